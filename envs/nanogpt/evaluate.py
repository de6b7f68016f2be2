"""The metric of record: validation loss of the exported model, scored by trusted code. FROZEN.

The split evaluation (docs/env-nanogpt.md, "The evaluation"). The idea's artifact is code, so it
never runs here: the untrusted model runner (eval_model.py) turns token windows into final hidden
states, and this scorer, the only process that holds the targets, applies the LM head it loads as
data ($AUTORESEARCH_ARTIFACTS/out/head.npz) and computes the cross-entropy itself.

    AUTORESEARCH_EVAL_PHASE=inputs  draw a secret seed (os.urandom), write the input groups
                                    $AUTORESEARCH_MODEL_IO/in/<g>/{tokens.npy, meta.json}, keep the
                                    seed and sizes in ./.nanogpt_eval_plan.json (the scorer's own cwd)
    AUTORESEARCH_EVAL_PHASE=score   read $AUTORESEARCH_MODEL_IO/out/<g>/hidden.{bin,json}, validate
                                    them, check causality, print the `---` block (val_loss) and write
                                    it to $AUTORESEARCH_RESULT when set
    unset                           local debugging: run both phases and eval_model.py for each group
                                    as plain subprocesses (no sandbox), with a temporary io dir

The rows: the first 10,485,760 validation tokens in 1,024-token windows (10,240 scored windows), plus
one causality variant for every CHECK_EVERY-th window: a secret random window w, a random cut c in
[1, T-1], w's tokens before c and another real window's tokens from c on. A variant goes to another
group (another fresh process) than w and than w-1 (whose last target is w's first token); consecutive
windows never share a group, so no row's last target is in its process. Rows are shuffled in groups;
a variant takes its window's slot in the model's calls (see make_plan).
Before c, w and its variant must predict the same (log-probabilities under the head within
CAUSAL_NATS), else the model sees the future or other rows: the evaluation fails.
Test-only size overrides (a real trial's clean environment has none of them): NANOGPT_EVAL_SIZE,
NANOGPT_EVAL_SEQ_LEN, NANOGPT_EVAL_BATCH, NANOGPT_EVAL_VOCAB.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the frozen harness, not the trial

import numpy as np  # noqa: E402

import shards  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PLAN_FILE = ".nanogpt_eval_plan.json"   # the secret seed: in the scorer's cwd, never in an input group
# Model-runner rows per process: about 2.9 GiB of float16 states at D = 768 (8 groups at full size).
# Each group pays a fresh process, torch's import and the program's load (about 12 s on an H200),
# so fewer, larger groups cost less; docs/env-nanogpt.md "Cost" has the figures.
ROWS_PER_GROUP = 2048
CHECK_EVERY = 2           # one causality variant per 2 scored windows: c = 5,120 (1.5x the model rows)
# The check compares log-probabilities (the scorer's head applied): a bound on the states would be
# loosened by inflating dimensions the head ignores. A leak under it gains at most this per token.
CAUSAL_NATS = 1e-3
SCORE_ROWS = 16           # rows per head matmul: [16, 1024, 50257] fp32 logits = 3.3 GB, as before
MAX_HEAD_BYTES = 1 << 32  # the head file's arrays, uncompressed
DTYPES = {"float16": 2}    # one dtype: a window and its checked twin are rounded alike


def fail(msg: str) -> None:
    print(f"evaluate: {msg}", file=sys.stderr)
    sys.exit(1)


# ----------------------------------------------------------------------------- the plan

def make_plan(seed: int, n: int, T: int, c: int, batch: int) -> dict:
    """Everything secret, derived from the seed: which rows each group holds (ids < n: scored window
    id; n + j: variant j; n + c + f: filler f, a copy of a window of that group, not scored), the
    checked windows, their cuts and donors. Re-derived at score time.

    A row's slot (its position in its group modulo `batch`) is its place in every model call, since
    eval_model.py runs the rows in calls of exactly `batch`. A variant gets its window's slot: on a
    GPU the same row can round differently in another slot of an equal-shaped call (an H200 gave
    1.2e-3 nats between slots, docs/env-nanogpt.md), and in the same slot it agreed to the bit.
    Fillers make every call full, so slots never shift."""
    rng = np.random.default_rng(seed)
    G = max(3, math.ceil((n + c) / ROWS_PER_GROUP))
    group = np.empty(n, dtype=np.int64)
    prev, i = -1, 0
    while i < n:                          # rounds of a random permutation: balanced, neighbours apart
        perm = rng.permutation(G)
        if perm[0] == prev:
            perm[[0, 1]] = perm[[1, 0]]
        k = min(G, n - i)
        group[i:i + k] = perm[:k]
        prev, i = int(perm[k - 1]), i + k
    checked = rng.choice(n, size=c, replace=False)
    cuts = rng.integers(1, T, size=c)                       # in [1, T-1]
    donors = rng.integers(0, n - 1, size=c)
    donors += donors >= checked                              # another window than the checked one
    queues = [[[] for _ in range(batch)] for _ in range(G)]  # [group][slot] -> row ids
    slot = np.empty(n, dtype=np.int64)
    for g in range(G):                                       # a group's windows round the slots
        members = rng.permutation(np.flatnonzero(group == g))
        off = int(rng.integers(batch))
        for k, w in enumerate(members):
            slot[w] = (k + off) % batch
            queues[g][slot[w]].append(int(w))
    vgroup = np.empty(c, dtype=np.int64)
    for j, w in enumerate(checked):
        banned = {int(group[w])} | ({int(group[w - 1])} if w > 0 else set())
        allowed = [g for g in range(G) if g not in banned]
        lens = np.array([len(queues[g][slot[w]]) for g in allowed])
        vgroup[j] = allowed[int(rng.choice(np.flatnonzero(lens == lens.min())))]  # fewest fillers
        queues[vgroup[j]][slot[w]].append(n + j)
    groups, fillers = [], []
    for g in range(G):
        qs = [rng.permutation(q).tolist() for q in queues[g]]
        own = np.flatnonzero(group == g)
        calls = max(len(q) for q in qs)
        rows = np.empty(calls * batch, dtype=np.int64)
        for s, q in enumerate(qs):
            for k in range(calls):
                if k < len(q):
                    rows[k * batch + s] = q[k]
                else:                                        # a window of this group again: no
                    rows[k * batch + s] = n + c + len(fillers)   # neighbour of another group comes in
                    fillers.append(int(own[rng.integers(len(own))]))
        groups.append(rows)
    return {"groups": groups, "checked": checked, "cuts": cuts, "donors": donors,
            "fillers": np.array(fillers, dtype=np.int64)}


def sizes_from_env() -> dict:
    env = os.environ
    T = int(env.get("NANOGPT_EVAL_SEQ_LEN", 1024))
    n_tokens = int(env.get("NANOGPT_EVAL_SIZE", shards.VAL_TOKENS))
    if n_tokens <= 0 or n_tokens % T or n_tokens // T < 2:
        fail(f"validation tokens ({n_tokens}) must be a multiple of the context ({T}), at least 2 windows")
    return {"T": T, "n_tokens": n_tokens, "batch": int(env.get("NANOGPT_EVAL_BATCH", 16)),
            "vocab": int(env.get("NANOGPT_EVAL_VOCAB", shards.VOCAB_SIZE))}


def windows(T: int, n_tokens: int):
    """(x, y): all scored windows [n, T] and their targets (y is x shifted one token on)."""
    n = n_tokens // T
    return next(shards.val_sequences(T, n_tokens, n))


def rows_of(ids: np.ndarray, x: np.ndarray, plan: dict) -> np.ndarray:
    """The token rows for these ids: scored windows as they are, variants spliced at their cut."""
    n = len(x)
    out = np.empty((len(ids), x.shape[1]), dtype=np.uint16)
    for r, i in enumerate(ids):
        if i < n:
            out[r] = x[i]
        elif i >= n + len(plan["cuts"]):                    # a filler: a copy, never scored
            out[r] = x[plan["fillers"][i - n - len(plan["cuts"])]]
        else:
            j = i - n
            c = plan["cuts"][j]
            out[r, :c] = x[plan["checked"][j], :c]
            out[r, c:] = x[plan["donors"][j], c:]
    return out


def phase_inputs(io: str) -> int:
    t0 = time.time()
    cfg = sizes_from_env()
    n = cfg["n_tokens"] // cfg["T"]
    cfg.update(seed=int.from_bytes(os.urandom(16), "little"), c=n // CHECK_EVERY, t0=t0)
    plan = make_plan(cfg["seed"], n, cfg["T"], cfg["c"], cfg["batch"])
    x, _ = windows(cfg["T"], cfg["n_tokens"])
    with open(PLAN_FILE, "w") as f:            # the scorer's own directory: no other step sees it
        json.dump(cfg, f)
    for g, ids in enumerate(plan["groups"]):
        d = os.path.join(io, "in", str(g))
        os.makedirs(d)
        np.save(os.path.join(d, "tokens.npy"), rows_of(ids, x, plan))
        with open(os.path.join(d, "meta.json"), "w") as f:
            json.dump({"batch": cfg["batch"]}, f)
    print(f"evaluate: {n} windows + {cfg['c']} causality variants + {len(plan['fillers'])} fillers in "
          f"{len(plan['groups'])} groups", file=sys.stderr)
    return 0


# ----------------------------------------------------------------------------- scoring

def load_head(arts: str, vocab: int) -> dict:
    """The LM head, read as data: weight [V >= vocab, D], optional bias [V], optional softcap > 0."""
    import zipfile
    path = os.path.join(arts, shards.HEAD_ARTIFACT)
    if not os.path.isfile(path):
        fail(f"no LM head at {path}: train.py must save the head's weights there (np.savez)")
    try:
        with zipfile.ZipFile(path) as z:
            if sum(i.file_size for i in z.infolist()) > MAX_HEAD_BYTES:
                fail(f"{path} holds more than {MAX_HEAD_BYTES >> 20} MiB")
        with np.load(path, allow_pickle=False) as z:
            head = {k: np.asarray(z[k]) for k in z.files}
    except SystemExit:
        raise
    except Exception as e:
        fail(f"could not read {path} as an .npz of arrays: {type(e).__name__}: {e}")
    extra = set(head) - {"weight", "bias", "softcap"}
    w = head.get("weight")
    if extra or w is None or w.ndim != 2 or w.shape[0] < vocab or w.dtype.kind != "f":
        fail(f"{path} must hold float 'weight' [V>={vocab}, D] and optionally 'bias' [V], 'softcap' []; "
             f"got {({k: (str(v.dtype), v.shape) for k, v in head.items()})}")
    b, cap = head.get("bias"), head.get("softcap")
    if b is not None and (b.shape != (w.shape[0],) or b.dtype.kind != "f"):
        fail(f"{path}: 'bias' must be float [{w.shape[0]}], got {b.dtype} {b.shape}")
    if cap is not None and (cap.shape != () or not float(cap) > 0 or not math.isfinite(float(cap))):
        fail(f"{path}: 'softcap' must be one finite number > 0, got {cap!r}")
    for k, v in head.items():
        if not np.isfinite(v).all():
            fail(f"{path}: '{k}' holds non-finite values")
    return head


def read_output(io: str, g: int, rows: int, T: int):
    """Group g's states as a read-only [rows, T, D] memmap and its dtype, or a clear failure."""
    d = os.path.join(io, "out", str(g))
    meta_p, bin_p = os.path.join(d, "hidden.json"), os.path.join(d, "hidden.bin")
    if not (os.path.isfile(meta_p) and os.path.isfile(bin_p)):
        fail(f"group {g}: the model step wrote no hidden.json and hidden.bin")
    if os.path.getsize(meta_p) > 4096:
        fail(f"group {g}: hidden.json is over 4 KiB")
    try:
        with open(meta_p) as f:
            meta = json.load(f)
        dtype, shape = meta["dtype"], [int(s) for s in meta["shape"]]
    except Exception as e:
        fail(f"group {g}: hidden.json is not {{'dtype': ..., 'shape': [n, T, D]}}: {type(e).__name__}: {e}")
    if dtype not in DTYPES:
        fail(f"group {g}: dtype {dtype!r}; the states must be one of {sorted(DTYPES)}")
    if len(shape) != 3 or shape[:2] != [rows, T] or not 1 <= shape[2] <= 1 << 16:
        fail(f"group {g}: shape {shape}; expected [{rows}, {T}, D] (its input had {rows} rows of {T})")
    want = rows * T * shape[2] * DTYPES[dtype]
    if os.path.getsize(bin_p) != want:
        fail(f"group {g}: hidden.bin is {os.path.getsize(bin_p)} bytes; {shape} {dtype} is {want}")
    raw = np.memmap(bin_p, dtype="<f2", mode="r", shape=tuple(shape))
    return raw, dtype


