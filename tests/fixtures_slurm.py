"""A real single-node Slurm cluster for tests: munged + slurmctld + slurmd as children of pytest.

Run as root without systemd. Every choice below answers a failure seen on this kind of machine:
- munged gets a private key, socket and seed file (the packaged /var/lib/munge is refused as insecure
  for root) and `--force` (it refuses sockets under a 0700 directory such as pytest's tmp dirs);
- GPUs are fake character devices (`c 1 3`, the /dev/null device): gres/gpu silently drops GPUs
  without `File=` and gives no CUDA_VISIBLE_DEVICES for regular files;
- `CPUs=8` with `SlurmdParameters=config_overrides` lets several 1-CPU jobs run at once on 2 cores;
- `batch_sched_delay=0` starts batch jobs on the next scheduler pass (~1 s) instead of after 3 s;
- `MinJobAge=3600` keeps finished jobs visible to `scontrol`; jobcomp/filetxt feeds `sacct -c`
  (there is no slurmdbd, so plain `sacct -j` fails);
- every client needs SLURM_CONF, so the fixture yields an env that carries it.
Ports 6817/6818 are fixed, so only one cluster per machine: the PIDs go to a state file in a known
place, and a cluster left by a crashed run is cancelled and stopped before a new one starts.
Teardown cancels every job and waits before stopping the daemons (a slurmd killed under running
jobs leaves `slurmstepd` orphans that ignore SIGTERM).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import stat
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from needs import need

SBIN = Path("/usr/sbin")
DAEMONS = ("munged", "slurmctld", "slurmd")
STATE_FILE = Path(tempfile.gettempdir()) / "ard-slurm-fixture.json"
PORTS = (6817, 6818)
FAKE_GPUS = 2
CPUS = 8


class SlurmUnavailable(Exception):
    """This machine cannot run the test cluster (binaries, root, ports); tests skip with the reason."""


@dataclass
class SlurmCluster:
    base: Path
    env: dict[str, str]
    node: str
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    start_s: float = 0.0            # measured: start of munged -> node idle

    def cli(self, *args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        """Run a Slurm client command against this cluster."""
        p = subprocess.run(list(args), env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
        return p

    def job_ids(self) -> list[str]:
        return self.cli("squeue", "-h", "-o", "%i", check=False).stdout.split()

    def wait_idle(self, timeout: float = 30.0) -> None:
        _wait(lambda: self.cli("sinfo", "-h", "-n", self.node, "-o", "%T", check=False).stdout.strip() == "idle",
              timeout, "node idle", [self.base / "log/slurmctld.log"])

    def drain_jobs(self, timeout: float = 30.0) -> None:
        """scancel everything, then wait until no job is queued and no node is completing."""
        _drain(self.env, timeout)


def _drain(env: dict[str, str], timeout: float) -> None:
    run = lambda *a: subprocess.run(list(a), env=env, capture_output=True, text=True, timeout=30)  # noqa: E731
    ids = run("squeue", "-h", "-o", "%i").stdout.split()
    if ids:
        run("scancel", "--full", *ids)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        q = run("squeue", "-h", "-o", "%i")
        nodes = run("sinfo", "-h", "-o", "%T").stdout
        if q.returncode != 0 or (not q.stdout.strip() and "comp" not in nodes):
            return
        time.sleep(0.2)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _gone(pid: int) -> bool:
    """True when the process has exited (a zombie counts: `kill -0` succeeds on zombies)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return text.rsplit(")", 1)[1].split()[0] == "Z"


def _stop_pid(pid: int, proc: subprocess.Popen | None = None, timeout: float = 10.0) -> None:
    try:
        os.kill(pid, 15)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return
        if proc is None and _gone(pid):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass
    if proc is not None:
        proc.wait(timeout=10)


def _start_time(pid: int) -> str:
    """The kernel's start time of a process (with the PID, it names one process for good)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def kill_stale() -> None:
    """Stop the cluster a crashed run left behind, found through the state file. A PID is only
    signalled if its command line still names that cluster's base directory (no PID reuse accidents).
    A cluster whose owning test process still runs is not stale: SlurmUnavailable then."""
    if not STATE_FILE.exists():
        return
    try:
        state = json.loads(STATE_FILE.read_text())
    except ValueError:
        STATE_FILE.unlink(missing_ok=True)
        return
    owner = int(state.get("owner", 0))
    if owner and owner != os.getpid() and not _gone(owner) and _start_time(owner) == state.get("owner_start"):
        raise SlurmUnavailable(f"the test Slurm cluster of test process {owner} is in use "
                               f"(ports {PORTS} are fixed: one cluster per machine)")
    base = state.get("base", "")
    pids = {n: int(p) for n, p in state.get("pids", {}).items()}
    ours = {n: p for n, p in pids.items() if base and n in _cmdline(p) and base in _cmdline(p)}
    if "slurmctld" in ours:
        _drain(dict(os.environ, SLURM_CONF=f"{base}/etc/slurm.conf"), timeout=20)
    for name in ("slurmd", "slurmctld", "munged"):
        if name in ours:
            _stop_pid(ours[name])
    STATE_FILE.unlink(missing_ok=True)
    if base.startswith(tempfile.gettempdir() + "/ard-slurm-"):
        shutil.rmtree(base, ignore_errors=True)


def _port_free(port: int) -> bool:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("0.0.0.0", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def _slurm_conf(b: Path, node: str) -> str:
    return f"""\
