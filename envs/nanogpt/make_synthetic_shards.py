"""Synthetic token shards, for smoke tests and for throughput runs on a host without internet. FROZEN.

The tokens are not random noise: they come from a fixed random Markov "language" over the GPT-2
vocabulary (each token has a few Zipf-weighted successors, and which one follows also depends on the
token before), so a model's loss falls as it learns, like on text. The numbers are NOT comparable to
FineWeb's. Usage:

    python make_synthetic_shards.py --out DIR [--train-tokens N] [--val-tokens N] [--shard-tokens N]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shards import EOT, VAL_TOKENS, VOCAB_SIZE, write_shard  # noqa: E402

SUCCESSORS = 8      # successors per token
DOC_TOKENS = 512    # tokens per synthetic document (each starts with EOT)


def _language(vocab: int, seed: int):
    rng = np.random.default_rng(seed)
    zipf = 1.0 / np.arange(1, vocab)                       # frequent tokens are frequent successors
    succ = rng.choice(vocab - 1, size=(vocab, SUCCESSORS), p=zipf / zipf.sum())
    w = 1.0 / np.arange(1, SUCCESSORS + 1)
    return succ, w / w.sum()


def synthetic_tokens(n: int, seed: int, vocab: int = VOCAB_SIZE, lang_seed: int = 1234) -> np.ndarray:
    """n tokens of documents drawn from the fixed language; `seed` picks the documents."""
    succ, w = _language(vocab, lang_seed)
    rng = np.random.default_rng(seed)
    n_docs = -(-n // DOC_TOKENS)
    out = np.empty((n_docs, DOC_TOKENS), dtype=np.int64)
    out[:, 0] = min(EOT, vocab - 1)
    prev = np.zeros(n_docs, dtype=np.int64)
    cur = rng.integers(0, vocab - 1, n_docs)
    out[:, 1] = cur
    for t in range(2, DOC_TOKENS):                          # all documents step together: fast
        slot = (rng.choice(SUCCESSORS, size=n_docs, p=w) + prev) % SUCCESSORS
        prev, cur = cur, succ[cur, slot]
        out[:, t] = cur
    return out.reshape(-1)[:n].astype(np.uint16)


def make_shards(out: str | os.PathLike, train_tokens: int, val_tokens: int, shard_tokens: int = 100_000_000,
                seed: int = 0, vocab: int = VOCAB_SIZE) -> list[Path]:
    """Write fineweb_val_000000.bin and fineweb_train_NNNNNN.bin shards; return their paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "fineweb_val_000000.bin"]
    write_shard(paths[0], synthetic_tokens(val_tokens, seed + 1, vocab))
    index, left = 1, train_tokens
    while left > 0:
        n = min(left, shard_tokens)
        p = out / f"fineweb_train_{index:06d}.bin"
        write_shard(p, synthetic_tokens(n, seed + 1 + index, vocab))
        paths.append(p)
        index, left = index + 1, left - n
    return paths


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="folder to write the shards into (use it as $NANOGPT_DATA)")
    ap.add_argument("--train-tokens", type=int, default=20_000_000)
    ap.add_argument("--val-tokens", type=int, default=VAL_TOKENS + 1)
    ap.add_argument("--shard-tokens", type=int, default=100_000_000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    for p in make_shards(a.out, a.train_tokens, a.val_tokens, a.shard_tokens, a.seed):
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
