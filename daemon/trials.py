"""Trial bookkeeping in git: lease notes (refs/notes/autoresearch-runs) and result notes.

Crash-safety rests on write order. At dispatch the lease is written before the runner starts the
trial; at harvest the log blob is anchored, then the result note is written, then the lease is
cleared. A restart at any point re-derives the same state: a result already in the note is never
harvested twice, and a lease without a result is polled again.
"""

from __future__ import annotations

import time

from . import defaults
from .decide import (BEST_DECISIONS, GOOD_DECISIONS, aggregate, baseline_complete, decide, identical_seeds,
                     improvement, pooled_std)
from .gitrepo import GitRepo
from .ideas import Idea
from .notes import Lease, Note, Status, Trial, format_leases, format_note, parse_leases, parse_note
from .population import LOGS_PREFIX, Population


class Ledger:
    """Reads and writes leases and results for one research repo."""

    def __init__(self, repo: GitRepo):
        self.repo = repo

    # -- leases ----------------------------------------------------------------------------------
    def leases(self, commit: str) -> list[Lease]:
        text = self.repo.note_read(defaults.RUNS_REF, commit)
        return parse_leases(text) if text else []

    def write_leases(self, commit: str, leases: list[Lease]) -> None:
        if leases:
            self.repo.note_write(defaults.RUNS_REF, commit, format_leases(leases))
        else:
            self.repo.note_remove(defaults.RUNS_REF, commit)

    def upsert_lease(self, commit: str, lease: Lease) -> None:
        cur = [lz for lz in self.leases(commit) if lz.trial_id != lease.trial_id]
        self.write_leases(commit, cur + [lease])

    def all_leases(self) -> dict[str, list[Lease]]:
        return {c: parse_leases(t) for c, t in self.repo.notes_read_all(defaults.RUNS_REF).items()}

    # -- logs ------------------------------------------------------------------------------------
    def store_log(self, name: str, data: bytes) -> str:
        """Anchor a log blob under refs/autoresearch/logs/<name> so gc never drops it."""
        sha = self.repo.hash_blob(data)
        self.repo.update_ref(LOGS_PREFIX + name, sha)
        return sha

    # -- results ---------------------------------------------------------------------------------
    def note(self, commit: str) -> Note | None:
        text = self.repo.note_read(defaults.NOTES_REF, commit)
        return parse_note(text) if text else None

    def write_note(self, commit: str, note: Note) -> None:
        note.finished_at = note.finished_at or time.time()
        self.repo.note_write(defaults.NOTES_REF, commit, format_note(note))


def best_value(pop: Population, goal: str, exclude: str | None = None) -> float | None:
    vals = [i.value for i in pop.ideas if i.value is not None and i.commit != exclude
            and i.note and i.note.decision in BEST_DECISIONS]
    if not vals:
        return None
    return min(vals) if goal == "min" else max(vals)


def build_note(trials: list[Trial], idea: Idea | None, pop: Population, manifest, policy_cfg,
               confirmed: bool = False) -> Note:
    """A result note from finished trials, with deltas against the baseline at the same seeds."""
    agg = aggregate(trials)
    note = Note(metric=manifest.metric, goal=manifest.goal, idea_id=idea.idea_id if idea else "baseline",
                trials=sorted(trials, key=lambda t: t.seed), **agg)
    if idea is not None and idea.tokens is not None:
        note.tokens, note.cost_usd = idea.tokens, idea.cost_usd
        split = {"ideation": idea.trailers.get("Idea-Cost-USD"), "implementation": idea.trailers.get("Implement-Cost-USD")}
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
    if note.status != Status.SUCCEEDED or note.value is None:
        note.baseline, note.baseline_std = b.value, b.std
        return True
    # delta against the baseline at the same seeds, where the baseline has them
    per_seed = {t.seed: t.value for t in b.trials if t.value is not None}
    paired = [(t.value - per_seed[t.seed]) for t in note.trials if t.value is not None and t.seed in per_seed]
    note.baseline, note.baseline_std = b.value, b.std
    note.delta = sum(paired) / len(paired) if paired else note.value - b.value
    if b.accelerator and note.accelerator and _accel_class(b.accelerator) != _accel_class(note.accelerator):
        flag = f"cross_accelerator: {note.accelerator} vs baseline {b.accelerator}"
        note.flags = sorted(set(note.flags) | {flag})
    parent = pop.by_id.get(idea.parents[0]) if idea.parents else None
    if parent is not None and parent.value is not None:
        note.parent_delta = note.value - parent.value
    if note.decision in ("confirmed", "demoted") and not confirmed:
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
    note.decision = decide(sum(vals) / len(vals), manifest.goal, b.value, b.std,
                           best_value(pop, manifest.goal, idea.commit), policy_cfg.noise_mult,
                           policy_cfg.confirm_seeds > 0, confirmed, n=len(vals), k=len(b.values),
                           std=pooled_std(vals, b.values), noise_known=noise_known)
    return True


def _accel_class(acc: str) -> str:
    """'8 x NVIDIA H100 80GB HBM3' -> 'NVIDIA H100 80GB HBM3': the count may differ, the model may not."""
    return acc.split(" x ", 1)[-1].strip()


def beats_baseline(idea: Idea, pop: Population, goal: str) -> bool:
    b = pop.baseline_value
    if idea.value is None:
        return False
    if idea.note and idea.note.decision:
        return idea.note.decision in GOOD_DECISIONS
    return b is not None and improvement(idea.value, b, goal) > 0
