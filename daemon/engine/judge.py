"""Pure judging, no I/O: what a set of per-seed results means (noise-aware promotion against the
measured baseline), and the verdict a result note carries (deltas, flags, decision).

Decisions written into result notes:
  worse         worse than the baseline by more than the noise margin
  within_noise  not distinguishable from the baseline
  improved      better than the baseline beyond noise, but not the best
  pending       would be the new best by less than the margin: confirmation seeds are queued
  promoted      the new best by more than the margin (or confirmation disabled)
  confirmed     pending, then confirmed by fresh seeds
  demoted       pending, then not confirmed
"""

from __future__ import annotations

import statistics

from autoresearchd.engine.plan import baseline_complete
from autoresearchd.goal import gain
from autoresearchd.manifest import Trust
from autoresearchd.store.ideas import Idea
from autoresearchd.store.notes import BASELINE_NOTE_ID, GOOD_DECISIONS, SIG_DIGITS, Decision, Note, Status, Trial
from autoresearchd.store.population import Population
from autoresearchd.store.trust import over_budget



def aggregate(trials: list[Trial]) -> dict:
    """Summary fields for a note from its trials: mean and std over the successful seeds."""
    ok = [t for t in trials if t.status == Status.SUCCEEDED and t.value is not None]
    suspect = sorted((t for t in trials if t.status == Status.SUSPICIOUS), key=lambda t: t.seed)
    if suspect:
        # one tampered or implausible seed taints the commit: its numbers stay visible, never trusted
        vals = [t.value for t in sorted(ok + suspect, key=lambda t: t.seed) if t.value is not None]
        status = Status.SUSPICIOUS
    elif ok:
        vals = [t.value for t in sorted(ok, key=lambda t: t.seed)]
        status = Status.SUCCEEDED
    else:
        vals = []
        # the first failure's status and reason explain the idea
        worst = sorted(trials, key=lambda t: t.seed)[0] if trials else None
        status = worst.status if worst else Status.FAILED
    first = sorted(trials, key=lambda t: t.seed)[0] if trials else None
    return {
        "status": status,
        "value": statistics.fmean(vals) if vals else None,
        "std": statistics.stdev(vals) if len(vals) > 1 else (0.0 if vals else None),
        "values": vals,
        "seeds": sorted(t.seed for t in trials),
        "host": first.host if first else None,
        # compute: totals over every trial (docs/notes.md), each of run + evaluation
        "wall_s": _total(trials, "wall_s"),
        "exit_code": first.exit_code if first else None,
        "seed": first.seed if first else None,
        "error": suspect[0].error if suspect else next((t.error for t in sorted(trials, key=lambda t: t.seed)
                                                         if t.error), None),
        "log": first.log if first else None,
        "accelerator": first.accelerator if first else None,
        "software": first.software if first else None,
        "harness": first.harness if first else None,
        # the weakest isolation any seed had: one unsandboxed seed makes the result unsandboxed
        "sandbox": "none" if any(t.sandbox == "none" for t in trials) else (first.sandbox if first else None),
        # likewise the weakest evaluation any seed had (issue 26: a model is code)
        "trust": weakest_trust([t.trust for t in trials]),
        "gpu_s": _total(trials, "gpu_s"),
        "cpu_s": _total(trials, "cpu_s"),
        "limit": next((t.limit for t in sorted(trials, key=lambda t: t.seed) if t.limit), None),
        "tamper": sorted({x for t in trials for x in t.tamper}),
    }


def _total(trials: list[Trial], key: str) -> float | None:
    """The sum of a compute field over the trials that have it (None when none has it: older notes).
    A trial from before GPU seconds were measured counts its GPUs' wall time, as it was then."""
    xs = [getattr(t, key) for t in trials if getattr(t, key, None) is not None]
    if key == "gpu_s":
        xs += [(t.wall_s or 0) * t.gpus for t in trials if t.gpu_s is None and t.gpus > 0]
    return sum(xs) if xs else None


def weakest_trust(values: list[str | None]) -> str | None:
    """The least trusted of the trials' `trust` values (manifest.Trust, weakest first: run,
    model-code, split); None when no trial says."""
    order = [t.value for t in (Trust.SELF_REPORTED, Trust.MODEL_CODE, Trust.SPLIT)]
    known = [v for v in values if v in order]
    return min(known, key=order.index) if known else None


