"""The Slurm runner against a real single-node cluster (tests/fixtures_slurm.py), and its state
parser against real Slurm 22.05 CLI output captured into tests/data/slurm/ (runs without a cluster)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from needs import need
from fixtures_slurm import make_slurm_runner, slurm_cluster, tar_of  # noqa: F401  (fixture)

from fixtures_sshd import ssh_fleet  # noqa: F401  (fixture: the ssh runner's loopback fleet, for the login node)

from autoresearchd.config import RunnerCfg
from autoresearchd.manifest import EnvManifest
from autoresearchd.runners import get
from autoresearchd.runners.base import HostUnreachable, PollState, TrialOutcome, TrialSpec
from autoresearchd.runners.slurm import SlurmRunner, slurm_time
from autoresearchd.runners.slurmjobs import (JobInfo, explain, parse_query, parse_sacct, parse_scontrol, parse_squeue,
                                             poll_state)

DATA = Path(__file__).parent / "data" / "slurm"


def sample(name: str) -> str:
    return (DATA / name).read_text()


def sections(**parts: tuple[int, str]) -> str:
    """query_script's output format, built from captured CLI text."""
    return "".join(f"@@ard {name} {rc}\n{text.rstrip()}\n" for name, (rc, text) in parts.items())


# -- parser and state table: no cluster needed ---------------------------------------------------

def test_parse_squeue_samples():
    assert parse_squeue(sample("squeue_pending.txt")) == "PENDING"
    assert parse_squeue(sample("squeue_running.txt")) == "RUNNING"
    assert parse_squeue(sample("squeue_finished.txt")) is None     # a finished job leaves the queue


@pytest.mark.parametrize("name,state,exit_code,reason", [
    ("scontrol_completed.txt", "COMPLETED", "0:0", "None"),
    ("scontrol_failed.txt", "FAILED", "3:0", "NonZeroExitCode"),
    ("scontrol_cancelled.txt", "CANCELLED", "0:15", "None"),
    ("scontrol_timeout.txt", "TIMEOUT", "0:15", "TimeLimit"),
    ("scontrol_pending.txt", "PENDING", "0:0", "BeginTime"),
    ("scontrol_running.txt", "RUNNING", "0:0", "None"),
    ("scontrol_node_fail.txt", "NODE_FAIL", "0:15", "NodeDown"),
])
def test_parse_scontrol_samples(name, state, exit_code, reason):
    rec = parse_scontrol(sample(name))
    assert (rec["JobState"], rec["ExitCode"], rec["Reason"]) == (state, exit_code, reason)
    assert rec["JobId"] and rec["StdOut"].endswith(".out")


def test_parse_sacct_jobcomp_sample():
    text = sample("sacct_c.txt")
    assert parse_sacct(text, "2") == {"JobID": "2", "State": "FAILED", "ExitCode": "3:0"}
    assert parse_sacct(text, "4")["State"] == "TIMEOUT"
    assert parse_sacct(text, "3")["State"] == "CANCELLED"
    assert parse_sacct(text, "99") == {}
    assert parse_sacct(sample("sacct_nodbd.txt"), "2") == {}          # no slurmdbd: an error line
    # slurmdbd's sacct writes who cancelled: "CANCELLED by 0"
    assert parse_sacct("7|CANCELLED by 0|0:15\n", "7")["State"] == "CANCELLED"


