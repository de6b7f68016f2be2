"""The screened runs a population carries (engine/screening.py makes them; docs/policies.md "Screening at
low fidelity"): for each `refs/autoresearch/screens/<key>` ref, its commit, the commit it screens (the
commit's `Screen-Of` trailer, store/trailers.py), its result note and its leases.

They are read with the population, from the listings it makes anyway (one for-each-ref, one notes list
per notes ref) and through its parse caches (population.py: a commit's parse and a frozen note, shared
by every reader; leases parsed afresh each read, as an idea's, since the harvest changes them). So the
screener reads no ref, note or blob of its own, and the spend rule (store/spend.py) sees every screen's
compute in the population it is given. LivePopulation keeps them current by the same changes it reads
for ideas (`LiveScreens`): a screen's ref, note or lease blob moved.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from autoresearchd.store.notes import Lease, Note
from autoresearchd.store.refs import SCREENS_PREFIX
from autoresearchd.vocab import Status


@dataclass(frozen=True)
class Screen:
    """A screened commit and what git holds for it: its result note (frozen: shared by every reader; copy
    it before changing it) and its leases."""
    key: str
    commit: str
    of: str
    note: Note | None
    leases: tuple[Lease, ...] = ()

    @property
    def value(self) -> float | None:
        n = self.note
        if n is None or n.status != Status.SUCCEEDED:
            return None
        v = n.screened.get("value")
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def screen_key(idea_id: str | None, commit: str) -> str:
    """The screens/ ref name of an idea's screen, or of the baseline's (once per baseline commit)."""
    return idea_id if idea_id else f"baseline-{commit}"


def screen_refs(listed: dict[str, str]) -> dict[str, str]:
    """key -> screened commit, from a listing of refs (any other ref in it is left out)."""
    return {ref[len(SCREENS_PREFIX):]: sha for ref, sha in listed.items() if ref.startswith(SCREENS_PREFIX)}


# build(key, commit, note blob, lease blob, objects read) -> the Screen, or None when the commit is no
# screen (unreadable, or no `Screen-Of` trailer): population._make_screen, through its parse caches
Build = Callable[[str, str, "str | None", "str | None", dict], "Screen | None"]


class LiveScreens:
    """The screens of a LivePopulation, rebuilt only where a screen's ref, note or lease blob changed.
    A screen that did not change keeps its object, so readers may compare screens by identity."""

    def __init__(self):
        self.refs: dict[str, str] = {}              # key -> commit
        self.by_sha: dict[str, set[str]] = {}       # commit -> keys on it
        self.built: dict[str, tuple[tuple, Screen | None]] = {}    # key -> (what it was built from, screen)
        self.screens: dict[str, Screen] = {}

    def move(self, ref: str, sha: str | None, shas: set[str]) -> str:
        """A screens/ ref moved (None: deleted); returns its key. The commits it left and reached go into
        `shas`."""
        key = ref[len(SCREENS_PREFIX):]
        old = self.refs.pop(key, None)
        shas |= {old, sha} - {None}
        if old is not None:
            self.by_sha[old].discard(key)
            if not self.by_sha[old]:
                del self.by_sha[old]
        if sha is not None:
            self.refs[key] = sha
            self.by_sha.setdefault(sha, set()).add(key)
        return key

    def touched(self, keys: set[str], shas: set[str]) -> set[str]:
        """The keys to look at again: those whose ref moved, and those on a commit whose note or lease moved."""
        return keys | {k for s in shas if s in self.by_sha for k in self.by_sha[s]}

    def wanted(self, keys: set[str], notes: dict, leases: dict) -> dict[str, tuple]:
        """key -> (commit, note blob, lease blob) for the touched keys whose inputs changed; a deleted
        key is dropped here."""
        out = {}
        for key in keys:
            sha = self.refs.get(key)
            if sha is None:
                self.built.pop(key, None)
                self.screens.pop(key, None)
                continue
            inputs = (sha, notes.get(sha), leases.get(sha))
            if self.built.get(key, (None,))[0] != inputs:
                out[key] = inputs
        return out

    def rebuild(self, inputs: dict[str, tuple], objs: dict, build: Build) -> None:
        for key, (sha, nb, lb) in inputs.items():
            s = build(key, sha, nb, lb, objs)
            self.built[key] = (inputs[key], s)
            if s is None:
                self.screens.pop(key, None)
            else:
                self.screens[key] = s
