"""Which model of an ensemble (`[llm] ensemble`) proposes the next batch: UCB1 on improvement per dollar.

Everything is read back from git. The model that proposed an idea is its `Idea-Model` trailer (the
`Model` trailer names the implementer's model); its cost is the idea's ideation spend by the one spend
rule (store/spend.py: the note's `cost.ideation`, else the `Idea-Cost-USD` trailer: the proposing
call's share, and any judge or lessons call billed to it). An idea's gain is its measured improvement
over the baseline (goal-aware, 0 when it did not improve, failed, or was dropped as a duplicate); ideas
still waiting for a result count as proposals, not as gains.

An idea's cost is its proposal's LLM spend plus, with a price per GPU-hour (`[llm]
ensemble_gpu_usd_per_hour`), its trials' GPU time by the one spend rule (store/spend.idea_compute_s:
the note's `gpu_s`, confirmation seeds included, and its screened run's; a linked result's nothing):
a model whose ideas are cheap to propose but fail or need many seeds is not cheap. For a model with n
proposals, m of them measured, mean gain g and mean cost u per proposal:
    score = (g + C * G * sqrt(ln N / m)) / u
where N is all proposals and G the best mean gain of any model (the bonus is in gain units). A model
with fewer than ENSEMBLE_MIN_TRIES proposals is tried first, the least tried first.
"""

from __future__ import annotations

import math
from collections import Counter

from autoresearchd import defaults
from autoresearchd.goal import gain as goal_gain      # this module's own gain() is per idea
from autoresearchd.store.notes import Status
from autoresearchd.store.spend import idea_compute_s, idea_spend


def idea_model(idea) -> str | None:
    return idea.trailers.idea_model


def idea_cost(idea) -> float:
    """What proposing the idea cost (its model's bill): the ideation part of the one spend rule."""
    return idea_spend(idea).ideation_usd


def compute_usd(idea, population, usd_per_gpu_hour: float) -> float:
    """What the idea's trials cost at this price per GPU-hour (0 without GPU time or a price)."""
    return idea_compute_s(idea, population, 1) * usd_per_gpu_hour / 3600 if usd_per_gpu_hour else 0.0


def gain(idea, population, env) -> float | None:
    """Improvement over the baseline (>= 0), or None while the idea has no final result."""
    n = idea.note
    if n is None or n.status in (Status.QUEUED, Status.RUNNING):
        return None
    base = population.baseline_value
    if n.status != Status.SUCCEEDED or n.value is None or base is None:
        return 0.0
    return max(0.0, goal_gain(n.value, base, env.goal))


def new_arm() -> dict:
    """One model's running figures, all zero."""
    return {"proposals": 0, "measured": 0, "gain": 0.0, "usd": 0.0, "compute_usd": 0.0}


def arm_stats(population, env, models: list[str] | None = None, pending: Counter | None = None,
              usd_per_gpu_hour: float = 0.0) -> dict:
    """model -> {proposals, measured, gain (sum), usd (sum: LLM spend), compute_usd (sum: trials at
    usd_per_gpu_hour)} from the ideas that name their model, plus `pending` proposals made by this
    process and not in git yet."""
    out = {m: new_arm() for m in models or []}
    for i in population.ideas:
        m = idea_model(i)
        if m is None or (models is not None and m not in out):
            continue
        s = out.setdefault(m, new_arm())
        s["proposals"] += 1
        s["usd"] += idea_cost(i)
        s["compute_usd"] += compute_usd(i, population, usd_per_gpu_hour)
        g = gain(i, population, env)
        if g is not None:
            s["measured"] += 1
            s["gain"] += g
    for m, k in (pending or {}).items():
        if m in out:
            out[m]["proposals"] += k
    return out


def choose(models: list[str], population, env, pending: Counter | None = None,
           usd_per_gpu_hour: float = 0.0) -> str:
    """The model for the next batch (deterministic for the same population)."""
    st = arm_stats(population, env, models, pending, usd_per_gpu_hour)
    fresh = [m for m in models if st[m]["proposals"] < defaults.ENSEMBLE_MIN_TRIES]
    if fresh:
        return min(fresh, key=lambda m: (st[m]["proposals"], models.index(m)))
    total = sum(s["proposals"] for s in st.values())
    means = {m: st[m]["gain"] / st[m]["measured"] for m in models if st[m]["measured"]}
    scale = max(means.values(), default=0.0) or (population.baseline_std or 1e-6)
    spent = {m: st[m]["usd"] + st[m]["compute_usd"] for m in models}
    costs = [spent[m] / st[m]["proposals"] for m in models if spent[m] > 0]
    floor = min(costs) / 100 if costs else 1.0       # an unpriced model is not free forever

    def score(m):
        s = st[m]
        bonus = defaults.ENSEMBLE_UCB_C * scale * math.sqrt(math.log(total) / max(1, s["measured"]))
        return (means.get(m, 0.0) + bonus) / max(spent[m] / s["proposals"], floor)
    return max(models, key=lambda m: (score(m), -models.index(m)))
