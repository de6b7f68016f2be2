"""A daemon that runs as root (a GPU box, a container, this CI machine) starts bwrap as root: the
sandbox is a user namespace that maps root to root, and bwrap left the step every capability of
that namespace (CapEff all ones, measured), CAP_SYS_ADMIN included. Its read-only binds are mounts
of its own mount namespace, not locked, so `mount -o remount,bind,rw` made each of them writable:
the Python environment, /usr, the data paths, on the host. Real trials on the local runner:

  data     run remounts a `data` path read-write and overwrites a file there
  scorer   run plants a .pth file in the site-packages of the interpreter the scorer runs: at exit
           it prints a `---` block after the scorer's own, and the last block is the metric
  sysctl   run writes the host's global sysctls (its uid is the kernel's root, and bwrap 0.8 left
           /proc/sys writable: its check for covering it is access(W_OK), which /proc/sys refuses
           to root as it is), kernel.core_pattern among them: `|program` is run by the kernel as
           root on the host at the next crash. Written back with the value each had.

Each must leave the host unchanged and the metric the scorer's (docs/security.md, "What `run`
can and cannot do": root inside keeps no capability).
"""

from __future__ import annotations

import glob
import os
import shutil
import site
import stat
import subprocess
import sysconfig
import tempfile
import time
import uuid

import pytest
from fixtures_slurm import fetch_when_ended, tar_of     # the runner tests' shared in-memory tar
from needs import needs, not_here

from autoresearchd.config import RunnerCfg
from autoresearchd.manifest import EnvManifest
from autoresearchd.runners import sandbox as sandboxes
from autoresearchd.runners.base import PollState, TrialSpec
from autoresearchd.runners.local import LocalRunner

pytestmark = needs("bwrap", sandboxes.get("bwrap").available())

TAG = "zz_ar_roottest_"

RUN = r'''import os, subprocess, sys, sysconfig
mode, tag = sys.argv[1], sys.argv[2]
def writable(d):          # the bind's own mount point is d or a directory above it
    while d != "/":
        r = subprocess.run(["mount", "-o", "remount,bind,rw", d], capture_output=True, text=True)
        print("remount", d, r.returncode, r.stderr.strip()[-200:])
        if r.returncode == 0:
            return
        d = os.path.dirname(d)
if mode == "data":
    d = os.environ["ROOTTEST_DATA"]
    writable(d)
    try:
        open(os.path.join(d, "train.txt"), "w").write("overwritten by run")
    except OSError as e:
        print("data:", e)
if mode == "scorer":
    sp = sysconfig.get_paths()["purelib"]
    writable(sp)
    pth = "import os, atexit; '%s' in os.getcwd() and atexit.register(lambda: print('\\n---\\nscore: 0.001'))\n" % tag
    try:
        open(os.path.join(sp, "''' + TAG + r'''%s.pth" % tag), "w").write(pth)
    except OSError as e:
        print("scorer:", e)
if mode == "sysctl":          # the host's own settings: the same value written back, nothing changed
    n = 0
    for f in ("/proc/sys/vm/swappiness", "/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe"):
        try:
            cur = open(f, "rb").read()
            fd = os.open(f, os.O_WRONLY)
            os.write(fd, cur)
            os.close(fd)
            n += 1
            print("sysctl: wrote", f)
        except OSError as e:
            print("sysctl:", f, e.strerror)
    print("---")
    print("writable: %d" % n)
print("---")
print("score: 5")
'''

SCORER = "print('---')\nprint('score: 1')\n"



def _planted() -> list[str]:
    dirs = {sysconfig.get_paths()["purelib"], *site.getsitepackages()}
    return [p for d in dirs for p in glob.glob(os.path.join(d, TAG + "*.pth"))]


@pytest.fixture(scope="module")
def root_runner(tmp_path_factory):
    if os.geteuid() != 0:
        not_here("this test is about a daemon that runs as root")
    data = tmp_path_factory.mktemp("roottest-data")
    (data / "train.txt").write_text("the data")
    work = tmp_path_factory.mktemp("roottest") / "work"
    m = EnvManifest(run="true", metric="score", time_budget_s=60, data={"ROOTTEST_DATA": str(data)})
    runner = LocalRunner(RunnerCfg(kind="local", slots=1, sandbox="bwrap"), m, str(work))
    try:
        yield runner, data
    finally:
        runner.close()
        for p in _planted():          # only before the fix could a run plant one
            os.unlink(p)


