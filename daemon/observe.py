"""Read-only views of the search, straight from git: `status`, `ideas` (the leaderboard) and `show`.
They work whether or not the daemon runs; the daemon's heartbeat file only adds liveness and slots.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter

from rich.table import Table

from . import defaults
from .gitrepo import state_dir
from .notes import Status
from .population import read_population
from .research import open_research


def daemon_state(repo) -> dict | None:
    """The daemon's heartbeat file, if the daemon is alive (pid exists and heartbeat is fresh)."""
    p = state_dir(repo) / "daemon.json"
    try:
        st = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    try:
        os.kill(st["pid"], 0)
    except (OSError, KeyError):
        return None
    st["fresh"] = time.time() - st.get("heartbeat", 0) < max(60.0, 10 * defaults.TICK_S)
    return st


def _fmt(v: float | None, nd: int = 4) -> str:
    return "" if v is None else f"{v:.{nd}f}"


def _delta(v: float | None) -> str:
    return "" if v is None else f"{v:+.4f}"


def summary(cfg) -> dict:
    research = open_research(cfg, create=False)
    pop = read_population(research.repo, research.baseline_ref)
    m = research.manifest
    counts = Counter(i.status.value for i in pop.ideas)
    best = pop.best(m.goal, confirmed_only=True) or pop.best(m.goal)
    st = daemon_state(research.repo)
    usd = sum((i.note.cost_usd if i.note and i.note.cost_usd is not None else (i.cost_usd or 0)) for i in pop.ideas)
    tokens = sum((i.note.tokens if i.note and i.note.tokens is not None else (i.tokens or 0)) for i in pop.ideas)
    gpu_s = sum((i.note.gpu_s or 0) for i in pop.ideas if i.note) + \
        ((pop.baseline_note.gpu_s or 0) if pop.baseline_note else 0)
    return {
        "daemon": {"alive": bool(st), "pid": st.get("pid") if st else None,
                   "uptime_s": time.time() - st["started"] if st else None,
                   "llm": st.get("llm") if st else None, "stop_reason": st.get("stop_reason") if st else None},
        "slots": st.get("slots", []) if st else [],
        "counts": dict(counts),
        "epoch": pop.max_epoch(),
        "baseline": {"commit": pop.baseline_commit, "value": pop.baseline_value, "std": pop.baseline_std,
                     "seeds": len(pop.baseline_note.values) if pop.baseline_note else 0},
        "best": None if best is None else {
            "idea": best.idea_id, "branch": (best.branch or "").removeprefix("refs/heads/"), "value": best.value,
            "std": best.note.std, "seeds": len(best.note.values), "decision": best.note.decision,
            "delta": best.note.delta, "title": best.title},
        "spend": {"usd": usd, "tokens": tokens, "gpu_hours": gpu_s / 3600,
                  "budget_usd": cfg.llm.budget_usd},
        "metric": m.metric, "goal": m.goal,
    }


def status(cfg, console, as_json: bool = False) -> int:
    s = summary(cfg)
    if as_json:
        console.print_json(json.dumps(s))
        return 0
    d = s["daemon"]
    if d["alive"]:
        console.print(f"[bold green]daemon running[/] pid {d['pid']}, up {int(d['uptime_s'])}s; LLM: {d['llm']}")
    else:
        console.print("[bold]daemon not running[/] (status read from git)")
    if s["slots"]:
        c = Counter(x["state"] for x in s["slots"])
        console.print(f"slots: {c.get('busy', 0)} busy, {c.get('free', 0)} free, {c.get('unreachable', 0)} unreachable")
    order = [st.value for st in Status]
    console.print("ideas: " + (", ".join(f"{k} {s['counts'][k]}" for k in order if k in s["counts"]) or "none yet"))
    console.print(f"epoch: {s['epoch']}")
    b = s["baseline"]
    console.print(f"baseline {s['metric']}: " + (f"{b['value']:.4f} ± {b['std'] or 0:.4f} ({b['seeds']} seeds)"
                                                 if b["value"] is not None else "not measured yet"))
    if s["best"]:
        bb = s["best"]
        console.print(f"best ({bb['decision'] or 'unconfirmed'}): {s['metric']}={bb['value']:.4f}"
                      f" ± {bb['std'] or 0:.4f} over {bb['seeds']} seed(s) ({_delta(bb['delta'])} vs baseline) "
                      f"{bb['idea']} {bb['branch']}")
    sp = s["spend"]
    budget = f" of ${sp['budget_usd']:.2f}" if sp["budget_usd"] else ""
    console.print(f"spend: ${sp['usd']:.4f}{budget} LLM, {sp['tokens']} tokens, {sp['gpu_hours']:.3f} GPU-hours")
    if d.get("stop_reason"):
        console.print(f"not proposing: {d['stop_reason']}")
    return 0