def identical_seeds(values: list[float]) -> bool:
    """Several seeds, one value: the run does not honour its seed (or is deterministic). Compared at
    the note's precision: a seed read back from its note is rounded, a fresh one is not yet."""
    return len(values) > 1 and len({float(f"{v:.{SIG_DIGITS}g}") for v in values}) == 1


# Student t 0.975 quantiles by degrees of freedom: with 2-3 seeds a sample std is itself noisy, so a
# fixed "2 sigma" margin promotes no-op ideas far more often than 5% of the time (bench/promotion.py).
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042]


def t975(dof: int) -> float:
    return _T975[dof - 1] if 1 <= dof <= len(_T975) else 1.96


def pooled_noise(groups: list[list[float]]) -> tuple[float | None, int]:
    """(pooled sample std, degrees of freedom) of groups of repeated runs, each group one commit at
    several seeds around its own mean: the seed noise, if it is the same for every commit. None when
    no group has two values."""
    dof = sum(len(g) - 1 for g in groups if g)
    if dof < 1:
        return None, 0
    ss = sum(sum((x - statistics.fmean(g)) ** 2 for x in g) for g in groups if len(g) > 1)
    return (ss / dof) ** 0.5, dof


def pooled_std(a: list[float], b: list[float]) -> float | None:
    """Pooled sample std of two groups (None with fewer than 1 degree of freedom)."""
    return pooled_noise([a, b])[0]


def repeat_groups(pop: Population, exclude: str | None = None) -> list[list[float]]:
    """The fresh seeds (seed 1 and up: confirmation runs) of every idea that has at least two, each
    idea a group. Seed 0 is left out: it was selected for looking good, so its distance from the
    fresh seeds' mean is not plain noise."""
    out = []
    for i in pop.ideas:
        if i.commit == exclude or i.note is None or i.note.status != Status.SUCCEEDED:
            continue
        fresh = [t.value for t in i.note.trials
                 if t.seed != 0 and t.status == Status.SUCCEEDED and t.value is not None]
        if len(fresh) > 1:
            out.append(fresh)
    return out


def decide(value: float, goal: str, baseline: float | None, baseline_std: float | None,
           best: float | None, noise_mult: float, confirm_enabled: bool, confirmed: bool = False,
           n: int = 1, k: int = 1, std: float | None = None, noise_known: bool = True,
           dof: int | None = None, confirm_min: float = 0.0) -> Decision | None:
    """The decision for `value` (a mean over n seeds) against the baseline (a mean over k seeds) and
    `best`, the best confirmed/promoted value so far. A margin is a noise multiple (at least the
    t quantile for the degrees of freedom) times the standard error of the difference: a single
    run against sqrt(1 + 1/k) noise stds (`baseline_std`); a confirmed mean against the pooled std
    (`std`). `dof` is the noise estimate's degrees of freedom when it pools more than these runs
    (noise_pool); by default k - 1 for a single run, n - 1 + k - 1 for a confirmed mean.
    With `noise_known` False (baseline seeds came back identical: the run ignores its seed) no margin
    can be computed, so nothing is promoted: a gain is only `improved`."""
    if baseline is None:
        return None
    if not noise_known:
        vs = gain(value, baseline, goal)
        return Decision.IMPROVED if vs > 0 else Decision.WORSE if vs < 0 else Decision.WITHIN_NOISE
    s = baseline_std or 0.0
    d1 = dof if dof is not None else k - 1
    single = max(noise_mult, t975(d1) if d1 > 0 else noise_mult) * s * (1 + 1 / max(1, k)) ** 0.5
    vs_base = gain(value, baseline, goal)
    reference = best if best is not None and gain(best, baseline, goal) > 0 else baseline
    vs_best = gain(value, reference, goal)
    if confirmed:
        d2 = dof if dof is not None else n - 1 + k - 1
        sp = std if std is not None else s
        margin = max(noise_mult, t975(d2)) * sp * (1 / max(1, n) + 1 / max(1, k)) ** 0.5
        return Decision.CONFIRMED if vs_best > 0 and vs_base > margin else Decision.DEMOTED
    if vs_best > 0:
        if vs_best > single or not confirm_enabled:
            return Decision.PROMOTED
        if vs_best > confirm_min * s * (1 + 1 / max(1, k)) ** 0.5:
            return Decision.PENDING
    if vs_base > single:
        return Decision.IMPROVED
    if vs_base < -single:
        return Decision.WORSE
    return Decision.WITHIN_NOISE


