"""Functional tests of the dispatch speed-ups (not timed): pre-staged trials wait for their slot and
start their budget clock only when they run; batched polls agree with single polls; a submit is one
round trip and places the same trial directory; a kill -9 while a pre-staged trial waits still ends
with exactly one result per trial; a finished trial wakes the daemon before the clock does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from fixtures_sshd import ssh_fleet  # noqa: F401  (fixture, started only when an ssh case runs)

from autoresearchd.config import RunnerCfg, load_config
from autoresearchd.manifest import EnvManifest
from autoresearchd.runners.base import PollState, TrialSpec, trial_script
from autoresearchd.runners.local import LocalRunner
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.notes import Status

from conftest import branch_idea, git, run_for, run_until_settled, wait_file


def _local(request, tmp_path, m):
    return LocalRunner(RunnerCfg(kind="local", slots=2), m, tmp_path / "work")


def _ssh(request, tmp_path, m):
    from autoresearchd.runners.ssh import SSHRunner
    fleet = request.getfixturevalue("ssh_fleet")
    return SSHRunner(RunnerCfg(kind="ssh", hosts=fleet.host_cfgs(gpus=0, slots=2)), m, ssh_config=os.devnull)


@pytest.fixture(params=["local", "ssh"])
def runner_for(request, tmp_path):
    made = []

    def make(m):
        r = {"local": _local, "ssh": _ssh}[request.param](request, tmp_path, m)
        made.append(r)
        return r
    yield make
    for r in made:
        r.close()


def manifest(run: str, budget: int = 60) -> EnvManifest:
    return EnvManifest(run=run, metric="score", time_budget_s=budget)


def code_tar(tmp_path, files: dict[str, str], executable=(), links: dict[str, str] | None = None) -> bytes:
    d = tmp_path / ("code-" + uuid.uuid4().hex[:6])
    d.mkdir()
    git(d, "init", "-q", "-b", "main")
    for rel, text in files.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
        if rel in executable:
            (d / rel).chmod(0o755)
    for rel, target in (links or {}).items():
        (d / rel).symlink_to(target)
    git(d, "add", "-A")
    git(d, "commit", "-qm", "code")
    return GitRepo(d).archive("HEAD")


def spec(m, tar, seed=0, eval_tar=None) -> TrialSpec:
    return TrialSpec(trial_id="t-" + uuid.uuid4().hex[:10], commit="0" * 40, seed=seed, manifest=m,
                     code_tar=tar, eval_tar=eval_tar)


def wait_states(r, handles, want, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = r.poll_many(handles)
        if all(s in want for s in states):
            return states
        time.sleep(0.05)
    raise AssertionError(f"states never reached {want}: {states}")


def stamp(handle, name) -> float:
    return float(Path(handle["dir"], name).read_text())


# -- pre-staging --------------------------------------------------------------------------------------
def test_prestaged_trial_waits_for_the_slot_and_its_budget_starts_when_it_runs(runner_for, tmp_path):
    # each run takes ~2.5 s against a 4 s budget: had the second one's clock started at submit,
    # it would have been killed for its time-out while it waited behind the first
    m = manifest("sleep 2.5; echo ---; echo score: $AUTORESEARCH_SEED", budget=4)
    r = runner_for(m)
    assert r.prestage >= 2
    slot = r.slots()[0]
    tar = code_tar(tmp_path, {"x.txt": "x"})
    first = r.submit(spec(m, tar, seed=1), slot)
    second = r.submit(spec(m, tar, seed=2), slot)
    time.sleep(0.5)
    assert r.poll(second) == PollState.RUNNING          # waiting counts as running: the lease stays live
    assert not Path(second["dir"], "started").exists()   # ... but its clock has not started
    assert second["dir"] not in r.started_at             # so views show it waiting, not running
    assert r.poll(first) == PollState.RUNNING
    assert r.started_at[first["dir"]] == pytest.approx(stamp(first, "started"), abs=0.01)   # lease.began
    wait_states(r, [first, second], {PollState.DONE})
    a, b = r.fetch(first), r.fetch(second)
    assert not a.timed_out and not b.timed_out and a.error is None and b.error is None
    assert a.metrics == {"score": 1.0} and b.metrics == {"score": 2.0}
    assert stamp(second, "started") >= stamp(first, "done") - 0.05
    assert b.wall_s < 4


def test_other_slots_do_not_wait(runner_for, tmp_path):
    m = manifest("sleep 2; echo ---; echo score: 1")
    r = runner_for(m)
    s0, s1 = r.slots()[:2]
    tar = code_tar(tmp_path, {"x.txt": "x"})
    a, b = r.submit(spec(m, tar), s0), r.submit(spec(m, tar), s1)
    wait_states(r, [a, b], {PollState.DONE})
    assert stamp(b, "started") < stamp(a, "done")       # different slots overlap


def test_cancelled_waiting_trial_frees_the_queue(runner_for, tmp_path):
    m = manifest("sleep 1; echo ---; echo score: 1")
    r = runner_for(m)
    slot = r.slots()[0]
    tar = code_tar(tmp_path, {"x.txt": "x"})
    first = r.submit(spec(m, tar), slot)
    waiting = r.submit(spec(m, tar), slot)
    third = r.submit(spec(m, tar), slot)
    time.sleep(0.3)
    r.cancel(waiting)
    wait_states(r, [first, third], {PollState.DONE})
    assert r.poll(waiting) == PollState.LOST            # killed while it waited: no result, not running
    assert not Path(waiting["dir"], "started").exists()


def test_a_trial_cancelled_before_its_wrapper_is_found_never_starts(runner_for, tmp_path):
    """A cancel right after the submit found no pgid yet (the wrapper had not written it), killed
    nothing, and the trial ran once the slot freed: `started` in 1 of 3 tries on the local runner. The
    cancel now leaves a mark the wrapper checks before it runs anything and again after the slot's lock."""
    # the first trial holds the slot until the test lets it go: a cancel that finds a wrapper's pgid
    # waits 1 s before its SIGKILL, so under load four cancels outlasted a fixed `sleep 2` and the
    # last trial took the freed slot and started before its cancel was sent (a true start, not a leak)
    m = manifest("while [ ! -e go ]; do sleep 0.05; done; echo ---; echo score: 1")
    r = runner_for(m)
    slot = r.slots()[0]
    tar = code_tar(tmp_path, {"x.txt": "x"})
    first = r.submit(spec(m, tar), slot)
    cancelled = []
    for _ in range(4):
        h = r.submit(spec(m, tar), slot)
        r.cancel(h)                                      # at once: before its wrapper wrote its pgid
        cancelled.append(h)
    wait_file(Path(first["dir"], "started"))
    Path(first["dir"], "code", "go").touch()             # the run's working directory is code/
    wait_states(r, [first], {PollState.DONE})
    time.sleep(1.0)                                      # what a wrapper let through would start now
    for h in cancelled:
        assert not Path(h["dir"], "started").exists(), h["dir"]
        assert r.poll(h) == PollState.LOST


