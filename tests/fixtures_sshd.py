"""Real OpenSSH servers on loopback, standing in for GPU hosts (tests and bench/runner_overhead.py).

`Fleet(base, n)` starts n `/usr/sbin/sshd` processes on free 127.0.0.1 ports, each with its own ed25519
host key; one client key and one known_hosts file (built from the host public keys, no TOFU) serve
them all. As root, logins go to a dedicated clean account (`ardtest`) so an exec does not pay for
root's shell start-up; otherwise to the current user. Each host gets its own work root under that
account's home. `stop_host(i)` kills a host's sshd and every connection it serves (the detached trials
live on); `start_host(i)` brings it back on the same port with the same key.

The pytest fixture `ssh_fleet` (session scope, 2 hosts) is shared by every module that imports it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from needs import need

SSHD = "/usr/sbin/sshd"
TEST_USER = "ardtest"

_CONFIG = """\
Port {port}
ListenAddress 127.0.0.1
HostKey {dir}/host_ed25519
AuthorizedKeysFile {dir}/authorized_keys
PidFile {dir}/sshd.pid
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
Subsystem sftp /usr/lib/openssh/sftp-server
# one session-scoped fleet serves every test module: runners left from earlier tests may still hold
# channels (completion-event waiters), so allow more than OpenSSH's default of 10 per connection
MaxSessions 64
MaxStartups 64
"""


def have_sshd() -> bool:
    return os.access(SSHD, os.X_OK) and shutil.which("ssh-keygen") is not None


def sshd_missing() -> str | None:
    """None where sshd (and ssh-keygen) are installed, else why not: for tests/needs.py."""
    return None if have_sshd() else f"{SSHD} is not installed (apt-get install openssh-server)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, capture_output=True)


def login_user() -> str:
    """The account the fleet logs into: a clean dedicated one as root (created once), else ourselves."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid()).pw_name
    try:
        pwd.getpwnam(TEST_USER)
    except KeyError:
        p = subprocess.run(["useradd", "-m", "-s", "/bin/bash", TEST_USER], capture_output=True, text=True)
        if p.returncode != 0 and "already exists" not in p.stderr:   # another test run raced us
            raise RuntimeError(f"useradd {TEST_USER} failed: {p.stderr}")
    # useradd leaves the account locked ('!'), which sshd refuses without PAM
    subprocess.run(["usermod", "-p", "*", TEST_USER], check=True, capture_output=True)
    home = Path(pwd.getpwnam(TEST_USER).pw_dir)
    rc = home / ".bashrc"
    if not rc.exists() or rc.stat().st_size:
        rc.write_text("")
        shutil.chown(rc, TEST_USER, TEST_USER)
    return TEST_USER


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            kids.setdefault(ppid, []).append(int(d))
    return kids


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _kill(pid: int, sig=signal.SIGKILL) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass
class Host:
    name: str
    port: int
    dir: Path
    work_root: str                   # as configured ("~/..."): the runner expands it remotely
    proc: subprocess.Popen | None = None