# -- a result note's verdict, from its trials and the population ---------------------------------
def best_value(pop: Population, goal: str, exclude: str | None = None) -> float | None:
    b = pop.best(goal, confirmed=True, exclude=exclude)
    return b.value if b is not None else None


def build_note(trials: list[Trial], idea: Idea | None, pop: Population, manifest, policy_cfg,
               confirmed: bool = False) -> Note:
    """A result note from finished trials, with deltas against the baseline at the same seeds."""
    agg = aggregate(trials)
    note = Note(metric=manifest.metric, goal=manifest.goal, idea_id=idea.idea_id if idea else BASELINE_NOTE_ID,
                trials=sorted(trials, key=lambda t: t.seed), **agg)
    if idea is not None and idea.tokens is not None:
        note.tokens, note.cost_usd = idea.tokens, idea.cost_usd
        split = {"ideation": idea.trailers.idea_cost_usd, "implementation": idea.trailers.implement_cost_usd}
        note.cost = {k: float(v) for k, v in split.items() if v is not None}
    fill_baseline(note, idea, pop, manifest, policy_cfg, confirmed)
    return note


IDENTICAL_FLAG = "identical_seeds"
NOISE_UNKNOWN_FLAG = ("noise_unknown: the baseline seeds were identical, so the noise is unknown and "
                      "nothing is promoted (see the baseline note)")


def identical_warning(values: list[float], metric: str) -> str:
    """The flag (and log line) for a baseline whose seeds all gave the same value: what happened and
    what to do about it."""
    return (f"{IDENTICAL_FLAG}: all {len(values)} baseline seeds gave an identical {metric} = {values[0]!r}: "
            "`run` ignores $AUTORESEARCH_SEED, so the noise is unknown and no idea is promoted. Seed every "
            "RNG from $AUTORESEARCH_SEED (docs/bring-your-own-repo.md), or, if runs really are "
            "deterministic, set `deterministic = true` in [env] (one baseline seed)")


def flag_identical(note: Note, manifest) -> str | None:
    """On a complete baseline note whose seeds all gave one value (and no `deterministic = true`),
    add the identical-seeds flag. Returns the flag, for the log."""
    if manifest.deterministic or not baseline_complete(note) or not identical_seeds(note.values):
        return None
    flag = identical_warning(note.values, manifest.metric)
    note.flags = sorted(set(note.flags) | {flag})
    return flag


def seed_warning(note: Note | None) -> str | None:
    """The identical-seeds flag of a baseline note, if it has one."""
    return next((f for f in (note.flags if note else []) if f.startswith(IDENTICAL_FLAG)), None)