def test_parse_query_chain():
    running = parse_query(sections(squeue=(0, sample("squeue_running.txt"))), "4")
    assert (running.state, running.source, running.reachable) == ("RUNNING", "squeue", True)
    failed = parse_query(sections(squeue=(0, sample("squeue_finished.txt")),
                                  scontrol=(0, sample("scontrol_failed.txt"))), "2")
    assert (failed.state, failed.source, failed.exit_code) == ("FAILED", "scontrol", "3:0")
    purged = parse_query(sections(squeue=(1, sample("squeue_unknown.txt")),
                                  scontrol=(1, sample("scontrol_unknown.txt")),
                                  sacct=(0, sample("sacct_c.txt"))), "4")
    assert (purged.state, purged.source) == ("TIMEOUT", "sacct")
    gone = parse_query(sections(squeue=(1, sample("squeue_unknown.txt")),
                                scontrol=(1, sample("scontrol_unknown.txt")), sacct=(0, "")), "999")
    assert gone.state is None and gone.reachable
    down = parse_query(sections(squeue=(1, sample("squeue_controller_down.txt"))), "4")
    assert not down.reachable and "Unable to contact" in down.reason


@pytest.mark.parametrize("state,expect", [
    ("PENDING", PollState.RUNNING), ("CONFIGURING", PollState.RUNNING), ("RUNNING", PollState.RUNNING),
    ("COMPLETING", PollState.RUNNING), ("COMPLETED", PollState.DONE), ("FAILED", PollState.DONE),
    ("TIMEOUT", PollState.DONE), ("CANCELLED", PollState.DONE), ("OUT_OF_MEMORY", PollState.DONE),
    ("BOOT_FAIL", PollState.DONE), ("NODE_FAIL", PollState.LOST), ("PREEMPTED", PollState.LOST),
    ("REQUEUED", PollState.LOST), (None, PollState.LOST), ("SOME_NEW_STATE", PollState.RUNNING),
])
def test_state_table(state, expect):
    assert poll_state(state) is expect


def test_slurm_time_rounds_up_to_minutes():
    assert slurm_time(1) == "0-00:01:00"
    assert slurm_time(60) == "0-00:01:00"
    assert slurm_time(61) == "0-00:02:00"
    assert slurm_time(25 * 3600 + 30) == "1-01:01:00"


def _outcome(**kw) -> TrialOutcome:
    base = dict(exit_code=None, timed_out=False, metrics={}, metrics_source="run", log=b"run log",
                error="run left no exit code")
    return TrialOutcome(**{**base, **kw})


def test_explain_adds_slurm_state():
    t = explain(_outcome(), JobInfo("TIMEOUT", "scontrol", "0:15", "TimeLimit"), "4",
                sample("slurm_out_timeout.txt").encode())
    assert t.timed_out and "Slurm time limit" in t.error and b"DUE TO TIME LIMIT" in t.log
    assert b"Slurm job 4: TIMEOUT, exit 0:15, reason TimeLimit" in t.log
    c = explain(_outcome(), JobInfo("CANCELLED"), "3", sample("slurm_out_cancelled.txt").encode())
    assert c.error == "cancelled by scancel (Slurm state CANCELLED)" and not c.requeue
    p = explain(_outcome(), JobInfo("PREEMPTED"), "5", b"")
    assert p.requeue and "PREEMPTED" in p.error
    n = explain(_outcome(), JobInfo("NODE_FAIL", "scontrol", "0:15", "NodeDown"), "1",
                sample("slurm_out_node_fail.txt").encode())
    assert n.requeue and b"DUE TO NODE FAILURE" in n.log
    ok = explain(_outcome(exit_code=0, error=None), JobInfo("COMPLETED"), "1", b"")
    assert ok.error is None and not ok.timed_out


