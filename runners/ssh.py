"""The ssh runner: trials run detached on remote hosts reached with paramiko.

`SSHShell` keeps one authenticated Transport per host (TCP_NODELAY, opened by us and handed to paramiko
with `sock=`) and opens a channel per command, so an exec costs a few ms instead of a new handshake.
Host keys are always verified against a known_hosts file; `trusted = true` only lets an unknown key be
recorded on first use, never a changed one. A host that cannot be reached raises `HostUnreachable`,
which the runner turns into `PollState.UNREACHABLE` / `Slot.reachable = False` rather than an error.

`SSHRunner` is a thin `ShellRunner`: slots per host, the remote work root (with `~` resolved on the
host) and the shells. Everything else (upload as tar through stdin, detached `trial.sh`, harvesting)
is shared with the local and slurm runners.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar

import paramiko

from autoresearchd import defaults
from autoresearchd.manifest import EnvManifest

from .base import HostUnreachable, ShellRunner, Slot

log = logging.getLogger(__name__)

SSH_CONFIG_ENV = "AUTORESEARCHD_SSH_CONFIG"   # overrides ~/.ssh/config (tests point it elsewhere)
# After a failed connect, commands fail fast for 1 s, doubling up to 3 s, then connect again: a host
# that comes back is seen within a few seconds (a long back-off once made the daemon declare finished
# trials lost after their host was back), and a dead one costs one connect time-out per interval.
RETRY_AFTER_S = defaults.RECONNECT_S
_CHUNK = 32768


class HostKeyError(HostUnreachable):
    """The host's key is unknown or changed: we refuse to talk to it (a config problem, not a blip)."""


class HostAuthError(HostUnreachable):
    """The host refused our key."""


def _fingerprint(key: paramiko.PKey) -> str:
    return f"{key.get_name()} {key.fingerprint}"


class _RecordUnknown(paramiko.MissingHostKeyPolicy):
    """trusted = true: accept a key seen for the first time and append it to known_hosts.
    (A mismatched key never reaches a policy: paramiko raises BadHostKeyException first.)"""

    def __init__(self, path: Path, name: str):
        self.path, self.name = path, name

    def missing_host_key(self, client, hostname, key):
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.path, "a") as f:
            f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
        client.get_host_keys().add(hostname, key.get_name(), key)
        log.warning("host %s: recorded new host key %s for %s in %s (trusted = true)",
                    self.name, _fingerprint(key), hostname, self.path)


class _RefuseUnknown(paramiko.MissingHostKeyPolicy):
    def __init__(self, path: Path, name: str, port: int):
        self.path, self.name, self.port = path, name, port

    def missing_host_key(self, client, hostname, key):
        host = hostname.split("]")[0].lstrip("[")
        raise HostKeyError(
            f"host {self.name} ({hostname}) offered host key {_fingerprint(key)}, which is not in {self.path}. "
            f"Check the fingerprint with the host's owner, then add it: "
            f"ssh-keyscan -p {self.port} {host} >> {self.path} "
            f"(or set trusted = true in its [[runner.hosts]] entry to record it on first use)")


