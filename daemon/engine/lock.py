"""One daemon per research repo: the lock `start` takes for the daemon's life (and `stop`'s probe of it)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from autoresearchd.config import ConfigError


def hold_daemon_lock(sd: Path, repo_path: Path) -> int:
    """One daemon per research repo: an exclusive flock on <state dir>/daemon.lock, held for the
    daemon's life and released by the kernel when it exits (kill -9 too). Two daemons on one repo
    would dispatch the same trials twice and remove each other's pidfile. Returns the fd to keep;
    raises ConfigError naming the daemon that holds it."""
    fd = os.open(sd / "daemon.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        try:
            pid = (sd / "daemon.pid").read_text().strip()
        except OSError:
            pid = "unknown"
        raise ConfigError(f"autoresearchd is already running on {repo_path} (pid {pid}); "
                          f"`autoresearchd status` shows it, `autoresearchd stop` stops it") from None
    return fd