def as_float(raw: np.ndarray, dtype: str, device):
    import torch
    t = torch.from_numpy(np.array(raw)).to(device)       # a copy: the memmap is read-only
    return t.float()


def phase_score(io: str) -> int:
    import torch
    import torch.nn.functional as F
    if not os.path.isfile(PLAN_FILE):
        fail(f"no {PLAN_FILE} here: phase `score` runs in the directory where phase `inputs` ran")
    with open(PLAN_FILE) as f:
        cfg = json.load(f)
    T, n = cfg["T"], cfg["n_tokens"] // cfg["T"]
    plan = make_plan(cfg["seed"], n, T, cfg["c"], cfg["batch"])
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    head = load_head(os.environ.get("AUTORESEARCH_ARTIFACTS", "."), cfg["vocab"])
    outs, where = [], {}
    for g, ids in enumerate(plan["groups"]):
        outs.append(read_output(io, g, len(ids), T))
        where.update((int(i), (g, r)) for r, i in enumerate(ids))
    D = {raw.shape[2] for raw, _ in outs}
    if D != {head["weight"].shape[1]}:
        fail(f"hidden sizes {sorted(D)} do not match the head's {head['weight'].shape[1]}")
    W = torch.from_numpy(head["weight"]).float().to(device)
    b = torch.from_numpy(head["bias"]).float().to(device) if "bias" in head else None
    cap = float(head["softcap"]) if "softcap" in head else None

    def logits_of(h):
        z = h @ W.T
        z = z + b if b is not None else z
        return cap * torch.tanh(z / cap) if cap is not None else z

    worst = check_causal(outs, where, plan, n, device, logits_of)
    x, y = windows(T, cfg["n_tokens"])
    total, count = 0.0, 0
    for g, ((raw, dtype), ids) in enumerate(zip(outs, plan["groups"])):
        rows = [(r, int(i)) for r, i in enumerate(ids) if i < n]
        for s in range(0, len(rows), SCORE_ROWS):
            part = rows[s:s + SCORE_ROWS]
            h = as_float(raw[[r for r, _ in part]], dtype, device)
            if not torch.isfinite(h).all():
                fail(f"non-finite hidden states in group {g}")
            logits = logits_of(h)
            target = torch.from_numpy(y[[w for _, w in part]]).to(device)
            total += F.cross_entropy(logits.view(-1, logits.size(-1)), target.view(-1), reduction="sum").item()
            count += target.numel()
    val_loss = total / count
    if not math.isfinite(val_loss):
        fail(f"validation loss is not finite ({val_loss})")
    metrics = {"val_loss": val_loss, "val_tokens": count, "causal_checks": cfg["c"],
               "eval_groups": len(outs), "causal_max_nats": float(f"{worst:.3g}"),
               "eval_s": round(time.time() - cfg["t0"], 1)}
    if os.environ.get("AUTORESEARCH_RESULT"):
        with open(os.environ["AUTORESEARCH_RESULT"], "w") as f:
            json.dump(metrics, f)
    print("---")
    print(f"val_loss: {val_loss:.6f}")
    for k in ("val_tokens", "causal_checks", "causal_max_nats", "eval_groups", "eval_s"):
        print(f"{k}: {metrics[k]}")
    if device.type == "cuda":
        print(f"eval_peak_mem_mib: {torch.cuda.max_memory_allocated() // 2 ** 20}")
    return 0