def leaderboard(cfg, status=None, origin=None, epoch=None) -> list[dict]:
    research = open_research(cfg, create=False)
    pop = read_population(research.repo, research.baseline_ref)
    goal = research.manifest.goal
    rows = []
    for i in pop.ideas:
        if status and i.status.value != status or origin and i.origin != origin or \
                epoch is not None and i.epoch != epoch:
            continue
        n = i.note
        rows.append({"idea": i.idea_id, "title": i.title, "status": i.status.value, "value": i.value,
                     "std": n.std if n else None, "seeds": len(n.values) if n else 0,
                     "delta": n.delta if n else None, "decision": n.decision if n else None, "origin": i.origin,
                     "parents": i.parents, "epoch": i.epoch,
                     "branch": (i.branch or "").removeprefix("refs/heads/"), "commit": i.commit,
                     "error": n.error if n else None})
    sign = 1 if goal == "min" else -1
    rows.sort(key=lambda r: (r["value"] is None, sign * (r["value"] or 0), r["idea"]))
    return rows


def ideas_table(cfg, console, status=None, origin=None, epoch=None, as_json=False, limit=None) -> int:
    rows = leaderboard(cfg, status, origin, epoch)
    if limit:
        rows = rows[:limit]
    if as_json:
        console.print_json(json.dumps(rows))
        return 0
    t = Table(show_lines=False)
    for col in ("#", "idea", "title", "status", "metric", "Δ baseline", "decision", "origin", "parents", "epoch"):
        t.add_column(col, overflow="fold" if col == "title" else "ellipsis")
    for k, r in enumerate(rows, 1):
        t.add_row(str(k), r["idea"], r["title"][:60], r["status"], _fmt(r["value"]), _delta(r["delta"]),
                  r["decision"] or "", r["origin"], ",".join(r["parents"])[:30], str(r["epoch"]))
    console.print(t)
    return 0


def show(cfg, console, ref: str, diff: bool = False, full_log: bool = False) -> int:
    research = open_research(cfg, create=False)
    repo = research.repo
    pop = read_population(repo, research.baseline_ref)
    idea = pop.resolve(ref)
    if idea is None:
        console.print(f"no idea matches '{ref}' (try an idea id, a branch name or a commit prefix)")
        return 1
    console.print(f"[bold]{idea.title}[/]  ({idea.idea_id}, {idea.origin}, epoch {idea.epoch})")
    console.print(f"branch: {idea.branch or '(none: never became runnable)'}  commit: {idea.commit}")
    console.print(idea.text, markup=False, highlight=False)
    if idea.base_commit and idea.commit:
        console.print(repo.diff(idea.base_commit, idea.commit, stat=not diff), markup=False, highlight=False)
    text = repo.note_read(defaults.NOTES_REF, idea.commit) if idea.commit else None
    console.print("[bold]note[/]" if text else "[bold]no result yet[/]: " + idea.status.value)
    if text:
        console.print(text, markup=False, highlight=False)
    tr = idea.trailers.get("Transcript")
    if tr:
        blob = repo.read_blob(tr)
        if blob:
            for a in json.loads(blob):
                console.print(f"attempt {a.get('attempt')}: {a.get('method') or ''} {(a.get('error') or 'ok')[:500]}",
                              markup=False, highlight=False)
    log_sha = idea.note.log if idea.note else None
    if log_sha:
        data = repo.read_blob(log_sha) or b""
        console.print("[bold]log[/]" + ("" if full_log else " (tail; --log for all)"))
        console.print((data if full_log else data[-4000:]).decode(errors="replace"), markup=False, highlight=False)
    return 0
