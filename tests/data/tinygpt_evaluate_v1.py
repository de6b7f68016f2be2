"""The PREVIOUS tinygpt evaluator (git main before issue 26), kept verbatim as the reference for
"tinygpt's honest val_loss is unchanged" (tests/test_tamper_model.py, bench/eval_split.py). Was: FROZEN. The trusted evaluation of tinygpt: the metric of record is computed here, never in train.py.

It loads the TorchScript artifact that train.py saved (no trial code is imported), checks that the
model is causal, and reports the mean cross-entropy on the fixed validation split of data.py.

Artifact contract: `out/model.pt` under $AUTORESEARCH_ARTIFACTS (for local debugging, without that
variable: next to this file), a torch.jit module mapping int64 tokens [EVAL_BATCH, SEQ_LEN] to
float logits [EVAL_BATCH, SEQ_LEN, VOCAB_SIZE]. Logits at position t may depend only on tokens
0..t of the same row.

Output: a final block, a line `---` then `val_loss: <float>` and `val_tokens: <int>`.
A non-causal or malformed model exits non-zero with the reason and no val_loss.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)     # the daemon runs this with PYTHONSAFEPATH=1: find data.py explicitly
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # spinning OpenMP waiters crawl on a busy machine

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import data  # noqa: E402

EVAL_BATCH = 16
ARTIFACT = "out/model.pt"
CUTS = (1, 17, 64, 127)      # positions where the causality check cuts the sequence


def fail(msg: str) -> None:
    print(f"evaluate.py: FAILED: {msg}", file=sys.stderr, flush=True)
    sys.exit(3)


def artifact_path() -> str:
    root = os.environ.get("AUTORESEARCH_ARTIFACTS")
    if root:
        return os.path.join(root, ARTIFACT)
    return os.path.join(HERE, ARTIFACT)     # local debugging: `python train.py && python evaluate.py`


def val_batches():
    """Non-overlapping windows of SEQ_LEN + 1 tokens, in a fixed shuffled order, EVAL_BATCH per batch."""
    toks = torch.tensor(data.val_tokens(), dtype=torch.long)
    w = data.SEQ_LEN + 1
    windows = toks[: len(toks) // w * w].view(-1, w)
    windows = windows[torch.randperm(len(windows), generator=torch.Generator().manual_seed(0))]
    n = len(windows) // EVAL_BATCH * EVAL_BATCH
    return windows[:n].split(EVAL_BATCH)


def run(model, x: torch.Tensor) -> torch.Tensor:
    out = model(x)
    if not isinstance(out, torch.Tensor):
        fail(f"the model returned {type(out).__name__}, expected a logits tensor")
    want = (x.size(0), x.size(1), data.VOCAB_SIZE)
    if tuple(out.shape) != want:
        fail(f"logits have shape {tuple(out.shape)}, expected {want} for input {tuple(x.shape)}")
    if not torch.isfinite(out).all():
        fail("the logits contain NaN or inf")
    return out.float()


def check_causal(model, batches) -> None:
    """Logits before a cut must not change when every later token (in every row) changes, and a
    row's logits must not depend on the other rows. Future tokens are replaced by real validation
    text from another batch, so a model cannot tell the probe from ordinary data."""
    x, other = batches[0][:, :-1], batches[1][:, :-1]
    base = run(model, x)
    for t in CUTS:
        probe = torch.cat([x[:, :t], other[:, t:]], dim=1)
        out = run(model, probe)
        diff = (out[:, :t] - base[:, :t]).abs().max().item()
        if diff > 1e-4 * (1.0 + base[:, :t].abs().max().item()):
            fail(f"the model is not causal: changing tokens at positions >= {t} changed the logits at "
                 f"earlier positions (max abs difference {diff:.3g}). Position t may only see tokens 0..t.")
    half = x.size(0) // 2
    probe = torch.cat([x[:half], other[half:]], dim=0)
    diff = (run(model, probe)[:half] - base[:half]).abs().max().item()
    if diff > 1e-4 * (1.0 + base[:half].abs().max().item()):
        fail(f"rows of a batch are not independent: changing some rows changed the logits of the others "
             f"(max abs difference {diff:.3g}). Each row must be scored on its own tokens only.")


def main() -> None:
    torch.set_num_threads(int(os.environ.get("TINYGPT_THREADS", "2")))
    path = artifact_path()
    if not os.path.isfile(path):
        fail(f"no model artifact at {path}: train.py must save a torch.jit module to {ARTIFACT}")
    try:
        model = torch.jit.load(path, map_location="cpu")
    except Exception as e:  # noqa: BLE001 - any load error is the trial's fault; say what it was
        fail(f"could not load {path} as a TorchScript module ({type(e).__name__}: {e})")
    model.eval()
    batches = val_batches()
    total, count = 0.0, 0
    with torch.no_grad():
        check_causal(model, batches)
        for b in batches:
            logits = run(model, b[:, :-1])
            total += F.cross_entropy(logits.reshape(-1, data.VOCAB_SIZE), b[:, 1:].reshape(-1),
                                     reduction="sum").item()
            count += b[:, 1:].numel()
    print("---")
    print(f"val_loss: {total / count:.6f}")
    print(f"val_tokens: {count}")


if __name__ == "__main__":
    main()
