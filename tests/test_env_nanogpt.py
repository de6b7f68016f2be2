"""The nanogpt environment on CPU: manifest, shard format, a whole trial through the real trial
wrapper (torchrun with 2 gloo processes -> exported model -> frozen evaluate from the baseline's
frozen files in a clean env), the idea check, the launcher's budget, and the causality check."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from autoresearchd.config import RunnerCfg
from autoresearchd.envs import template_dir
from autoresearchd.manifest import MANIFEST_FILE, parse_manifest
from autoresearchd.runners.base import PollState, Slot, TrialSpec
from autoresearchd.runners.local import LocalRunner
from autoresearchd.runners.metrics import parse_metrics
from autoresearchd.store.gitrepo import GitRepo

ENV = template_dir("nanogpt")
PY = sys.executable
SMALL_VOCAB = 512
# What a tiny CPU configuration needs; a real trial's environment has none of these.
TINY = {"NANOGPT_SMOKE": "1", "NANOGPT_SMOKE_VOCAB": str(SMALL_VOCAB), "TORCHDYNAMO_DISABLE": "1",
        "NANOGPT_EVAL_SEQ_LEN": "64", "NANOGPT_EVAL_SIZE": "4096", "NANOGPT_EVAL_VOCAB": str(SMALL_VOCAB),
        "NANOGPT_EVAL_BATCH": "8", "OMP_NUM_THREADS": "1"}

sys.path.insert(0, str(ENV))
import make_synthetic_shards  # noqa: E402
import prepare_fineweb  # noqa: E402
import shards  # noqa: E402


def manifest():
    return parse_manifest((ENV / MANIFEST_FILE).read_text())


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("nanogpt-data")
    make_synthetic_shards.make_shards(d, train_tokens=40_000, val_tokens=4_200, shard_tokens=20_000,
                                      vocab=SMALL_VOCAB)
    return d


def env_copy(dst: Path) -> Path:
    shutil.copytree(ENV, dst, ignore=shutil.ignore_patterns("__pycache__", "out"))
    return dst


def run(cmd, cwd, env, timeout=120):
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_manifest_is_the_papers_setup():
    m = manifest()
    assert (m.run, m.evaluate, m.check) == ("python launch.py", "python evaluate.py", "python launch.py --smoke")
    assert (m.metric, m.goal, m.artifacts) == ("val_loss", "min", [shards.ARTIFACT, shards.HEAD_ARTIFACT])
    assert m.time_budget_s > 1500 and "NANOGPT_DATA" in m.data
    assert (m.model, m.model_output_mb) == ("python eval_model.py", 6144)      # the split evaluation
    for path in ("evaluate.py", "eval_model.py", "launch.py", "shards.py", "prepare_fineweb.py", MANIFEST_FILE):
        assert m.is_frozen(path), path       # an idea that edits one of these never becomes a run
    assert not m.is_frozen("train.py")
    assert shards.VAL_TOKENS == 10_485_760


def test_shard_writer_round_trip_and_errors(tmp_path):
    texts = ["hello world", "a second, longer document about nothing", "x" * 70]
    byte_encode = lambda t: list(t.encode())         # noqa: E731 - a stand-in for tiktoken (no network)
    w = prepare_fineweb.ShardWriter(tmp_path, shard_tokens=50)
    stream = []
    for t in texts:
        toks = prepare_fineweb.tokenize(t, byte_encode, shards.EOT)
        stream.extend(toks.tolist())
        w.add(toks)
    paths = w.close()
    assert [p.name for p in paths] == ["fineweb_val_000000.bin", "fineweb_train_000001.bin",
                                       "fineweb_train_000002.bin"]
    got = np.concatenate([shards.load_shard(p) for p in paths]).tolist()
    assert got == stream and got[0] == shards.EOT and max(got) == shards.EOT
    assert [shards.shard_tokens(p) for p in paths] == [50, 50, len(stream) - 100]
    with open(paths[1], "r+b") as f:
        f.truncate(shards.HEADER_BYTES + 20)
    with pytest.raises(ValueError, match="truncated or corrupt"):
        shards.shard_tokens(paths[1])
    (tmp_path / "junk.bin").write_bytes(b"\0" * 2048)
    with pytest.raises(ValueError, match="not a token shard"):
        shards.shard_tokens(tmp_path / "junk.bin")


def test_loader_splits_windows_between_ranks(data):
    a = shards.TokenLoader("train", 2, 8, rank=0, world=2, root=str(data))
    b = shards.TokenLoader("train", 2, 8, rank=1, world=2, root=str(data))
    stream = np.asarray(shards.load_shard(a.paths[0]), dtype=np.int64)
    (xa, ya), (xb, yb) = a.next_batch(), b.next_batch()
    assert xa.flatten().tolist() == stream[:16].tolist() and xb.flatten().tolist() == stream[16:32].tolist()
    assert ya.flatten().tolist() == stream[1:17].tolist() and yb.flatten().tolist() == stream[17:33].tolist()
    assert a.next_batch()[0].flatten().tolist() == stream[32:48].tolist()
    x, y = next(shards.val_sequences(8, 64, 4, root=str(data)))
    assert x.shape == (4, 8) and (x[:, 1:] == y[:, :-1]).all()


def test_whole_trial_through_the_wrapper(tmp_path, make_repo, data):
    """The daemon's path: git archive of the idea and of the frozen files, trial.sh, torchrun with two
    gloo processes, the exported artifact copied out, evaluate from eval/ in a clean environment."""
    files = {p.relative_to(ENV).as_posix(): p.read_text() for p in ENV.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts}
    repo = GitRepo(make_repo(files))
    m = manifest().model_copy(update={"data": {"NANOGPT_DATA": str(data), "NANOGPT_NPROC": "2", **TINY},
                                     "eval_data": {"NANOGPT_VAL_DATA": str(data)}})   # val shards: evaluator only
    frozen = [MANIFEST_FILE, *m.frozen]
    spec = TrialSpec(trial_id="t1", commit="HEAD", seed=0, manifest=m, code_tar=repo.archive("HEAD"),
                     eval_tar=repo.archive("HEAD", frozen), frozen_paths=frozen)
    runner = LocalRunner(RunnerCfg(work_root=str(tmp_path / "trials")), m, tmp_path / "trials")
    handle = runner.submit(spec, Slot("local", "0"))
    deadline = time.time() + 150
    while runner.poll(handle) == PollState.RUNNING and time.time() < deadline:
        time.sleep(0.2)
    out = runner.fetch(handle)
    log = out.log.decode(errors="replace")
    assert out.error is None and out.metrics_source == "evaluate", log[-3000:]
    assert "world 2 on cpu" in log and "1 accumulation step" in log
    scorer_state = {".nanogpt_eval_plan.json"}          # the scorer's secret, when the wrapper splits
    assert set(os.listdir(Path(handle["dir"]) / "eval")) - scorer_state == {MANIFEST_FILE, *m.frozen}   # no train.py
    eval_log = log.split("===== evaluate =====")[1]
    assert parse_metrics(eval_log) == pytest.approx(out.metrics, rel=1e-4)
    loss = out.metrics["val_loss"]
    assert out.metrics["val_tokens"] == 4096 and math.isfinite(loss) and loss < math.log(SMALL_VOCAB) + 0.5
    assert not out.tamper


def test_check_command_runs_train_and_evaluate(tmp_path):
    code = env_copy(tmp_path / "code")
    p = run([PY, "launch.py", "--smoke"], code, dict(os.environ, OMP_NUM_THREADS="1"))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "2 accumulation step(s)" in p.stdout and "stopped after 8 steps" in p.stdout
    assert "val_loss" in parse_metrics(p.stdout)


def test_budget_reached_still_saves(tmp_path, data):
    """A 1 s budget ends before train.py's first step: it must stop at once and still save."""
    code = env_copy(tmp_path / "code")
    env = dict(os.environ, NANOGPT_DATA=str(data), CUDA_VISIBLE_DEVICES="", NANOGPT_TRAIN_BUDGET_S="1",
               NANOGPT_SAVE_GRACE_S="90", **TINY)
    p = run([PY, "launch.py"], code, env)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "training budget of 1s reached" in p.stdout and "(time budget)" in p.stdout
    assert (code / shards.ARTIFACT).is_file() and (code / shards.HEAD_ARTIFACT).is_file()


