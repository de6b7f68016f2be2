"""Read-only views of the search, straight from git: `status`, `ideas` (the leaderboard) and `show`.

They work whether or not the daemon runs: git holds every idea and result; the daemon's heartbeat
file (daemon.json in the state dir) only adds liveness, slots and the live LLM budget. The population
is read once, in one batch, whatever its size. "Best" always means the best *confirmed* result
(decision promoted or confirmed), shown with its spread over seeds; the best unconfirmed value is
reported separately and labelled, because one lucky seed is not a result.
"""

from __future__ import annotations

import json
import textwrap

from rich import box
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from autoresearchd import defaults
from autoresearchd.store.diffbase import diff_base
from autoresearchd.store.notes import Status
from autoresearchd.store.refs import NOTES_REF, branch_name
from autoresearchd.views.progress import running_trials
from autoresearchd.views.safe import UNTRUSTED, one_line, untrusted_lines
from autoresearchd.views.summary import idea_tokens, idea_usd, load, read_leaderboard, summary
from autoresearchd.views.versus import (DELTA_LEGEND, baseline_running, baseline_tag, decision_text, delta_short,
                                        delta_text)
from autoresearchd.vocab import HostState, SlotState
from autoresearchd.views.progress import trials_table
from autoresearchd.views.learning import curve_lines
from autoresearchd.implement.agent_cli import steps


def _fmt(v: float | None, nd: int = 4) -> str:
    return "" if v is None else f"{v:.{nd}f}"


def _delta(v: float | None) -> str:
    return "" if v is None else f"{v:+.4f}"


def _result_line(r: dict, metric: str) -> str:
    spread = f" ± {r['std']:.4f} over {r['seeds']} seeds" if r["seeds"] > 1 and r["std"] is not None \
        else f" ({r['seeds']} seed)"
    delta = f", {escape(r['delta_text'])}" if r["delta_text"] else ""
    return (f"{metric} = {r['value']:.4f}{spread}{delta} \\[{escape(r['decision_text'])}]  "
            f"{r['idea']} {escape(r['branch'])}  “{escape(r['title'][:60])}”")


def _fmt_uptime(s: float) -> str:
    s = int(s)
    return f"{s // 86400}d{s % 86400 // 3600:02d}h" if s >= 86400 else f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s"


def baseline_text(b: dict) -> str:
    """The baseline as measured so far: seed 0's value as soon as it exists, then the mean and std."""
    if b["value"] is None:
        if b.get("status") and b["status"] != Status.SUCCEEDED:
            return f"{b['status']}: {b.get('error') or 'no value'}"
        return "not measured yet (seed 0 is the first result)"
    if b["seeds"] < (b.get("seeds_planned") or 0):
        return (f"{b['value']:.4f} from {b['seeds']} of {b['seeds_planned']} seeds (the other seeds are "
                f"measured next; ideas are judged once all are in)")
    return f"{b['value']:.4f} ± {b['std'] or 0:.4f} over {b['seeds']} seeds"


