"""Sandbox overhead per trial (not a timed test): no-op trials sandboxed (bwrap) and bare (none).

Each trial is a no-op `run` and a no-op `evaluate`, so a sandboxed trial starts two sandboxes (run,
then the evaluator) and unpacks the evaluator's directory. The figures are the wrapper's own:
  wall  `done - started` (stamped by trial.sh on the host), so submit and poll latency stay out of it;
  CPU   user + system seconds of trial.sh's whole process tree (the sandboxes, the run and the
        evaluator included): this process makes itself the child subreaper (prctl), so the detached
        wrapper, once its launching shell is gone, is reparented here and wait4() gives its rusage and
        that of every descendant it reaped. The loopback sshd is a child of this process, so the ssh
        host's wrapper comes here too. CPU is the figure to trust on a shared machine: others' load
        stretches wall time, not the CPU a trial spends.
Sandboxed and bare trials alternate (pairs), one at a time, on the local runner and on a loopback
ssh host. Prints the median of the paired differences (sandboxed - bare), and both medians.

    .venv/bin/python bench/sandbox_overhead.py [--trials 50] [--runners local,ssh]
Needs bwrap; ssh needs /usr/sbin/sshd (tests/fixtures_sshd.py is used as a library).
"""

from __future__ import annotations

import argparse
import ctypes
import io
import os
import resource
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from autoresearchd.config import RunnerCfg  # noqa: E402
from autoresearchd.manifest import EnvManifest  # noqa: E402
from autoresearchd.runners.base import PollState, TrialSpec  # noqa: E402

NOOP = "echo ---; echo score: 1"
PR_SET_CHILD_SUBREAPER = 36          # linux/prctl.h


def subreaper() -> None:
    """Orphaned descendants (the detached trial.sh) are reparented to this process."""
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SystemExit(f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}")


def reap(pid: int, timeout: float = 30.0) -> float:
    """CPU seconds (user + system) of the wrapper `pid` and every descendant it reaped."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            got, _, ru = os.wait4(pid, os.WNOHANG)
        except ChildProcessError:       # not reparented here yet (its launching shell still runs)
            got, ru = 0, None
        if got == pid:
            return ru.ru_utime + ru.ru_stime
        time.sleep(0.005)
    raise SystemExit(f"the wrapper {pid} did not end (or never became this process's child)")


def tar_of(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, text in files.items():
            data = text.encode()
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def one(runner, m: EnvManifest, i: int, read) -> tuple[float, float]:
    spec = TrialSpec(trial_id=f"sbx-{i:04d}", commit="0" * 40, seed=0, manifest=m,
                     code_tar=tar_of({"train.sh": "true\n"}), eval_tar=tar_of({"evaluate.sh": "true\n"}),
                     frozen_paths=["evaluate.sh"])
    h = runner.submit(spec, runner.slots()[0])
    while runner.poll(h) != PollState.DONE:
        time.sleep(0.02)
    out = runner.fetch(h)
    if out.error or out.metrics.get("score") != 1.0:
        raise SystemExit(f"trial {h['dir']} failed: {out.error}\n{out.log.decode(errors='replace')[-800:]}")
    wall = float(read(h["dir"], "done")) - float(read(h["dir"], "started"))
    cpu = reap(int(h["pid"]))
    runner.cleanup(h)
    return wall, cpu


def measure(make, read, n: int) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    m = EnvManifest(run=NOOP, evaluate=NOOP, metric="score", time_budget_s=60, eval_budget_s=60,
                    frozen=["evaluate.sh"])
    sandboxed, bare = make("bwrap", m), make("none", m)
    one(sandboxed, m, 0, read), one(bare, m, 1, read)         # warm-up: the host probes, caches
    sb, nb = [], []
    for i in range(n):
        sb.append(one(sandboxed, m, 2 * i + 2, read))
        nb.append(one(bare, m, 2 * i + 3, read))
    sandboxed.close(), bare.close()
    return sb, nb


def report(name: str, sb: list[tuple[float, float]], nb: list[tuple[float, float]]) -> None:
    for k, what in ((0, "wall"), (1, "CPU ")):
        a, b = [x[k] for x in sb], [x[k] for x in nb]
        diff = [x - y for x, y in zip(a, b)]
        print(f"{name:6} {what} {len(a):3d} pairs   median(sandboxed - bare) {statistics.median(diff) * 1e3:7.1f} ms   "
              f"median sandboxed {statistics.median(a) * 1e3:7.1f} ms   median bare {statistics.median(b) * 1e3:7.1f} ms")


def bare_start(n: int) -> None:
    """The sandbox start alone, as trial.sh starts it (bwrap prefix + env -i + bash -c true)."""
    import subprocess

    from autoresearchd.runners import sandbox as sandboxes
    path = f"{os.path.dirname(sys.executable)}:/usr/bin:/bin"
    with tempfile.TemporaryDirectory(prefix="ard-sbx-") as d:
        req = sandboxes.SandboxRequest(argv=["env", "-i", f"PATH={path}", "bash", "-c", "true"], cwd=d,
                                       writable=[d], path=path)
        times: dict[str, list[float]] = {}
        cpus: dict[str, list[float]] = {}
        for kind in ("bwrap", "none"):
            argv = sandboxes.get(kind).argv(req)
            xs, cs = [], []
            for _ in range(n):
                r0, t = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
                subprocess.run(argv, check=True)
                xs.append(time.perf_counter() - t)
                r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                cs.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
            times[kind], cpus[kind] = xs, cs
    for what, d in (("wall", times), ("CPU ", cpus)):
        diff = [a - b for a, b in zip(d["bwrap"], d["none"])]
        print(f"start  {what} {n:3d} pairs   median(bwrap - none) {statistics.median(diff) * 1e3:7.1f} ms   "
              f"median bwrap {statistics.median(d['bwrap']) * 1e3:7.1f} ms   "
              f"median none {statistics.median(d['none']) * 1e3:7.1f} ms   (one sandbox start, no trial)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--runners", default="local,ssh")
    a = ap.parse_args()
    kinds = a.runners.split(",")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    subreaper()
    bare_start(a.trials)
    if "local" in kinds:
        from autoresearchd.runners.local import LocalRunner
        with tempfile.TemporaryDirectory(prefix="ard-sbx-") as root:
            def make_local(kind, m):
                return LocalRunner(RunnerCfg(kind="local", slots=1, sandbox=kind, prestage=1), m, f"{root}/{kind}")
            report("local", *measure(make_local, lambda d, f: Path(d, f).read_text(), a.trials))
    if "ssh" in kinds:
        from fixtures_sshd import Fleet

        from autoresearchd.runners.ssh import SSHRunner
        with Fleet(n=1) as fleet:
            def make_ssh(kind, m):
                return SSHRunner(RunnerCfg(kind="ssh", sandbox=kind, prestage=1,
                                           hosts=fleet.host_cfgs(slots=1, gpus=0)), m, ssh_config=os.devnull)
            report("ssh", *measure(make_ssh, lambda d, f: Path(d, f).read_text(), a.trials))   # loopback


if __name__ == "__main__":
    main()