def test_the_curve_counts_the_budget_when_the_budget_ends_the_run(tmp_path, data):
    """A real run ends by its wall-clock budget long before num_iterations (2,656 of 26,880 steps on
    an H200), so `t` = step / steps stayed under 0.1 and no stopping rule's rung was ever reached.
    `t` is now the larger of the steps' and the budget's share done."""
    code = env_copy(tmp_path / "code")
    curve = tmp_path / "progress.jsonl"
    env = dict(os.environ, NANOGPT_DATA=str(data), CUDA_VISIBLE_DEVICES="", NANOGPT_TRAIN_BUDGET_S="25",
               NANOGPT_SMOKE_STEPS="1000000", AUTORESEARCH_PROGRESS=str(curve), **TINY)
    p = run([PY, "launch.py"], code, env)
    assert p.returncode == 0 and "(time budget)" in p.stdout, p.stdout[-2000:] + p.stderr[-2000:]
    points = [json.loads(line) for line in curve.read_text().splitlines()]
    ts = [pt["t"] for pt in points]
    assert len(points) >= 2 and ts == sorted(ts) and 0 < ts[0] and ts[-1] <= 1, points
    assert ts[-1] > 0.3 and points[-1]["step"] / 1e6 < 0.01          # by the clock, not by the steps