def status(cfg, console, as_json: bool = False) -> int:
    s = summary(cfg)
    if as_json:
        console.file.write(json.dumps(s) + "\n")
        return 0
    d = s["daemon"]
    if d["alive"] and d.get("stopping_s") is not None:
        busy = len(d.get("implementing") or [])
        console.print(f"[bold yellow]daemon stopping[/] pid {d['pid']}, for {_fmt_uptime(d['stopping_s'])}: "
                      f"it finishes the {busy} implementation(s) in flight, then exits "
                      f"(`autoresearchd stop --now` exits at once)")
    elif d["alive"]:
        stale = "" if d["fresh"] else f" [yellow](no heartbeat for {int(d['last_heartbeat_s'])}s)[/]"
        console.print(f"[bold green]daemon running[/] pid {d['pid']}, up {_fmt_uptime(d['uptime_s'] or 0)}; "
                      f"LLM: {escape(str(d['llm']))}{stale}")
    else:
        console.print("[bold]daemon not running[/] (status read from git)")
    if d["alive"]:
        c = s["slot_counts"]
        console.print(f"slots: {c.get(SlotState.BUSY, 0)} busy, {c.get(SlotState.FREE, 0)} free, "
                      f"{c.get(SlotState.UNREACHABLE, 0)} unreachable"
                      + (f", {c[SlotState.DEGRADED]} degraded" if c.get(SlotState.DEGRADED) else ""))
        for name, h in sorted(s["hosts"].items()):
            if h.get("state") != HostState.OK:
                nxt = f" (next probe in {h['next_probe_s']:.0f}s)" if h.get("next_probe_s") is not None else ""
                console.print(f"host {name} {h['state']}: {h.get('reason') or 'no reason given'}{nxt}",
                              markup=False, highlight=False)
    order = [st.value for st in Status]
    counts = s["counts"]
    extra = sorted(k for k in counts if k not in order)
    console.print(f"ideas: {s['total']} — " + (", ".join(f"{k} {counts[k]}" for k in order + extra if k in counts)
                                                or "none yet"))
    console.print(f"epoch: {s['epoch'] if s['epoch'] is not None else 'none yet (no idea)'}")
    b = s["baseline"]
    console.print(f"baseline {s['metric']} ({s['goal']}): {baseline_text(b)}", highlight=False, markup=False)
    if b.get("warning"):
        console.print(f"[bold yellow]warning[/]: {escape(b['warning'])}")
    if s["best"]:
        # "confirmed" only when more than one seed agrees: a promotion on one seed is not a confirmation
        label = "[bold]best confirmed[/]" if s["best"]["seeds"] > 1 else \
            "[bold]best so far[/] (promoted on 1 seed, not confirmed by fresh seeds)"
        console.print(f"{label}: " + _result_line(s["best"], s["metric"]), highlight=False)
    else:
        console.print("best confirmed: none yet")
    if s["best_unconfirmed"]:
        console.print("[yellow]best unconfirmed[/] (not yet confirmed by fresh seeds): " +
                      _result_line(s["best_unconfirmed"], s["metric"]), highlight=False)
    _stale(console, s)
    sp = s["spend"]
    budget = f" of ${sp['budget_usd']:.2f}" if sp["budget_usd"] else ""
    gpu_budget = f" of {sp['max_gpu_hours']:g}" if sp["max_gpu_hours"] else ""     # 0.08 h, not "0.1"
    compute = f"{sp['gpu_hours']:.2f}{gpu_budget} GPU-hours" if s["gpus"] else f"{sp['cpu_hours']:.2f}{gpu_budget} CPU-hours"
    console.print(f"spend: ${sp['usd']:.4f}{budget} LLM, {sp['tokens']:,} tokens, {compute}")
    if sp.get("held"):
        console.print(f"compute budget spent: {sp['held']} queued idea(s) held, not started "
                      "(raise daemon.max_gpu_hours to run them)")
    if sp.get("stopped") or sp.get("screened_out"):
        unit = "GPU-hours" if s["gpus"] else "CPU-hours"
        how = [f"{sp['stopped']} idea(s) stopped by their learning curves"] if sp.get("stopped") else []
        how += [f"{sp['screened_out']} screened out short"] if sp.get("screened_out") else []
        console.print(f"not run to full length: {', '.join(how)}, about {sp['saved_hours']:.2f} {unit} saved "
                      "(estimated)")
    if len(s["models"]) > 1:            # an ensemble: who proposed what, for how much
        console.print("proposing models: " + "; ".join(
            f"{escape(r['model'])} {r['share']:.0%} ({r['proposals']} ideas, ${r['usd']:.4f}"
            + (f", {r['gain_per_usd']:.3g} {escape(s['metric'])} gained per $" if r["gain_per_usd"] is not None
               else "") + ")" for r in s["models"]), highlight=False)
    cpi = s["cost_per_improvement"]
    if cpi["usd"] is not None:
        hw = f" and {cpi['gpu_hours']:.2f} GPU-hours" if s["gpus"] else ""
        console.print(f"cost per unit of improvement: ${cpi['usd']:.2f}{hw} per 1.0 {s['metric']}")
    _running(console, s, d["alive"])
    if s.get("tune"):
        _plain(console, s["tune"]["line"])
    if d.get("stop_reason"):
        _plain(console, f"not proposing: {d['stop_reason']}")
    if d.get("held"):
        _plain(console, f"held: {d['held']}")
    return 0