def fill_baseline(note: Note, idea: Idea | None, pop: Population, manifest, policy_cfg,
                  confirmed: bool = False) -> bool:
    """Set baseline, delta, parent delta and decision when the baseline is known. True if changed."""
    b = pop.baseline_note
    if idea is None or b is None or b.status != Status.SUCCEEDED or b.value is None:
        return False
    note.baseline_commit = pop.baseline_commit     # what the result is measured against (views say so)
    if note.status != Status.SUCCEEDED or note.value is None:
        note.baseline, note.baseline_std = b.value, b.std
        return True
    # delta against the baseline at the same seeds, where the baseline has them
    per_seed = {t.seed: t.value for t in b.trials if t.value is not None}
    paired = [(t.value - per_seed[t.seed]) for t in note.trials if t.value is not None and t.seed in per_seed]
    note.baseline, note.baseline_std = b.value, b.std
    note.delta_mean = note.value - b.value
    note.delta = sum(paired) / len(paired) if paired else note.delta_mean
    if b.accelerator and note.accelerator and _accel_class(b.accelerator) != _accel_class(note.accelerator):
        flag = f"cross_accelerator: {note.accelerator} vs baseline {b.accelerator}"
        note.flags = sorted(set(note.flags) | {flag})
    over = over_budget(note.trials, b.trials, manifest)
    if over is not None:
        # kept with its figures, never a result (the same path as `suspicious`: only succeeded counts)
        note.status, note.error, note.budget, note.decision = Status.OVER_BUDGET, over[0], over[1], None
        note.flags = sorted(set(note.flags) | {over[0]})
        return True
    parent = pop.by_id.get(idea.parents[0]) if idea.parents else None
    if parent is not None and parent.value is not None:
        note.parent_delta = note.value - parent.value
    if note.decision in (Decision.CONFIRMED, Decision.DEMOTED) and not confirmed:
        return True
    if not baseline_complete(b):
        note.decision = None    # decided when the baseline's last seed is in (Dispatcher.backfill)
        return True
    vals = note.values
    if confirmed:
        # judge on the fresh seeds alone: the first seed was selected for looking good
        vals = [t.value for t in note.trials if t.seed != 0 and t.value is not None] or vals
    noise_known = manifest.deterministic or not identical_seeds(b.values)
    if not noise_known:
        note.flags = sorted(set(note.flags) | {NOISE_UNKNOWN_FLAG})
    noise, spread, dof = noise_estimate(pop, idea, vals if confirmed else None, policy_cfg)
    note.decision = decide(sum(vals) / len(vals), manifest.goal, b.value, noise,
                           best_value(pop, manifest.goal, idea.commit), policy_cfg.noise_mult,
                           policy_cfg.confirm_seeds > 0, confirmed, n=len(vals), k=len(b.values),
                           std=spread, noise_known=noise_known, dof=dof,
                           confirm_min=policy_cfg.confirm_min)
    return True


def noise_estimate(pop: Population, idea: Idea, fresh: list[float] | None,
                   policy_cfg) -> tuple[float | None, float | None, int | None]:
    """(std for a single run, std for a confirmed mean, dof or None) for `decide`. By default a single
    run's margin uses the baseline's seeds, and a confirmation's the noise pooled over the baseline's
    seeds, every earlier confirmation's fresh seeds and its own (dof None only when it has no fresh
    seed). With `noise_pool` the single run's margin is pooled too: a few baseline seeds give a noisy
    estimate of the noise (with 3, it is off by half or more one search in three), and a margin built
    on an overestimate demotes real gains while the t quantile for 2 degrees of freedom (4.3) keeps
    the margin wide long after the noise is well known."""
    b = pop.baseline_note
    if not policy_cfg.noise_pool:
        if not fresh:
            return b.std, None, None
        # A confirmation pools every unselected repeat the search has measured (the baseline's seeds,
        # earlier confirmations' fresh seeds, its own), not the baseline's k seeds alone: with 3 seeds
        # the std is off by half or more one search in three and t(3 dof) = 3.18, so where the baseline
        # overestimated the noise no gain cleared the margin and a whole search at seed noise 0.02
        # ended with no confirmed best (5 of 20, bench/search_sim.py --noise-sd 0.02). The single-run
        # margin is unchanged.
        std, dof = pooled_noise([b.values] + repeat_groups(pop, exclude=idea.commit) + [fresh])
        return b.std, std, dof
    groups = [b.values] + repeat_groups(pop, exclude=idea.commit) + ([fresh] if fresh else [])
    std, dof = pooled_noise(groups)
    if std is None:          # a single baseline seed and nothing repeated yet: the baseline's own
        return b.std, None, None
    return std, std, dof


def _accel_class(acc: str) -> str:
    """'8 x NVIDIA H100 80GB HBM3' -> 'NVIDIA H100 80GB HBM3': the count may differ, the model may not."""
    return acc.split(" x ", 1)[-1].strip()


def beats_baseline(idea: Idea, pop: Population, goal: str) -> bool:
    b = pop.baseline_value
    if idea.value is None:
        return False
    if idea.note and idea.note.decision:
        return idea.note.decision in GOOD_DECISIONS
    return b is not None and gain(idea.value, b, goal) > 0