def check_causal(outs, where, plan, n: int, device, logits_of) -> float:
    """Each checked window's predictions before its cut must equal its variant's (other process,
    other rows around it): a difference means the model saw later tokens or other rows. Returns the
    largest difference seen (0 when every pair agreed to the bit, as an honest model's do)."""
    import torch
    worst = 0.0
    for j, (w, cut) in enumerate(zip(plan["checked"], plan["cuts"])):
        (go, ro), (gv, rv) = where[int(w)], where[n + j]
        a = as_float(outs[go][0][ro][:cut], outs[go][1], device)
        v = as_float(outs[gv][0][rv][:cut], outs[gv][1], device)
        if not (torch.isfinite(a).all() and torch.isfinite(v).all()):
            fail(f"non-finite hidden states in window {w} or its variant")
        diff = (torch.log_softmax(logits_of(a), -1) - torch.log_softmax(logits_of(v), -1)).abs().max().item()
        if not diff <= CAUSAL_NATS:
            fail(f"causality check failed: window {w} and a copy whose tokens from position {cut} on come "
                 f"from another window, run in another process, predict differently before {cut}: "
                 f"log-probabilities differ by {diff:.3g} (tolerance {CAUSAL_NATS}); the model sees later "
                 f"tokens or other rows")
        worst = max(worst, diff)
    return worst


