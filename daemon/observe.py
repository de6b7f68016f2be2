"""Read-only views of the search, straight from git: `status`, `ideas` (the leaderboard) and `show`.

They work whether or not the daemon runs: git holds every idea and result; the daemon's heartbeat
file (daemon.json in the state dir) only adds liveness, slots and the live LLM budget. The population
is read once, in one batch, whatever its size. "Best" always means the best *confirmed* result
(decision promoted or confirmed), shown with its spread over seeds; the best unconfirmed value is
reported separately and labelled, because one lucky seed is not a result.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from . import defaults
from .decide import BEST_DECISIONS
from .gitrepo import state_dir
from .notes import Status
from .population import read_population
from .progress import running_trials
from .research import open_research
from .trials import seed_warning


def daemon_state(repo) -> dict | None:
    """The daemon's heartbeat file, with `alive` (its pid exists) and `fresh` (recent heartbeat)."""
    p = state_dir(repo, create=False) / "daemon.json"
    try:
        st = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    try:
        os.kill(int(st["pid"]), 0)
        st["alive"] = True
    except PermissionError:
        st["alive"] = True          # exists, owned by another user
    except (OSError, KeyError, TypeError, ValueError):
        st["alive"] = False
    st["fresh"] = st["alive"] and time.time() - st.get("heartbeat", 0) < max(60.0, 10 * defaults.TICK_S)
    return st


def load(cfg):
    """(research, population): the one batch read every view starts from."""
    research = open_research(cfg, create=False)
    return research, read_population(research.repo, research.baseline_ref)


def _fmt(v: float | None, nd: int = 4) -> str:
    return "" if v is None else f"{v:.{nd}f}"


def _delta(v: float | None) -> str:
    return "" if v is None else f"{v:+.4f}"


def _branch(idea) -> str:
    return (idea.branch or "").removeprefix("refs/heads/")


def idea_usd(i) -> float:
    """LLM spend on one idea: the note's figure, else the commit's (implemented or only proposed)."""
    if i.note and i.note.cost_usd is not None:
        return i.note.cost_usd
    if i.cost_usd is not None:
        return i.cost_usd
    try:
        return float(i.trailers.get("Idea-Cost-USD") or 0)
    except ValueError:
        return 0.0


def idea_tokens(i) -> int:
    if i.note and i.note.tokens is not None:
        return i.note.tokens
    if i.tokens is not None:
        return i.tokens
    try:
        return int(i.trailers.get("Idea-Tokens") or 0)
    except ValueError:
        return 0


def compute_s(note, gpus: int) -> float:
    """Compute time a note measured: GPU-seconds for a GPU env; for a CPU env (gpus = 0) its CPU
    time (`cpu_s` where the note has it, else the run time older notes filed as gpu_s). A result
    linked from an identical tree cost nothing."""
    if note is None or note.linked:
        return 0.0
    if gpus:
        return float(note.gpu_s or 0)
    return float(getattr(note, "cpu_s", None) or note.gpu_s or 0)


def compute_unit(gpus: int) -> str:
    return "GPU-hours" if gpus else "CPU-hours"


def is_confirmed(i) -> bool:
    return i.value is not None and i.note is not None and i.note.decision in BEST_DECISIONS


def result_entry(i) -> dict:
    n = i.note
    return {"idea": i.idea_id, "title": i.title, "branch": _branch(i), "commit": i.commit, "value": i.value,
            "std": n.std, "seeds": len(n.values), "values": n.values, "decision": n.decision,
            "delta": n.delta, "origin": i.origin, "epoch": i.epoch}


def best_of(pop, goal: str, confirmed: bool | None):
    """Best measured idea; confirmed=True only promoted/confirmed, False only the others, None any."""
    cands = [i for i in pop.succeeded() if confirmed is None or is_confirmed(i) == confirmed]
    if not cands:
        return None
    return (min if goal == "min" else max)(cands, key=lambda i: i.value)


