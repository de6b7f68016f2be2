"""This process's ref writes as events, for whoever keeps a population current (store/livepop.py).

GitRepo.update_ref and delete_ref tell the listeners of their repository which ref they moved, so the
daemon's tick re-reads only the refs it moved itself instead of listing every idea ref again (100k
of them in a big search). A listener gets the ref's name only and reads the ref from git itself, so a
failed or raced write misleads nobody; writes by other processes (pushes, the CLI) are not events
and are found by the next ref listing.
"""

from __future__ import annotations

import threading
import weakref
from pathlib import Path

_LISTENERS: dict[Path, list] = {}
_LOCK = threading.Lock()


def listen(git_dir: Path, method) -> None:
    """Call method(ref) after each update_ref/delete_ref on git_dir by any GitRepo of this process.
    Held weakly (a bound method of an object that is gone is dropped), so a forgotten listener never
    keeps its population alive."""
    with _LOCK:
        _LISTENERS.setdefault(git_dir, []).append(weakref.WeakMethod(method))


def unlisten(git_dir: Path, method) -> None:
    with _LOCK:
        _LISTENERS[git_dir] = [w for w in _LISTENERS.get(git_dir, []) if w() not in (None, method)]


def moved(git_dir: Path, ref: str) -> None:
    """A ref of git_dir was written (or a write was tried): tell the listeners."""
    for w in list(_LISTENERS.get(git_dir, ())):
        fn = w()
        if fn is not None:
            fn(ref)
        else:
            unlisten(git_dir, None)         # drops the dead ones
