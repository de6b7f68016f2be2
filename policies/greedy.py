"""Greedy hill-climbing (karpathy/autoresearch style): every new idea stacks on the current best.

The current best is the best measured idea that beats the baseline, preferring ideas the
noise-aware loop promoted or confirmed (demoted ones never count); with none, the baseline itself.
Each proposal gets base_commit = that idea's commit and parents = [its id]. The prompt shows the
chain of changes that led to the best version and the recent failures with their reasons.
"""

from __future__ import annotations

from autoresearchd import defaults
from autoresearchd.store.ranking import best_of
from autoresearchd.store.notes import FAILURES
from autoresearchd.vocab import BEST_DECISIONS, Decision, Origin

from .common import BatchPlan, LLMPolicy
from .prompting import Listing, describe_idea, fmt_num



def greedy_base(population, env):
    """The idea to build on, or None for the baseline."""
    # like with like: a result measured against an old baseline is no parent (Population.stale)
    ok = [i for i in population.comparable() if not (i.note and i.note.decision == Decision.DEMOTED)]
    base = population.baseline_value
    if base is not None:
        ok = [i for i in ok if env.better(i.value, base)]
    pool = [i for i in ok if i.note.decision in BEST_DECISIONS] or ok
    return best_of(pool, env.goal)            # the one order of "best" (store/ranking.py)


def lineage(idea, population) -> list:
    """The ideas from the baseline to `idea`, oldest first (following each commit's first parent)."""
    chain, seen = [], set()
    while idea is not None and idea.idea_id not in seen:
        seen.add(idea.idea_id)
        chain.append(idea)
        idea = population.by_commit.get(idea.base_commit) if idea.base_commit else None
    return chain[::-1]


class GreedyPolicy(LLMPolicy):
    name = "greedy"

    def plan(self, population, env, epoch: int, done: int) -> BatchPlan:
        bs = max(1, self.cfg.batch)
        k = min(bs, self.cfg.ideas_per_epoch - done)
        best = greedy_base(population, env)
        b = population.baseline_value
        steps = [f"0. The unmodified baseline: `{env.metric}` = {fmt_num(b)}" if b is not None
                 else "0. The unmodified baseline (not measured yet)"]
        chain = lineage(best, population) if best else []
        for n, idea in enumerate(chain, 1):
            steps.append(f"{n}. " + describe_idea(idea, population, env).removeprefix("### "))
        if not chain:
            steps.append("No idea has beaten the baseline yet: build on the unmodified code.")
        base_commit = best.commit if best else None
        failures = sorted((i for i in population.ideas if i.status in FAILURES),
                          key=lambda i: (i.committed_at, i.idea_id))[-defaults.GREEDY_RECENT_FAILURES:]
        tried = [i.title for i in population.ideas if i.base_commit == (base_commit or
                                                                         population.baseline_commit)]
        avoid = self.prompts.avoid(tried + self.pending_titles(population))
        prompt = self.prompts.page("greedy", population, env, k, avoid=avoid,
                                   lineage=Listing(steps, keep="last"),
                                   failures=Listing.ideas(failures[::-1], population, env))
        parents = [best.idea_id] if best else []
        return BatchPlan(Origin.GREEDY, epoch, done // bs, k, prompt, self.prompts.system(),
                         self.prompts.hash("system", "greedy", "task", "format", "avoid"),
                         lambda idea: (list(parents), base_commit))