class Fleet:
    def __init__(self, base: str | os.PathLike | None = None, n: int = 2, extra_config: str = ""):
        """`extra_config`: more sshd_config lines for every host (e.g. PermitUserEnvironment yes)."""
        if not have_sshd():
            raise RuntimeError(f"{SSHD} or ssh-keygen is missing (apt-get install openssh-server)")
        # sshd reads authorized_keys as the login user: the base must be world-traversable, which
        # pytest's tmp dirs (0700) are not, hence a directory of our own under /tmp.
        self.base = Path(tempfile.mkdtemp(prefix="ard-sshd-", dir=base))
        self.base.chmod(0o755)
        self.user = login_user()
        self.home = Path(pwd.getpwnam(self.user).pw_dir)
        self.tag = "ard-" + uuid.uuid4().hex[:8]     # this fleet's work roots: ~/<tag>/<host>
        self.client_key = self.base / "client_ed25519"
        _keygen(self.client_key, "autoresearchd-test-client")
        self.known_hosts = self.base / "known_hosts"
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        self.hosts: list[Host] = []
        lines = []
        for i in range(n):
            d = self.base / f"gpu{i}"
            d.mkdir()
            d.chmod(0o755)
            _keygen(d / "host_ed25519", f"gpu{i}")
            shutil.copy(f"{self.client_key}.pub", d / "authorized_keys")
            (d / "authorized_keys").chmod(0o644)
            h = Host(f"gpu{i}", free_port(), d, f"~/{self.tag}/gpu{i}")
            (d / "sshd_config").write_text(_CONFIG.format(port=h.port, dir=d) + extra_config)
            typ, key = (d / "host_ed25519.pub").read_text().split()[:2]
            lines.append(f"[127.0.0.1]:{h.port} {typ} {key}\n")
            self.hosts.append(h)
        self.known_hosts.write_text("".join(lines))
        try:
            for i in range(n):
                self._spawn(i)
            for i in range(n):
                self._wait_listening(i)
        except BaseException:
            self.stop()
            raise

    # -- one host -------------------------------------------------------------------------------
    def _spawn(self, i: int) -> None:
        h = self.hosts[i]
        log = open(h.dir / "sshd.log", "ab")
        h.proc = subprocess.Popen([SSHD, "-f", str(h.dir / "sshd_config"), "-D", "-e"], stdin=subprocess.DEVNULL,
                                  stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def _wait_listening(self, i: int, timeout: float = 10.0) -> None:
        h = self.hosts[i]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if h.proc.poll() is not None:
                raise RuntimeError(f"sshd {h.name} exited {h.proc.returncode}: "
                                   f"{(h.dir / 'sshd.log').read_text()[-800:]}")
            try:
                with socket.create_connection(("127.0.0.1", h.port), timeout=1) as s:
                    if s.recv(4).startswith(b"SSH-"):
                        return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"sshd {h.name} did not listen on {h.port} within {timeout}s")

    def stop_host(self, i: int) -> None:
        """The host vanishes: its listener and every open connection die (trials keep running)."""
        h = self.hosts[i]
        if h.proc is None:
            return
        kids = _children_map()
        victims, todo = [], [h.proc.pid]
        while todo:                                  # sshd connection processes under the listener
            p = todo.pop()
            for c in kids.get(p, []):
                if _comm(c) == "sshd":
                    victims.append(c)
                    todo.append(c)
        h.proc.kill()
        h.proc.wait()
        for p in victims:
            _kill(p)
        h.proc = None

    def start_host(self, i: int) -> None:
        if self.hosts[i].proc is None:
            self._spawn(i)
            self._wait_listening(i)

    # -- config for the runner ------------------------------------------------------------------
    def host_cfg(self, i: int, **over):
        from autoresearchd.config import HostCfg
        h = self.hosts[i]
        kw = dict(name=h.name, host="127.0.0.1", port=h.port, user=self.user, key=str(self.client_key),
                  known_hosts=str(self.known_hosts), gpus=1, work_root=h.work_root, connect_timeout_s=5.0)
        kw.update(over)
        return HostCfg(**kw)

    def host_cfgs(self, **over) -> list:
        return [self.host_cfg(i, **over) for i in range(len(self.hosts))]

    def remote_path(self, path: str) -> Path:
        """A remote path as seen from this machine (the fleet is loopback)."""
        return self.home / path[2:] if path.startswith("~/") else Path(path)

    # -- teardown ---------------------------------------------------------------------------------
    def kill_trials(self) -> None:
        """Kill every process left in this fleet's work roots (detached trials survive sshd)."""
        root = str(self.home / self.tag)
        for pidfile in Path(root).glob("*/*/*pid*") if Path(root).exists() else []:
            try:
                pg = int(pidfile.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            try:
                os.killpg(pg, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    cwd = os.readlink(f"/proc/{d}/cwd")
                except OSError:
                    continue
                if cwd == root or cwd.startswith(root + "/"):
                    _kill(int(d))

    def stop(self) -> None:
        for i, h in enumerate(self.hosts):
            if h.proc is not None:
                self.stop_host(i)
        self.kill_trials()
        shutil.rmtree(self.home / self.tag, ignore_errors=True)
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> "Fleet":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


_SHARED: Fleet | None = None


@pytest.fixture(scope="session")
def ssh_fleet():
    """Two loopback sshd hosts for the whole session (one instance even if several modules import this)."""
    global _SHARED
    need("sshd", sshd_missing())
    if _SHARED is None:
        _SHARED = Fleet(n=2)
    yield _SHARED
    if _SHARED is not None:
        _SHARED.stop()
        _SHARED = None