# ----------------------------------------------------------------------------- local debugging

def local(arts: str) -> int:
    """The three steps as plain subprocesses (no sandbox): `python evaluate.py` by hand or in a check."""
    tmp = tempfile.mkdtemp(prefix="nanogpt-eval-")
    try:
        io, scorer, model_cwd = (os.path.join(tmp, d) for d in ("io", "scorer", "model"))
        for d in (io, scorer, model_cwd):
            os.makedirs(d)
        base = {k: v for k, v in os.environ.items() if not k.startswith("AUTORESEARCH_")}
        base["AUTORESEARCH_ARTIFACTS"] = os.path.abspath(arts)
        me = [sys.executable, os.path.join(HERE, "evaluate.py")]
        scorer_env = dict(base, AUTORESEARCH_MODEL_IO=io)
        if os.environ.get("AUTORESEARCH_RESULT"):
            scorer_env["AUTORESEARCH_RESULT"] = os.environ["AUTORESEARCH_RESULT"]
        rc = subprocess.run(me, cwd=scorer, env=dict(scorer_env, AUTORESEARCH_EVAL_PHASE="inputs")).returncode
        if rc:
            return rc
        model_env = {k: v for k, v in base.items() if k not in (shards.DATA_VAR, shards.VAL_DATA_VAR)}
        for g in sorted(os.listdir(os.path.join(io, "in")), key=int):
            out = os.path.join(io, "out", g)
            os.makedirs(out)
            env = dict(model_env, AUTORESEARCH_MODEL_IN=os.path.join(io, "in", g), AUTORESEARCH_MODEL_OUT=out)
            # its stdout goes to our stderr: only the scorer's `---` block reaches stdout
            rc = subprocess.run([sys.executable, os.path.join(HERE, "eval_model.py")], cwd=model_cwd,
                                env=env, stdout=sys.stderr).returncode
            if rc:
                print(f"evaluate: the model step failed on group {g} (exit {rc})", file=sys.stderr)
                return rc
        return subprocess.run(me, cwd=scorer, env=dict(scorer_env, AUTORESEARCH_EVAL_PHASE="score")).returncode
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Frozen validation-loss evaluation of the exported model.")
    ap.add_argument("--artifacts", help="local debugging: the folder holding out/ (default: "
                                        "$AUTORESEARCH_ARTIFACTS, else .)")
    a = ap.parse_args(argv)
    phase = os.environ.get("AUTORESEARCH_EVAL_PHASE")
    if phase is None:
        return local(a.artifacts or os.environ.get("AUTORESEARCH_ARTIFACTS", "."))
    io = os.environ.get("AUTORESEARCH_MODEL_IO")
    if not io:
        fail(f"AUTORESEARCH_EVAL_PHASE={phase} needs $AUTORESEARCH_MODEL_IO")
    if phase == "inputs":
        return phase_inputs(io)
    if phase == "score":
        return phase_score(io)
    fail(f"unknown AUTORESEARCH_EVAL_PHASE {phase!r}; valid: inputs, score (unset: run all steps locally)")


if __name__ == "__main__":
    sys.exit(main())