ClusterName=ardtest
SlurmctldHost={node}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={b}/munge/munge.sock
SlurmctldPort={PORTS[0]}
SlurmdPort={PORTS[1]}
StateSaveLocation={b}/state
SlurmdSpoolDir={b}/spool
SlurmctldPidFile={b}/slurmctld.pid
SlurmdPidFile={b}/slurmd.pid
SlurmctldLogFile={b}/log/slurmctld.log
SlurmdLogFile={b}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={b}/log/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
MailProg=/bin/true
InactiveLimit=0
KillWait=5
MinJobAge=3600
SlurmctldTimeout=30
SlurmdTimeout=30
Waittime=0
GresTypes=gpu
NodeName={node} NodeAddr=127.0.0.1 CPUs={CPUS} RealMemory=1000 Gres=gpu:{FAKE_GPUS} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def _fake_gpu(path: Path) -> None:
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except OSError:            # no CAP_MKNOD (containers): a symlink to /dev/null works as well
        path.symlink_to("/dev/null")


def _wait(cond, timeout: float, what: str, logs: list[Path]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    tails = "\n".join(f"--- {p}:\n" + p.read_text(errors="replace")[-1500:] for p in logs if p.exists())
    raise RuntimeError(f"test Slurm cluster: {what} not reached in {timeout:.0f} s\n{tails}")


def _save_state(c: SlurmCluster) -> None:
    STATE_FILE.write_text(json.dumps({"base": str(c.base), "owner": os.getpid(),
                                      "owner_start": _start_time(os.getpid()),
                                      "pids": {n: p.pid for n, p in c.procs.items()}}))


def start_cluster() -> SlurmCluster:
    """Start munged, slurmctld and slurmd; return when the node is idle. Raises SlurmUnavailable."""
    missing = [n for n in (*DAEMONS, "mungekey") if not (SBIN / n).exists()]
    missing += [n for n in ("sbatch", "squeue", "scontrol", "sacct", "scancel", "sinfo") if not shutil.which(n)]
    if missing:
        raise SlurmUnavailable(f"Slurm/munge not installed (missing {', '.join(missing)}); "
                               f"apt-get install slurm-wlm munge")
    if os.geteuid() != 0:
        raise SlurmUnavailable("the test Slurm cluster runs its daemons as root")
    kill_stale()
    busy = [p for p in PORTS if not _port_free(p)]
    if busy:
        raise SlurmUnavailable(f"port(s) {busy} in use: another Slurm runs on this machine")
    t0 = time.monotonic()
    b = Path(tempfile.mkdtemp(prefix="ard-slurm-", dir=tempfile.gettempdir()))
    b.chmod(0o755)              # munged wants a world-traversable path to its socket
    for d in ("etc", "state", "spool", "log", "dev", "munge"):
        (b / d).mkdir(mode=0o755)
    node = socket.gethostname().split(".")[0]
    env = dict(os.environ, SLURM_CONF=str(b / "etc/slurm.conf"))
    c = SlurmCluster(base=b, env=env, node=node)
    try:
        subprocess.run([str(SBIN / "mungekey"), "--create", f"--keyfile={b}/munge/munge.key"], check=True,
                       capture_output=True)
        m = b / "munge"
        c.procs["munged"] = _spawn(b, "munged", [str(SBIN / "munged"), "-F", "--force", f"--key-file={m}/munge.key",
                                                 f"--socket={m}/munge.sock", f"--pid-file={m}/munged.pid",
                                                 f"--log-file={m}/munged.log", f"--seed-file={m}/munged.seed"], env)
        _save_state(c)
        _wait(lambda: (m / "munge.sock").is_socket(), 10, "munge socket", [b / "log/munged.out"])
        for i in range(FAKE_GPUS):
            _fake_gpu(b / f"dev/fakegpu{i}")
        (b / "etc/slurm.conf").write_text(_slurm_conf(b, node))
        (b / "etc/gres.conf").write_text(f"AutoDetect=off\nNodeName={node} Name=gpu "
                                         f"File={b}/dev/fakegpu[0-{FAKE_GPUS - 1}]\n")
        conf = env["SLURM_CONF"]
        c.procs["slurmctld"] = _spawn(b, "slurmctld", [str(SBIN / "slurmctld"), "-D", "-f", conf], env)
        c.procs["slurmd"] = _spawn(b, "slurmd", [str(SBIN / "slurmd"), "-D", "-N", node, "-f", conf], env)
        _save_state(c)

        def idle() -> bool:
            for n, p in c.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{n} exited with {p.returncode}: "
                                       f"{(b / 'log' / (n + '.out')).read_text(errors='replace')[-1500:]}")
            return c.cli("sinfo", "-h", "-n", node, "-o", "%T", check=False).stdout.strip() == "idle"
        _wait(idle, 30, "node idle", [b / "log/slurmctld.out", b / "log/slurmd.out", b / "log/slurmd.log"])
    except BaseException:
        stop_cluster(c)
        raise
    c.start_s = time.monotonic() - t0
    return c