def test_sbatch_argv_quotes_and_orders():
    m = EnvManifest(run="true", metric="loss", time_budget_s=600, eval_budget_s=300, gpus=2,
                    evaluate="python eval.py")
    cfg = RunnerCfg(kind="slurm", slurm={"partition": "gpu", "account": "lab x", "extra_args": ["--qos=low"],
                                         "time_margin_s": 120, "work_root": "/scratch/ard"})
    r = get("slurm")(cfg, m, environ={})
    spec = TrialSpec("t 1", "c0ffee", 0, m, b"")
    argv = r.sbatch_argv("/scratch/ard/t 1", spec)
    assert argv[:3] == ["sbatch", "--parsable", "--no-requeue"]
    assert "--time=0-00:18:00" in argv          # 600 + 10 + 300 + 10 + 120 s, rounded up
    assert "--gres=gpu:2" in argv and "--partition=gpu" in argv and "--account=lab x" in argv
    assert argv.index("--qos=low") > argv.index("--account=lab x")    # extra_args come last but the script
    assert argv[-1] == "bash probe.sh > probe.txt 2>&1; exec bash '/scratch/ard/t 1/trial.sh'"
    assert "/scratch/ard/50%%/slurm.out" in r.sbatch_argv("/scratch/ard/50%", spec)   # not a %-pattern
    assert [s.slot for s in r.slots()] == ["job0", "job1", "job2", "job3"]
    with pytest.raises(ValueError, match="names no"):
        SlurmRunner(RunnerCfg(kind="slurm", slurm={"login": "nope"}), m)


def test_controller_down_is_unreachable_not_lost(tmp_path):
    """Real client commands against a controller port nobody listens on (no cluster needed)."""
    need("slurm", None if shutil.which("squeue") else "Slurm client commands not installed (apt-get install slurm-client)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"ClusterName=down\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort={port}\n"
                    f"MessageTimeout=1\nAuthType=auth/none\nNodeName=localhost CPUs=1\n"
                    f"PartitionName=debug Nodes=ALL Default=YES\n")
    m = manifest("true")
    r = make_slurm_runner(SimpleNamespace(env={"SLURM_CONF": str(conf)}), tmp_path, m)
    d = tmp_path / "t1"
    d.mkdir()
    assert r.poll({"host": "slurm", "slot": "job0", "dir": str(d), "job_id": "4"}) is PollState.UNREACHABLE
    with pytest.raises(HostUnreachable, match="Unable to contact slurm controller"):
        r.submit(spec_for(m, "t2"), r.slots()[0])


# -- against the real cluster --------------------------------------------------------------------



def manifest(run: str, **kw) -> EnvManifest:
    return EnvManifest(**{"run": run, "metric": "loss", "time_budget_s": 60, **kw})


def spec_for(m: EnvManifest, trial: str) -> TrialSpec:
    return TrialSpec(trial, "c0ffee", 7, m, tar_of({"train.sh": m.run}))


def wait_done(runner, handle, timeout: float = 60) -> PollState:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = runner.poll(handle)
        if st not in (PollState.RUNNING, PollState.UNREACHABLE):
            return st
        time.sleep(0.2)
    raise AssertionError(f"trial {handle} still running after {timeout} s")


def wait_started(runner, handle, timeout: float = 30) -> None:
    started = Path(handle["dir"]) / "started"
    deadline = time.monotonic() + timeout
    while not started.exists() and time.monotonic() < deadline:
        assert runner.poll(handle) is PollState.RUNNING
        time.sleep(0.1)
    assert started.exists(), "the job never started"


def submit(cluster, tmp_path, m, trial, **slurm):
    r = make_slurm_runner(cluster, tmp_path, m, **slurm)
    return r, r.submit(spec_for(m, trial), r.slots()[0])


@pytest.mark.slurm
def test_run_and_harvest_metrics(slurm_cluster, tmp_path):
    m = manifest('echo "seed=$AUTORESEARCH_SEED cvd=[${CUDA_VISIBLE_DEVICES-unset}]"; echo ---; echo "loss: 1.25"')
    t0 = time.monotonic()
    r, h = submit(slurm_cluster, tmp_path, m, "ok1")
    assert h["job_id"].isdigit() and h["dir"].endswith("/ok1")
    assert wait_done(r, h) is PollState.DONE
    out = r.fetch(h)
    print(f"sbatch -> harvested: {time.monotonic() - t0:.2f} s")
    assert out.error is None, out.log
    assert out.exit_code == 0 and out.metrics == {"loss": 1.25} and out.metrics_source == "run"
    assert b"seed=7 cvd=[]" in out.log            # a CPU trial: trial.env hides GPUs
    assert out.accelerator == "cpu" and out.software
    assert b"Slurm job %s: COMPLETED" % h["job_id"].encode() in out.log
    rec = parse_scontrol(slurm_cluster.cli("scontrol", "show", "job", "-o", h["job_id"]).stdout)
    assert rec["JobName"] == "ard-ok1" and rec["WorkDir"] == h["dir"] and rec["Requeue"] == "0"
    r.cleanup(h)
    assert r.poll(h) is PollState.MISSING