def summary(cfg, research=None, pop=None) -> dict:
    if pop is None:
        research, pop = load(cfg)
    m = research.manifest
    counts = Counter(i.status.value for i in pop.ideas)
    st = daemon_state(research.repo)
    alive = bool(st and st["alive"])
    best = best_of(pop, m.goal, True)
    lucky = best_of(pop, m.goal, False)
    if lucky is not None and best is not None and not m.better(lucky.value, best.value):
        lucky = None                 # only worth showing when it beats the confirmed best
    usd = sum(idea_usd(i) for i in pop.ideas)
    tokens = sum(idea_tokens(i) for i in pop.ideas)
    notes = [i.note for i in pop.ideas if i.note] + ([pop.baseline_note] if pop.baseline_note else [])
    gpu_s = sum(compute_s(n, m.gpus) for n in notes) if m.gpus else 0.0
    cpu_s = sum(compute_s(n, 0) for n in notes) if not m.gpus else 0.0
    budget = (st or {}).get("budget") or {}
    slots = st.get("slots", []) if alive else []
    improvement = abs(best.note.delta) if best is not None and best.note.delta else None
    return {
        "daemon": {"alive": alive, "fresh": bool(st and st.get("fresh")), "pid": st.get("pid") if st else None,
                   "uptime_s": time.time() - st["started"] if alive and st.get("started") else None,
                   "last_heartbeat_s": time.time() - st["heartbeat"] if st and st.get("heartbeat") else None,
                   "llm": st.get("llm") if st else None, "stop_reason": st.get("stop_reason") if st else None,
                   "implementing": st.get("implementing", []) if alive else [],
                   "stopping_s": (time.time() - st["stopping_since"]
                                  if alive and st.get("stopping_since") else None)},
        "slots": slots,
        "hosts": (st.get("hosts") or {}) if alive else {},
        "slot_counts": dict(Counter(x.get("state", "?") for x in slots)),
        "counts": dict(counts),
        "total": len(pop.ideas),
        "epoch": pop.max_epoch(),
        "baseline": {"commit": pop.baseline_commit, "value": pop.baseline_value, "std": pop.baseline_std,
                     "seeds": len(pop.baseline_note.values) if pop.baseline_note else 0,
                     "warning": seed_warning(pop.baseline_note),
                     "seeds_planned": (pop.baseline_note.seeds_planned if pop.baseline_note else None)
                     or cfg.policy.baseline_seeds,
                     "status": pop.baseline_note.status.value if pop.baseline_note else None,
                     "error": pop.baseline_note.error if pop.baseline_note else None},
        "best": result_entry(best) if best is not None else None,
        "best_unconfirmed": result_entry(lucky) if lucky is not None else None,
        "spend": {"usd": usd, "tokens": tokens, "gpu_hours": gpu_s / 3600 if m.gpus else 0.0,
                  "cpu_hours": cpu_s / 3600,
                  "budget_usd": budget.get("max_usd") or cfg.llm.budget_usd,
                  "live_usd": budget.get("usd"), "max_gpu_hours": cfg.daemon.max_gpu_hours},
        "cost_per_improvement": {"usd": usd / improvement if improvement else None,
                                 "gpu_hours": gpu_s / 3600 / improvement if improvement and m.gpus else None},
        "metric": m.metric, "goal": m.goal, "gpus": m.gpus, "time_budget_s": m.time_budget_s,
        "running_trials": running_trials(pop),
        "models": model_shares(pop, m),
    }


def model_shares(pop, env) -> list[dict]:
    """Per proposing model (the Idea-Model trailer): its share of the proposals, its ideation spend and
    its improvement per dollar, as the ensemble's bandit sees them (policies/bandit.py)."""
    from .policies.bandit import arm_stats
    st = arm_stats(pop, env)
    total = sum(s["proposals"] for s in st.values()) or 1
    return [{"model": m, "proposals": s["proposals"], "share": s["proposals"] / total, "usd": s["usd"],
             "measured": s["measured"], "gain_per_usd": s["gain"] / s["usd"] if s["usd"] else None}
            for m, s in sorted(st.items(), key=lambda kv: -kv[1]["proposals"])]


def _result_line(r: dict, metric: str) -> str:
    spread = f" ± {r['std']:.4f} over {r['seeds']} seeds" if r["seeds"] > 1 and r["std"] is not None \
        else f" ({r['seeds']} seed)"
    return (f"{metric} = {r['value']:.4f}{spread}, {_delta(r['delta'])} vs baseline [{r['decision']}]  "
            f"{r['idea']} {escape(r['branch'])}  “{escape(r['title'][:60])}”")


def _fmt_uptime(s: float) -> str:
    s = int(s)
    return f"{s // 86400}d{s % 86400 // 3600:02d}h" if s >= 86400 else f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s"


