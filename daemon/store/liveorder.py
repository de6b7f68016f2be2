"""The shown ideas of a live population in the population's order, with its by-id and by-commit maps,
patched one commit at a time.

store/livepop.py decides which ref shows each commit (a branch before its archive ref) and builds the
idea; this keeps what the population hands out in step with it: the ordered list (by committed time,
id, then ref as population._by_time and _ref_order sort), the first idea of each id, the idea of each
commit, and the epochs of the policy's ideas (the current epoch of a pushed idea without a note).
Patching is by bisection, so a tick that moves a few ideas costs a few list moves; a full read appends
every idea and sorts once (`sort`): one insort each moved half the list, n²/2 pointer moves.
"""

from __future__ import annotations

import bisect
import operator
from collections import Counter

from autoresearchd.store.ideas import Idea
from autoresearchd.vocab import Origin

_REF = operator.itemgetter(3)              # an order key's ref


class ShownOrder:
    """The ordered ideas and their indexes. Keys are (committed_at, idea_id, *population.ref_rank(ref))."""

    def __init__(self) -> None:
        self.winner: dict[str, tuple] = {}      # sha -> the order key of the ref that shows it
        self.order: list[tuple] = []            # the keys, sorted
        self.seq: list[Idea] = []               # the shown ideas in that order: the population's list,
        # patched as the order is (a copy per refresh, not 100k lookups: 56 ms a tick at 100k ideas)
        self.shown: dict[str, Idea] = {}        # winning ref -> the idea the population holds
        self.ids: dict[str, list[tuple]] = {}   # idea id -> the sorted keys of its shown ideas
        self.by_id: dict[str, Idea] = {}        # the population's by_id and by_commit, kept current
        self.by_commit: dict[str, Idea] = {}
        self.dirty: tuple[set, set] = (set(), set())     # ids and shas whose entries to look up again
        self.epochs: Counter = Counter()        # epochs of the shown ideas not of human origin

    def remove(self, sha: str) -> str | None:
        """`sha` out of the order; the ref that showed it (None: none did)."""
        old = self.winner.pop(sha, None)
        if old is None:
            return None
        k = bisect.bisect_left(self.order, old)
        del self.order[k], self.seq[k]
        keys = self.ids[old[1]]
        del keys[bisect.bisect_left(keys, old)]
        self.dirty[0].add(old[1])
        self.dirty[1].add(sha)
        idea = self.shown.pop(old[3])
        if idea.origin != Origin.HUMAN:
            self.epochs[idea.epoch] -= 1
            if not self.epochs[idea.epoch]:
                del self.epochs[idea.epoch]
        return old[3]

    def add(self, sha: str, ref: str, idea: Idea, key: tuple, append: bool) -> None:
        """`idea`, shown by `ref`, in its place (with `append`, at the end: the caller then sorts)."""
        if append:
            self.order.append(key)         # seq: rebuilt once the order is sorted
            self.ids.setdefault(idea.idea_id, []).append(key)
        else:
            bisect.insort(self.order, key)
            self.seq.insert(bisect.bisect_left(self.order, key), idea)
            bisect.insort(self.ids.setdefault(idea.idea_id, []), key)
        self.dirty[0].add(idea.idea_id)
        self.dirty[1].add(sha)
        self.winner[sha], self.shown[ref] = key, idea
        if idea.origin != Origin.HUMAN:
            self.epochs[idea.epoch] += 1

    def sort(self) -> None:
        """After appends: the order sorted once, the list rebuilt from it."""
        self.order.sort()
        self.seq = list(map(self.shown.__getitem__, map(_REF, self.order)))    # no per-key frame
        for idea_id in self.dirty[0]:
            self.ids[idea_id].sort()

    def replace(self, ref: str, sha: str, idea: Idea) -> None:
        """The idea `ref` shows, in its place, swapped for another of the same key (a placed copy)."""
        self.shown[ref] = idea
        self.seq[bisect.bisect_left(self.order, self.winner[sha])] = idea
        self.dirty[0].add(idea.idea_id)
        self.dirty[1].add(sha)

    def index(self) -> None:
        """by_id (the first idea of an id in the order) and by_commit, for the ids and commits touched."""
        ids, shas = self.dirty
        for sha in shas:
            w = self.winner.get(sha)
            if w is not None:
                self.by_commit[sha] = self.shown[w[3]]
            else:
                self.by_commit.pop(sha, None)
        for idea_id in ids:
            keys = self.ids.get(idea_id)
            if keys:
                self.by_id[idea_id] = self.shown[keys[0][3]]
            else:
                self.ids.pop(idea_id, None)
                self.by_id.pop(idea_id, None)
        self.dirty = (set(), set())
