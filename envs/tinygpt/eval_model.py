"""FROZEN. The model runner of tinygpt's split evaluation: the only process that executes the idea's
code (the TorchScript artifact). It is UNTRUSTED at run time: the daemon runs it once per input
group, each time in a fresh sandbox that holds no targets, no validation seed and no scorer secret,
and nothing it prints is parsed. evaluate.py (the trusted scorer) checks and scores what it writes.

Reads  $AUTORESEARCH_MODEL_IN/tokens.npy    int64 [N, SEQ_LEN]
       $AUTORESEARCH_ARTIFACTS/out/model.pt a torch.jit module: int64 [16, SEQ_LEN] -> logits [16, SEQ_LEN, 256]
Writes $AUTORESEARCH_MODEL_OUT/logits.npy   [N, SEQ_LEN, 256], float32 when the model's logits are floats
                                            (anything else is written as it came: the scorer refuses it)
"""

import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # spinning OpenMP waiters crawl on a busy machine

import numpy as np  # noqa: E402
import torch  # noqa: E402

EVAL_BATCH = 16
ARTIFACT = "out/model.pt"
HERE = os.path.dirname(os.path.abspath(__file__))


def fail(msg: str) -> None:
    print(f"eval_model.py: FAILED: {msg}", file=sys.stderr, flush=True)
    sys.exit(3)


def main() -> None:
    torch.set_num_threads(int(os.environ.get("TINYGPT_THREADS", "2")))
    src, dst = os.environ["AUTORESEARCH_MODEL_IN"], os.environ["AUTORESEARCH_MODEL_OUT"]
    path = os.path.join(os.environ.get("AUTORESEARCH_ARTIFACTS") or HERE, ARTIFACT)
    tokens = torch.from_numpy(np.load(os.path.join(src, "tokens.npy"), allow_pickle=False))
    try:
        model = torch.jit.load(path, map_location="cpu")
    except Exception as e:  # noqa: BLE001 - any load error is the trial's fault; say what it was
        fail(f"could not load {path} as a TorchScript module ({type(e).__name__}: {e})")
    model.eval()
    # written batch by batch: a file that grows past the bound stops at the kernel's RLIMIT_FSIZE
    with open(os.path.join(dst, "logits.npy"), "wb") as f, torch.no_grad():
        for i in range(0, len(tokens), EVAL_BATCH):
            out = model(tokens[i:i + EVAL_BATCH])
            if not isinstance(out, torch.Tensor):
                fail(f"the model returned {type(out).__name__}, expected a logits tensor")
            out = out.detach().cpu()
            if out.is_floating_point():
                out = out.float()
            a = np.ascontiguousarray(out.numpy())
            if i == 0:
                shape = (len(tokens),) + a.shape[1:] if a.ndim else (len(tokens),)
                np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(a.dtype),
                                                         "fortran_order": False, "shape": shape})
            f.write(a.tobytes())


if __name__ == "__main__":
    main()
