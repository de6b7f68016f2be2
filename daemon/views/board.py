"""The dashboard's leaderboard index: every idea's row in rank order, its failure group, and the
counts the filters show (per status, origin, decision and epoch, and per failure group).

Built once from a population, then moved on by the ideas that changed (compared by identity: the live
reader hands out the previous population's objects for ideas that did not change): a changed idea's
old row leaves the ranked list and its new row is inserted where it ranks, so a note at 10k ideas
costs two binary searches, not a sort of every row. `advance` returns a new Board and leaves the old
one as it was (a served snapshot may still be reading it). Rows are never modified once built.
"""

from __future__ import annotations

import bisect
from collections import Counter

from autoresearchd.views.summary import leaderboard_row, rank_key
from autoresearchd.views.versus import baseline_running
from autoresearchd.vocab import FAILURES, Status

# The failures view's groups, in the order it shows them. A failed status is its own group (its value),
# except three the view's own words name: an implementation that failed its checks (split out of
# implement_failed), a run that failed (`failed` reads as "crashed"), and a tampered or implausible result
# (merged from the status, the note's flags and its trials).
CHECK_FAILED, CRASHED, TAMPER_OR_SUSPICIOUS = "check_failed", "crashed", "tamper_or_suspicious"
FAILURE_GROUPS = (Status.IMPLEMENT_FAILED.value, CHECK_FAILED, CRASHED, Status.TIMED_OUT.value,
                  Status.REJECTED.value, Status.DUPLICATE.value, TAMPER_OR_SUSPICIOUS, Status.OVER_BUDGET.value,
                  Status.LOST.value, Status.REFUSED.value, Status.CANCELLED.value, Status.STOPPED.value)
FACETS = {"status": lambda r: r["status"], "origin": lambda r: r["origin"],
          "decision": lambda r: r["decision"] or "none", "epoch": lambda r: r["epoch"]}


def suspicious(n) -> bool:
    """The note's result is not to be trusted: its status says so (tampered with, or outside the
    plausible range), or its tamper list, a flag, a trial's tamper list or a newer daemon's own key
    (`suspicious: true`) does."""
    word = Status.SUSPICIOUS.value          # the flag's and the newer key's name
    flags = {str(f).lower() for f in (n.flags or [])}
    extra = n.model_extra or {}
    return (n.status == Status.SUSPICIOUS or bool(n.tamper) or word in flags or any(t.tamper for t in n.trials)
            or str(extra.get(word) or "").lower() in ("true", "1"))


def failure_reason(i) -> str | None:
    """The failures view's group for an idea (FAILURE_GROUPS, or another failed status's value), or
    None when it did not fail."""
    n = i.note
    if n is None:
        return None
    if suspicious(n):
        return TAMPER_OR_SUSPICIOUS
    st = n.status
    if st == Status.IMPLEMENT_FAILED and "check" in (n.error or "").lower():
        return CHECK_FAILED
    if st == Status.FAILED:
        return CRASHED
    if st in FAILURES or st == Status.DUPLICATE:
        return st.value
    return None


def same_baseline(old_pop, new_pop) -> bool:
    """The baseline did not move and its note did not change: rows built against it still hold."""
    return old_pop.baseline_commit == new_pop.baseline_commit and old_pop.baseline_note == new_pop.baseline_note


def changes(old_pop, new_pop) -> tuple[list, list]:
    """(ideas gone, ideas come) between two populations of one live reader, by identity."""
    before = {id(i): i for i in old_pop.ideas}
    now = {id(i): i for i in new_pop.ideas}
    return [i for k, i in before.items() if k not in now], [i for k, i in now.items() if k not in before]


class Board:
    """rows (rank order), keys (their rank keys), by_id (idea id -> row), reasons (idea id -> failure
    group or None), facets (filter counts) and failures (count per group)."""

    def __init__(self, pop, goal: str, seeds_planned: int = 1):
        self.goal = goal
        # a row says against which baseline it was measured and what an undecided one waits for: both
        # follow the baseline, so a moved or further measured baseline builds a new Board (same_baseline)
        self.seeds_planned = seeds_planned
        self.waiting = baseline_running(pop, seeds_planned)
        self.per = {id(i): (i, leaderboard_row(i, pop, self.waiting), failure_reason(i)) for i in pop.ideas}
        self.rows = [self.per[id(i)][1] for i in pop.ideas]
        self.rows.sort(key=self._key)
        self.keys = [self._key(r) for r in self.rows]
        self.by_id = {r["idea"]: r for r in self.rows}
        self.reasons = {i.idea_id: r for i, _, r in self.per.values()}
        self.facets = {f: Counter(get(r) for r in self.rows) for f, get in FACETS.items()}
        self.failures = Counter(r for r in self.reasons.values() if r)

    def _key(self, row: dict) -> tuple:
        return rank_key(row, self.goal)

    def rank(self, row: dict) -> int | None:
        """A measured row's place (1 = best); None for an unmeasured one."""
        return None if row["value"] is None else bisect.bisect_left(self.keys, self._key(row)) + 1

    def advance(self, gone: list, came: list, pop) -> Board:
        """The board of `pop`, a later population with the same baseline (same_baseline)."""
        b = Board.__new__(Board)
        b.seeds_planned, b.waiting = self.seeds_planned, self.waiting
        b.goal, b.per, b.rows, b.keys = self.goal, dict(self.per), list(self.rows), list(self.keys)
        b.by_id, b.reasons = dict(self.by_id), dict(self.reasons)
        b.facets = {f: Counter(c) for f, c in self.facets.items()}
        b.failures = Counter(self.failures)
        for i in gone:
            _, row, reason = b.per.pop(id(i))
            k = bisect.bisect_left(b.keys, b._key(row))
            while b.rows[k] is not row:
                k += 1
            del b.rows[k], b.keys[k]
            if b.by_id.get(row["idea"]) is row:
                del b.by_id[row["idea"]]
                b.reasons.pop(row["idea"], None)
            b._count(row, reason, -1)
        for i in came:
            row, reason = leaderboard_row(i, pop, b.waiting), failure_reason(i)
            b.per[id(i)] = (i, row, reason)
            key = b._key(row)
            k = bisect.bisect_right(b.keys, key)
            b.rows.insert(k, row)
            b.keys.insert(k, key)
            b.by_id[row["idea"]], b.reasons[i.idea_id] = row, reason
            b._count(row, reason, +1)
        return b

    def _count(self, row: dict, reason: str | None, k: int) -> None:
        for f, get in FACETS.items():
            c = self.facets[f]
            c[get(row)] += k
            if not c[get(row)]:
                del c[get(row)]
        if reason:
            self.failures[reason] += k
            if not self.failures[reason]:
                del self.failures[reason]

    def facet_counts(self) -> dict:
        return {f: dict(sorted(c.items(), key=lambda kv: str(kv[0]))) for f, c in self.facets.items()}