# -- batched polling ----------------------------------------------------------------------------------
def test_batched_poll_agrees_with_single_polls(request, tmp_path):
    fleet = request.getfixturevalue("ssh_fleet")
    from autoresearchd.runners.ssh import SSHRunner
    m = manifest("sleep ${SLEEP_S:-0}; echo ---; echo score: 1")
    ssh = SSHRunner(RunnerCfg(kind="ssh", hosts=fleet.host_cfgs(gpus=0, slots=3)), m, ssh_config=os.devnull)
    try:
        tar_fast = code_tar(tmp_path, {"x.txt": "x"})
        slow = manifest("sleep 30; echo ---; echo score: 1")
        slots = ssh.slots()                              # 2 hosts x 3 slots
        done = [ssh.submit(spec(m, tar_fast), s) for s in slots[:2]]
        running = [ssh.submit(spec(slow, tar_fast), slots[2]), ssh.submit(spec(slow, tar_fast), slots[3])]
        killed = ssh.submit(spec(slow, tar_fast), slots[4])
        wait_states(ssh, done, {PollState.DONE})
        pg = int(wait_file(Path(killed["dir"], "pgid")))
        os.killpg(pg, signal.SIGKILL)                    # the wrapper dies without `done`: lost
        missing = dict(done[0], dir=done[0]["dir"] + "-gone")
        nopid = {"host": slots[5].host, "slot": slots[5].slot, "dir": ssh.work_root(slots[5].host) + "/t-nopid",
                 "submitted": time.time()}
        Path(fleet.remote_path(ssh.hosts[slots[5].host].work_root), "t-nopid").mkdir(parents=True, exist_ok=True)
        stale = dict(nopid, submitted=time.time() - 3600)
        handles = [running[0], done[0], missing, killed, nopid, running[1], done[1], stale]
        deadline = time.monotonic() + 10
        while ssh.poll(killed) != PollState.LOST and time.monotonic() < deadline:
            time.sleep(0.05)                             # until PID 1 reaps the killed wrapper
        batched = ssh.poll_many(handles)
        single = [ssh.poll(h) for h in handles]
        assert batched == single == [PollState.RUNNING, PollState.DONE, PollState.MISSING, PollState.LOST,
                                     PollState.RUNNING, PollState.RUNNING, PollState.DONE, PollState.LOST]
        fetched = ssh.fetch_many(done + running[:1])
        assert [o.metrics for o in fetched[:2]] == [{"score": 1.0}] * 2 == [ssh.fetch(h).metrics for h in done]
        for h in running:
            ssh.cancel(h)
    finally:
        ssh.close()


