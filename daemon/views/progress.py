"""A live progress view for the foreground daemon: ideas implemented this epoch, the queue, and every
running trial with its elapsed time against the run's time budget.

`render_progress(state, population)` returns a rich renderable; the caller owns the rich.live.Live
that refreshes it (for example once per tick with the daemon's state dict and latest population).
It fits 80 columns: titles are cut (with an ellipsis), never the numbers. `running_trials` is also
what `status` lists, so trials left running after a stop are visible there too.
"""

from __future__ import annotations

import time

from rich.console import Group
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from autoresearchd.store.notes import LeaseState, Origin, Status
from autoresearchd.views.safe import one_line
from autoresearchd.vocab import SlotState


def mmss(s: float) -> str:
    s = int(max(0, s))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def running_trials(population, now: float | None = None) -> list[dict]:
    """Every lease in git that is still running: trial, idea, where, and how long it has run. Time
    counts from the run's start on its host (`began`); a trial placed on a host that still waits for
    its slot has `elapsed_s` None and `waiting_s` since it was placed."""
    now = time.time() if now is None else now
    units = [("baseline", "baseline", population.baseline_leases)]
    units += [(i.idea_id, i.title, i.leases) for i in population.ideas if i.leases]
    out = []
    for idea_id, title, leases in units:
        for lz in leases:
            if lz.state == LeaseState.RUNNING:
                out.append({"trial": lz.trial_id, "idea": idea_id, "title": title, "seed": lz.seed,
                            "where": f"{lz.host}/{lz.slot}", "purpose": lz.purpose,
                            "elapsed_s": None if lz.began is None else now - lz.began,
                            "waiting_s": now - lz.started})
    return sorted(out, key=lambda r: (r["elapsed_s"] is None, -(r["elapsed_s"] or 0), -r["waiting_s"]))


def epoch_counts(population, trials: list[dict] | None = None) -> dict:
    """This epoch's ideas by fate, and the queue and running trials (from the leases in git)."""
    epoch = population.epoch()          # the one current epoch every view shows (Population.epoch)
    here = [i for i in population.ideas if i.epoch == epoch and i.origin != Origin.HUMAN]
    trials = running_trials(population) if trials is None else trials
    return {"epoch": epoch, "proposed": len(here), "implemented": sum(1 for i in here if i.branch),
            "implementing": sum(1 for i in here if i.proposal),
            "failed_to_implement": sum(1 for i in here if i.status in (Status.IMPLEMENT_FAILED, Status.REJECTED)
                                       and not i.branch),
            "duplicates": sum(1 for i in here if i.status == Status.DUPLICATE and not i.branch),
            "queued": len(population.queued()),
            "running": sum(1 for t in trials if t["elapsed_s"] is not None),
            "waiting": sum(1 for t in trials if t["elapsed_s"] is None),
            "finished": sum(1 for i in population.ideas if i.note is not None)}


def time_cell(r: dict, budget_s: float | None) -> Text:
    if r["elapsed_s"] is None:
        return Text(f"waiting {mmss(r['waiting_s'])}", style="dim")
    over = bool(budget_s) and r["elapsed_s"] > budget_s
    return Text(mmss(r["elapsed_s"]) + (f" / {mmss(budget_s)}" if budget_s else ""), style="red" if over else "")


def render_progress(state: dict | None, population, time_budget_s: float | None = None,
                    ideas_per_epoch: int | None = None, now: float | None = None):
    """The renderable: a summary line, a slots/budget line, and a table of running trials."""
    state = state or {}
    trials = running_trials(population, now)
    c = epoch_counts(population, trials)
    of = f" of {ideas_per_epoch}" if ideas_per_epoch else ""
    fates = [f"{c['implemented']} implemented{of}"]
    fates += [f"{c[k]} {word}" for k, word in (("implementing", "implementing"),
                                               ("failed_to_implement", "not implementable"),
                                               ("duplicates", "duplicates")) if c[k]]
    waiting = f" (+{c['waiting']} waiting for a slot)" if c["waiting"] else ""
    head = Text.assemble(("epoch ", "bold"), (str(c["epoch"]) if c["epoch"] is not None else "-", "bold"),
                         f": {', '.join(fates)} · queued {c['queued']} · running {c['running']}{waiting} · "
                         f"finished {c['finished']}")
    parts = [head]
    slots = state.get("slots") or []
    info = []
    if slots:
        busy = sum(1 for s in slots if s.get("state") == SlotState.BUSY)
        down = sum(1 for s in slots if s.get("state") == SlotState.UNREACHABLE)
        info.append(f"slots {busy}/{len(slots)} busy" + (f", {down} unreachable" if down else ""))
    if time_budget_s:
        info.append(f"run budget {mmss(time_budget_s)}")
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
    if state.get("held"):
        info.append(f"held: {state['held']}")
    if info:
        parts.append(Text(" · ".join(info), style="dim"))
    if trials:
        parts.append(trials_table(trials, time_budget_s))
    return Group(*parts)


class TrialsTable:
    """Running trials: the idea and seed, the title, where, time and a budget bar. Laid out for the
    console's width: the numbers keep their width and only the title gives way (with an ellipsis),
    then the bar; so at 80 columns nothing is cut but the title."""

    GAP = 2          # a borderless table pads each column by one on both sides

    def __init__(self, trials: list[dict], budget_s: float | None, bar: bool = True):
        self.trials, self.budget_s, self.bar = trials, budget_s, bar and bool(budget_s)

    def __rich_console__(self, console, options):
        rows = [(f"{r['idea']} s{r['seed']}", one_line(r["title"]), r["where"][:24], time_cell(r, self.budget_s), r)
                for r in self.trials]
        idea_w = max([4] + [len(x[0]) for x in rows])
        where_w = max([5] + [len(x[2]) for x in rows])
        time_w = max([4] + [len(x[3]) for x in rows])
        bar_w = 10 if self.bar else 0
        fixed = idea_w + where_w + time_w + self.GAP * 3

        def title_room(bar: int) -> int:
            return options.max_width - fixed - (bar + self.GAP if bar else 0)
        if bar_w and title_room(bar_w) < 12:
            bar_w = 0            # a narrow console: the bar goes before the title does
        title_w = max(5, min(max([5] + [len(x[1]) for x in rows]), title_room(bar_w)))
        t = Table(box=None, pad_edge=False, show_header=True, header_style="bold", expand=False)
        t.add_column("idea", no_wrap=True, width=idea_w)
        t.add_column("title", no_wrap=True, overflow="ellipsis", width=title_w)
        t.add_column("where", no_wrap=True, overflow="ellipsis", width=where_w)
        t.add_column("time", no_wrap=True, width=time_w)
        if bar_w:
            t.add_column("", no_wrap=True, width=bar_w)
        for idea, title, where, tcell, r in rows:
            cells = [Text(idea), Text(title), Text(where), tcell]
            if bar_w and r["elapsed_s"] is None:
                cells.append(Text(""))           # waiting: its budget clock has not started
            elif bar_w:
                over = r["elapsed_s"] > self.budget_s
                cells.append(ProgressBar(total=self.budget_s, completed=min(r["elapsed_s"], self.budget_s),
                                         width=bar_w, complete_style="red" if over else "green"))
            t.add_row(*cells)
        yield t


def trials_table(trials: list[dict], budget_s: float | None, bar: bool = True) -> TrialsTable:
    return TrialsTable(trials, budget_s, bar)