def baseline_text(b: dict) -> str:
    """The baseline as measured so far: seed 0's value as soon as it exists, then the mean and std."""
    if b["value"] is None:
        if b.get("status") and b["status"] != "succeeded":
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
        console.print(f"slots: {c.get('busy', 0)} busy, {c.get('free', 0)} free, {c.get('unreachable', 0)} unreachable"
                      + (f", {c['degraded']} degraded" if c.get("degraded") else ""))
        for name, h in sorted(s["hosts"].items()):
            if h.get("state") != "ok":
                nxt = f" (next probe in {h['next_probe_s']:.0f}s)" if h.get("next_probe_s") is not None else ""
                console.print(f"host {name} {h['state']}: {h.get('reason') or 'no reason given'}{nxt}",
                              markup=False, highlight=False)
    order = [st.value for st in Status]
    counts = s["counts"]
    extra = sorted(k for k in counts if k not in order)
    console.print(f"ideas: {s['total']} — " + (", ".join(f"{k} {counts[k]}" for k in order + extra if k in counts)
                                                or "none yet"))
    console.print(f"epoch: {s['epoch'] if s['epoch'] >= 0 else '-'}")
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
    sp = s["spend"]
    budget = f" of ${sp['budget_usd']:.2f}" if sp["budget_usd"] else ""
    gpu_budget = f" of {sp['max_gpu_hours']:.1f}" if sp["max_gpu_hours"] else ""
    compute = f"{sp['gpu_hours']:.2f}{gpu_budget} GPU-hours" if s["gpus"] else f"{sp['cpu_hours']:.2f} CPU-hours"
    console.print(f"spend: ${sp['usd']:.4f}{budget} LLM, {sp['tokens']:,} tokens, {compute}")
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
    if d.get("stop_reason"):
        _plain(console, f"not proposing: {d['stop_reason']}")
    return 0


def _running(console, s: dict, alive: bool) -> None:
    """The trials git records as running: after a stop, detached trials run on and are listed here."""
    from .progress import trials_table
    trials = s["running_trials"]
    if not trials:
        return
    why = "" if alive else " (daemon stopped: detached trials run on; `start` collects their results)"
    waiting = sum(1 for t in trials if t["elapsed_s"] is None)     # placed, not started: not running yet
    more = f" (+{waiting} waiting for a slot)" if waiting else ""
    console.print(f"[bold]trials running[/]: {len(trials) - waiting}{more}{why}", highlight=False)
    budget = s["time_budget_s"]
    console.print(trials_table(trials, budget, bar=False))


def leaderboard_row(i) -> dict:
    """One idea as a leaderboard row (plain values, ready for JSON)."""
    n = i.note
    return {"idea": i.idea_id, "title": i.title, "status": i.status.value, "value": i.value,
            "std": n.std if n and i.value is not None else None,
            "seeds": len(n.values) if n else 0, "values": n.values if n else [],
            "delta": n.delta if n else None, "decision": n.decision if n else None, "origin": i.origin,
            "parents": i.parents, "epoch": i.epoch, "branch": _branch(i), "commit": i.commit,
            "error": n.error if n else None}


def rank_rows(rows: list[dict], goal: str) -> None:
    """Best first under the goal; unmeasured ideas last (by id: stable from one read to the next)."""
    sign = 1 if goal == "min" else -1
    rows.sort(key=lambda r: (r["value"] is None, sign * (r["value"] or 0), r["idea"]))


def leaderboard(cfg, status=None, origin=None, epoch=None, research=None, pop=None) -> list[dict]:
    """Every idea as a row, best first under the env's goal; unmeasured ideas last."""
    if pop is None:
        research, pop = load(cfg)
    rows = [leaderboard_row(i) for i in pop.ideas
            if not (status and i.status.value != status or origin and i.origin != origin
                    or epoch is not None and i.epoch != epoch)]
    rank_rows(rows, research.manifest.goal)
    return rows


def _metric_cell(r: dict) -> str:
    if r["value"] is None:
        return ""
    return f"{r['value']:.4f} ± {r['std']:.4f}" if r["seeds"] > 1 and r["std"] is not None else f"{r['value']:.4f}"


COLUMNS = ("#", "idea", "title", "metric", "Δ baseline", "decision", "status", "origin", "parents", "epoch")
RICH_ROWS = 300
WIDE_TABLE = 130          # below this many columns `ideas` shows the NARROW set
NARROW_DROPS = ("decision", "origin", "parents", "epoch")