def test_train_that_ignores_the_stop_is_killed_and_fails(tmp_path):
    code = env_copy(tmp_path / "code")
    (code / "out").mkdir()
    (code / shards.ARTIFACT).write_text("stale model from an earlier run")
    (code / "train.py").write_text(
        "import os, time\nopen('pid', 'w').write(str(os.getpid()))\nwhile True:\n    time.sleep(0.1)\n")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", NANOGPT_TRAIN_BUDGET_S="1", NANOGPT_SAVE_GRACE_S="5")
    p = run([PY, "launch.py"], code, env, timeout=120)
    assert p.returncode == 3 and "no model saved" in p.stdout, p.stdout + p.stderr
    assert not (code / shards.ARTIFACT).exists()          # the stale model does not count
    if (code / "pid").exists():                           # the worker started (it may not, on a busy CPU)
        with pytest.raises(ProcessLookupError):
            os.kill(int((code / "pid").read_text()), 0)   # ... and is gone, not orphaned
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and _cmdline_has(pid, str(code))]


def _cmdline_has(pid: str, text: str) -> bool:
    try:
        return text in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


# ----------------------------------------------------------------------------- the split evaluation

def eval_env(data, **extra):
    """A clean environment like the trial wrapper's, with the tiny sizes."""
    return {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "PYTHONSAFEPATH": "1",
            "NANOGPT_DATA": str(data), **TINY, **extra}


def evaluate(arts, data, cwd, evaluator=ENV / "evaluate.py", **extra):
    return run([PY, str(evaluator), "--artifacts", str(arts)], cwd, eval_env(data, **extra))