def _run(runner: LocalRunner, m: EnvManifest, code: dict[str, str], eval_files: dict[str, str] | None = None,
         tag: str | None = None):
    spec = TrialSpec(trial_id=f"r-{tag or uuid.uuid4().hex[:8]}", commit="0" * 40, seed=0, manifest=m,
                     code_tar=tar_of(code),
                     eval_tar=tar_of(eval_files or {}), frozen_paths=list(m.frozen))
    outs = fetch_when_ended(runner, {"one": (runner.submit(spec, runner.slots()[0]), m)}, 300, (PollState.DONE,))
    assert outs, "trial did not finish"
    return outs["one"]


def test_run_cannot_make_a_read_only_data_path_writable(root_runner):
    runner, data = root_runner
    m = EnvManifest(run="python3 run.py data x", metric="score", time_budget_s=60,
                    data={"ROOTTEST_DATA": str(data)})
    out = _run(runner, m, {"run.py": RUN})
    assert out.error is None, (out.error, out.log[-1500:])
    assert (data / "train.txt").read_text() == "the data", out.log[-1500:]


def test_run_cannot_plant_code_in_the_scorers_interpreter(root_runner):
    runner, data = root_runner
    tag = uuid.uuid4().hex[:10]
    m = EnvManifest(run=f"python3 run.py scorer {tag}", evaluate="python3 evaluate.py", metric="score",
                    time_budget_s=60, eval_budget_s=60, frozen=["evaluate.py"])
    # the .pth acts only where the cwd holds the tag: in this trial's eval/ (the trial dir is named by it)
    out = _run(runner, m, {"run.py": RUN}, {"evaluate.py": SCORER}, tag=tag)
    assert out.error is None and out.metrics == {"score": 1.0}, (out.metrics, out.log[-1500:])
    assert not _planted(), _planted()



def test_run_cannot_write_the_hosts_sysctls(root_runner):
    runner, data = root_runner
    m = EnvManifest(run="python3 run.py sysctl x", metric="score", time_budget_s=60)
    out = _run(runner, m, {"run.py": RUN})
    assert out.error is None, (out.error, out.log[-1500:])
    assert b"sysctl: wrote" not in out.log, out.log[-1500:]


SETUID_RUN = r'''import os, shutil
shutil.copy("/usr/bin/id", "suid_id")
os.chmod("suid_id", 0o4755)
print("---")
print("score: 1")
'''


def test_a_setuid_program_a_run_leaves_is_out_of_other_users_reach(root_runner):
    """A root daemon's run owns what it writes as root, so it can leave a setuid-root program in code/
    (nothing in the daemon runs it; any local user who can reach the path could). The trial's directory
    is the daemon user's alone (0700), so another user cannot: run as `nobody`, it is refused. The work
    root here is open to all (as a shared /scratch would be), so only the trial directory's mode stands."""
    work = tempfile.mkdtemp(prefix="ard-suid-")
    os.chmod(work, 0o755)
    m = EnvManifest(run="python3 run.py", metric="score", time_budget_s=60)
    runner = LocalRunner(RunnerCfg(kind="local", slots=1, sandbox="bwrap"), m, work)
    spec = TrialSpec(trial_id=f"r-suid-{uuid.uuid4().hex[:6]}", commit="0" * 40, seed=0, manifest=m,
                     code_tar=tar_of({"run.py": SETUID_RUN}), eval_tar=b"", frozen_paths=[])
    h = runner.submit(spec, runner.slots()[0])
    try:
        deadline = time.monotonic() + 300
        while runner.poll(h) != PollState.DONE:
            assert time.monotonic() < deadline, "trial did not finish"
            time.sleep(0.2)
        target = os.path.join(h["dir"], "code", "suid_id")
        assert os.stat(target).st_mode & stat.S_ISUID, "the run left no setuid program (test is void)"
        p = subprocess.run(["runuser", "-u", "nobody", "--", target], capture_output=True, text=True)
        assert p.returncode != 0 and "uid=" not in p.stdout, (p.returncode, p.stdout, p.stderr)
        assert "Permission denied" in p.stderr, p.stderr
        assert stat.S_IMODE(os.stat(h["dir"]).st_mode) == 0o700
        runner.fetch(h)
    finally:
        runner.close()
        shutil.rmtree(work, ignore_errors=True)
