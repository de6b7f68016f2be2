"""This process's ref writes as events, for whoever keeps a population current (store/livepop.py).

GitRepo.update_ref and delete_ref tell the listeners of their repository which ref they moved, so the
daemon's tick re-reads only the refs it moved itself instead of listing every idea ref again (100k
of them in a big search). A listener gets the ref's name only and reads the ref from git itself, so a
failed or raced write misleads nobody; writes by other processes (pushes, the CLI) are not events
and are found by the next ref listing.
"""

from __future__ import annotations

import threading
from pathlib import Path

_LISTENERS: dict[Path, list] = {}
_LOCK = threading.Lock()


def listen(git_dir: Path, fn) -> None:
    """Call fn(ref) after each update_ref/delete_ref on git_dir by any GitRepo of this process."""
    with _LOCK:
        _LISTENERS.setdefault(git_dir, []).append(fn)


def unlisten(git_dir: Path, fn) -> None:
    with _LOCK:
        fns = _LISTENERS.get(git_dir, [])
        if fn in fns:
            fns.remove(fn)


def moved(git_dir: Path, ref: str) -> None:
    """A ref of git_dir was written (or a write was tried): tell the listeners."""
    for fn in list(_LISTENERS.get(git_dir, ())):
        fn(ref)