@pytest.fixture(scope="module")
def trained(tmp_path_factory, data):
    """A tiny model trained by the baseline train.py: out/model.pt2 (body) and out/head.npz."""
    d = tmp_path_factory.mktemp("trained")
    env = dict(os.environ, NANOGPT_DATA=str(data), CUDA_VISIBLE_DEVICES="", **TINY,
               NANOGPT_ARTIFACT=str(d / shards.ARTIFACT), NANOGPT_HEAD=str(d / shards.HEAD_ARTIFACT))
    p = run([PY, str(ENV / "train.py")], d, env, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return d


def direct_loss(arts: Path, data: Path) -> float:
    """What the evaluator before the split computed: the fp32 logits of the whole model on the
    scored windows, in order, and their mean cross-entropy, all in one process."""
    import torch
    import torch.nn.functional as F
    body = torch.export.load(str(arts / shards.ARTIFACT)).module()
    W = torch.from_numpy(np.load(arts / shards.HEAD_ARTIFACT)["weight"])
    total, count = 0.0, 0
    for x, y in shards.val_sequences(64, 4096, 8, root=str(data)):
        with torch.no_grad():
            logits = body(torch.from_numpy(x)) @ W.T
        total += F.cross_entropy(logits.view(-1, logits.size(-1)), torch.from_numpy(y).view(-1),
                                 reduction="sum").item()
        count += y.size
    return total / count


def test_honest_value_is_unchanged(tmp_path, data, trained):
    p = evaluate(trained, data, tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    m = parse_metrics(p.stdout)
    assert m["val_tokens"] == 4096 and m["causal_checks"] == 32 and m["eval_groups"] >= 3
    assert m["val_loss"] == pytest.approx(direct_loss(trained, data), rel=2e-5)
    assert not list(tmp_path.iterdir())          # local debugging leaves nothing in its cwd


def phase(name, io, cwd, arts, data, **extra):
    env = eval_env(data, AUTORESEARCH_EVAL_PHASE=name, AUTORESEARCH_MODEL_IO=str(io),
                   AUTORESEARCH_ARTIFACTS=str(arts), **extra)
    return run([PY, str(ENV / "evaluate.py")], cwd, env)


def model_step(io, g, arts):
    out = io / "out" / g
    out.mkdir(parents=True)
    env = {"PATH": os.environ["PATH"], "AUTORESEARCH_MODEL_IN": str(io / "in" / g),
           "AUTORESEARCH_MODEL_OUT": str(out), "AUTORESEARCH_ARTIFACTS": str(arts), "OMP_NUM_THREADS": "1"}
    return run([PY, str(ENV / "eval_model.py")], out.parent, env)


def _scorer_module():
    """The env's evaluate.py under a name of its own (other envs have an evaluate.py too)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("nanogpt_evaluate", ENV / "evaluate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_model_input_holds_no_secret_and_no_next_window(tmp_path, data, trained):
    """The groups hold token rows only: no seed, no cut, no targets beyond the rows themselves. No
    row's last target (the next window's first token) is in its process: neither the next window
    nor a variant of it (which starts with it) shares its group. The evaluator before the split
    scored 16 consecutive windows per batch, so a model mixing rows could read it."""
    io, sc = tmp_path / "io", tmp_path / "scorer"
    sc.mkdir()
    p = phase("inputs", io, sc, trained, data)
    assert p.returncode == 0, p.stderr
    cfg = json.loads((sc / ".nanogpt_eval_plan.json").read_text())
    ev = _scorer_module()
    x, _ = next(shards.val_sequences(64, 4096, 64, root=str(data)))
    n = len(x)
    plan = ev.make_plan(cfg["seed"], n, 64, cfg["c"], cfg["batch"])
    groups = sorted((io / "in").iterdir(), key=lambda d: int(d.name))
    assert len(groups) == len(plan["groups"]) >= 3 and cfg["c"] == 32
    group_of, slot_of = {}, {}
    for g, ids in zip(groups, plan["groups"]):
        assert sorted(f.name for f in g.iterdir()) == ["meta.json", "tokens.npy"]
        assert str(cfg["seed"]) not in (g / "meta.json").read_text()
        rows = np.load(g / "tokens.npy")
        assert rows.dtype == np.uint16 and (rows == ev.rows_of(ids, x, plan)).all()   # what the plan says
        group_of.update((int(i), int(g.name)) for i in ids)
        slot_of.update((int(i), r % cfg["batch"]) for r, i in enumerate(ids))
        assert len(ids) % cfg["batch"] == 0 and len(set(ids.tolist())) == len(ids)   # full calls only
    rows = n + cfg["c"]
    assert sorted(i for i in group_of if i < rows) == list(range(rows))   # each row in exactly one group
    for f, w in enumerate(plan["fillers"]):                     # a filler repeats a window of its group
        assert group_of[rows + f] == group_of[int(w)]
    assert sorted(group_of)[rows:] == list(range(rows, rows + len(plan["fillers"])))
    for w in range(n - 1):
        assert group_of[w] != group_of[w + 1], w                 # never beside the next window
    for j, w in enumerate(plan["checked"]):
        assert group_of[n + j] != group_of[int(w)]               # a variant is never beside its original
        assert w == 0 or group_of[n + j] != group_of[int(w) - 1]  # ... nor beside the window before it
        assert slot_of[n + j] == slot_of[int(w)]                 # ... and in its slot of the model's calls
        cut = plan["cuts"][j]
        assert 1 <= cut <= 63 and plan["donors"][j] != w


def test_wrong_outputs_fail_with_a_reason(tmp_path, data, trained):
    io, sc = tmp_path / "io", tmp_path / "scorer"
    sc.mkdir()
    assert phase("inputs", io, sc, trained, data).returncode == 0
    groups = sorted((p.name for p in (io / "in").iterdir()), key=int)
    for g in groups:
        p = model_step(io, g, trained)
        assert p.returncode == 0, p.stderr
    ok = phase("score", io, sc, trained, data)
    assert ok.returncode == 0 and "val_loss" in parse_metrics(ok.stdout), ok.stderr
    out = io / "out" / groups[0]
    meta = json.loads((out / "hidden.json").read_text())
    good_bin = (out / "hidden.bin").read_bytes()
    n, T, D = meta["shape"]

    def corrupt(meta_obj, blob):
        (out / "hidden.json").write_text(json.dumps(meta_obj))
        (out / "hidden.bin").write_bytes(blob)
        return phase("score", io, sc, trained, data)

    nan = np.frombuffer(good_bin, dtype=np.float16).copy()
    nan[5] = np.nan
    cases = [({"dtype": "float64", "shape": [n, T, D]}, good_bin + good_bin, "dtype 'float64'"),
             ({"dtype": "float16", "shape": [n - 1, T, D]}, good_bin[:(n - 1) * T * D * 2], "expected ["),
             ({"dtype": "float16", "shape": [n, T, D + 1]}, bytes(n * T * (D + 1) * 2), "do not match the head"),
             ({"dtype": "float16", "shape": [n, T, D]}, good_bin[:-2], "bytes"),
             ({"dtype": "float16", "shape": [n, T, D]}, nan.tobytes(), "non-finite"),
             ({"shape": [n, T, D]}, good_bin, "hidden.json is not")]
    for meta_obj, blob, reason in cases:
        p = corrupt(meta_obj, blob)
        assert p.returncode == 1 and reason in p.stderr and "val_loss" not in p.stdout, (reason, p.stderr)
    (out / "hidden.bin").unlink()
    p = phase("score", io, sc, trained, data)
    assert p.returncode == 1 and f"group {groups[0]}: the model step wrote no" in p.stderr


def test_a_forged_metric_block_from_the_model_step_is_not_the_result(tmp_path, data, trained):
    """The model step's own stdout never reaches the scorer's: a runner that prints a perfect score
    (as idea code running in it could) changes nothing."""
    code = env_copy(tmp_path / "code")
    (code / "eval_model_real.py").write_bytes((ENV / "eval_model.py").read_bytes())
    (code / "eval_model.py").write_text(
        "import runpy, sys, os\nprint('---'); print('val_loss: 0.000001'); sys.stdout.flush()\n"
        "runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'eval_model_real.py'),"
        " run_name='__main__')\n")
    p = evaluate(trained, data, tmp_path, evaluator=code / "evaluate.py")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "val_loss: 0.000001" in p.stderr and "0.000001" not in p.stdout
    assert parse_metrics(p.stdout)["val_loss"] == pytest.approx(direct_loss(trained, data), rel=2e-5)


LEAKY = """
import sys, numpy as np, torch
V, D, T = {V}, 32, 64
OLD_CUTS = (16, 32, 48, 63)          # the positions the evaluator before the split checked
class Leak(torch.nn.Module):
    def __init__(self, how):
        super().__init__()
        torch.manual_seed(0)
        self.how, self.emb, self.nxt = how, torch.nn.Embedding(V, D), torch.nn.Embedding(V, D)
        mask = torch.ones(T)
        mask[-1] = 0
        if how == "untested":          # looks ahead everywhere but just before the old cuts
            mask[[c - 1 for c in OLD_CUTS]] = 0
        self.register_buffer("mask", mask)
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))
    def forward(self, idx):
        h = self.emb(idx)
        nxt = self.nxt(torch.cat([idx[:, 1:], idx[:, -1:]], dim=1))
        if self.how == "rows":         # each row sees the next row of its batch
            return h + 0.5 * self.nxt(torch.roll(idx, -1, dims=0))
        if self.how == "stateful":     # causal for its first 6 calls (the old check's), then it leaks
            self.calls.add_(1)
            return h + (self.calls > 6).float() * self.mask[None, :, None] * nxt
        if self.how == "slotted":      # honest, but each slot of a call rounds its own way (cuBLAS on
            slot = torch.arange(idx.shape[0], dtype=h.dtype)[:, None, None]   # an H200 did, 1e-3 nats)
            return h + 0.01 * slot * self.nxt.weight[0]
        if self.how == "flat":         # not [B, T, D]
            return h.sum(-1)
        if self.how == "huge":         # states float16 cannot hold
            return h * 1e6
        if self.how == "inflated":     # a small leak beside a huge state the head ignores (which
            big = torch.full_like(h[..., :1], 60000.0)     # would widen a tolerance on the states)
            return torch.cat([h + 0.01 * self.mask[None, :, None] * nxt, big], dim=-1)
        return h + self.mask[None, :, None] * nxt
