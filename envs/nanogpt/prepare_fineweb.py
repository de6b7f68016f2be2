"""Download FineWeb's 10B-token sample and tokenize it into GPT-2 token shards. FROZEN.

    python prepare_fineweb.py [--out DIR] [--version 10B|100B] [--shard-tokens 100000000]

Needs internet, the `datasets` and `tiktoken` packages, about 20 GB of disk for 10B, and an hour or
so of CPU. Documents are streamed from the Hugging Face hub (HuggingFaceFW/fineweb, sample-10BT),
each is prefixed with <|endoftext|> and encoded with tiktoken's GPT-2 encoding, and the stream is
cut into shards of --shard-tokens tokens (a document may straddle two shards). The first shard is
the validation split (fineweb_val_000000.bin); the rest are training shards. Output goes to --out,
by default $NANOGPT_DATA.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shards import DATA_VAR, VAL_DATA_VAR, write_shard  # noqa: E402

REMOTE = {"10B": "sample-10BT", "100B": "sample-100BT"}


def tokenize(text: str, encode, eot: int) -> np.ndarray:
    """One document as uint16 tokens, <|endoftext|> first (it separates documents)."""
    toks = np.array([eot, *encode(text)], dtype=np.int64)
    if toks.max() >= 2 ** 16:
        raise ValueError("a token id does not fit in uint16; this script expects the GPT-2 vocabulary")
    return toks.astype(np.uint16)


class ShardWriter:
    """Packs a stream of tokenized documents into fixed-size shards: val first, then train."""

    def __init__(self, out: str | os.PathLike, shard_tokens: int, val_out: str | os.PathLike | None = None):
        self.out, self.size = Path(out), shard_tokens
        self.val_out = Path(val_out) if val_out else self.out    # eval-only: outside the training folder
        self.out.mkdir(parents=True, exist_ok=True)
        self.val_out.mkdir(parents=True, exist_ok=True)
        self.buf = np.empty(shard_tokens, dtype=np.uint16)
        self.fill, self.index, self.written = 0, 0, []

    def add(self, toks: np.ndarray) -> None:
        while len(toks):
            take = min(len(toks), self.size - self.fill)
            self.buf[self.fill:self.fill + take] = toks[:take]
            self.fill += take
            toks = toks[take:]
            if self.fill == self.size:
                self._flush()

    def close(self) -> list[Path]:
        if self.fill:
            self._flush()
        return self.written

    def _flush(self) -> None:
        split = "val" if self.index == 0 else "train"
        path = (self.val_out if split == "val" else self.out) / f"fineweb_{split}_{self.index:06d}.bin"
        write_shard(path, self.buf[:self.fill])
        print(f"wrote {self.fill:,} tokens to {path}", flush=True)
        self.written.append(path)
        self.index, self.fill = self.index + 1, 0


_ENC = None


def _encode_doc(doc: dict) -> np.ndarray:
    global _ENC
    if _ENC is None:                       # one tokenizer per worker process
        import tiktoken
        _ENC = tiktoken.get_encoding("gpt2")
    return tokenize(doc["text"], _ENC.encode_ordinary, _ENC.eot_token)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get(DATA_VAR), help=f"output folder (default ${DATA_VAR})")
    ap.add_argument("--val-out", default=os.environ.get(VAL_DATA_VAR),
                    help=f"folder for the validation shard, which only the evaluator sees (default ${VAL_DATA_VAR}; "
                         f"unset: --out)")
    ap.add_argument("--version", choices=sorted(REMOTE), default="10B")
    ap.add_argument("--shard-tokens", type=int, default=100_000_000)
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    a = ap.parse_args(argv)
    if not a.out:
        ap.error(f"give --out or set ${DATA_VAR}")
    out = Path(os.path.expandvars(os.path.expanduser(a.out)))
    from datasets import load_dataset     # only this script needs it; the GPU hosts may lack it
    import multiprocessing as mp
    docs = load_dataset("HuggingFaceFW/fineweb", name=REMOTE[a.version], split="train", streaming=True)
    val_out = Path(os.path.expandvars(os.path.expanduser(a.val_out))) if a.val_out else None
    writer = ShardWriter(out, a.shard_tokens, val_out)
    with mp.Pool(a.workers) as pool:
        for toks in pool.imap(_encode_doc, docs, chunksize=16):
            writer.add(toks)
    writer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