# -- one round trip per submit ------------------------------------------------------------------------
class CountingShell:
    def __init__(self, inner):
        self.inner, self.name, self.calls = inner, inner.name, []

    def run(self, cmd, stdin=None, timeout=60.0):
        self.calls.append(cmd)
        return self.inner.run(cmd, stdin=stdin, timeout=timeout)

    def close(self):
        self.inner.close()


def test_submit_is_one_round_trip_and_places_the_same_trial_dir(runner_for, tmp_path):
    m = manifest("bash run.sh")
    r = runner_for(m)
    files = {"run.sh": "echo ---; echo score: 3\n", "pkg/deep/mod.py": "x = 1\n", "name with space.txt": "s"}
    tar = code_tar(tmp_path, files, executable=("run.sh",), links={"link": "pkg/deep/mod.py"})
    eval_tar = code_tar(tmp_path, {"evaluate.py": "print(1)\n"})
    slot = r.slots()[0]
    r.work_root(slot.host)                               # resolve ~ and probe the sandbox first: both
    r.host_sandbox(slot.host)                            # round trips are cached per host
    counting = CountingShell(r.shell_for(slot.host))
    r.shell_for = lambda host: counting
    h = r.submit(spec(m, tar, eval_tar=eval_tar), slot)
    assert len(counting.calls) == 1, counting.calls
    d = Path(h["dir"])
    wait_states(r, [h], {PollState.DONE})
    for rel, text in files.items():
        assert (d / "code" / rel).read_text() == text
    assert os.access(d / "code" / "run.sh", os.X_OK)
    assert (d / "code" / "link").is_symlink() and os.readlink(d / "code" / "link") == "pkg/deep/mod.py"
    # the evaluator ships as eval.tar; without an `evaluate` command it is never unpacked
    assert (d / "eval.tar").stat().st_size > 0 and not (d / "eval").exists()
    assert (d / "trial.sh").read_bytes() == trial_script()
    assert "AR_SLOT_LOCK=" in (d / "trial.env").read_text()
    assert r.fetch(h).metrics == {"score": 3.0}


