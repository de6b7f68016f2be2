"""The nanogpt environment on CPU: manifest, shard format, a whole trial through the real trial
wrapper (torchrun with 2 gloo processes -> exported model -> frozen evaluate from the baseline's
frozen files in a clean env), the idea check, the launcher's budget, and the causality check."""

from __future__ import annotations

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
    assert (m.metric, m.goal, m.artifacts) == ("val_loss", "min", [shards.ARTIFACT])
    assert m.time_budget_s > 1500 and "NANOGPT_DATA" in m.data
    for path in ("evaluate.py", "launch.py", "shards.py", "prepare_fineweb.py", MANIFEST_FILE):
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
    assert set(os.listdir(Path(handle["dir"]) / "eval")) == {MANIFEST_FILE, *m.frozen}   # no train.py there
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
    assert (code / shards.ARTIFACT).is_file()


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


LEAKY = """
import sys, torch
class Leak(torch.nn.Module):
    def __init__(self, how):
        super().__init__(); self.how = how; self.emb = torch.nn.Embedding({V}, {V})
    def forward(self, idx):
        if self.how == "future":      # position t sees token t+1
            idx = torch.cat([idx[:, 1:], idx[:, -1:]], dim=1)
        else:                         # each row sees the next row of the batch
            idx = idx + torch.roll(idx, -1, dims=0) % 2
        return self.emb(idx % {V})
for how in ("future", "rows"):
    ep = torch.export.export(Leak(how).eval(), (torch.randint(0, {V}, (2, 64)),),
                             dynamic_shapes={{"idx": {{0: torch.export.Dim("b", min=1, max=64)}}}})
    torch.export.save(ep, sys.argv[1] + "/" + how + ".pt2")
"""


@pytest.fixture(scope="module")
def leaky_models(tmp_path_factory):
    d = tmp_path_factory.mktemp("leaky")
    (d / "leak.py").write_text(LEAKY.format(V=SMALL_VOCAB))
    p = run([PY, str(d / "leak.py"), str(d)], d, dict(os.environ))
    assert p.returncode == 0, p.stderr[-2000:]
    return d


@pytest.mark.parametrize("how,msg", [("future", "sees the future"), ("rows", "rows must be independent")])
def test_evaluate_rejects_a_model_that_sees_ahead(tmp_path, data, leaky_models, how, msg):
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "PYTHONSAFEPATH": "1",
           "NANOGPT_DATA": str(data), **TINY}
    p = run([PY, str(ENV / "evaluate.py"), "--artifact", str(leaky_models / f"{how}.pt2")], tmp_path, env)
    assert p.returncode == 1 and msg in p.stderr, p.stderr[-2000:]
