"""The behaviour every runner owes the daemon, one suite run against each runner.

To add a runner, add a factory to RUNNERS: `factory(request, tmp_path, manifest, gpus=N, **cfg) -> Runner`,
where `gpus` is how many GPUs the (fake) host has and `cfg` are RunnerCfg overrides (log_head_bytes, ...).
All hosts here are this machine (local, or sshd on loopback), so a trial directory from a handle can be
inspected directly.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest
from fixtures_sshd import ssh_fleet  # noqa: F401  (fixture, started only when an ssh case runs)
from fixtures_slurm import make_slurm, slurm_cluster  # noqa: F401  (fixture, started only for slurm cases)

from autoresearchd.config import RunnerCfg
from autoresearchd.manifest import EnvManifest
from autoresearchd.runners.base import PollState, TrialSpec
from autoresearchd.runners.local import LocalRunner
from autoresearchd.store.gitrepo import GitRepo

from conftest import sleeper, sleeper_pids, wait_file


def make_local(request, tmp_path, manifest, gpus=0, **cfg):
    rc = RunnerCfg(kind="local", slots=2, gpus=list(range(gpus)), **cfg)
    return LocalRunner(rc, manifest, tmp_path / "work")


def make_ssh(request, tmp_path, manifest, gpus=0, **cfg):
    from autoresearchd.runners.ssh import SSHRunner
    fleet = request.getfixturevalue("ssh_fleet")
    hosts = [fleet.host_cfg(0, gpus=gpus, slots=None if gpus else 2)]
    return SSHRunner(RunnerCfg(kind="ssh", hosts=hosts, **cfg), manifest, ssh_config=os.devnull)


RUNNERS = {"local": make_local, "ssh": make_ssh, "slurm": make_slurm}


@pytest.fixture(params=sorted(RUNNERS))
def make_runner(request, tmp_path):
    made = []

    def make(manifest, gpus=0, **cfg):
        r = RUNNERS[request.param](request, tmp_path, manifest, gpus=gpus, **cfg)
        made.append(r)
        return r
    yield make
    for r in made:
        r.close()


@pytest.fixture
def code(make_repo):
    """code(files) -> (code_tar, repo) of a fresh one-commit repo."""
    def _code(files: dict[str, str]):
        repo = GitRepo(make_repo(files, name="env-" + uuid.uuid4().hex[:6]))
        return repo.archive("HEAD"), repo
    return _code


def manifest(run: str, **kw) -> EnvManifest:
    kw.setdefault("metric", "score")
    kw.setdefault("time_budget_s", 60)
    return EnvManifest(run=run, **kw)


def wait_done(runner, handle, timeout=60.0) -> PollState:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = runner.poll(handle)
        if st in (PollState.DONE, PollState.LOST, PollState.MISSING):
            return st
        time.sleep(0.05)
    raise AssertionError(f"trial {handle} not done within {timeout}s")


def run_trial(runner, m, code_tar, *, slot=0, seed=0, trial_id=None, **spec_kw):
    spec = TrialSpec(trial_id=trial_id or "t-" + uuid.uuid4().hex[:10], commit="0" * 40, seed=seed,
                     manifest=m, code_tar=code_tar, **spec_kw)
    handle = runner.submit(spec, runner.slots()[slot])
    assert wait_done(runner, handle) == PollState.DONE
    return handle, runner.fetch(handle)


def gone(pid: int) -> bool:
    """Exited (a zombie waiting for PID 1 to reap it counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def wait_gone(pid: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.05)
    return False


TRAIN = {"train.sh": "echo training\n"}


def test_metrics_from_stdout_block(make_runner, code):
    m = manifest("bash train.sh; echo ---; echo 'score: 0.75'; echo 'loss: 1.5'")
    r = make_runner(m)
    _, out = run_trial(r, m, code(TRAIN)[0])
    assert out.exit_code == 0 and not out.timed_out and out.error is None, out
    assert out.metrics == {"score": 0.75, "loss": 1.5} and out.metrics_source == "run"
    assert b"training" in out.log and out.wall_s is not None and out.wall_s >= 0
    assert out.accelerator and out.software


def test_metrics_from_result_json(make_runner, code):
    m = manifest("python3 -c \"import json,os; json.dump({'score': 0.5, 'acc': 0.9}, "
                 "open(os.environ['AUTORESEARCH_RESULT'], 'w'))\"; echo ---; echo 'score: 7'")
    r = make_runner(m)
    _, out = run_trial(r, m, code(TRAIN)[0])
    assert out.error is None and out.metrics == {"score": 0.5, "acc": 0.9}


def test_nonzero_exit_is_failed(make_runner, code):
    m = manifest("echo oops; exit 3")
    _, out = run_trial(make_runner(m), m, code(TRAIN)[0])
    assert out.exit_code == 3 and out.error == "run exited 3" and b"oops" in out.log


def test_no_metrics_says_so(make_runner, code):
    m = manifest("echo hello")
    _, out = run_trial(make_runner(m), m, code(TRAIN)[0])
    assert out.exit_code == 0 and out.metrics == {}
    assert "no 'score' reported" in out.error


def test_time_budget_kills_process_group(make_runner, code):
    z = sleeper()
    m = manifest(f"sleep {z} & echo $! > gc.pid; sleep 1000", time_budget_s=2)
    h, out = run_trial(make_runner(m), m, code(TRAIN)[0])
    assert out.timed_out and "time budget" in out.error
    assert (Path(h["dir"]) / "code" / "gc.pid").exists()
    deadline = time.monotonic() + 15
    while sleeper_pids(z) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not sleeper_pids(z), "the run's grandchild survived the time-out"


def test_frozen_evaluate_ignores_tampering(make_runner, code):
    files = {
        "evaluate.py": "import os\n"
                       "v = open(os.path.join(os.environ['AUTORESEARCH_ARTIFACTS'], 'model.txt')).read().strip()\n"
                       "print('evaluating'); print('---'); print('score:', v)\n",
        "train.sh": "echo 0.25 > model.txt\n"
                    "printf 'print(\"---\"); print(\"score: 999\")\\n' > evaluate.py\n"
                    "echo ---; echo 'score: 999'\n",
    }
    m = manifest("bash train.sh", evaluate="python3 evaluate.py", artifacts=["model.txt"], frozen=["evaluate.py"])
    tar, repo = code(files)
    _, out = run_trial(make_runner(m), m, tar, eval_tar=repo.archive("HEAD", ["evaluate.py"]),
                       frozen_paths=["evaluate.py"])
    assert out.metrics == {"score": 0.25} and out.metrics_source == "evaluate", out
    assert out.eval_exit_code == 0 and out.error is None
    assert out.tamper and any("evaluate.py" in t for t in out.tamper)
    assert b"evaluating" in out.log


def test_cancel_kills_running_trial(make_runner, code):
    z = sleeper()
    m = manifest(f"echo $$ > run.pid2; sleep {z} & echo $! > gc.pid; sleep 1000; wait")
    r = make_runner(m)
    spec = TrialSpec(trial_id="t cancel; " + uuid.uuid4().hex[:10], commit="0" * 40, seed=0, manifest=m,
                     code_tar=code(TRAIN)[0])
    h = r.submit(spec, r.slots()[0])
    d = Path(h["dir"]) / "code"
    wait_file(d / "gc.pid") and wait_file(d / "run.pid2")
    deadline = time.monotonic() + 15        # the pid file can come before the child's exec of sleep
    while not (pids := sleeper_pids(z)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pids and r.poll(h) == PollState.RUNNING
    r.cancel(h)
    assert all(wait_gone(p) for p in pids)
    assert wait_done(r, h, timeout=30) in (PollState.LOST, PollState.DONE)
    r.cleanup(h)
    assert r.poll(h) == PollState.MISSING


def test_seed_and_trial_reach_the_env(make_runner, code):
    m = manifest('echo "trial=$AUTORESEARCH_TRIAL budget=$AUTORESEARCH_TIME_BUDGET_S"; '
                 'echo ---; echo "seed: $AUTORESEARCH_SEED"; echo "score: 1"')
    _, out = run_trial(make_runner(m), m, code(TRAIN)[0], seed=1234, trial_id="t-seed-" + uuid.uuid4().hex[:6])
    assert out.metrics["seed"] == 1234
    assert b"trial=t-seed-" in out.log and b"budget=60" in out.log


def test_cuda_visible_devices_per_slot(make_runner, code):
    m = manifest('echo "CVD=[$CUDA_VISIBLE_DEVICES]"; echo ---; echo "score: 1"', gpus=2)
    r = make_runner(m, gpus=4)
    if r.scheduler_gpus:        # slurm: slots are queue places; --gres picks the (2 fake) GPUs
        assert b"CVD=[0,1]" in run_trial(r, m, code(TRAIN)[0])[1].log
        return
    slots = r.slots()
    assert [s.gpus for s in slots] == [[0, 1], [2, 3]]
    assert len({s.key for s in slots}) == 2
    _, out = run_trial(r, m, code(TRAIN)[0], slot=1)
    assert b"CVD=[2,3]" in out.log


NASTY = "a;touch pwned1 $(touch pwned2) `touch pwned3` \"dq\" 'sq' \\ \n ünïcødé ✓ $HOME *"


def test_metacharacters_do_not_inject(make_runner, code):
    m = manifest('printf %s "$DATA_X" > data.txt; printf %s "$AUTORESEARCH_TRIAL" > trial.txt; '
                 'printf "%s\\n" "a;b \\$(x) \\`y\\` \'q\'" > cmd.txt; echo ---; echo score: 1',
                 evaluate='printf %s "$DATA_X" > eval_data.txt; echo ---; echo score: 2',
                 data={"DATA_X": NASTY})
    tid = "t;touch pwned4 $(touch pwned5) `touch pwned6` 'q\" ü " + uuid.uuid4().hex[:6]
    h, out = run_trial(make_runner(m), m, code(TRAIN)[0], trial_id=tid)
    d = Path(h["dir"])
    assert d.name == tid
    assert out.error is None and out.metrics == {"score": 2.0}, out
    assert (d / "code" / "data.txt").read_text() == NASTY
    assert (d / "code" / "trial.txt").read_text() == tid
    assert (d / "code" / "cmd.txt").read_text() == "a;b $(x) `y` 'q'\n"
    assert (d / "eval" / "eval_data.txt").read_text() == NASTY
    assert not [p for p in d.parent.rglob("pwned*")], "a metacharacter was executed"