def test_eval_dir_appears_only_after_the_run_is_over(runner_for, tmp_path):
    """The run never sees eval/: it is unpacked from eval.tar once run's processes are gone."""
    m = manifest("test ! -e ../eval || exit 3; echo ---; echo score: 1")
    m.evaluate = "cat evaluate.py"
    r = runner_for(m)
    h = r.submit(spec(m, code_tar(tmp_path, {"a": "a"}), eval_tar=code_tar(tmp_path, {"evaluate.py": "---\nscore: 2\n"})),
                 r.slots()[0])
    assert not Path(h["dir"], "eval").exists() and Path(h["dir"], "code", "a").read_text() == "a"
    wait_states(r, [h], {PollState.DONE})
    assert Path(h["dir"], "eval", "evaluate.py").read_text() == "---\nscore: 2\n"
    assert r.fetch(h).metrics == {"score": 2.0}


# -- the daemon ---------------------------------------------------------------------------------------
MANIFEST = """[env]
name = "toy"
run = "python3 run.py"
metric = "score"
goal = "min"
time_budget_s = 60
"""

RUN = """import os, time
log = {log!r}
t = time.time()
time.sleep({secs})
open(log, "a").write(f"{{os.environ['AUTORESEARCH_TRIAL']}} {{t}} {{time.time()}}\\n")
print("---")
print("score: {score}")
"""


def toy(make_repo, log: Path, secs: float):
    return make_repo({".autoresearch.toml": MANIFEST, "run.py": RUN.format(log=str(log), secs=secs, score=1.0)},
                     "research")


def config(tmp_path, repo, slots=1, tick=0.3) -> Path:
    cfg = tmp_path / ".autoresearch.toml"
    cfg.write_text(f'[research]\nrepo = "{repo}"\n[runner]\nsandbox = "none"\nkind = "local"\nslots = {slots}\n'
                   f'[daemon]\ntick_s = {tick}\n[policy]\nbaseline_seeds = 1\nconfirm_seeds = 0\n'
                   f'[llm]\nprovider = "none"\n')
    return cfg


def all_noted(pop) -> bool:
    return pop.baseline_note is not None and all(i.note is not None for i in pop.ideas) and not any(
        i.leases for i in pop.ideas)


def test_kill_9_while_a_prestaged_trial_waits_gives_one_result_each(make_repo, tmp_path):
    log = tmp_path / "runs.log"
    repo = toy(make_repo, log, 2.5)
    ideas = [branch_idea(repo, f"p/{k}", f"Idea {k}", {"run.py": (repo / "run.py").read_text()
                         .replace("score: 1.0", f"score: 0.{k}")}) for k in (5, 6)]
    cfg = config(tmp_path, repo, slots=1)
    p = subprocess.Popen([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), "start"],
                         env=dict(os.environ, PYTHONUNBUFFERED="1"), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    from autoresearchd import defaults
    work = Path(defaults.local_trial_root(str(repo)))     # outside the research repo (and its .git)
    deadline = time.time() + 60
    waiting = []
    while time.time() < deadline and not waiting:       # one running, one staged without `started`
        dirs = [d for d in work.glob("*") if d.is_dir() and not d.name.startswith(".")] if work.exists() else []
        if any((d / "started").exists() for d in dirs):
            waiting = [d for d in dirs if (d / "pgid").exists() and not (d / "started").exists()]
        time.sleep(0.05)
    assert waiting, "the daemon never staged a trial behind the running one"
    os.killpg(p.pid, signal.SIGKILL)                     # the daemon dies; the staged trial keeps waiting
    p.wait()
    pop = run_until_settled(cfg, timeout=90, until=all_noted)
    assert pop.baseline_note.status == Status.SUCCEEDED
    for c, k in zip(ideas, (5, 6)):
        note = pop.by_commit[c].note
        assert note.status == Status.SUCCEEDED and note.value == pytest.approx(0.1 * k) and len(note.trials) == 1
    runs = [ln.split() for ln in log.read_text().splitlines()]
    assert len(runs) == 3 and len({r[0] for r in runs}) == 3   # baseline and both ideas ran exactly once
    spans = sorted((float(a), float(b)) for _, a, b in runs)
    assert all(spans[i][1] <= spans[i + 1][0] + 0.05 for i in range(2))   # one slot: never two at once
    assert not GitRepo(repo).notes_list("refs/notes/autoresearch-runs")


