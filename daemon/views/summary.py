"""The numbers every view shows, computed once from git: the daemon's heartbeat, the population's
spend and compute, the best results (confirmed and not), the summary `status` prints and the
leaderboard `ideas` prints. No rendering here: observe.py prints these, report, export and the
dashboard read them.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter

from autoresearchd import defaults
from autoresearchd.engine.judge import seed_warning
from autoresearchd.engine.plan import held
from autoresearchd.engine.stopwhen import budget_spent
from autoresearchd.research import open_research
from autoresearchd.store.gitrepo import state_dir
from autoresearchd.store.notes import Status
from autoresearchd.store.population import read_population
from autoresearchd.store.ranking import key as result_key
from autoresearchd.store.ranking import ranked
from autoresearchd.store.refs import branch_name
from autoresearchd.store.spend import compute_total, idea_spend, saved_s, total
from autoresearchd.views.progress import running_trials
from autoresearchd.views.versus import baseline_running, versus
from autoresearchd.policies.bandit import arm_stats
from autoresearchd.tune.split import split
from autoresearchd.tune.surface import studies


def daemon_state(repo, tick_s: float = defaults.TICK_S) -> dict | None:
    """The daemon's heartbeat file, with `alive` (its pid exists) and `fresh` (a heartbeat within ten of
    the daemon's ticks, its configured `tick_s`, and at least a minute)."""
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
    st["fresh"] = st["alive"] and time.time() - st.get("heartbeat", 0) < max(60.0, 10 * tick_s)
    return st


def load(cfg):
    """(research, population): the one batch read every view starts from."""
    research = open_research(cfg, create=False)
    return research, read_population(research.repo, research.baseline_ref)


def idea_usd(i) -> float:
    """LLM spend on one idea (store/spend.py, the one spend rule)."""
    return idea_spend(i).usd


def idea_tokens(i) -> int:
    """LLM tokens of one idea (store/spend.py, the one spend rule)."""
    return idea_spend(i).tokens


def compute_unit(gpus: int) -> str:
    return "GPU-hours" if gpus else "CPU-hours"


def result_entry(i, pop, waiting: str | None = None) -> dict:
    """One result as `status`, the report and the dashboard show it, with what its delta is measured
    against (views/versus.py). `waiting`: versus.baseline_running for the population."""
    n = i.note
    return dict({"idea": i.idea_id, "title": i.title, "branch": branch_name(i.branch), "commit": i.commit,
                 "value": i.value, "std": n.std, "seeds": len(n.values), "values": n.values, "decision": n.decision,
                 "delta": n.delta, "origin": i.origin, "epoch": i.epoch}, **versus(i, pop, waiting))


def population_figures(pop, env) -> dict:
    """The population's part of the summary, computed from scratch: counts per status, the newest
    epoch, the best confirmed and the best unconfirmed idea, LLM spend, compute seconds (`gpu_s` for a
    GPU env, `cpu_s` for a CPU env), the running trials and each proposing model's figures.
    views/totals.py keeps the same dict current by the ideas that changed (the live dashboard)."""
    spent, compute = total(pop.ideas), compute_total(pop, env.gpus)
    return {"counts": dict(Counter(i.status.value for i in pop.ideas)), "total": len(pop.ideas),
            "epoch": pop.epoch(), "best": pop.best(env.goal, confirmed=True),
            "lucky": pop.best(env.goal, confirmed=False), "stale": stale_results(pop, env.goal),
            "usd": spent.usd, "tokens": spent.tokens,
            "gpu_s": compute if env.gpus else 0.0, "cpu_s": compute if not env.gpus else 0.0,
            "saved_s": sum(saved_s(i.note) for i in pop.ideas),
            "running": running_trials(pop), "arms": arm_stats(pop, env)}


def stale_results(pop, goal: str) -> list:
    """Results measured against an old baseline, best first: shown apart, never "best"."""
    return ranked((i for i in pop.succeeded() if pop.stale(i)), goal)


