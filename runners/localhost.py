"""The local runner's host side done in this process: poll, read back, remove and wait for trials
without a `bash -c` each (issue 29: a short trial's overhead is counted in process starts, ~2-5 ms
of CPU each, and on this machine the shell only stood between the daemon and files it can read).

Each function answers exactly what its shell counterpart does on a host (runners/trialdir.py's
POLL_FN, runners/readback.py's read_files_many, base.py's `rm -rf` and `tail -F` of the events
file); tests/test_runner_local_py.py holds each against it. What a trial wrote is untrusted: a
file is read only when it is a regular file at its own name (O_NOFOLLOW, fstat), as `[ -f ]`
followed by `tar -c` (which stores a link as a link, and readback skips it) did.
"""

from __future__ import annotations

import ctypes
import os
import select
import shutil
import stat
import time

from autoresearchd import defaults


def _first_line(path: str) -> str | None:
    """`read -r x < path`: the first line, surrounding blanks stripped; None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            line = f.readline(4096)
    except OSError:
        return None
    return line.decode(errors="replace").strip(" \t\n")


def mine(d: str, pid: str) -> bool:
    """MINE_FN: is process `pid` this trial's? Its working directory is the trial dir, code/, eval/ or
    model/, or its environment names a path in the trial dir (a pid from a file may be a stranger's)."""
    if not os.path.isdir("/proc/1"):
        return True
    for sub in ("", "/code", "/eval", "/model"):
        try:
            if os.path.samefile(f"/proc/{pid}/cwd", d + sub):
                return True
        except OSError:
            pass
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"={d}/".encode() in f.read()
    except OSError:
        return False


def poll_one(d: str, pid: int | None) -> str:
    """POLL_FN's `st DIR PID`: done | missing | nopid | dead | running | running@<started>."""
    if os.path.exists(f"{d}/done"):
        return "done"
    if not os.path.isdir(d):
        return "missing"
    p = str(pid) if pid else (_first_line(f"{d}/pgid") or "")
    if not p.isdigit() or not p.isascii():
        return "nopid"
    s = ""
    stat_line = _first_line(f"/proc/{p}/stat")
    if stat_line is not None:
        s = stat_line.rpartition(") ")[2].partition(" ")[0] if ") " in stat_line else stat_line.partition(" ")[0]
        if not mine(d, p):
            s = ""
    if os.path.exists(f"{d}/done"):
        return "done"
    if not s or s.startswith("Z"):
        return "dead"
    t = _first_line(f"{d}/started") or ""
    return f"running@{t}" if t and not t.strip("0123456789.") else "running"


def read_files(dirs: list[str], names: list[str]) -> list[dict[str, bytes]]:
    """read_files_many on this machine: per trial dir, the named files that are regular files there."""
    res: list[dict[str, bytes]] = []
    for d in dirs:
        got: dict[str, bytes] = {}
        for n in names:
            try:
                fd = os.open(f"{d}/{n}", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    with os.fdopen(fd, "rb", closefd=False) as f:
                        got[n] = f.read()
            finally:
                os.close(fd)
        res.append(got)
    return res


def remove(dirs: list[str]) -> None:
    """`rm -rf DIR...`: what cannot be removed stays, as rm's exit code was not looked at either
    (shutil.rmtree works by file descriptors, so a link a trial left is removed, never followed)."""
    for d in dirs:
        try:
            if os.path.islink(d) or not os.path.isdir(d):
                os.unlink(d)
            else:
                shutil.rmtree(d, ignore_errors=True)
        except OSError:         # gone already, or not ours to remove: as `rm -rf` left it
            pass


# -- completion events: inotify on the work root -------------------------------------------------------
_IN_MODIFY, _IN_CREATE, _IN_MOVED_TO = 0x2, 0x100, 0x80
_IN_CLOEXEC, _IN_NONBLOCK = 0o2000000, 0o4000
_libc = None


def _inotify():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def wait_appended(root: str, timeout: float) -> bool:
    """base.py's wait_event on this machine: True once a line is appended to <root>/.events after the
    call began, False after `timeout`. The file is made, and emptied past 1 MB, as the shell did. An
    inotify watch on the directory wakes it (no polling); a burst of completions within
    defaults.LOCAL_EVENT_SETTLE_S wakes it once, as the shell's restart between two waits did.
    inotify by hand, not watchdog (engine/watch.py's library): a watchdog observer per wait cost
    72.3 against 53.8 ms of daemon CPU a trial and 49 against 41 passes for 64 trials, the same bench
    back to back on an idle machine (docs/architecture.md, "The local runner's completion wait")."""
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, ".events")
    with open(path, "ab"):
        pass
    if os.path.getsize(path) > 1_000_000:
        with open(path, "r+b") as f:
            f.truncate(0)
    lib = _inotify()
    fd = lib.inotify_init1(_IN_CLOEXEC | _IN_NONBLOCK)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "inotify_init1")
    try:
        if lib.inotify_add_watch(fd, os.fsencode(root), _IN_MODIFY | _IN_CREATE | _IN_MOVED_TO) < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {root}")
        poller = select.poll()          # not select(): a busy daemon's descriptors may pass 1024
        poller.register(fd, select.POLLIN)
        st0 = os.stat(path)
        base, ino = st0.st_size, st0.st_ino
        end = time.monotonic() + timeout
        while True:
            try:
                st = os.stat(path)
                if st.st_ino != ino or st.st_size < base:      # replaced or emptied: all of it is new
                    ino, base = st.st_ino, 0
                if st.st_size > base:
                    time.sleep(defaults.LOCAL_EVENT_SETTLE_S)
                    return True
            except FileNotFoundError:
                ino, base = None, 0
            left = end - time.monotonic()
            if left <= 0:
                return False
            if poller.poll(left * 1000):
                try:
                    os.read(fd, 65536)          # the events themselves say nothing the stat does not
                except BlockingIOError:
                    pass
    finally:
        os.close(fd)
