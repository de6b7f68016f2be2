"""A live progress view for the foreground daemon: ideas implemented this epoch, the queue, and every
running trial with its elapsed time against the time budget.

`render_progress(state, population)` returns a rich renderable; the caller owns the rich.live.Live
that refreshes it (for example once per tick with the daemon's state dict and latest population).
"""

from __future__ import annotations

import time

from rich.console import Group
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text


def _mmss(s: float) -> str:
    s = int(max(0, s))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def running_trials(population, now: float | None = None) -> list[dict]:
    """Every live lease: trial id, idea, where, and seconds since it started."""
    now = time.time() if now is None else now
    units = [("baseline", "baseline", population.baseline_leases)]
    units += [(i.idea_id, i.title, i.leases) for i in population.ideas if i.leases]
    out = []
    for idea_id, title, leases in units:
        for lz in leases:
            if lz.state == "running":
                out.append({"trial": lz.trial_id, "idea": idea_id, "title": title, "where": f"{lz.host}/{lz.slot}",
                            "purpose": lz.purpose, "elapsed_s": now - lz.started})
    return sorted(out, key=lambda r: -r["elapsed_s"])


def epoch_counts(population) -> dict:
    epoch = population.max_epoch()
    here = [i for i in population.ideas if i.epoch == epoch and i.origin != "human"]
    return {"epoch": epoch, "proposed": len(here), "implemented": sum(1 for i in here if i.branch),
            "implementing": sum(1 for i in here if i.proposal),
            "failed_to_implement": sum(1 for i in here if not i.branch and not i.proposal),
            "queued": len(population.queued()), "running": len(population.running()),
            "finished": sum(1 for i in population.ideas if i.note is not None)}


def render_progress(state: dict | None, population, time_budget_s: float | None = None,
                    ideas_per_epoch: int | None = None, now: float | None = None):
    """The renderable: a summary line, a slots/budget line, and a table of running trials."""
    state = state or {}
    c = epoch_counts(population)
    of = f" of {ideas_per_epoch}" if ideas_per_epoch else ""
    head = Text.assemble(
        ("epoch ", "bold"), (str(max(c["epoch"], 0)), "bold"),
        f": {c['implemented']} implemented{of}, {c['implementing']} implementing, "
        f"{c['failed_to_implement']} not implementable · queued {c['queued']} · running {c['running']} · "
        f"finished {c['finished']}")
    parts = [head]
    slots = state.get("slots") or []
    info = []
    if slots:
        busy = sum(1 for s in slots if s.get("state") == "busy")
        down = sum(1 for s in slots if s.get("state") == "unreachable")
        info.append(f"slots {busy}/{len(slots)} busy" + (f", {down} unreachable" if down else ""))
    b = state.get("budget") or {}
    if b:
        cap = f" of ${b['max_usd']:.2f}" if b.get("max_usd") else ""
        info.append(f"LLM ${b.get('usd', 0):.4f}{cap}, {b.get('tokens', 0):,} tokens")
    bn = population.baseline_note
    if bn is not None:
        shown = bn.status.value if bn.value is None else f"{bn.value:.4f}"
        planned = f" ({len(bn.seeds)} of {bn.seeds_planned} seeds)" if (bn.seeds_planned or 0) > len(bn.seeds) else ""
        info.append(f"baseline {bn.metric or ''} {shown}{planned}")
    if state.get("proposing"):
        info.append("proposing…")
    if state.get("stop_reason"):
        info.append(f"not proposing: {state['stop_reason']}")
    if info:
        parts.append(Text(" · ".join(info), style="dim"))
    trials = running_trials(population, now)
    if trials:
        t = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
        for col in ("trial", "idea", "where", "elapsed", ""):
            t.add_column(col, no_wrap=True, overflow="ellipsis", max_width=40 if col == "idea" else None)
        for r in trials:
            budget = time_budget_s or 0
            over = budget and r["elapsed_s"] > budget
            bar = ProgressBar(total=budget or 1, completed=min(r["elapsed_s"], budget) if budget else 0, width=24,
                              complete_style="red" if over else "green")
            t.add_row(r["trial"], Text(r["title"]), r["where"],   # Text: a title is never rich markup
                      _mmss(r["elapsed_s"]) + (f" / {_mmss(budget)}" if budget else ""), bar)
        parts.append(t)
    return Group(*parts)