def test_a_finished_trial_wakes_the_daemon_before_the_clock(make_repo, tmp_path):
    repo = toy(make_repo, tmp_path / "runs.log", 0.5)
    cfg = config(tmp_path, repo, slots=2, tick=120)      # the clock alone would take two minutes

    def baseline_noted(pop):
        return pop.baseline_note is not None
    pop = run_until_settled(cfg, timeout=60, until=baseline_noted)    # fails at 60 s, half the clock
    assert pop.baseline_note.status == Status.SUCCEEDED


def test_an_idle_daemon_does_not_tick_itself(make_repo, tmp_path):
    """Git reading refs must not count as a ref change (a watcher feedback loop)."""
    repo = toy(make_repo, tmp_path / "runs.log", 0.1)
    cfg = config(tmp_path, repo, slots=1, tick=5)
    from autoresearchd.app import build_daemon
    d = build_daemon(load_config(cfg), with_llm=False)
    passes = []
    harvest = d.collector.harvest
    d.collector.harvest = lambda pop: passes.append(time.time()) or harvest(pop)
    run_for(d, 4)                                        # a fixed time: what it does idle is the test
    assert len(passes) < 20, f"{len(passes)} reconcile passes in 4 s with a 5 s clock"


def test_a_reused_pid_is_not_this_trial(tmp_path):
    """A pid file can name a process that is not the trial's any more (pids wrap on a busy host):
    poll must not call the trial alive, and cancel must not kill the stranger."""
    m = manifest("echo ---; echo score: 1")
    r = LocalRunner(RunnerCfg(kind="local", slots=1), m, tmp_path / "work")
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True, cwd=tmp_path)
    try:
        d = tmp_path / "work" / "t-stale"
        d.mkdir(parents=True)
        for name in ("pgid", "run.pid"):
            (d / name).write_text(f"{stranger.pid}\n")
        handle = {"host": "local", "slot": "0", "dir": str(d), "submitted": time.time() - 3600}
        assert r.poll(handle) == PollState.LOST
        r.cancel(handle)
        assert stranger.poll() is None, "cancel killed a process that was not the trial's"
    finally:
        stranger.kill()
        stranger.wait()


def test_a_python_runs_output_reaches_its_log_while_it_runs(runner_for, tmp_path):
    """Output to a pipe is block-buffered in Python; the trial makes it unbuffered so that a running
    trial's log (run.head, which `show` and the dashboard read) is live."""
    m = manifest("python3 -c 'import time; print(\"step 1 loss 4.2\"); time.sleep(30)'")
    r = runner_for(m)
    h = r.submit(spec(m, code_tar(tmp_path, {"a": "a"})), r.slots()[0])
    log = Path(h["dir"], "run.head")
    try:
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline and not (log.exists() and "step 1" in log.read_text()):
            time.sleep(0.2)
        assert log.exists() and "step 1 loss 4.2" in log.read_text()
        assert r.poll_many([h]) == [PollState.RUNNING]
    finally:
        r.cancel(h)


def test_done_waits_for_the_log_cap_to_write_the_whole_log(tmp_path, monkeypatch):
    # The log cap (`head` and `tail` behind a process substitution) may still be writing the step's log
    # when the step ends: here its `head` starts a second late. `done` (and the step's rc) must wait for
    # it, or the daemon reads a log without the score (`wait` with no argument skips a process
    # substitution, so the wrapper once wrote `done` first, and under load lost a trial's score).
    import shutil
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "head").write_text(f"#!/bin/bash\nsleep 1\nexec {shutil.which('head')} \"$@\"\n")
    (shim / "head").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")
    m = manifest("echo ---; echo score: 7")
    r = LocalRunner(RunnerCfg(kind="local", slots=1, sandbox="none"), m, tmp_path / "work")
    try:
        h = r.submit(spec(m, code_tar(tmp_path, {"x.txt": "x"})), r.slots()[0])
        wait_states(r, [h], {PollState.DONE})
        assert r.fetch(h).metrics == {"score": 7.0}
        assert "score: 7" in Path(h["dir"], "run.head").read_text()
    finally:
        r.close()