class SSHShell:
    """A Shell (runners.base) over one persistent SSH connection to one host."""

    def __init__(self, host, ssh_config: str | os.PathLike | None = None):
        self.host = host
        self.name = host.name
        self._lock = threading.Lock()
        self._channels = threading.BoundedSemaphore(defaults.SSH_MAX_CHANNELS)
        self._client: paramiko.SSHClient | None = None
        self._retry_at = 0.0
        self._fails = 0
        self._failure: HostUnreachable | None = None
        self._resolve(ssh_config)

    # -- where and who --------------------------------------------------------------------------
    def _resolve(self, ssh_config) -> None:
        """Fabric style: ~/.ssh/config (or $AUTORESEARCHD_SSH_CONFIG) fills in what the host entry leaves out."""
        h = self.host
        path = Path(os.path.expanduser(ssh_config or os.environ.get(SSH_CONFIG_ENV) or "~/.ssh/config"))
        conf: dict = {}
        if path.is_file():
            conf = paramiko.SSHConfig.from_path(str(path)).lookup(h.alias or h.host or h.name)
        elif h.alias:
            raise ValueError(f"host {h.name}: alias '{h.alias}' needs an ssh config file, but {path} does not exist")
        self.hostname = h.host or conf.get("hostname") or h.alias or h.name
        self.port = int(h.port or conf.get("port") or 22)
        self.user = h.user or conf.get("user") or None
        if h.key and not Path(os.path.expanduser(h.key)).is_file():
            raise ValueError(f"host {h.name}: key file {h.key} does not exist")
        keys = [h.key] if h.key else list(conf.get("identityfile") or [])
        self.keys = [os.path.expanduser(k) for k in keys if Path(os.path.expanduser(k)).exists()] or None
        kh = h.known_hosts or (conf.get("userknownhostsfile") or "").split(" ")[0] or "~/.ssh/known_hosts"
        self.known_hosts = Path(os.path.expanduser(kh))

    def _where(self) -> str:
        return f"{self.user + '@' if self.user else ''}{self.hostname}:{self.port}"

    # -- connection ------------------------------------------------------------------------------
    def _connect(self) -> paramiko.SSHClient:
        h = self.host
        client = paramiko.SSHClient()
        if self.known_hosts.is_file():
            client.load_host_keys(str(self.known_hosts))
        client.set_missing_host_key_policy(_RecordUnknown(self.known_hosts, h.name) if h.trusted
                                           else _RefuseUnknown(self.known_hosts, h.name, self.port))
        try:
            sock = socket.create_connection((self.hostname, self.port), timeout=h.connect_timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as e:
            raise HostUnreachable(f"host {h.name}: cannot connect to {self._where()}: {e}") from None
        try:
            client.connect(self.hostname, port=self.port, username=self.user, key_filename=self.keys,
                           look_for_keys=self.keys is None, allow_agent=self.keys is None, sock=sock,
                           timeout=h.connect_timeout_s, banner_timeout=h.connect_timeout_s,
                           auth_timeout=h.connect_timeout_s)
        except HostKeyError:
            sock.close()
            raise
        except paramiko.BadHostKeyException as e:
            sock.close()
            raise HostKeyError(
                f"host {h.name} ({self._where()}) presented host key {_fingerprint(e.key)}, but {self.known_hosts} "
                f"expects {_fingerprint(e.expected_key)}. The host was reinstalled or someone is in the middle; "
                f"if you trust the change, remove the old line (ssh-keygen -R '[{self.hostname}]:{self.port}' "
                f"-f {self.known_hosts}) and add the new key. trusted = true never accepts a changed key.") from None
        except paramiko.AuthenticationException as e:
            sock.close()
            raise HostAuthError(f"host {h.name}: {self._where()} refused our key "
                                f"({self.keys or 'ssh agent / default keys'}): {e}") from None
        except (paramiko.SSHException, OSError, EOFError) as e:
            sock.close()
            raise HostUnreachable(f"host {h.name}: ssh handshake with {self._where()} failed: {e}") from None
        t = client.get_transport()
        t.set_keepalive(15)
        return client

    def _transport(self, fresh: bool = False) -> paramiko.Transport:
        with self._lock:
            c = self._client
            if c is not None and not fresh and c.get_transport() is not None and c.get_transport().is_active():
                return c.get_transport()
            if c is not None:
                c.close()
                self._client = None
            if self._failure is not None and time.monotonic() < self._retry_at:
                raise type(self._failure)(str(self._failure))
            try:
                self._client = self._connect()
            except HostUnreachable as e:
                lo, hi = RETRY_AFTER_S
                self._failure, self._fails = e, self._fails + 1
                self._retry_at = time.monotonic() + min(hi, lo * 2 ** (self._fails - 1))
                raise
            self._failure, self._fails = None, 0
            return self._client.get_transport()

    def _open(self) -> paramiko.Channel:
        """A session channel; a dead connection is replaced once (nothing was executed yet)."""
        for attempt in (0, 1):
            t = self._transport(fresh=attempt == 1)
            try:
                return t.open_session(timeout=self.host.connect_timeout_s)
            except paramiko.ChannelException as e:      # the server refused a channel; the link is fine
                raise HostUnreachable(f"host {self.name}: channel refused: {e}") from None
            except (paramiko.SSHException, OSError, EOFError) as e:
                if attempt == 1:
                    raise HostUnreachable(f"host {self.name}: connection to {self._where()} lost: {e}") from None
        raise AssertionError("unreachable")

    def reset_backoff(self) -> None:
        """The next command connects at once (the last probe before a lease is declared lost)."""
        with self._lock:
            self._retry_at = 0.0

    def connected(self) -> bool:
        c = self._client
        return c is not None and c.get_transport() is not None and c.get_transport().is_active()

    def check(self) -> None:
        """Connect if needed; raises HostUnreachable (or HostKeyError, HostAuthError)."""
        self._transport()

    # -- Shell protocol ----------------------------------------------------------------------------
    def run(self, cmd: str, stdin: bytes | None = None, timeout: float = 60.0) -> tuple[int, bytes, bytes]:
        with self._channels:
            chan = self._open()
            try:
                rc, out, err = self._exec(chan, cmd, stdin, timeout)
            except (socket.timeout, TimeoutError):
                raise HostUnreachable(f"host {self.name}: command timed out after {timeout:.0f}s: {cmd[:80]}") from None
            except (paramiko.SSHException, OSError, EOFError) as e:
                raise HostUnreachable(f"host {self.name}: connection lost during a command: {e}") from None
            finally:
                chan.close()
        if rc == -1 and self._lost(chan):
            # the connection died mid-command: the command may have run (a submit may have started
            # its trial), so this is the host's fault, never a command's exit -1 (a submit read as
            # failed was requeued while its trial ran, and the seed ran twice)
            raise HostUnreachable(f"host {self.name}: connection lost during a command (no exit status): {cmd[:80]}")
        return rc, out, err

    @staticmethod
    def _lost(chan: paramiko.Channel) -> bool:
        """Whether a channel that closed without an exit status did so because its connection died.
        (A command killed by a signal on a live connection also has none: paramiko ignores exit-signal.)
        The transport's thread closes its channels before it marks itself inactive: wait for it briefly."""
        t = chan.get_transport()
        if t is None:
            return True
        t.join(defaults.SSH_LOST_WAIT_S)
        return not t.is_active()

    def _exec(self, chan: paramiko.Channel, cmd: str, stdin: bytes | None, timeout: float):
        deadline = time.monotonic() + timeout
        chan.exec_command(cmd)
        err: list[bytes] = []

        def left() -> float:
            t = deadline - time.monotonic()
            if t <= 0:
                raise TimeoutError
            return t

        def drain_stderr():     # stderr shares the window with stdout: read it concurrently
            try:
                while (b := chan.recv_stderr(_CHUNK)):
                    err.append(b)
            except (OSError, paramiko.SSHException, EOFError):
                pass
        t_err = threading.Thread(target=drain_stderr, daemon=True)
        t_err.start()
        t_in = None
        if stdin:
            def feed():
                try:
                    view = memoryview(stdin)
                    for i in range(0, len(view), _CHUNK):
                        chan.sendall(view[i:i + _CHUNK])
                    chan.shutdown_write()
                except (OSError, paramiko.SSHException, EOFError):
                    pass        # the command exited early; its status tells what happened
            t_in = threading.Thread(target=feed, daemon=True)
            t_in.start()
        else:
            chan.shutdown_write()
        out: list[bytes] = []
        while True:
            chan.settimeout(left())
            b = chan.recv(_CHUNK)
            if not b:
                break
            out.append(b)
        if not chan.status_event.wait(left()):
            raise TimeoutError
        t_err.join(left())
        if t_in is not None:
            t_in.join(left())
        return chan.recv_exit_status(), b"".join(out), b"".join(err)

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


class SSHRunner(ShellRunner):
    name: ClassVar[str] = "ssh"
    REACHABLE_TTL_S = defaults.SSH_REACHABLE_TTL_S   # per instance: a test may shorten it

    def __init__(self, cfg, manifest: EnvManifest, ssh_config: str | os.PathLike | None = None, *,
                 sandbox_fallback: bool = False):
        super().__init__(cfg, manifest, sandbox_fallback=sandbox_fallback)
        if not cfg.hosts:
            raise ValueError("runner.kind = 'ssh' needs at least one [[runner.hosts]] entry")
        names = [h.name for h in cfg.hosts]
        if len(set(names)) != len(names):
            raise ValueError(f"[[runner.hosts]] names must be unique, got {names}")
        self.hosts = {h.name: h for h in cfg.hosts}
        self._shells = {h.name: SSHShell(h, ssh_config) for h in cfg.hosts}
        self._roots: dict[str, str] = {}
        self._reach: dict[str, tuple[float, bool]] = {}
        self.errors: dict[str, str] = {}     # last connection error per host, for status displays

    def _slots_of(self, h) -> list[Slot]:
        per = self.manifest.gpus
        n = h.slots or max(1, h.gpus // max(1, per))
        if per <= 0:
            return [Slot(h.name, str(i)) for i in range(n)]
        out = []
        for i in range(n):
            ids = [(i * per + k) % max(1, h.gpus) for k in range(per)]
            out.append(Slot(h.name, ",".join(map(str, ids)), ids))
        return out

    def host_slots(self, host: str) -> int:
        # from the host entry alone: slots() would probe every host's reachability first
        h = self.hosts.get(host)
        return max(1, len(self._slots_of(h))) if h is not None else 1

    def _reachable(self, name: str) -> bool:
        now = time.monotonic()
        seen = self._reach.get(name)
        if seen and now - seen[0] < self.REACHABLE_TTL_S:
            return seen[1]
        sh = self._shells[name]
        try:
            sh.check()
            ok = True
            self.errors.pop(name, None)
        except HostUnreachable as e:
            ok = False
            if self.errors.get(name) != str(e):
                log.warning("%s", e)
            self.errors[name] = str(e)
        self._reach[name] = (time.monotonic(), ok)
        return ok

    def slots(self) -> list[Slot]:
        stale = [n for n in self.hosts if time.monotonic() - self._reach.get(n, (-1e9, False))[0]
                 >= self.REACHABLE_TTL_S and not self._shells[n].connected()]
        if len(stale) > 1:      # connect to several hosts at once: one slow host costs one time-out
            with ThreadPoolExecutor(min(8, len(stale))) as ex:
                list(ex.map(self._reachable, stale))
        out = []
        for h in self.hosts.values():
            ok = self._reachable(h.name)
            for s in self._slots_of(h):
                s.reachable = ok
                out.append(s)
        return out

    def min_free_kb(self, host: str) -> int:
        h = self.hosts.get(host)
        return int((h.min_free_mb if h is not None else 0) * 1024)

    def reconnect(self, host: str) -> None:
        if host in self._shells:
            self._shells[host].reset_backoff()
            self._reach.pop(host, None)

    def python_for(self, host: str) -> str | None:
        h = self.hosts.get(host)
        return (h.python if h is not None else None) or super().python_for(host)

    def shell_for(self, host: str) -> SSHShell:
        try:
            return self._shells[host]
        except KeyError:
            raise HostUnreachable(f"host '{host}' is not in [[runner.hosts]] any more "
                                  f"(known: {', '.join(self._shells)})") from None

    def work_root(self, host: str) -> str:
        """The host's work root with `~` resolved there (the daemon's $HOME means nothing remotely)."""
        if host not in self._roots:
            root = self.hosts[host].work_root
            if root == "~" or root.startswith("~/"):
                rc, out, err = self.shell_for(host).run('printf %s "$HOME"', timeout=30)
                home = out.decode().strip()
                if rc != 0 or not home.startswith("/"):
                    raise RuntimeError(f"host {host}: could not resolve $HOME for work_root {root!r}: "
                                       f"{err.decode(errors='replace')[-200:]}")
                root = home + root[1:]
            elif not root.startswith("/"):
                raise ValueError(f"host {host}: work_root must be absolute or start with ~/ (got {root!r})")
            self._roots[host] = root
        return self._roots[host]

    def close(self) -> None:
        super().close()
        for sh in self._shells.values():
            sh.close()