def _stale(console, s: dict) -> None:
    """Results measured against an old baseline: listed apart, never best (docs/policies.md)."""
    st = s["stale"]
    if not st["count"]:
        return
    console.print(f"[dim]measured against an old baseline[/] ({st['count']}, kept apart: never best, never a "
                  f"parent; push the change again onto the current baseline to compare it):", highlight=False)
    for r in st["top"]:
        console.print("  " + _result_line(r, s["metric"]), highlight=False)


def _running(console, s: dict, alive: bool) -> None:
    """The trials git records as running: after a stop, detached trials run on and are listed here."""
    trials = s["running_trials"]
    if not trials:
        return
    why = "" if alive else " (daemon stopped: detached trials run on; `start` collects their results)"
    waiting = sum(1 for t in trials if t["elapsed_s"] is None)     # placed, not started: not running yet
    more = f" (+{waiting} waiting for a slot)" if waiting else ""
    console.print(f"[bold]trials running[/]: {len(trials) - waiting}{more}{why}", highlight=False)
    budget = s["time_budget_s"]
    console.print(trials_table(trials, budget, bar=False))


def _metric_cell(r: dict) -> str:
    if r["value"] is None:
        return ""
    return f"{r['value']:.4f} ± {r['std']:.4f}" if r["seeds"] > 1 and r["std"] is not None else f"{r['value']:.4f}"


COLUMNS = ("#", "idea", "title", "metric", "Δ baseline", "decision", "status", "origin", "parents", "epoch")
NARROW_DROPS = ("decision", "origin", "parents", "epoch")


def ideas_table(cfg, console, status=None, origin=None, epoch=None, as_json=False, limit=None) -> int:
    known = {s.value for s in Status}
    if status and status not in known:
        _plain(console, f"unknown status '{status}'; valid: {', '.join(sorted(known))}")
        return 2
    pop, rows = read_leaderboard(cfg, status, origin, epoch)
    if pop.at_baseline and not as_json:
        _plain(console, f"{', '.join(branch_name(b) for b in pop.at_baseline)}: at the baseline commit "
                        "(no change to measure; `show baseline` has its result)")
    if limit:
        rows = rows[:limit]
    if as_json:
        console.file.write(json.dumps(rows) + "\n")
        return 0
    cells = [(str(k), r["idea"], _cut(r["title"], 60), _metric_cell(r), delta_short(r), r["decision_text"],
              r["status"], r["origin"], ",".join(r["parents"])[:30], str(r["epoch"])) for k, r in enumerate(rows, 1)]
    cells = [tuple(one_line(x) for x in c) for c in cells]     # before widths are measured (views/safe.py)
    if len(rows) > defaults.IDEAS_RICH_ROWS:   # rich lays out big tables slowly (seconds per thousand rows): plain columns
        w = [max([len(h)] + [len(c[j]) for c in cells]) for j, h in enumerate(COLUMNS)]
        fmt = "  ".join(f"{{:<{x}}}" for x in w)
        console.file.write("\n".join([fmt.format(*COLUMNS)] + [fmt.format(*c).rstrip() for c in cells]) + "\n")
        _legend(console, rows)
        console.print(f"{len(rows)} idea(s)")
        return 0
    # piped into a file or a pager: do not squeeze the table into 80 columns
    out = console if console.is_terminal else type(console)(file=console.file, width=max(console.width, 180))
    cols = COLUMNS
    if out.width < defaults.IDEAS_WIDE_TABLE:
        # a narrow terminal: all ten columns leave the title no room at all, so keep those that rank
        # and drop the provenance ones (`show IDEA` has them)
        cols = tuple(c for c in COLUMNS if c not in NARROW_DROPS)
    t = Table(show_lines=False, box=box.SIMPLE_HEAD if out.width < defaults.IDEAS_WIDE_TABLE else box.HEAVY_HEAD)
    # At 80 columns a stale result's delta (`-0.3824 mean, old 3.0385@fed95d4`) and a metric with its
    # std left the status column no width at all: where the natural widths do not fit, the metric and
    # the delta get widths of their own and wrap, the title keeps 16 columns and the status its word.
    natural = {col: max([len(col)] + [len(c[COLUMNS.index(col)]) for c in cells]) for col in cols}
    avail = out.width - 3 * len(cols) - 1 - sum(w for col, w in natural.items()
                                                 if col not in ("title", "metric", "Δ baseline"))
    fixed: dict[str, int] = {}
    if "Δ baseline" in cols and natural["metric"] + natural["Δ baseline"] + 16 > avail:
        fixed["metric"] = min(natural["metric"], 9)                  # `3.0932 ±` over `0.0070`
        fixed["Δ baseline"] = min(natural["Δ baseline"], max(12, avail - 16 - fixed["metric"]))
    for col in cols:
        wraps = col == "title" or col in fixed
        t.add_column(col, overflow="fold" if wraps else "ellipsis", no_wrap=not wraps, width=fixed.get(col),
                     min_width={"#": len(str(len(cells))), "idea": min(13, natural["idea"]), "title": 16, "metric": 6,
                                "status": natural.get("status")}.get(col))
    keep = [COLUMNS.index(c) for c in cols]
    for c in cells:
        t.add_row(*(Text(c[j]) for j in keep))    # titles, branches, errors are data, never rich markup
    out.print(t)
    _legend(console, rows)
    console.print(f"{len(rows)} idea(s)")
    return 0


