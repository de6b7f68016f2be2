"""The model runner of the split evaluation: hidden states of the exported body. FROZEN, but it
executes the idea's artifact, so it is treated as untrusted while it runs.

One input group at a time, in its own fresh process and sandbox (the trial wrapper's `model` step;
`python evaluate.py` runs it as a plain subprocess when debugging by hand):

    in   $AUTORESEARCH_MODEL_IN/tokens.npy   uint16 [n, T] token windows (no targets, no hint of
                                              which rows are causality checks)
         $AUTORESEARCH_MODEL_IN/meta.json    {"batch": rows per forward pass}
         $AUTORESEARCH_ARTIFACTS/out/model.pt2   the torch.export program train.py saved
    out  $AUTORESEARCH_MODEL_OUT/hidden.bin  the final hidden states, row-major, little-endian
         $AUTORESEARCH_MODEL_OUT/hidden.json {"dtype": "float16", "shape": [n, T, D]}

Always float16, so a window and its checked twin (another group) are rounded alike: every value must
be under 65504 in size, which costs an idea nothing (the head is linear: scale the states down and
the head's weight up; the baseline's states are normalised). A larger value fails the step. Nothing
this process prints is parsed: the scorer (evaluate.py) validates the files and computes the metric.
The model runs on the device it was exported on.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import torch

ARTIFACT = "out/model.pt2"
FP16_MAX = 65504.0


def fail(msg: str) -> None:
    print(f"eval_model: {msg}", file=sys.stderr)
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


def hidden_of(model, x: np.ndarray, device: torch.device) -> torch.Tensor:
    idx = torch.from_numpy(x.astype(np.int64)).to(device)
    with torch.no_grad():
        out = model(idx)
    if isinstance(out, (tuple, list)) and out:
        out = out[0]
    if not isinstance(out, torch.Tensor) or out.dim() != 3 or tuple(out.shape[:2]) != tuple(x.shape) \
            or not out.is_floating_point():
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        fail(f"the model must map int64 [B, T] to float hidden states [B, T, D]; got {shape} for {x.shape}")
    return out.float()


def write_group(model, device, tokens: np.ndarray, batch: int, out_dir: str) -> tuple[dict, dict]:
    """Run every row through the model, appending each batch's states to hidden.bin as they come;
    return the states' meta and the seconds spent in the model and in writing."""
    n, T = tokens.shape
    D = None
    took = {"model_s": 0.0, "write_s": 0.0}     # where a group's time goes, printed by main
    with open(os.path.join(out_dir, "hidden.bin"), "wb") as f:
        for s in range(0, n, batch):
            x = tokens[s:s + batch]
            # every call gets the same shape, so the same kernels run on every row: the states of a
            # window and of its checked twin (another process) then agree to the bit before the cut
            pad = np.concatenate([x, np.repeat(x[-1:], batch - len(x), axis=0)]) if len(x) < batch else x
            t0 = time.time()
            h = hidden_of(model, pad, device)[:len(x)]
            if D is None:
                D = h.shape[2]
            elif h.shape[2] != D:
                fail(f"the hidden size changed between batches ({D} then {h.shape[2]})")
            if not torch.isfinite(h).all():
                fail(f"the model's hidden states hold non-finite values (rows {s}..{s + len(h) - 1})")
            if h.abs().max().item() >= FP16_MAX:
                fail(f"a hidden state is {h.abs().max().item():.3g} in size, over float16's {FP16_MAX:.0f}; "
                     "scale the states down and the head's weight up by the same factor")
            t1 = time.time()
            f.write(h.to(torch.float16).cpu().contiguous().numpy().astype("<f2").tobytes())
            took["model_s"] += t1 - t0
            took["write_s"] += time.time() - t1
    return {"dtype": "float16", "shape": [n, T, D or 0]}, took


def main() -> int:
    env = os.environ
    try:
        inp, out, arts = env["AUTORESEARCH_MODEL_IN"], env["AUTORESEARCH_MODEL_OUT"], env["AUTORESEARCH_ARTIFACTS"]
    except KeyError as e:
        fail(f"${e.args[0]} is not set: this is the model step of the split evaluation; "
             "run `python evaluate.py` to evaluate by hand")
    tokens = np.load(os.path.join(inp, "tokens.npy"), allow_pickle=False)
    with open(os.path.join(inp, "meta.json")) as f:
        batch = int(json.load(f)["batch"])
    if tokens.ndim != 2 or tokens.dtype != np.uint16 or batch < 1:
        fail(f"bad input group: tokens {tokens.dtype} {tokens.shape}, batch {batch}")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    t0 = time.time()
    model, device = load_model(os.path.join(arts, ARTIFACT))
    load_s = time.time() - t0
    meta, took = write_group(model, device, tokens, batch, out)
    with open(os.path.join(out, "hidden.json"), "w") as f:
        json.dump(meta, f)
    print(f"eval_model: {meta['shape'][0]} rows -> {meta['dtype']} {meta['shape']}; load {load_s:.1f} s, "
          f"model {took['model_s']:.1f} s, write {took['write_s']:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
