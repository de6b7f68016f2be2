"""This process's ref writes as events, for whoever keeps a population current (store/livepop.py).

GitRepo.update_ref, delete_ref and move_refs tell the listeners of their repository which ref they moved, so the
daemon's tick re-reads only the refs it moved itself instead of listing every idea ref again (100k
of them in a big search). A listener gets the ref's name only and reads the ref through `read`: from
git itself, so a failed or raced write misleads nobody, except where the write told its value
(`moved(..., value)`) after git confirmed it, and writes of that ref cannot pass one another: a notes
ref written under the notes lock (store/gitnotes.py), an archive ref (its name fixes its value, and
nothing deletes it). A harvest's refresh then starts no `for-each-ref`. Writes by other processes
(pushes, the CLI) are not events and are found by the next ref listing.
"""

from __future__ import annotations

import threading
import weakref
from pathlib import Path

from autoresearchd import defaults

_LISTENERS: dict[Path, list] = {}
_KNOWN: dict[Path, dict[str, str | None]] = {}    # git dir -> ref -> its value as this process's last write left it
_LOCK = threading.Lock()
_UNSAID = object()


def listen(git_dir: Path, method) -> None:
    """Call method(ref) after each update_ref/delete_ref on git_dir by any GitRepo of this process.
    Held weakly (a bound method of an object that is gone is dropped), so a forgotten listener never
    keeps its population alive."""
    with _LOCK:
        _LISTENERS.setdefault(git_dir, []).append(weakref.WeakMethod(method))


def unlisten(git_dir: Path, method) -> None:
    with _LOCK:
        _LISTENERS[git_dir] = [w for w in _LISTENERS.get(git_dir, []) if w() not in (None, method)]


def moved(git_dir: Path, ref: str, value=_UNSAID) -> None:
    """A ref of git_dir was written (or a write was tried): tell the listeners. `value`: what git
    confirmed the ref holds now (None: deleted), only from a writer whose writes of it are ordered."""
    with _LOCK:
        known = _KNOWN.setdefault(git_dir, {})
        if value is _UNSAID:
            known.pop(ref, None)
        else:
            if len(known) >= defaults.REF_VALUES_KEPT:
                known.clear()
            known[ref] = value
    for w in list(_LISTENERS.get(git_dir, ())):
        fn = w()
        if fn is not None:
            fn(ref)
        else:
            unlisten(git_dir, None)         # drops the dead ones


def read(repo, refs) -> dict[str, str]:
    """ref -> sha for those of `refs` that exist now: the values this process's writes told, the rest
    read from git by name in one for-each-ref (none when every value is known)."""
    with _LOCK:
        known = _KNOWN.get(repo.git_dir, {})
        now = {ref: known[ref] for ref in refs if known.get(ref)}
        rest = sorted(ref for ref in refs if ref not in known)
    if rest:
        now.update(repo.refs(*rest))
    return now