def summary(cfg, research=None, pop=None, figures: dict | None = None) -> dict:
    """Everything `status` prints. `figures`: population_figures already at hand (the live dashboard
    keeps them current instead of walking every idea per note)."""
    if pop is None:
        research, pop = load(cfg)
    m = research.manifest
    f = population_figures(pop, m) if figures is None else figures
    st = daemon_state(research.repo, cfg.daemon.tick_s)
    alive = bool(st and st["alive"])
    best, lucky = f["best"], f["lucky"]
    if lucky is not None and best is not None and not m.better(lucky.value, best.value):
        lucky = None                 # only worth showing when it beats the confirmed best
    usd, tokens, gpu_s, cpu_s = f["usd"], f["tokens"], f["gpu_s"], f["cpu_s"]
    budget = (st or {}).get("budget") or {}
    slots = st.get("slots", []) if alive else []
    improvement = abs(best.note.delta) if best is not None and best.note.delta else None
    planned = (pop.baseline_note.seeds_planned if pop.baseline_note else None) or cfg.policy.baseline_seeds
    waiting = baseline_running(pop, planned)
    stale = f.get("stale") or []
    return {
        "daemon": {"alive": alive, "fresh": bool(st and st.get("fresh")), "pid": st.get("pid") if st else None,
                   "uptime_s": time.time() - st["started"] if alive and st.get("started") else None,
                   "last_heartbeat_s": time.time() - st["heartbeat"] if st and st.get("heartbeat") else None,
                   "llm": st.get("llm") if st else None, "stop_reason": st.get("stop_reason") if st else None,
                   "held": st.get("held") if alive else None,
                   "implementing": st.get("implementing", []) if alive else [],
                   "stopping_s": (time.time() - st["stopping_since"]
                                  if alive and st.get("stopping_since") else None)},
        "slots": slots,
        "hosts": (st.get("hosts") or {}) if alive else {},
        "slot_counts": dict(Counter(x.get("state", "?") for x in slots)),
        "counts": dict(f["counts"]),
        "total": f["total"],
        "epoch": f["epoch"],
        "baseline": {"commit": pop.baseline_commit, "value": pop.baseline_value, "std": pop.baseline_std,
                     "seeds": len(pop.baseline_note.values) if pop.baseline_note else 0,
                     "warning": seed_warning(pop.baseline_note),
                     "seeds_planned": planned, "running": waiting,
                     "status": pop.baseline_note.status.value if pop.baseline_note else None,
                     "error": pop.baseline_note.error if pop.baseline_note else None},
        "best": result_entry(best, pop, waiting) if best is not None else None,
        "best_unconfirmed": result_entry(lucky, pop, waiting) if lucky is not None else None,
        # measured against an old baseline: kept apart (docs/policies.md, "A moved baseline")
        "stale": {"count": len(stale), "top": [result_entry(i, pop, waiting) for i in stale[:defaults.STALE_SHOWN]]},
        "spend": {"usd": usd, "tokens": tokens, "gpu_hours": gpu_s / 3600 if m.gpus else 0.0,
                  "cpu_hours": cpu_s / 3600,
                  "budget_usd": budget.get("max_usd") or cfg.llm.budget_usd,
                  "live_usd": budget.get("usd"), "max_gpu_hours": cfg.daemon.max_gpu_hours,
                  # early stopping ([stopping]) and screening ([screening]) together: estimated, in the
                  # env's unit (GPU-hours, or CPU-hours without GPUs)
                  "saved_hours": f.get("saved_s", 0.0) / 3600, "stopped": f["counts"].get(Status.STOPPED.value, 0),
                  "screened_out": f["counts"].get(Status.SCREENED_OUT.value, 0),
                  # queued ideas the daemon does not start: the compute budget is spent (engine/stopwhen.py)
                  "held": len(held(pop)) if budget_spent(pop, cfg, m) else 0},
        "cost_per_improvement": {"usd": usd / improvement if improvement else None,
                                 "gpu_hours": gpu_s / 3600 / improvement if improvement and m.gpus else None},
        "metric": m.metric, "goal": m.goal, "gpus": m.gpus, "time_budget_s": m.time_budget_s,
        "running_trials": f["running"],
        "models": shares(f["arms"]),
        "tune": tune_summary(cfg, pop, m, st, research.repo),
    }


