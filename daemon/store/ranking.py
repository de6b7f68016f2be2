"""The one "best": the order in which every reader ranks measured ideas, with one tie-break.

Best first (docs/policies.md, "Which idea is best"):
1. the value, better first under the env's goal (goal.sign);
2. at equal value, the stronger evidence: `confirmed` (fresh seeds held it up), then `promoted`, then
   any other decision;
3. then the earlier idea (committed first: it reached the value first);
4. then the idea id, so the order is total and the same from one read to the next.

`Population.best` (the judge's reference, `status`, the report, the loop's target stop), the running
totals and the leaderboard (views/totals.py, views/summary.py, views/board.py), and the policies'
parents (evolutionary's exploit candidates, greedy's base) all rank by `key`; which ideas are
candidates (confirmed or not, current baseline, beating it) is each caller's question, the order is not.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from autoresearchd.goal import sign
from autoresearchd.vocab import Decision

T = TypeVar("T")


def evidence(decision) -> int:
    """0 for confirmed, 1 for promoted, 2 for anything else (a smaller number ranks first)."""
    if decision == Decision.CONFIRMED:
        return 0
    return 1 if decision == Decision.PROMOTED else 2


def key(value: float, decision, committed_at: int, idea_id: str, goal: str) -> tuple:
    """The sort key of one measured result, best first."""
    return (sign(goal) * value, evidence(decision), committed_at, idea_id)


def idea_key(i, goal: str) -> tuple:
    """`key` of a measured idea (one with a value)."""
    return key(i.value, i.note.decision, i.committed_at, i.idea_id, goal)


def ranked(ideas: Iterable[T], goal: str) -> list[T]:
    """Measured ideas, best first."""
    return sorted(ideas, key=lambda i: idea_key(i, goal))


def best_of(ideas: Iterable[T], goal: str) -> T | None:
    """The best of measured ideas (None for none)."""
    return min(ideas, key=lambda i: idea_key(i, goal), default=None)
