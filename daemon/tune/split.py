"""Who gets the trial budget: new ideas from the LLM, or tuning the best ideas' knobs.

The rule (docs/policies.md, "Tuning knobs: the hybrid search"): each arm's rate is the largest gain
one of its measured ideas made over the idea it grew from (its parent idea's value, else the baseline's;
a tuned commit's parent is the idea it tunes), per compute-hour the arm spent (GPU-hours, or CPU-hours
on a CPU environment, over all of its trials, failed ones too). Tuning's share of the trials is its
rate over the sum of both rates, held inside [floor, 1 - floor] so neither arm starves and a lucky
start cannot lock the other out. Before either arm has gained anything the split is even. With no
LLM (provider `none`, or the LLM has stopped proposing) tuning gets every trial.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from autoresearchd.store.notes import Origin, Status


class Arm(str, Enum):
    LLM = "llm"
    TUNE = "tune"


@dataclass
class Split:
    tune: float                                      # tuning's share of new trials, 0..1
    why: str                                         # how the share came about, one phrase
    arms: dict[str, dict] = field(default_factory=dict)   # arm -> {gain, hours, rate, ideas}

    def line(self) -> str:
        """One line for `status`."""
        parts = [f"{a} gain {v['gain']:.4g} in {v['hours']:.2f} h" for a, v in self.arms.items()]
        return f"budget split: tune {self.tune:.0%} / llm {1 - self.tune:.0%} ({self.why}; {', '.join(parts)})"

    def as_dict(self) -> dict:
        return {"tune": self.tune, "llm": 1 - self.tune, "why": self.why, "arms": self.arms}


def arm_of(idea) -> Arm | None:
    if idea.origin == Origin.TUNE:
        return Arm.TUNE
    return None if idea.origin == Origin.HUMAN else Arm.LLM


def _parent_value(pop, idea) -> float | None:
    for pid in idea.parents:
        p = pop.by_id.get(pid)
        if p is not None and p.value is not None and not pop.stale(p):
            return p.value
    return pop.baseline_value


def split(pop, goal: str, floor: float, llm_on: bool = True) -> Split:
    arms = {a.value: {"gain": 0.0, "hours": 0.0, "rate": 0.0, "ideas": 0} for a in Arm}
    sign = 1.0 if goal == "min" else -1.0
    for i in pop.ideas:
        a = arm_of(i)
        if a is None or i.note is None:
            continue
        st = arms[a.value]
        st["hours"] += ((i.note.gpu_s or 0.0) + (i.note.cpu_s or 0.0)) / 3600
        st["ideas"] += 1
        ref = _parent_value(pop, i)
        if i.note.status == Status.SUCCEEDED and i.value is not None and ref is not None and not pop.stale(i):
            st["gain"] = max(st["gain"], sign * (ref - i.value))
    for st in arms.values():
        st["rate"] = st["gain"] / max(st["hours"], 1 / 60)      # at least a minute: no division by ~0
    if not llm_on:
        return Split(1.0, "no LLM is proposing: tuning gets every trial", arms)
    total = arms["tune"]["rate"] + arms["llm"]["rate"]
    if total <= 0:
        return Split(0.5, "no gain yet: even", arms)
    share = min(max(arms["tune"]["rate"] / total, floor), 1 - floor)
    return Split(share, f"gain per compute-hour, floor {floor:.0%}", arms)
