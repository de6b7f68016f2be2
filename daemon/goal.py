"""What "better" means under an env's goal ("min": lower is better, "max": higher is better). The one
place that branches on the goal: every comparison, ranking and "best" goes through these.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")


def sign(goal: str) -> int:
    """+1 under "min", -1 under "max": `sign * value` sorts best first."""
    return 1 if goal == "min" else -1


def better(a: float, b: float, goal: str) -> bool:
    """True if a is strictly better than b."""
    return sign(goal) * a < sign(goal) * b


def gain(value: float, ref: float, goal: str) -> float:
    """How much better value is than ref (negative: worse)."""
    return sign(goal) * (ref - value)


def best(items: Iterable[T], goal: str, key: Callable[[T], float] = lambda x: x) -> T:
    """The best of items (the first of equals); items must not be empty. Ideas are ranked by
    store/ranking.py, whose ties are broken by the evidence, then the commit time, then the id."""
    return (min if goal == "min" else max)(items, key=key)


def goal_word(goal: str) -> str:
    """"lower" or "higher", for prompts and messages."""
    return "lower" if goal == "min" else "higher"