def tune_summary(cfg, pop, m, st, repo=None) -> dict | None:
    """The budget split between LLM ideas and tuning, and each study's best tuned values (None when
    tuning is off). The same rule the daemon applies (daemon/tune/split.py), from the population.
    With `repo`, a study also names the knobs its idea declares, with their surface lines."""
    if not cfg.tune.enabled:
        return None
    llm_on = cfg.llm.provider != "none" and not (st or {}).get("stop_reason")
    sp = split(pop, m.goal, cfg.tune.floor, llm_on)
    return {**sp.as_dict(), "line": sp.line(), "studies": studies(pop, m, repo)}


def model_shares(pop, env) -> list[dict]:
    """Per proposing model (the Idea-Model trailer): its share of the proposals, its ideation spend and
    its improvement per dollar, as the ensemble's bandit sees them (policies/bandit.py)."""
    return shares(arm_stats(pop, env))


def shares(st: dict) -> list[dict]:
    """model_shares from the bandit's arm_stats."""
    total = sum(s["proposals"] for s in st.values()) or 1
    return [{"model": m, "proposals": s["proposals"], "share": s["proposals"] / total, "usd": s["usd"],
             "measured": s["measured"], "gain_per_usd": s["gain"] / s["usd"] if s["usd"] else None}
            for m, s in sorted(st.items(), key=lambda kv: (-kv[1]["proposals"], kv[0]))]


def leaderboard_row(i, pop, waiting: str | None = None) -> dict:
    """One idea as a leaderboard row (plain values, ready for JSON), with what its delta is measured
    against (views/versus.py). `waiting`: versus.baseline_running for the population."""
    n = i.note
    return dict({"idea": i.idea_id, "title": i.title, "status": i.status.value, "value": i.value,
                 "std": n.std if n and i.value is not None else None,
                 "seeds": len(n.values) if n else 0, "values": n.values if n else [],
                 "delta": n.delta if n else None, "decision": n.decision if n else None, "origin": i.origin,
                 "parents": i.parents, "epoch": i.epoch, "branch": branch_name(i.branch), "commit": i.commit,
                 "committed_at": i.committed_at, "error": n.error if n else None}, **versus(i, pop, waiting))


def rank_key(row: dict, goal: str) -> tuple:
    """A row's place in the leaderboard: results measured against the current baseline first, in the
    one order of "best" (store/ranking.py), then results measured against an old baseline, then
    unmeasured ideas (by commit time and id: stable from one read to the next)."""
    return (row["value"] is None, bool(row.get("stale")),
            result_key(row["value"] or 0.0, row["decision"], row["committed_at"], row["idea"], goal))


def rank_rows(rows: list[dict], goal: str) -> None:
    """Best first under the goal; unmeasured ideas last."""
    rows.sort(key=lambda r: rank_key(r, goal))


def read_leaderboard(cfg, status=None, origin=None, epoch=None) -> tuple:
    """(population, rows): the one read `ideas` makes and its leaderboard, in one call (the view asked
    this module twice, load then leaderboard: docs/architecture.md, "Walk: one result")."""
    research, pop = load(cfg)
    return pop, leaderboard(cfg, status, origin, epoch, research=research, pop=pop)


def leaderboard(cfg, status=None, origin=None, epoch=None, research=None, pop=None) -> list[dict]:
    """Every idea as a row, best first under the env's goal; unmeasured ideas last."""
    if pop is None:
        research, pop = load(cfg)
    waiting = baseline_running(pop, (pop.baseline_note.seeds_planned if pop.baseline_note else None)
                               or cfg.policy.baseline_seeds)
    rows = [leaderboard_row(i, pop, waiting) for i in pop.ideas
            if not (status and i.status.value != status or origin and i.origin != origin
                    or epoch is not None and i.epoch != epoch)]
    rank_rows(rows, research.manifest.goal)
    return rows