def _legend(console, rows: list[dict]) -> None:
    if any(r["delta"] is not None for r in rows):
        console.print(DELTA_LEGEND, markup=False, highlight=False)     # wrapped to the terminal


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


def _plain(console, text: str) -> None:
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def show(cfg, console, ref: str, diff: bool = False, full_log: bool = False) -> int:
    research, pop = load(cfg)
    repo = research.repo
    at_base = [b for b in pop.at_baseline if ref in (b, branch_name(b))]
    if at_base:
        _plain(console, f"{branch_name(at_base[0])} points at the baseline commit: it is the baseline")
        ref = "baseline"
    if ref == "baseline":          # the baseline is no idea, but its note and logs are worth reading
        if not pop.baseline_note:
            _plain(console, f"baseline {pop.baseline_commit}: no result yet")
            return 1
        _plain(console, f"baseline  commit: {pop.baseline_commit}")
        _plain(console, repo.note_read(NOTES_REF, pop.baseline_commit) or "")
        _logs(console, repo, pop.baseline_note, full_log)
        return 0
    idea = pop.resolve(ref)
    if idea is None:
        _plain(console, f"no idea matches '{ref}' (try an idea id, a branch name, a commit prefix "
                        "or 'baseline')")
        return 2                     # bad input, like every other command's
    console.print(Text(one_line(idea.title), style="bold")
                  + Text(f"  ({idea.idea_id}, {idea.origin}, epoch {idea.epoch}, {idea.status.value})"),
                  highlight=False)
    _plain(console, f"branch: {branch_name(idea.branch) or '(none: never became runnable)'}  commit: {idea.commit}")
    if idea.parents:
        _plain(console, f"parents: {', '.join(idea.parents)}")
    if idea.model:
        # only what is known: a proposal not implemented yet (or a pushed branch) has no attempts
        facts = [f"model: {idea.model}"] + ([f"attempts: {idea.attempts}"] if idea.attempts is not None else [])
        facts += [f"tokens: {idea_tokens(idea):,}", f"cost: ${idea_usd(idea):.4f}"]
        console.print("; ".join(facts), markup=False, highlight=False)
    console.print()
    _plain(console, textwrap.indent(idea.text, "  "))   # the idea's own words: no line of it starts as the view's
    console.print()
    base = diff_base(repo, idea, pop.baseline_commit, pop.by_commit.__contains__)
    if base and idea.commit and idea.branch:
        console.print("[bold]diff[/]" if diff else "[bold]diffstat[/] (--diff for the full diff)")
        _plain(console, repo.diff(base, idea.commit, stat=not diff) or "(no change)")
    text = repo.note_read(NOTES_REF, idea.commit) if idea.commit else None
    if text and idea.note is not None:
        _versus(console, idea, pop, cfg)
    if text:
        console.print("[bold]note[/]")
        _plain(console, "\n".join(ln for ln in text.splitlines() if not ln.startswith("trials: ")))
        for t in idea.note.trials if idea.note else []:
            v = f"{t.value:.4f}" if t.value is not None else one_line(t.error)[:200]
            _plain(console, f"  seed {t.seed}: {t.status.value} {v} on {t.host or '?'}"
                            + (f" in {t.wall_s:.0f}s" if t.wall_s else ""))
        for line in curve_lines(repo, idea.note, pop.baseline_note, research.manifest.metric):
            _plain(console, line)
    else:
        console.print(f"[bold]no result yet[/]: {idea.status.value}")
    # The implementer's attempts: the Transcript trailer; for a record, the note's log holds it too.
    transcript = idea.trailers.transcript or (idea.note.log if idea.note and not idea.branch else None)
    _attempts(console, repo, transcript)
    if idea.note and idea.branch:
        _logs(console, repo, idea.note, full_log)
    return 0


