"""Token shards: the on-disk format, where they live, and the loaders that read them. FROZEN.

A shard is a binary file: a header of 256 little-endian int32 (magic, version, token count, zeros)
followed by that many uint16 GPT-2 token ids. Shards are named `fineweb_{split}_NNNNNN.bin` and live
in the directory named by $NANOGPT_DATA (`~` and `$VARS` are expanded). The first shard that the
preparation script writes is the validation split; the rest are training data.

train.py reads batches through `TokenLoader`; evaluate.py reads validation sequences through
`val_sequences`. Both read the shards in a fixed order, so a run's data is reproducible.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

import numpy as np

MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
EOT = 50256                        # GPT-2's <|endoftext|>, which starts every document
VOCAB_SIZE = 50257                 # GPT-2's vocabulary
VAL_TOKENS = 10_485_760            # tokens the frozen evaluation scores (the paper's figure)
ARTIFACT = "out/model.pt2"         # where train.py saves the exported body (tokens -> hidden states)
HEAD_ARTIFACT = "out/head.npz"     # where it saves the LM head's weights (data: the scorer applies them)
DATA_VAR = "NANOGPT_DATA"
# the validation shards' folder, given to the evaluator only (the manifest's eval_data): run's
# sandbox never sees it. Unset (local debugging), they are read from $NANOGPT_DATA.
VAL_DATA_VAR = "NANOGPT_VAL_DATA"


def write_shard(path: str | os.PathLike, tokens) -> None:
    """Write one shard atomically (a reader never sees half a file)."""
    toks = np.asarray(tokens)
    if toks.dtype != np.uint16:
        if toks.size and (toks.min() < 0 or toks.max() >= 2 ** 16):
            raise ValueError("token ids must fit in uint16 (0..65535)")
        toks = toks.astype(np.uint16)
    if toks.size >= 2 ** 31:
        raise ValueError(f"{toks.size} tokens is too many for one shard (limit 2**31 - 1)")
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:3] = (MAGIC, VERSION, toks.size)
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(header.tobytes())
        f.write(toks.astype("<u2", copy=False).tobytes())
    os.replace(tmp, path)


def shard_tokens(path: str | os.PathLike) -> int:
    """The token count from a shard's header, after checking that the header is ours."""
    header = np.fromfile(path, dtype="<i4", count=HEADER_INTS)
    if header.size < HEADER_INTS or header[0] != MAGIC or header[1] != VERSION:
        raise ValueError(f"{path}: not a token shard (bad header; expected magic {MAGIC}, version {VERSION})")
    n = int(header[2])
    expected = HEADER_BYTES + 2 * n
    if os.path.getsize(path) != expected:
        raise ValueError(f"{path}: header says {n} tokens but the file is {os.path.getsize(path)} bytes "
                         f"(expected {expected}); the shard is truncated or corrupt")
    return n


def load_shard(path: str | os.PathLike) -> np.ndarray:
    """The tokens of one shard as a read-only uint16 array (memory-mapped, so large shards load fast)."""
    n = shard_tokens(path)
    return np.memmap(path, dtype="<u2", mode="r", offset=HEADER_BYTES, shape=(n,))


def data_dir(root: str | None = None) -> Path:
    raw = root if root is not None else os.environ.get(DATA_VAR)
    if not raw:
        raise SystemExit(f"${DATA_VAR} is not set: point it at the folder of fineweb_*.bin shards "
                         f"(make them with prepare_fineweb.py, or make_synthetic_shards.py for a test)")
    d = Path(os.path.expandvars(os.path.expanduser(raw)))
    if not d.is_dir():
        raise SystemExit(f"${DATA_VAR}={raw!r}: no such directory; run prepare_fineweb.py to create it")
    return d


def shard_paths(split: str, root: str | None = None) -> list[str]:
    if split == "val" and root is None and os.environ.get(VAL_DATA_VAR):
        root = os.environ[VAL_DATA_VAR]
    d = data_dir(root)
    paths = sorted(glob.glob(str(d / f"fineweb_{split}_*.bin")))
    if not paths:
        raise SystemExit(f"no fineweb_{split}_*.bin shards in {d}; run prepare_fineweb.py "
                         f"(or make_synthetic_shards.py) with --out {d}")
    return paths


class TokenLoader:
    """Contiguous (x, y) batches of shape [B, T] for one rank of a data-parallel job.

    Each call hands rank r the r-th of `world` consecutive B*T windows, then moves all ranks on
    together; at the end of a shard it goes on to the next, and after the last back to the first.
    """

    def __init__(self, split: str, B: int, T: int, rank: int = 0, world: int = 1, root: str | None = None):
        self.B, self.T, self.rank, self.world = B, T, rank, world
        self.paths = shard_paths(split, root)
        need = world * B * T + 1
        for p in self.paths:
            if shard_tokens(p) < need:
                raise SystemExit(f"{p}: {shard_tokens(p)} tokens, fewer than one step of {world} x {B} x {T} "
                                 f"(+1) needs; use bigger shards or a smaller batch")
        self.reset()

    def reset(self) -> None:
        self._open(0)

    def _open(self, index: int) -> None:
        self.shard = index % len(self.paths)
        self.tokens = load_shard(self.paths[self.shard])
        self.pos = self.rank * self.B * self.T

    def next_batch(self):
        import torch
        B, T = self.B, self.T
        buf = np.asarray(self.tokens[self.pos:self.pos + B * T + 1], dtype=np.int64)
        x = torch.from_numpy(buf[:-1].reshape(B, T))
        y = torch.from_numpy(buf[1:].reshape(B, T))
        self.pos += self.world * B * T
        if self.pos + self.world * B * T + 1 > len(self.tokens):
            self._open(self.shard + 1)
        return x, y


def val_sequences(T: int, n_tokens: int, batch: int, root: str | None = None):
    """Yield (x, y) int64 arrays of shape [b, T] covering the first `n_tokens` predicted tokens of
    the validation split, in order: non-overlapping windows, y shifted one to the right of x."""
    if n_tokens <= 0 or n_tokens % T:
        raise SystemExit(f"validation tokens ({n_tokens}) must be a positive multiple of the context ({T})")
    n_seq = n_tokens // T
    parts = [load_shard(p) for p in _enough_val(n_tokens + 1, root)]
    stream = parts[0] if len(parts) == 1 else np.concatenate(parts)
    if len(stream) < n_tokens + 1:
        raise SystemExit(f"the validation split holds {len(stream)} tokens; {n_tokens + 1} are needed")
    for start in range(0, n_seq, batch):
        b = min(batch, n_seq - start)
        chunk = np.asarray(stream[start * T:(start + b) * T + 1], dtype=np.int64)
        yield chunk[:-1].reshape(b, T), chunk[1:].reshape(b, T)


def _enough_val(n: int, root: str | None) -> list[str]:
    """The leading validation shards that together hold at least n tokens (all if they hold fewer)."""
    out, total = [], 0
    for p in shard_paths("val", root):
        out.append(p)
        total += shard_tokens(p)
        if total >= n:
            break
    return out
