"""FROZEN. The trusted scorer of tinygpt: the metric of record is computed here, never in train.py,
and never in a process that runs the idea's code (docs/security.md "A model is code").

The evaluation is split in three steps (the manifest's `evaluate` and `model`):
  1. this file, phase `inputs` ($AUTORESEARCH_EVAL_PHASE=inputs): makes the validation windows and,
     for every window, a check variant that keeps the tokens before a secret random cut c and takes
     the tokens from c on from another validation window (natural text). Originals and variants are
     shuffled into two input groups <io>/in/<g>/tokens.npy, a window and its variant always in
     different groups. The secret (which row is which, the cuts; seeded from os.urandom) stays in
     this process's own directory, which the model runner never sees.
  2. eval_model.py, once per group, in a fresh sandbox: the artifact's logits, <io>/out/<g>/logits.npy.
  3. this file, phase `score`: checks every output (shape, dtype, finite), fails the evaluation if
     the logits of any window before its cut differ from its variant's (the model looked ahead, or
     a row depends on the other rows of its batch), and prints the mean cross-entropy of the
     original windows: the only output of the evaluation that is parsed.
Without $AUTORESEARCH_EVAL_PHASE (local debugging: `python train.py && python evaluate.py`) it runs
the three steps itself, the model runner as plain subprocesses, with a temporary io directory.

Artifact contract: `out/model.pt` under $AUTORESEARCH_ARTIFACTS (locally: next to this file), a
torch.jit module mapping int64 tokens [EVAL_BATCH, SEQ_LEN] to float logits [EVAL_BATCH, SEQ_LEN,
VOCAB_SIZE]. Logits at position t may depend only on tokens 0..t of the same row.

Output: a final block, a line `---` then `val_loss: <float>`, `val_tokens: <int>`, `causal_checks: <int>`.
A non-causal or malformed model exits non-zero with the reason and no val_loss.
"""

import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)     # the daemon runs this with PYTHONSAFEPATH=1: find data.py explicitly

import numpy as np  # noqa: E402

import data  # noqa: E402

EVAL_BATCH = 16              # the artifact's batch (the model runner feeds it 16 rows at a time)
ARTIFACT = "out/model.pt"
GROUPS = 2                   # a window and its check variant go to different groups (fresh processes)
SECRET = ".eval_secret.npz"  # phase mode: in this process's own cwd (eval/), never in the inputs
TOLERANCE = 1e-3             # an absolute bound on the logits compared (float noise of batching: ~1e-6)


def fail(msg: str) -> None:
    print(f"evaluate.py: FAILED: {msg}", file=sys.stderr, flush=True)
    sys.exit(3)


def artifact_path() -> str:
    return os.path.join(os.environ.get("AUTORESEARCH_ARTIFACTS") or HERE, ARTIFACT)


