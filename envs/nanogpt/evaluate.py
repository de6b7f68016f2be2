"""The metric of record: validation loss of the exported model. FROZEN.

Runs from a fresh copy of the baseline's frozen files, in a clean environment, and imports nothing
from the trial's code: it loads only the torch.export program that train.py saved, feeds it the first
10,485,760 validation tokens in 1,024-token windows, and computes the mean cross-entropy itself.
Before scoring it checks causality: changing later tokens (in the same row or in other rows of the
batch) must not change earlier logits. Prints a `---` block with val_loss (and writes the same
numbers to $AUTORESEARCH_RESULT when set).

Inputs: the artifact at $AUTORESEARCH_ARTIFACTS/out/model.pt2 (or --artifact), the shards under
$NANOGPT_DATA. Test-only overrides (a real trial's clean environment has none of them):
NANOGPT_EVAL_SIZE, NANOGPT_EVAL_SEQ_LEN, NANOGPT_EVAL_BATCH, NANOGPT_EVAL_VOCAB. The model runs on the device it
was exported on.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the frozen harness, not the trial

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import shards  # noqa: E402

CAUSAL_ATOL = 1e-3   # relative to the logits' scale; a leak that helps the loss moves them far more


def fail(msg: str) -> None:
    print(f"evaluate: {msg}", file=sys.stderr)
    sys.exit(1)


def load_model(path: str):
    """The exported module and the device its weights were saved on (where it must run)."""
    if not os.path.isfile(path):
        fail(f"no model artifact at {path}: train.py must save a torch.export program there")
    try:
        model = torch.export.load(path).module()
    except Exception as e:  # a broken file is the trial's failure, said plainly
        fail(f"could not load {path} as a torch.export program: {type(e).__name__}: {e}")
    tensors = list(model.parameters()) + list(model.buffers())
    return model, (tensors[0].device if tensors else torch.device("cpu"))


def logits_of(model, x: np.ndarray, device: torch.device, vocab_min: int) -> torch.Tensor:
    idx = torch.from_numpy(np.ascontiguousarray(x)).to(device)
    with torch.no_grad():
        out = model(idx)
    if isinstance(out, (tuple, list)):
        out = out[0]
    if not isinstance(out, torch.Tensor) or out.dim() != 3 or tuple(out.shape[:2]) != tuple(x.shape) \
            or out.shape[2] < vocab_min:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        fail(f"the model must map int64 [B, T] to logits [B, T, V>={vocab_min}]; got {shape} for {x.shape}")
    return out.float()


def check_causal(model, x: np.ndarray, device: torch.device, vocab: int) -> None:
    """Earlier logits must not depend on later tokens, nor on other rows of the batch."""
    rng = np.random.default_rng(0)
    base = logits_of(model, x, device, vocab)
    tol = CAUSAL_ATOL * (1.0 + base.abs().max().item())
    B, T = x.shape
    for cut in sorted({T // 4, T // 2, 3 * T // 4, T - 1} - {0}):
        y = x.copy()
        y[:, cut:] = rng.integers(0, vocab, size=(B, T - cut))
        diff = (logits_of(model, y, device, vocab)[:, :cut] - base[:, :cut]).abs().max().item()
        if diff > tol:
            fail(f"causality check failed: changing tokens from position {cut} on changed the logits "
                 f"before it by {diff:.3g} (tolerance {tol:.3g}); the model sees the future")
    if B > 1:
        y = x.copy()
        y[1:] = rng.integers(0, vocab, size=(B - 1, T))
        diff = (logits_of(model, y, device, vocab)[0] - base[0]).abs().max().item()
        if diff > tol:
            fail(f"causality check failed: changing other rows of the batch changed row 0's logits by "
                 f"{diff:.3g} (tolerance {tol:.3g}); rows must be independent")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Frozen validation-loss evaluation of the exported model.")
    ap.add_argument("--artifact", help="model file (default: $AUTORESEARCH_ARTIFACTS/out/model.pt2)")
    a = ap.parse_args(argv)
    env = os.environ
    path = a.artifact or os.path.join(env.get("AUTORESEARCH_ARTIFACTS", "."), shards.ARTIFACT)
    n_tokens = int(env.get("NANOGPT_EVAL_SIZE", shards.VAL_TOKENS))
    T = int(env.get("NANOGPT_EVAL_SEQ_LEN", 1024))
    batch = int(env.get("NANOGPT_EVAL_BATCH", 16))
    vocab = int(env.get("NANOGPT_EVAL_VOCAB", shards.VOCAB_SIZE))
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    t0 = time.time()
    model, device = load_model(path)
    sequences = shards.val_sequences(T, n_tokens, batch)
    total, count = 0.0, 0
    for i, (x, y) in enumerate(sequences):
        if i == 0:
            check_causal(model, x, device, vocab)
        logits = logits_of(model, x, device, vocab)
        target = torch.from_numpy(y).to(device)
        total += F.cross_entropy(logits.view(-1, logits.size(-1)), target.view(-1), reduction="sum").item()
        count += y.size
    val_loss = total / count
    if not math.isfinite(val_loss):
        fail(f"validation loss is not finite ({val_loss})")
    metrics = {"val_loss": val_loss, "val_tokens": count, "eval_s": round(time.time() - t0, 1)}
    if env.get("AUTORESEARCH_RESULT"):
        with open(env["AUTORESEARCH_RESULT"], "w") as f:
            json.dump(metrics, f)
    print("---")
    print(f"val_loss: {val_loss:.6f}")
    print(f"val_tokens: {count}")
    print(f"eval_s: {metrics['eval_s']}")
    if device.type == "cuda":
        print(f"eval_peak_mem_mib: {torch.cuda.max_memory_allocated() // 2 ** 20}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
