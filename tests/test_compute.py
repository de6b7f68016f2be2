"""A trial's compute and resources are its own (issue 26 classes 3 and 5, issue 27 item 4), on the
local runner and over ssh.

Compute: a sleeping trial costs no CPU; two processes burning CPU cost the sum of both; a grandchild
that double-forks out of the run's process tree is still counted. Resources: a memory hog, a fork
bomb and a file-descriptor hog each end alone with `limit: ...` in their outcome while an honest
trial beside them succeeds, and none leaves a process behind.

As root (this machine), the local runner's trials get cgroups (v2 for CPU, v1 memory/pids on a hybrid
host); the ssh fleet logs in as an unprivileged account, so those trials get the fallback: rusage
and rlimits set inside each sandbox's own user namespace. `limits` in the trial directory says which.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest
from needs import needs
from fixtures_sshd import ssh_fleet  # noqa: F401  (fixture, started only when an ssh case runs)
from test_runner_contract import make_local, make_ssh, manifest, wait_done

from autoresearchd.runners import sandbox as sandboxes
from autoresearchd.runners.base import PollState, TrialSpec
from autoresearchd.runners.limits import Limit

pytestmark = needs("bwrap", sandboxes.get("bwrap").available())

RUNNERS = {"local": make_local, "ssh": make_ssh}
CODE = {"x.txt": "x\n"}
OK = "echo ---; echo 'score: 1'"


@pytest.fixture(params=sorted(RUNNERS))
def make_runner(request, tmp_path):
    made = []

    def make(m):
        r = RUNNERS[request.param](request, tmp_path, m)
        made.append(r)
        return r
    yield make
    for r in made:
        r.close()


@pytest.fixture
def code_tar(make_repo):
    from autoresearchd.store.gitrepo import GitRepo
    return GitRepo(make_repo(CODE, name="env-" + uuid.uuid4().hex[:6])).archive("HEAD")


def submit(r, m, code_tar, slot=0):
    spec = TrialSpec(trial_id="t-" + uuid.uuid4().hex[:10], commit="0" * 40, seed=0, manifest=m, code_tar=code_tar)
    return spec.trial_id, r.submit(spec, r.slots()[slot])


def finish(r, handle, timeout=120.0):
    assert wait_done(r, handle, timeout) == PollState.DONE
    return r.fetch(handle)


def trial_procs(trial_id: str) -> list[int]:
    """Processes still running with this trial's id in their environment (every run and evaluate
    process has AUTORESEARCH_TRIAL)."""
    out = []
    needle = f"AUTORESEARCH_TRIAL={trial_id}".encode()
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and needle in (p / "environ").read_bytes().split(b"\0"):
                out.append(int(p.name))
        except OSError:
            continue
    return out


def how(r, handle) -> str:
    """What enforced the limits and measured the CPU (the wrapper's `limits` file)."""
    d = handle["dir"]
    if r.name == "ssh":
        rc, out, _ = r.shell_for(handle["host"]).run(f"cat {d}/limits")
        return out.decode()
    return Path(d, "limits").read_text()


# -- compute ------------------------------------------------------------------------------------------
def test_a_sleeping_trial_costs_wall_time_not_cpu(make_runner, code_tar):
    m = manifest(f"sleep 5; {OK}")
    r = make_runner(m)
    _, h = submit(r, m, code_tar)
    out = finish(r, h)
    assert out.error is None, out.error
    assert out.wall_s == pytest.approx(5.0, abs=1.5), out.wall_s
    assert out.cpu_s is not None and out.cpu_s < 0.5, (out.cpu_s, how(r, h))
    assert out.gpu_s == 0.0             # no GPU here: 0, and the trial's gpus = 0 says why


BURN = """python3 -c '
import os, time
def burn(s):
    t = time.process_time() + s
    while time.process_time() < t:
        pass
pid = os.fork()
burn(2.0)
if pid:
    os.waitpid(pid, 0)
else:
    os._exit(0)
'; """


def test_two_busy_processes_cost_the_sum_of_their_cpu(make_runner, code_tar):
    m = manifest(BURN + OK)
    r = make_runner(m)
    _, h = submit(r, m, code_tar)
    out = finish(r, h)
    assert out.error is None, out.error
    # 2 processes x 2 s of their own CPU time: 4 s, whatever the load did to the wall time
    assert 3.9 <= out.cpu_s <= 5.0, (out.cpu_s, out.wall_s, how(r, h))
    assert out.wall_s >= 1.9
    if os.cpu_count() >= 2 and os.getloadavg()[0] < 1.0:     # two idle cores: both ran at once
        assert out.cpu_s > out.wall_s


DOUBLE_FORK = """python3 -c '
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:          # the grandchild: reparented away from the run, in its own session
        t = time.process_time() + 1.5
        while time.process_time() < t:
            pass
        open("burnt", "w").close()
    os._exit(0)
os.wait()
while not os.path.exists("burnt"):
    time.sleep(0.05)
time.sleep(0.3)
'; """


def test_a_double_forked_grandchild_is_still_counted(make_runner, code_tar):
    m = manifest(DOUBLE_FORK + OK)
    r = make_runner(m)
    _, h = submit(r, m, code_tar)
    out = finish(r, h)
    assert out.error is None, out.error
    assert out.cpu_s >= 1.45, (out.cpu_s, how(r, h))


# -- resources: a hog ends alone, the trial beside it succeeds --------------------------------------
HOGS = {
    # grows until refused: a MemoryError under an rlimit, an OOM kill in a cgroup
    Limit.MEMORY: ("python3 -c 'x = []\nwhile True: x.append(bytearray(8 << 20))'", {"mem_mb": 256}),
    # forks until refused; the children would sleep for a minute
    Limit.PIDS: ("python3 -c '\nimport os, time\nwhile True:\n    if os.fork() == 0:\n        time.sleep(60)\n"
                 "        os._exit(0)'", {"max_pids": 64}),
    Limit.OPEN_FILES: ("python3 -c 'fs = [open(\"x.txt\") for _ in range(10000)]'", {"max_open_files": 64}),
}


@pytest.mark.parametrize("limit", list(HOGS), ids=[x.value for x in HOGS])
def test_a_trial_that_hits_its_limit_ends_alone(make_runner, code_tar, limit):
    hog, limits = HOGS[limit]
    honest = manifest("python3 -c 'import time; time.sleep(6)'; " + OK, **limits)
    bad = manifest(f"{hog} && {{ {OK}; }}", **limits)
    r = make_runner(honest)
    tid_ok, h_ok = submit(r, honest, code_tar, slot=0)
    time.sleep(1.0)                      # the honest one is running when the hog starts
    tid_bad, h_bad = submit(r, bad, code_tar, slot=1)
    out_bad = finish(r, h_bad)
    out_ok = finish(r, h_ok)
    assert out_bad.limit == limit.value, (out_bad.error, how(r, h_bad))
    assert f"limit: {limit.value}" in out_bad.error and out_bad.exit_code != 0
    assert out_ok.error is None and out_ok.metrics == {"score": 1.0} and out_ok.limit is None, out_ok.error
    deadline = time.monotonic() + 15
    while trial_procs(tid_bad) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not trial_procs(tid_bad), "the hog left processes behind"


FAKE_SMI = """#!/bin/bash
# a stand-in nvidia-smi: each GPU named by -i is 50% busy
case "$*" in
  *utilization.gpu*) ids=; while [ $# -gt 0 ]; do [ "$1" = -i ] && ids=$2; shift; done
    IFS=, read -ra a <<< "${ids:-0}"; for _ in "${a[@]}"; do echo 50; done;;
  *-L*) echo "GPU 0: Fake GPU (UUID: GPU-0)";;
  *) echo "Fake GPU";;
esac
"""


def test_gpu_seconds_are_the_busy_time_of_the_slots_gpus(tmp_path, monkeypatch, code_tar):
    """GPU seconds: the slot's GPUs' sampled utilisation x time (here a fake nvidia-smi says 50%);
    without nvidia-smi, the time the GPUs were held (wall x GPUs)."""
    m = manifest(f"sleep 4; {OK}", gpus=1)
    r = make_local(None, tmp_path, m, gpus=1)
    try:
        _, h = submit(r, m, code_tar)
        out = finish(r, h)
        assert out.error is None and out.gpu_s == pytest.approx(out.wall_s * 1.0, rel=0.3), out
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        (bin_dir / "nvidia-smi").write_text(FAKE_SMI)
        (bin_dir / "nvidia-smi").chmod(0o755)
        monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
        _, h = submit(r, m, code_tar)
        out = finish(r, h)
        assert out.error is None, out.error
        assert 0.3 * out.wall_s <= out.gpu_s <= 0.7 * out.wall_s, (out.gpu_s, out.wall_s)
    finally:
        r.close()