def val_windows() -> np.ndarray:
    """Every non-overlapping window of SEQ_LEN + 1 validation tokens (512 of them: a multiple of
    EVAL_BATCH, so the set the one-process evaluator scored in its shuffled batches)."""
    toks = np.asarray(data.val_tokens(), dtype=np.int64)
    w = data.SEQ_LEN + 1
    return toks[: len(toks) // w * w].reshape(-1, w)


def make_inputs(io: str, secret: str) -> None:
    """Phase `inputs`: the two groups of originals and variants; the secret is saved apart."""
    if not os.path.isfile(artifact_path()):
        fail(f"no model artifact at {artifact_path()}: train.py must save a torch.jit module to {ARTIFACT}")
    x = val_windows()[:, :-1]
    n, t = x.shape
    rng = np.random.default_rng(int.from_bytes(os.urandom(32), "little"))
    cut = rng.integers(1, t, size=n)              # c in [1, T-1]: logits at positions < c are compared
    variant = x.copy()
    for i in range(n):
        c = cut[i]
        for _ in range(32):                       # a donor whose first replaced token differs
            j = int(rng.integers(n - 1))
            j += j >= i
            if x[j, c] != x[i, c]:
                break
        variant[i, c:] = x[j, c:]
    group = rng.permutation(np.arange(n) % GROUPS)   # the original's group; its variant goes to the next
    loc = np.zeros((n, 2, 2), dtype=np.int64)        # [window, original|variant] -> (group, row)
    for g in range(GROUPS):
        items = [(i, 0) for i in np.flatnonzero(group == g)] + \
                [(i, 1) for i in np.flatnonzero((group + 1) % GROUPS == g)]
        items = [items[k] for k in rng.permutation(len(items))]
        rows = np.stack([(x if kind == 0 else variant)[i] for i, kind in items])
        for r, (i, kind) in enumerate(items):
            loc[i, kind] = (g, r)
        os.makedirs(os.path.join(io, "in", str(g)))
        np.save(os.path.join(io, "in", str(g), "tokens.npy"), rows)
    np.savez(secret, cut=cut, loc=loc)


def load_output(io: str, g: int, rows: int, t: int) -> np.ndarray:
    """Group g's logits, validated before any of it is believed."""
    path = os.path.join(io, "out", str(g), "logits.npy")
    if not os.path.isfile(path) or os.path.islink(path):
        fail(f"the model runner wrote no logits for group {g} (expected a plain file logits.npy)")
    try:
        a = np.load(path, mmap_mode="r", allow_pickle=False)
    except Exception as e:  # noqa: BLE001 - a malformed file is the model's fault; say what it was
        fail(f"group {g}: logits.npy is not a readable .npy array ({type(e).__name__}: {e})")
    want = (rows, t, data.VOCAB_SIZE)
    if a.dtype != np.float32:
        fail(f"group {g}: logits have dtype {a.dtype}, expected float32")
    if tuple(a.shape) != want:
        fail(f"group {g}: logits have shape {tuple(a.shape)}, expected {want}")
    for s in range(0, rows, 64):
        if not np.isfinite(a[s:s + 64]).all():
            fail(f"group {g}: the logits contain NaN or inf")
    return a


def score(io: str, secret: str) -> None:
    """Phase `score`: the causality check over every window, then the loss of the originals."""
    st = np.load(secret)
    cut, loc = st["cut"], st["loc"]
    w = val_windows()
    n, t = len(w), w.shape[1] - 1
    sizes = [int((loc[:, :, 0] == g).sum()) for g in range(GROUPS)]
    out = [load_output(io, g, sizes[g], t) for g in range(GROUPS)]
    for i in range(n):
        c = int(cut[i])
        (go, ro), (gv, rv) = loc[i]
        # absolute, never relative to the logits' size: the model chooses that size (one logit of -1e30 on
        # a token the text never holds, or +1e6 on all of them, changes no probability), and a bound of
        # 1e-4 x the largest logit let a look-ahead at every position pass (tests/test_tamper_model_scale.py)
        a, b = np.asarray(out[go][ro, :c], dtype=np.float64), np.asarray(out[gv][rv, :c], dtype=np.float64)
        diff = float(np.abs(a - b).max())
        if not diff <= TOLERANCE:
            fail(f"the model is not causal, or its rows are not independent: the logits of a validation "
                 f"window before position {c} changed when its tokens from position {c} on (and the other "
                 f"rows of its batch) changed (max abs difference {diff:.3g}). Position t may "
                 f"only see tokens 0..t of its own row.")
    total, count = 0.0, 0
    for g in range(GROUPS):
        idx = np.flatnonzero(loc[:, 0, 0] == g)          # the originals scored in group g
        rows = loc[idx, 0, 1]
        for s in range(0, len(idx), 64):
            lg = np.asarray(out[g][rows[s:s + 64]], dtype=np.float64)
            y = w[idx[s:s + 64], 1:]
            m = lg.max(-1, keepdims=True)
            lse = m[..., 0] + np.log(np.exp(lg - m).sum(-1))
            total += float((lse - np.take_along_axis(lg, y[..., None], -1)[..., 0]).sum())
            count += y.size
    print("---")
    print(f"val_loss: {total / count:.6f}")
    print(f"val_tokens: {count}")
    print(f"causal_checks: {n}")


def all_in_one() -> None:
    """Local debugging: the three steps in a row, the model runner as plain subprocesses (no sandbox)."""
    tmp = tempfile.mkdtemp(prefix="tinygpt-eval-")
    try:
        io, secret = os.path.join(tmp, "io"), os.path.join(tmp, "secret.npz")
        make_inputs(io, secret)
        for g in sorted(os.listdir(os.path.join(io, "in")), key=int):
            dst = os.path.join(io, "out", g)
            os.makedirs(dst)
            env = dict(os.environ, AUTORESEARCH_MODEL_IN=os.path.join(io, "in", g), AUTORESEARCH_MODEL_OUT=dst,
                       AUTORESEARCH_ARTIFACTS=os.environ.get("AUTORESEARCH_ARTIFACTS") or HERE)
            p = subprocess.run([sys.executable, os.path.join(HERE, "eval_model.py")], env=env, cwd=HERE)
            if p.returncode != 0:
                fail(f"the model runner (group {g}) exited {p.returncode}")
        score(io, secret)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    phase = os.environ.get("AUTORESEARCH_EVAL_PHASE")
    if not phase:
        return all_in_one()
    io, secret = os.environ["AUTORESEARCH_MODEL_IO"], os.path.join(os.getcwd(), SECRET)
    if phase == "inputs":
        make_inputs(io, secret)
    elif phase == "score":
        try:
            score(io, secret)
        finally:
            os.remove(secret)
    else:
        fail(f"unknown AUTORESEARCH_EVAL_PHASE {phase!r} (inputs | score)")


if __name__ == "__main__":
    main()