def _spawn(b: Path, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
    with open(b / "log" / f"{name}.out", "wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)


def stop_cluster(c: SlurmCluster, keep: bool = False) -> None:
    """Cancel every job and wait, then stop slurmd, slurmctld, munged by PID."""
    ctld = c.procs.get("slurmctld")
    if ctld is not None and ctld.poll() is None:
        c.drain_jobs()
    for name in ("slurmd", "slurmctld", "munged"):
        p = c.procs.get(name)
        if p is not None and p.poll() is None:
            _stop_pid(p.pid, p)
    STATE_FILE.unlink(missing_ok=True)
    if not keep:
        shutil.rmtree(c.base, ignore_errors=True)


_SHARED: SlurmCluster | None = None
_USERS = 0


@pytest.fixture(scope="session")
def slurm_cluster():
    """(session) A running single-node cluster with 8 CPUs and 2 fake GPUs; skips if unavailable.
    Several test modules may import this fixture: they share one cluster, stopped after the last."""
    global _SHARED, _USERS
    if _SHARED is None:
        try:
            _SHARED = start_cluster()
        except SlurmUnavailable as e:
            need("slurm", str(e))
    _USERS += 1
    try:
        yield _SHARED
    finally:
        _USERS -= 1
        if _USERS == 0:
            stop_cluster(_SHARED, keep=bool(os.environ.get("ARD_KEEP_SLURM")))
            _SHARED = None


# -- helpers for runner tests (the shared runner contract test can plug these in) ------------------

def tar_of(files: dict[str, str]) -> bytes:
    """An in-memory tar of text files, as `git archive` would give the runner."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def fetch_when_ended(runner, handles: dict, deadline_s: float, ended: tuple) -> dict:
    """Poll each submitted trial (name -> (handle, its manifest)) until its poll state is one of `ended`,
    then fetch it with its manifest set on the runner (the outcome reads the runner's manifest). Returns
    {name: outcome} for those that ended within deadline_s: the caller says what a missing one means."""
    outs, deadline = {}, time.monotonic() + deadline_s
    while len(outs) < len(handles) and time.monotonic() < deadline:
        for name, (h, m) in handles.items():
            if name not in outs and runner.poll(h) in ended:
                runner.manifest = m
                outs[name] = runner.fetch(h)
        if len(outs) < len(handles):
            time.sleep(0.3)
    return outs


def make_slurm(request, tmp_path: Path, manifest, gpus: int = 0, **cfg: object):
    """The factory for tests/test_runner_contract.py's RUNNERS: `gpus` is ignored (the test cluster
    always has 2 fake GPUs; Slurm assigns them), `cfg` are RunnerCfg overrides."""
    from autoresearchd.config import RunnerCfg
    from autoresearchd.runners.slurm import SlurmRunner

    cluster = request.getfixturevalue("slurm_cluster")
    rc = RunnerCfg(kind="slurm", slurm={"work_root": str(tmp_path / "slurm-trials"), "max_jobs": 2}, **cfg)
    return SlurmRunner(rc, manifest, environ=cluster.env)


def make_slurm_runner(cluster: SlurmCluster, tmp_path: Path, manifest, **slurm: object):
    """A SlurmRunner submitting to `cluster` with sbatch on PATH, trial dirs under tmp_path.
    Extra keyword arguments set [runner.slurm] keys (max_jobs, extra_args, time_margin_s, ...)."""
    from autoresearchd.config import RunnerCfg
    from autoresearchd.runners.slurm import SlurmRunner

    cfg = RunnerCfg(kind="slurm", slurm={"work_root": str(tmp_path / "slurm-trials"), **slurm})
    return SlurmRunner(cfg, manifest, environ=cluster.env)