def ideas_table(cfg, console, status=None, origin=None, epoch=None, as_json=False, limit=None) -> int:
    known = {s.value for s in Status}
    if status and status not in known:
        _plain(console, f"unknown status '{status}'; valid: {', '.join(sorted(known))}")
        return 2
    rows = leaderboard(cfg, status, origin, epoch)
    if limit:
        rows = rows[:limit]
    if as_json:
        console.file.write(json.dumps(rows) + "\n")
        return 0
    cells = [(str(k), r["idea"], _cut(r["title"], 60), _metric_cell(r), _delta(r["delta"]), r["decision"] or "",
              r["status"], r["origin"], ",".join(r["parents"])[:30], str(r["epoch"])) for k, r in enumerate(rows, 1)]
    if len(rows) > RICH_ROWS:   # rich lays out big tables slowly (seconds per thousand rows): plain columns
        w = [max([len(h)] + [len(c[j]) for c in cells]) for j, h in enumerate(COLUMNS)]
        fmt = "  ".join(f"{{:<{x}}}" for x in w)
        console.file.write("\n".join([fmt.format(*COLUMNS)] + [fmt.format(*c).rstrip() for c in cells]) + "\n")
        console.print(f"{len(rows)} idea(s)")
        return 0
    # piped into a file or a pager: do not squeeze the table into 80 columns
    out = console if console.is_terminal else Console(file=console.file, width=max(console.width, 180))
    cols = COLUMNS
    if out.width < WIDE_TABLE:
        # a narrow terminal: all ten columns leave the title no room at all, so keep those that rank
        # and drop the provenance ones (`show IDEA` has them)
        cols = tuple(c for c in COLUMNS if c not in NARROW_DROPS)
    t = Table(show_lines=False, box=box.SIMPLE_HEAD if out.width < WIDE_TABLE else box.HEAVY_HEAD)
    for col in cols:
        t.add_column(col, overflow="fold" if col == "title" else "ellipsis", no_wrap=col != "title",
                     min_width={"#": len(str(len(cells))), "idea": 13, "title": 16, "metric": 6}.get(col))
    keep = [COLUMNS.index(c) for c in cols]
    for c in cells:
        t.add_row(*(Text(c[j]) for j in keep))    # titles, branches, errors are data, never rich markup
    out.print(t)
    console.print(f"{len(rows)} idea(s)")
    return 0


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


def _plain(console, text: str) -> None:
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def show(cfg, console, ref: str, diff: bool = False, full_log: bool = False) -> int:
    research, pop = load(cfg)
    repo = research.repo
    if ref == "baseline":          # the baseline is no idea, but its note and logs are worth reading
        if not pop.baseline_note:
            _plain(console, f"baseline {pop.baseline_commit}: no result yet")
            return 1
        _plain(console, f"baseline  commit: {pop.baseline_commit}")
        _plain(console, repo.note_read(defaults.NOTES_REF, pop.baseline_commit) or "")
        _logs(console, repo, pop.baseline_note, full_log)
        return 0
    idea = pop.resolve(ref)
    if idea is None:
        _plain(console, f"no idea matches '{ref}' (try an idea id, a branch name, a commit prefix "
                        "or 'baseline')")
        return 2                     # bad input, like every other command's
    console.print(Text(idea.title, style="bold") + Text(f"  ({idea.idea_id}, {idea.origin}, epoch {idea.epoch}, "
                                                       f"{idea.status.value})"), highlight=False)
    _plain(console, f"branch: {_branch(idea) or '(none: never became runnable)'}  commit: {idea.commit}")
    if idea.parents:
        _plain(console, f"parents: {', '.join(idea.parents)}")
    if idea.model:
        # only what is known: a proposal not implemented yet (or a pushed branch) has no attempts
        facts = [f"model: {idea.model}"] + ([f"attempts: {idea.attempts}"] if idea.attempts is not None else [])
        facts += [f"tokens: {idea_tokens(idea):,}", f"cost: ${idea_usd(idea):.4f}"]
        console.print("; ".join(facts), markup=False, highlight=False)
    console.print()
    _plain(console, idea.text)
    console.print()
    if idea.base_commit and idea.commit and idea.branch:
        console.print("[bold]diff[/]" if diff else "[bold]diffstat[/] (--diff for the full diff)")
        _plain(console, repo.diff(idea.base_commit, idea.commit, stat=not diff) or "(no change)")
    text = repo.note_read(defaults.NOTES_REF, idea.commit) if idea.commit else None
    if text:
        console.print("[bold]note[/]")
        _plain(console, "\n".join(ln for ln in text.splitlines() if not ln.startswith("trials: ")))
        for t in idea.note.trials if idea.note else []:
            v = f"{t.value:.4f}" if t.value is not None else (t.error or "")[:200]
            _plain(console, f"  seed {t.seed}: {t.status.value} {v} on {t.host or '?'}"
                            + (f" in {t.wall_s:.0f}s" if t.wall_s else ""))
    else:
        console.print(f"[bold]no result yet[/]: {idea.status.value}")
    # The implementer's attempts: the Transcript trailer; for a record, the note's log holds it too.
    transcript = idea.trailers.get("Transcript") or (idea.note.log if idea.note and not idea.branch else None)
    _attempts(console, repo, transcript)
    if idea.note and idea.branch:
        _logs(console, repo, idea.note, full_log)
    return 0


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
        _plain(console, line + ("ok" if not err else err.strip()[:1500]))
        if a.get("events"):
            from .agent_cli import steps
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
        tail = len(data) > 4000 and not full
        console.print(f"[bold]log {escape(name)}[/]" + (" (tail; --log for all)" if tail else ""), highlight=False)
        _plain(console, (data[-4000:] if tail else data).decode(errors="replace"))
