"""When the search proposes no more ideas, and when it is over: the daemon's stop conditions
(`max_ideas`, `max_epochs`, the LLM budget, `max_gpu_hours`, `target`), pure: the population and the
config in, the reason out. `Daemon.stop_condition` asks `stop_condition` for the refill, `idle()` and
the state file; `Daemon._maybe_tune` asks `search_stop` before it writes tuned trials, and `Daemon.jobs` asks
`budget_spent` before it starts a new idea (docs/config.md, [daemon])."""

from __future__ import annotations

from autoresearchd.store.population import Population
from autoresearchd.store.spend import budget_hours
from autoresearchd.vocab import Origin


def stop_condition(pop: Population, cfg, manifest, llm, has_policy: bool, stop_reason: str | None = None) -> str | None:
    """Why no more ideas are proposed (None: proposing goes on). `stop_reason`: why a proposal round or
    an implementation gave up (the LLM budget, as the provider said it), if no condition holds."""
    d = cfg.daemon
    llm_ideas = [i for i in pop.ideas if i.origin not in (Origin.HUMAN, Origin.TUNE)]
    if d.max_ideas is not None and len(llm_ideas) >= d.max_ideas:
        return f"max_ideas reached ({len(llm_ideas)})"
    if d.max_epochs is not None and pop.max_epoch() >= d.max_epochs - 1 and has_policy:
        epoch_full = len([i for i in llm_ideas if i.epoch == pop.max_epoch()]) >= cfg.policy.ideas_per_epoch
        if pop.max_epoch() >= d.max_epochs or epoch_full:
            return f"max_epochs reached ({d.max_epochs})"
    if llm is not None and llm.budget.exhausted:
        return "LLM budget exhausted"
    return search_stop(pop, cfg, manifest) or stop_reason


def budget_spent(pop: Population, cfg, manifest) -> str | None:
    """Why no new idea may start (None: they may): the compute budget `daemon.max_gpu_hours` is spent.
    Ideas queued then are held, not run: their first trials would spend past the budget (on a replayed
    tinygpt search, what was queued at the budget overshot it by 55-93%, docs/policies.md). The baseline's
    seeds and confirmations still run, so what was measured is judged and a best confirmed."""
    d = cfg.daemon
    if d.max_gpu_hours is not None:
        gpus = manifest.gpus
        h = budget_hours(pop, gpus)         # the one spend rule: CPU-hours on a CPU env, as `status` shows
        if h >= d.max_gpu_hours:
            return f"{'GPU' if gpus else 'CPU'}-hour budget reached ({h:.2f} h)"
    return None


def search_stop(pop: Population, cfg, manifest) -> str | None:
    """Why the whole search is over, tuning included (None: it goes on): the compute budget or the
    target. The other stops end the LLM's proposals only, and tuning then gets every trial."""
    d = cfg.daemon
    spent = budget_spent(pop, cfg, manifest)
    if spent is not None:
        return spent
    if d.target is not None:
        best = pop.best(manifest.goal, confirmed=True)
        if best is not None and not manifest.better(d.target, best.value):
            return f"target {d.target} reached by {best.idea_id}"
    return None