for how in ("untested", "future", "rows", "stateful", "inflated", "flat", "huge", "honest", "slotted"):
    m = Leak(how).eval()
    if how == "honest":
        m.how, m.mask = "future", torch.zeros(T)
    ep = torch.export.export(m, (torch.randint(0, V, (2, T)),),
                             dynamic_shapes={{"idx": {{0: torch.export.Dim("b", min=1, max=64)}}}})
    d = sys.argv[1] + "/" + how + "/out"
    import os; os.makedirs(d)
    torch.export.save(ep, d + "/model.pt2")
    w = m.emb.weight.detach().numpy()
    if how == "inflated":
        w = np.concatenate([w, np.zeros((V, 1), dtype=w.dtype)], axis=1)
    np.savez(d + "/head.npz", weight=w)
"""


@pytest.fixture(scope="module")
def leaky_models(tmp_path_factory):
    d = tmp_path_factory.mktemp("leaky")
    (d / "leak.py").write_text(LEAKY.format(V=SMALL_VOCAB))
    p = run([PY, str(d / "leak.py"), str(d)], d, dict(os.environ))
    assert p.returncode == 0, p.stderr[-2000:]
    return d


def test_untested_positions_escaped_the_old_fixed_check(leaky_models):
    """The blind spot of the evaluator before the split: with its four fixed cuts, changing the
    later tokens left every earlier state of this model unchanged, though it reads ahead at 59 of
    64 positions."""
    import torch
    body = torch.export.load(str(leaky_models / "untested" / shards.ARTIFACT)).module()
    x = torch.randint(0, SMALL_VOCAB, (8, 64), generator=torch.Generator().manual_seed(1))
    base = body(x)
    for cut in (16, 32, 48, 63):
        y = x.clone()
        y[:, cut:] = torch.randint(0, SMALL_VOCAB, (8, 64 - cut))
        assert torch.equal(body(y)[:, :cut], base[:, :cut])


@pytest.mark.parametrize("how", ["untested", "future", "rows", "stateful", "inflated"])
def test_evaluate_rejects_a_model_that_sees_ahead(tmp_path, data, leaky_models, how):
    p = evaluate(leaky_models / how, data, tmp_path, NANOGPT_EVAL_BATCH="4")
    assert p.returncode == 1 and "causality check failed" in p.stderr, p.stderr[-2000:]
    assert "val_loss" not in p.stdout


@pytest.mark.parametrize("how,reason", [("flat", "must map int64 [B, T] to float hidden states [B, T, D]"),
                                        ("huge", "over float16's 65504")])
def test_the_model_step_refuses_outputs_it_cannot_pass_on(tmp_path, data, leaky_models, how, reason):
    p = evaluate(leaky_models / how, data, tmp_path)
    assert p.returncode == 1 and reason in p.stderr and "val_loss" not in p.stdout, p.stderr[-2000:]


def test_evaluate_accepts_the_causal_twin(tmp_path, data, leaky_models):
    p = evaluate(leaky_models / "honest", data, tmp_path, NANOGPT_EVAL_BATCH="4")
    assert p.returncode == 0 and "val_loss" in parse_metrics(p.stdout), p.stderr[-2000:]
    assert parse_metrics(p.stdout)["causal_max_nats"] == 0


def test_a_model_whose_rounding_depends_on_its_batch_slot_is_not_called_a_cheat(tmp_path, data, leaky_models):
    """On an H200 the honest baseline failed the check (1.2e-3 nats against a 1e-3 tolerance): the
    same row rounded differently in another slot of an equal-shaped call, while in the same slot it
    agreed to the bit (docs/env-nanogpt.md). A twin now takes its window's slot; this model, causal
    but 0.01 x its slot off, stands in for those kernels on a CPU."""
    p = evaluate(leaky_models / "slotted", data, tmp_path, NANOGPT_EVAL_BATCH="4")
    assert p.returncode == 0, p.stderr[-2000:]
    m = parse_metrics(p.stdout)
    assert m["causal_max_nats"] == 0 and m["causal_checks"] == 32
