"""What a result is compared with, said the same way in every view: the baseline it was measured
against (the current one, or an old one, named by value and commit), the kind of delta (paired by
seed, or against the baseline's mean, and the other where they differ by more than the noise), and a
decision still waiting for the baseline's last seeds ("baseline running, 1/3 seeds"), never a bare
None.

`status`, `ideas`, `show`, the report, the dashboard and `export` all take their words from here.
"""

from __future__ import annotations

from autoresearchd.engine.plan import baseline_complete
from autoresearchd.store.notes import DeltaKind, Status, delta_kind, delta_words, deltas_differ, mean_delta


def baseline_tag(value: float | None, commit: str | None) -> str:
    """`2.6133@abc1234`: a baseline named by its value and its commit (either may be unknown)."""
    v = f"{value:.4f}" if value is not None else "?"
    return v + (f"@{commit[:7]}" if commit else "")


def baseline_running(pop, seeds_planned: int) -> str | None:
    """`baseline running, 1/3 seeds` while the current baseline's seeds are not all in; None once it
    is complete (or failed: nothing more runs)."""
    n = pop.baseline_note
    if n is not None and baseline_complete(n):
        return None
    planned = (n.seeds_planned if n is not None else None) or seeds_planned
    have = len(n.values) if n is not None else 0
    return f"baseline running, {have}/{planned} seeds"


def decision_text(decision: str | None, waiting: str | None) -> str:
    """A decision as a view prints it: an undecided measured result says what it waits for."""
    if decision:
        return decision
    return f"undecided: {waiting}" if waiting else "undecided"


def delta_text(note, stale: bool, kind: DeltaKind | None = None) -> str:
    """The delta with what it is measured against and how: `-0.0805 vs old baseline 2.6133@abc1234,
    paired by seed`, `+0.0257 vs baseline, paired by seed (+0.0075 vs baseline mean)`. `kind`:
    delta_kind(note), when the caller has it."""
    if note is None or note.delta is None:
        return ""
    kind = kind or delta_kind(note)
    if not stale:
        return delta_words(note, kind)
    text = f"{note.delta:+.4f} vs old baseline {baseline_tag(note.baseline, note.baseline_commit)}"
    if kind == DeltaKind.PAIRED:
        text += ", paired by seed"
        if deltas_differ(note, kind):
            text += f" ({mean_delta(note):+.4f} vs its mean)"
    return text


def delta_short(row: dict) -> str:
    """A row's delta for a table cell: `+0.0257 paired (+0.0075 mean)`, `+0.0075 mean`,
    `-0.0805 paired, old 2.6133@abc1234` (the legend, DELTA_LEGEND, says what the words mean)."""
    if row.get("delta") is None:
        return ""
    kind = row.get("delta_kind")
    text = f"{row['delta']:+.4f} " + ("paired" if kind == DeltaKind.PAIRED.value else "mean")
    if row.get("deltas_differ") and row.get("delta_mean") is not None:
        text += f" ({row['delta_mean']:+.4f} mean)"
    if row.get("stale"):
        text += f", old {baseline_tag(row.get('baseline'), row.get('baseline_commit'))}"
    return text


DELTA_LEGEND = ("Δ: paired = paired by seed with the baseline's same seeds; mean = against the baseline's "
                "mean; old V@C = measured against an old baseline (value V, commit C), kept apart")


def versus(i, pop, waiting: str | None) -> dict:
    """The comparison fields of one idea's result, ready for JSON: what its delta is, against which
    baseline, and its decision in words. `waiting`: baseline_running(pop, ...)."""
    n = i.note
    if n is None:
        return dict(_UNMEASURED)
    stale = pop.stale(i)
    kind = delta_kind(n)
    measured = n.status == Status.SUCCEEDED and n.value is not None
    return {"delta_kind": kind.value if kind is not None else None, "delta_mean": mean_delta(n),
            "deltas_differ": deltas_differ(n, kind) if kind is not None else False,
            "delta_text": delta_text(n, stale, kind) if kind is not None else "",
            "baseline": n.baseline, "baseline_commit": n.baseline_commit, "stale": stale,
            "decision_text": decision_text(n.decision, "its baseline moved" if stale else waiting) if measured else
            (n.decision or "")}


_UNMEASURED = {"delta_kind": None, "delta_mean": None, "deltas_differ": False, "delta_text": "", "baseline": None,
               "baseline_commit": None, "stale": False, "decision_text": ""}