@pytest.mark.slurm
def test_daemon_secrets_do_not_reach_the_job(slurm_cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("ARD_TEST_API_KEY", "sekrit-value")
    monkeypatch.setenv("ARD_TEST_PLAIN", "plain-value")
    m = manifest('echo "[${ARD_TEST_API_KEY-gone}] [${ARD_TEST_PLAIN-gone}]"; echo ---; echo "loss: 1"')
    r, h = submit(slurm_cluster, tmp_path, m, "secret1")
    assert wait_done(r, h) is PollState.DONE
    # run gets a clean environment (docs/environment.md): not even the daemon's harmless variables
    assert b"[gone] [gone]" in r.fetch(h).log


@pytest.mark.slurm
def test_failing_job_records_exit_code(slurm_cluster, tmp_path):
    r, h = submit(slurm_cluster, tmp_path, manifest("echo boom >&2; exit 3"), "fail1")
    assert wait_done(r, h) is PollState.DONE
    out = r.fetch(h)
    assert out.exit_code == 3 and out.error == "run exited 3" and b"boom" in out.log


@pytest.mark.slurm
def test_gres_job_sees_slurm_gpus(slurm_cluster, tmp_path):
    m = manifest('echo "cvd=[$CUDA_VISIBLE_DEVICES] jobgpus=[$SLURM_JOB_GPUS]"; echo ---; '
                 'echo "loss: 1"; echo "gpu: $CUDA_VISIBLE_DEVICES"', gpus=1)
    r, h = submit(slurm_cluster, tmp_path, m, "gpu1")
    assert wait_done(r, h) is PollState.DONE
    out = r.fetch(h)
    assert out.error is None, out.log
    assert out.metrics["gpu"] in (0.0, 1.0), out.log           # set by Slurm from --gres, not by us
    rec = parse_scontrol(slurm_cluster.cli("scontrol", "show", "job", "-o", h["job_id"]).stdout)
    assert rec["TresPerNode"] == "gres:gpu:1"


@pytest.mark.slurm
def test_scancel_from_outside_is_recorded_as_cancelled(slurm_cluster, tmp_path):
    r, h = submit(slurm_cluster, tmp_path, manifest("sleep 300"), "cancel1")
    wait_started(r, h)
    slurm_cluster.cli("scancel", h["job_id"])
    assert wait_done(r, h) is PollState.DONE
    out = r.fetch(h)
    assert out.error == "cancelled by scancel (Slurm state CANCELLED)" and not out.requeue
    assert b"CANCELLED AT" in out.log


@pytest.mark.slurm
def test_restart_harvests_from_the_handle_alone(slurm_cluster, tmp_path):
    m = manifest('echo run >> runs.count; sleep 1; echo ---; echo "loss: 2"')
    r, h = submit(slurm_cluster, tmp_path, m, "restart1")
    stored = json.dumps(h)                 # what the lease note keeps
    r.close()
    del r
    r2 = make_slurm_runner(slurm_cluster, tmp_path, m)
    h2 = json.loads(stored)
    assert wait_done(r2, h2) is PollState.DONE
    out = r2.fetch(h2)
    assert out.metrics == {"loss": 2.0}
    assert (Path(h2["dir"]) / "code" / "runs.count").read_text() == "run\n"       # ran exactly once
    assert r2.poll(h2) is PollState.DONE                                  # harvest is repeatable
    rows = [ln for ln in (slurm_cluster.base / "log/jobcomp.txt").read_text().splitlines()
            if f"JobId={h2['job_id']} " in ln]
    assert len(rows) == 1 and "JobState=COMPLETED" in rows[0]


@pytest.mark.slurm
def test_node_failure_is_lost_and_requeued(slurm_cluster, tmp_path):
    r, h = submit(slurm_cluster, tmp_path, manifest("sleep 300"), "nodefail1")
    wait_started(r, h)
    node = slurm_cluster.node
    slurm_cluster.cli("scontrol", "update", f"nodename={node}", "state=down", "reason=ard-test")
    try:
        assert wait_done(r, h) is PollState.LOST
        out = r.fetch(h)
        assert out.requeue and "NODE_FAIL" in out.error and b"DUE TO NODE FAILURE" in out.log
    finally:
        # ReturnToService=2 may already have brought the node back ("Invalid node state" then)
        slurm_cluster.cli("scontrol", "update", f"nodename={node}", "state=resume", check=False)
        slurm_cluster.wait_idle()


@pytest.mark.slurm
def test_crash_inside_submit_recovers_from_the_predicted_handle(slurm_cluster, tmp_path):
    """The daemon writes predict_handle() to the lease before submit; if it dies before storing the
    returned handle, the job id is found again in the trial directory."""
    m = manifest('sleep 1; echo ---; echo "loss: 3"')
    r, h = submit(slurm_cluster, tmp_path, m, "crash1")
    r2 = make_slurm_runner(slurm_cluster, tmp_path, m)
    predicted = r2.predict_handle("crash1", r2.slots()[0])
    assert "job_id" not in predicted and predicted["dir"] == h["dir"]
    assert wait_done(r2, predicted) is PollState.DONE
    out = r2.fetch(predicted)
    assert out.metrics == {"loss": 3.0} and f"Slurm job {h['job_id']}: COMPLETED".encode() in out.log
    # sbatch never ran: nothing to wait for, and cancel (by job name) is harmless
    never = r2.predict_handle("never1", r2.slots()[1])
    Path(never["dir"]).mkdir(parents=True)
    assert r2.poll(never) is PollState.LOST
    r2.cancel(never)
    r2.cleanup(never)
    assert r2.poll(never) is PollState.MISSING


@pytest.mark.slurm
def test_job_unknown_to_slurm_is_lost(slurm_cluster, tmp_path):
    r = make_slurm_runner(slurm_cluster, tmp_path, manifest("true"))
    d = tmp_path / "ghost"
    d.mkdir()
    assert r.poll({"host": "slurm", "slot": "job0", "dir": str(d), "job_id": "987654"}) is PollState.LOST


@pytest.mark.slurm
def test_too_many_gpus_is_refused_with_slurms_reason(slurm_cluster, tmp_path):
    m = manifest("true", gpus=3)
    with pytest.raises(RuntimeError, match="sbatch on slurm refused.*configuration is not available"):
        submit(slurm_cluster, tmp_path, m, "gpu3")


@pytest.mark.slurm
def test_slurm_time_limit_is_a_timeout(slurm_cluster, tmp_path):
    # The wrapper's own budget (600 s) is far above the Slurm limit (1 min, from extra_args, which
    # override --time), so only Slurm can stop it. Slurm enforced 1 min about 75 s after start here.
    r, h = submit(slurm_cluster, tmp_path, manifest("sleep 600", time_budget_s=600), "slow1",
                  extra_args=["--time=1"])
    assert wait_done(r, h, timeout=180) is PollState.DONE
    out = r.fetch(h)
    assert out.timed_out and out.error.startswith("Slurm time limit"), out.error
    assert b"DUE TO TIME LIMIT" in out.log


@pytest.mark.slurm
@pytest.mark.sshd
def test_login_node_over_ssh(slurm_cluster, request):
    """[runner.slurm] login: every command runs over SSH on the login node (here a loopback sshd
    whose user submits to the test cluster); the job runs as that user in its home directory."""
    fleet = request.getfixturevalue("ssh_fleet")
    host = fleet.host_cfg(0)
    m = manifest('echo "user=$(id -un)"; echo ---; echo "loss: 0.5"')
    cfg = RunnerCfg(kind="slurm", hosts=[host],
                    slurm={"login": host.name, "work_root": f"~/{fleet.tag}/slurm", "max_jobs": 2})
    r = SlurmRunner(cfg, m, client_env={"SLURM_CONF": slurm_cluster.env["SLURM_CONF"]})
    try:
        h = r.submit(spec_for(m, "login1"), r.slots()[1])
        assert h["host"] == host.name and h["dir"] == f"{fleet.home}/{fleet.tag}/slurm/login1"
        assert wait_done(r, h) is PollState.DONE
        out = r.fetch(h)
        assert out.error is None and out.metrics == {"loss": 0.5}, out.log
        assert f"user={fleet.user}".encode() in out.log
        rec = parse_scontrol(slurm_cluster.cli("scontrol", "show", "job", "-o", h["job_id"]).stdout)
        assert rec["UserId"].startswith(fleet.user + "(")
        r.cleanup(h)
        assert r.poll(h) is PollState.MISSING
    finally:
        r.close()


# -- the whole daemon on Slurm -------------------------------------------------------------------

@pytest.mark.slurm
def test_daemon_kill_9_then_restart_harvests_slurm_job_once(slurm_cluster, toy_env, tmp_path, monkeypatch):
    """The loop dispatches baseline seeds and an idea as Slurm jobs; the daemon is killed with -9
    while the idea's job runs; a new daemon harvests it from the lease note, exactly once."""
    from conftest import branch_idea, run_until_settled

    from autoresearchd.engine.plan import settled
    from autoresearchd.store.gitrepo import GitRepo
    from autoresearchd.store.notes import Status

    monkeypatch.setenv("SLURM_CONF", slurm_cluster.env["SLURM_CONF"])
    counter = tmp_path / "runs.log"
    slow = (toy_env / "run.py").read_text().replace(
        "x = 1.0", f"open({str(counter)!r}, 'a').write('run\\n')\nimport time; time.sleep(4)\nx = 0.9")
    idea = branch_idea(toy_env, "slow/slurm", "Slow idea", {"run.py": slow})
    cfg = tmp_path / ".autoresearch.toml"
    # sandbox = "none": the run counts itself in a file of this test's (a sandboxed run cannot)
    cfg.write_text(f'[research]\nrepo = "{toy_env}"\n[runner]\nkind = "slurm"\nsandbox = "none"\n[runner.slurm]\n'
                   f'work_root = "{tmp_path}/slurm-trials"\nmax_jobs = 3\n[daemon]\ntick_s = 0.3\n'
                   f'[policy]\nbaseline_seeds = 2\n[llm]\nprovider = "none"\n')
    p = subprocess.Popen([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), "start"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not counter.exists():
            time.sleep(0.1)
        assert counter.exists(), "the first daemon never started the idea's job"
    finally:
        os.killpg(p.pid, signal.SIGKILL)       # the daemon dies; the Slurm job keeps running
        p.wait()
    pop = run_until_settled(cfg, timeout=90, until=settled)
    assert pop.baseline_note.status == Status.SUCCEEDED and len(pop.baseline_note.values) == 2
    note = pop.by_commit[idea].note
    assert note.status == Status.SUCCEEDED and 0.9 <= note.value < 0.92, note
    assert counter.read_text() == "run\n" and len(note.trials) == 1       # harvested, never run twice
    assert not GitRepo(toy_env).notes_list("refs/notes/autoresearch-runs")   # no stale leases
    jobs = [ln for ln in (slurm_cluster.base / "log/jobcomp.txt").read_text().splitlines() if "Name=ard-" in ln]
    assert any("JobState=COMPLETED" in ln for ln in jobs)
