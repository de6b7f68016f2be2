"""The trial wrapper's cgroups and host counts after its fourth cost pass (runners/limits.sh): what
the cheaper paths replaced still does what it did.

- the groups: one mkdir makes the trial's group in every writable hierarchy with its `run` and
  `eval` groups; each step joins its own; one rmdir at the end removes them all, and a stale group
  (an hour old, left by a killed wrapper) is swept by one find while a recent one is left alone;
- the CPU count the process limit is derived from: read from /proc/self/status, not by `nproc`;
  the same number, under a narrowed CPU affinity too.

The group tests need root (cgroups this user may write), bubblewrap and a cgroup hierarchy; they
skip, saying which, where one is missing. The CPU count needs only bash and coreutils' nproc.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from needs import need, needs
from test_trial_cost import processes_of, stage

from autoresearchd import runners
from autoresearchd.runners import sandbox as sandboxes

LIMITS_SH = Path(runners.__file__).parent / "limits.sh"
BWRAP = sandboxes.get("bwrap")
needs_bwrap = needs("bwrap", BWRAP.available())
needs_strace = needs("strace", None if shutil.which("strace") else "not installed (apt-get install strace)")


def limits_sh(script: str, *pre: str) -> str:
    """Run `script` in bash after sourcing limits.sh (T set to a scratch dir); its stdout."""
    p = subprocess.run([*pre, "bash", "-c", f'T=$(mktemp -d); . "$1"; {script}', "-", str(LIMITS_SH)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def groups_of(tdir: Path) -> list[Path]:
    """Every cgroup directory named for this trial's wrapper (its directory's name and the wrapper's
    PID, which it wrote to `pgid`), in every mounted hierarchy, at any depth."""
    name = f"autoresearchd-{tdir.name}-{(tdir / 'pgid').read_text().strip()}"
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _dev, mnt, typ, *_ = line.split()
        if typ in ("cgroup", "cgroup2"):
            found += [Path(d) for d, _s, _f in os.walk(mnt) if Path(d).name == name]
    return found


def writable_roots() -> list[Path]:
    """The hierarchies' directories limits.sh would make a trial's group under (its own cgroups)."""
    out = limits_sh('lim_v2_root; echo "$LIM_R"; for c in cpuacct memory pids; do lim_v1_root $c; echo "$LIM_R"; done')
    return [Path(r) for r in dict.fromkeys(out.splitlines()) if r and os.access(Path(r) / "cgroup.procs", os.W_OK)]


def test_the_cpu_count_is_what_nproc_counts():
    both = 'lim_cpus; echo "$LIM_N $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"'
    n, want = limits_sh(both).split()
    assert n == want, (n, want)
    if shutil.which("taskset") and os.cpu_count() and os.cpu_count() > 1:
        n, want = limits_sh(both, "taskset", "-c", "0").split()
        assert n == want == "1", (n, want)


needs_groups = needs("cgroups", None if os.geteuid() == 0 and Path("/sys/fs/cgroup").is_dir() else
                     "root and a cgroup hierarchy are needed for the trial's own groups")


@needs_bwrap
@needs_strace
@needs_groups
def test_the_trials_groups_are_made_used_and_removed(tmp_path):
    roots = writable_roots()
    if not roots:
        need("cgroups", "no cgroup hierarchy here lets this user make a group")
    # a stale group a killed wrapper left (two hours old, with a step group in it), and a recent one
    stale, recent = [r / f"autoresearchd-stale-{os.getpid()}" for r in roots], roots[0] / f"autoresearchd-recent-{os.getpid()}"
    try:
        for s in stale:
            (s / "run").mkdir(parents=True)
            old = time.time() - 7200
            os.utime(s, (old, old))
        recent.mkdir()
        tdir = stage(tmp_path, "bwrap", run="head -c 20000000 /dev/urandom | sha256sum; echo ---; echo score: 1")
        processes_of(tdir)
        assert (tdir / "done").exists() and (tdir / "run.rc").read_text().strip() == "0"
        assert "score: 1" in (tdir / "eval.head").read_text()
        limits = dict(ln.split(None, 1) for ln in (tdir / "limits").read_text().splitlines())
        assert limits["cpu"].strip().startswith("cgroup"), limits     # root here: the CPU is the group's counter
        # so a step's CPU is only there when the step joined its own group (made by lim_init's mkdir):
        # the run hashes 20 MB (tens of ms), the no-op evaluation starts a shell at least
        assert int((tdir / "run.cpu_us").read_text()) > 10_000
        assert int((tdir / "eval.cpu_us").read_text()) > 0
        assert groups_of(tdir) == [], "the trial's groups are all removed at its end"
        assert all(not s.exists() for s in stale), "a group an hour old and empty is swept"
        assert recent.exists(), "a recent group (a trial running beside) is left alone"
    finally:
        for d in [recent, *[s / "run" for s in stale], *stale]:
            if d.exists():
                d.rmdir()


@needs_bwrap
@needs_groups
def test_two_wrappers_of_one_trial_id_each_count_in_a_group_of_their_own(tmp_path):
    """Two wrappers named alike run at once (two daemons on one host whose searches share a baseline
    commit, so a trial id; two work roots): each makes and joins groups of its own, so both get the same
    limits and accounting. Named by the trial id alone, the second found the first's group and fell back
    to rlimits (memory, processes), and two that started together both took the one group, so the first
    to end its run killed the other's."""
    if not writable_roots():
        need("cgroups", "no cgroup hierarchy here lets this user make a group")
    slow = stage(tmp_path / "a", "bwrap", run="sleep 3; echo ---; echo score: 1")
    quick = stage(tmp_path / "b", "bwrap")
    assert slow.name == quick.name
    a = subprocess.Popen(["bash", str(slow / "trial.sh")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (slow / "run.pid").exists():      # its run step is in its groups
            assert time.monotonic() < deadline and a.poll() is None, "the slow trial's run never started"
            time.sleep(0.05)
        mine = groups_of(slow)
        assert mine, "the running wrapper has groups of its own"
        subprocess.run(["bash", str(quick / "trial.sh")], capture_output=True, timeout=120, check=True)
        assert a.wait(timeout=120) == 0
    finally:
        if a.poll() is None:
            a.kill()
    limits = [(t / "limits").read_text() for t in (slow, quick)]
    assert limits[0] == limits[1], limits
    assert dict(ln.split(None, 1) for ln in limits[0].splitlines())["cpu"].startswith("cgroup"), limits[0]
    for t in (slow, quick):
        assert (t / "run.rc").read_text().strip() == "0", t.parent.name
        assert "score: 1" in (t / "eval.head").read_text(), t.parent.name
        assert groups_of(t) == [], "each wrapper removes its own groups at its end"
    assert not any(g.exists() for g in mine)