def _versus(console, idea, pop, cfg) -> None:
    """What the note's delta is and against which baseline (the note's own first line may predate the
    labels), and what an undecided result waits for."""
    n = idea.note
    stale = pop.stale(idea)
    if n.delta is not None:
        _plain(console, f"delta: {delta_text(n, stale)}")
    if stale:
        if pop.baseline_value is not None:
            now = baseline_tag(pop.baseline_value, pop.baseline_commit)
        else:
            now = baseline_running(pop, cfg.policy.baseline_seeds) or "not measured yet"
        _plain(console, f"measured against an old baseline (now {now}): kept apart, never best, never a parent")
    if idea.value is not None:
        waiting = baseline_running(pop, (pop.baseline_note.seeds_planned if pop.baseline_note else None)
                                   or cfg.policy.baseline_seeds)
        _plain(console, f"decision: {decision_text(n.decision, 'its baseline moved' if stale else waiting)}")


def _attempts(console, repo, sha: str | None) -> None:
    if not sha:
        return
    blob = repo.read_blob(sha)
    try:
        attempts = json.loads(blob) if blob else []
    except ValueError:
        attempts = []
    if not isinstance(attempts, list) or not attempts:
        return
    console.print(f"[bold]implementer attempts[/] ({len(attempts)})")
    for a in attempts:
        err = a.get("error")
        line = f"  attempt {a.get('attempt')}: " + (f"via {a['method']}: " if a.get("method") else "")
        if a.get("implementer"):       # a coding-agent session: its summary, then its steps
            line += (f"{a['implementer']} session {a.get('session', '?')}, {a.get('turns', 0)} turns, "
                     f"{a.get('wall_s', 0)}s, ${a.get('cost_usd', 0)}: ")
        first, _, rest = (err or "").strip()[:1500].partition("\n")
        _plain(console, line + ("ok" if not err else first))
        if rest:                       # the check's or the agent's output: untrusted, behind a gutter
            _plain(console, untrusted_lines(rest, indent="    "))
        if a.get("events"):
            for s in steps(a["events"]):
                _plain(console, f"    {s}")


def _logs(console, repo, note, full: bool) -> None:
    """The log of each trial (tail unless full); trials without their own log use the note's."""
    logs = [(t.trial_id, t.log) for t in note.trials if t.log] or ([("log", note.log)] if note.log else [])
    seen = set()
    for name, sha in logs:
        if sha in seen:
            continue
        seen.add(sha)
        data = repo.read_blob(sha) or b""
        cap = defaults.SHOW_LOG_TAIL_BYTES
        tail = len(data) > cap and not full
        console.print(f"[bold]log {escape(name)}[/]: {UNTRUSTED}" + (" (tail; --log for all)" if tail else ""),
                      highlight=False)
        _plain(console, untrusted_lines((data[-cap:] if tail else data).decode(errors="replace")))
        _plain(console, f"(end of log {name})")
