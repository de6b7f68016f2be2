"""The dashboard's data: JSON-ready views of one population snapshot (overview, leaderboard, lineage,
failures, one idea), built from the same readers as `status`, `ideas` and `show` (observe.py).

A `Snapshot` is immutable once built: it holds the research repo, one population, and indexes computed
at most once (leaderboard rows, reused from the previous snapshot for ideas that did not change; the
lineage's children, subtree sizes and bests, on first use). The server builds a new one
only when git changed, so every request between two notes is served from memory. Nothing here
writes to git. Text that leaves this module passes `redact` (defence in depth: trials never see the
daemon's secrets, but a served log must not carry one even if something leaked into it).
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections import Counter

from autoresearchd import defaults
from autoresearchd.goal import better, sign
from autoresearchd.runners.trialdir import SECRET_NAME
from autoresearchd.store.notes import BEST_DECISIONS, FAILURES, GOOD_DECISIONS, Status
from autoresearchd.store.refs import branch_name
from autoresearchd.views.curves import series
from autoresearchd.views.progress import running_trials
from autoresearchd.views.summary import daemon_state, idea_tokens, idea_usd, leaderboard_row, rank_rows, summary

SORT_KEYS = ("rank", "idea", "title", "value", "delta", "decision", "status", "origin", "epoch")
FAILURE_GROUPS = ("implement_failed", "check_failed", "crashed", "timed_out", "rejected", "duplicate",
                  "tamper_or_suspicious", "lost", "refused", "cancelled")


def secrets_in_env(environ=None) -> list[str]:
    """Values of this process's variables whose names look like secrets (long enough to matter)."""
    env = os.environ if environ is None else environ
    return sorted({v for k, v in env.items() if SECRET_NAME.search(k) and len(v) >= 8}, key=len, reverse=True)


def redact(text: str | None, secrets: list[str]) -> str | None:
    if not text:
        return text
    for s in secrets:
        if s in text:
            text = text.replace(s, "[redacted]")
    return text


def steps(curve: dict) -> dict:
    """A best-so-far curve cut to the points where it changes (plus both ends): the same step plot
    from a few dozen points instead of one per finished idea."""
    raw, conf = curve["raw"], curve["confirmed"]
    keep = [k for k in range(len(raw)) if k in (0, len(raw) - 1) or raw[k] != raw[k - 1] or conf[k] != conf[k - 1]
            or (k + 1 < len(raw) and (raw[k + 1] != raw[k] or conf[k + 1] != conf[k]))]
    return {key: [vals[k] for k in keep] for key, vals in curve.items()}


def failure_reason(i) -> str | None:
    """The failures view's group for an idea, or None when it did not fail."""
    n = i.note
    if n is None:
        return None
    flags = {str(f).lower() for f in (n.flags or [])}
    extra = n.model_extra or {}             # newer daemons may file `suspicious: true` as its own key
    if n.tamper or (n.decision or "") == "suspicious" or "suspicious" in flags or \
            any(t.tamper for t in n.trials) or str(extra.get("suspicious") or "").lower() in ("true", "1"):
        return "tamper_or_suspicious"
    st = n.status
    if st == Status.IMPLEMENT_FAILED:
        return "check_failed" if "check" in (n.error or "").lower() else "implement_failed"
    if st == Status.DUPLICATE:
        return "duplicate"
    if st == Status.FAILED:
        return "crashed"
    if st in FAILURES:
        return st.value
    return None


def _colour(i) -> str:
    """A result class the page colours by: best, good, neutral, worse, failed, live, pending."""
    n = i.note
    if n is None:
        return "live" if i.status in (Status.RUNNING, Status.IMPLEMENTING) else "pending"
    if i.value is None:
        return "failed"
    if n.decision in BEST_DECISIONS:
        return "best"
    if n.decision in GOOD_DECISIONS or n.decision == "pending":
        return "good"
    if n.decision in ("worse", "demoted"):
        return "worse"
    return "neutral"


class Snapshot:
    """One consistent view of the search at one git version."""

    def __init__(self, cfg, research, pop, version: str, secrets: list[str] | None = None,
                 prev: "Snapshot | None" = None):
        self.cfg, self.research, self.pop, self.version = cfg, research, pop, version
        self.secrets = secrets_in_env() if secrets is None else secrets
        self.goal = research.manifest.goal
        self.built_at = time.time()
        # An idea the live reader did not rebuild is the very object `prev` had: its row and failure
        # reason are reused (a new note at 10k ideas builds one row, not 10k). Keyed by object id; the
        # entry holds the idea, so no id is reused while the entry lives. Rows are never modified.
        old = prev._per_idea if prev is not None else {}
        per = {}
        for i in pop.ideas:
            o = old.get(id(i))
            per[id(i)] = o if o is not None and o[0] is i else (i, leaderboard_row(i), failure_reason(i))
        self._per_idea = per
        self.rows = [per[id(i)][1] for i in pop.ideas]
        rank_rows(self.rows, self.goal)
        self.rank = {id(r): k for k, r in enumerate(self.rows, 1) if r["value"] is not None}
        self.row_by_id = {r["idea"]: r for r in self.rows}
        self.reasons = {i.idea_id: per[id(i)][2] for i in pop.ideas}
        self._tree = self._facets = None        # built on first use: a note need not wait for them
        self._summary = self._summary_state = self._fixed = None

    # -- overview ------------------------------------------------------------------------------------
    def overview(self) -> dict:
        """summary.summary plus the curves, what runs and failures by reason. The population
        parts are computed once per snapshot; the summary again only when the daemon's state changed."""
        st = daemon_state(self.research.repo, self.cfg.daemon.tick_s)
        key = json.dumps({k: v for k, v in (st or {}).items() if k not in ("heartbeat", "fresh")}, sort_keys=True,
                         default=str)
        if self._fixed is None:
            by_time = series(self.pop, self.goal, self.research.manifest.gpus)
            self._fixed = {
                "curves": dict(by_time, by_time=steps(by_time["by_time"])),
                "running": running_trials(self.pop),
                "failures": dict(Counter(r for r in self.reasons.values() if r)),
                "noise_margin": self._margin(), "env": self.research.manifest.name}
        if self._summary is None or key != self._summary_state:
            s = summary(self.cfg, self.research, self.pop)
            s["baseline"]["values"] = list(self.pop.baseline_note.values) if self.pop.baseline_note else []
            self._summary, self._summary_state = s, key
        out = dict(self._summary, **self._fixed)
        d = dict(out["daemon"])
        if st and st.get("heartbeat"):      # liveness is recomputed at each request, the rest is cached
            d["last_heartbeat_s"] = time.time() - st["heartbeat"]
        out["daemon"] = d
        out["version"] = self.version
        return out

    def _margin(self) -> float | None:
        b = self.pop.baseline_std
        return None if b is None else self.cfg.policy.noise_mult * b

    # -- leaderboard ---------------------------------------------------------------------------------
    def ideas(self, status=None, origin=None, epoch=None, decision=None, q=None, sort="rank", desc=False,
              offset=0, limit=100) -> dict:
        rows = self.rows
        if status:
            rows = [r for r in rows if r["status"] == status]
        if origin:
            rows = [r for r in rows if r["origin"] == origin]
        if epoch is not None:
            rows = [r for r in rows if r["epoch"] == epoch]
        if decision:
            rows = [r for r in rows if (r["decision"] or "none") == decision]
        if q:
            ql = q.lower()
            rows = [r for r in rows if ql in r["title"].lower() or ql in r["idea"].lower()]
        if sort != "rank" and sort in SORT_KEYS:
            num = sort in ("value", "delta", "epoch")
            present = [r for r in rows if r[sort] is not None]
            present.sort(key=lambda r: r[sort] if num else str(r[sort]).lower(), reverse=desc)
            rows = present + [r for r in rows if r[sort] is None]
        elif desc:
            rows = [r for r in reversed(rows) if r["value"] is not None] + [r for r in rows if r["value"] is None]
        margin = self._margin()
        page = [dict(r, rank=self.rank.get(id(r)), margin=margin, title=redact(r["title"], self.secrets),
                     error=(redact(r["error"], self.secrets) or "")[:300] or None)
                for r in rows[offset:offset + limit]]
        if self._facets is None:
            facets = {"status": Counter(r["status"] for r in self.rows),
                      "origin": Counter(r["origin"] for r in self.rows),
                      "decision": Counter(r["decision"] or "none" for r in self.rows),
                      "epoch": Counter(r["epoch"] for r in self.rows)}
            self._facets = {k: dict(sorted(v.items(), key=lambda kv: str(kv[0]))) for k, v in facets.items()}
        return {"total": len(self.rows), "matched": len(rows), "offset": offset, "rows": page,
                "facets": self._facets,
                "metric": self.research.manifest.metric, "goal": self.goal, "version": self.version}

    # -- lineage -------------------------------------------------------------------------------------
    def _lineage(self) -> tuple[dict, dict, dict]:
        """(children, subtree sizes, subtree bests), indexed on first use. Two requests racing here
        both build the same index; either result is right."""
        if self._tree is None:
            self._tree = self._lineage_index()
        return self._tree

    def _lineage_index(self) -> tuple[dict, dict, dict]:
        """children by first parent (roots hang off the baseline), subtree sizes and subtree bests."""
        by_id = self.pop.by_id
        values = {r["idea"]: r["value"] for r in self.rows}
        kids: dict[str, list[str]] = {}
        for i in self.pop.ideas:
            p = next((p for p in i.parents if p in by_id and p != i.idea_id), None)
            kids.setdefault(p or "baseline", []).append(i.idea_id)
        size: dict[str, int] = {}
        best: dict[str, float | None] = {}
        order, stack, seen = [], ["baseline"], set()
        while stack:                        # iterative post-order: deep chains must not hit recursion limits
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            order.append(n)
            stack.extend(kids.get(n, []))
        for n in reversed(order):
            v = values.get(n)
            s = 1
            for c in kids.get(n, []):
                s += size.get(c, 0)
                cb = best.get(c)
                if cb is not None and (v is None or better(cb, v, self.goal)):
                    v = cb
            size[n], best[n] = s, v
        s = sign(self.goal)
        for k, c in kids.items():          # the paying branches first
            c.sort(key=lambda x: (best.get(x) is None, s * (best.get(x) or 0), x))
        return kids, size, best

    def _node(self, nid: str) -> dict:
        i = self.pop.by_id.get(nid)
        r = self.row_by_id.get(nid)
        kids, size, best = self._lineage()
        base = {"id": nid, "children": len(kids.get(nid, [])), "size": size.get(nid, 1), "best": best.get(nid)}
        if i is None:
            return dict(base, title="baseline", value=self.pop.baseline_value, colour="baseline", status="baseline",
                        delta=None, decision=None, origin="baseline", epoch=None)
        return dict(base, title=redact(i.title, self.secrets), value=i.value, colour=_colour(i),
                    status=i.status.value, delta=r["delta"] if r else None, decision=r["decision"] if r else None,
                    origin=i.origin, epoch=i.epoch, parents=i.parents)

    def lineage(self, root: str = "baseline", depth: int = 2, limit: int = 50) -> dict | None:
        """The subtree under root, `depth` levels deep, at most `limit` children per node (best first)."""
        if root != "baseline" and root not in self.pop.by_id:
            return None
        depth, limit = max(0, min(depth, 6)), max(1, min(limit, 500))

        def walk(nid, d):
            node = self._node(nid)
            if d > 0:
                ks = self._lineage()[0].get(nid, [])
                node["kids"] = [walk(k, d - 1) for k in ks[:limit]]
                node["more"] = max(0, len(ks) - limit)
            return node
        path, cur = [], root
        while cur in self.pop.by_id:         # the ancestors, to navigate back up from a focused subtree
            i = self.pop.by_id[cur]
            cur = next((p for p in i.parents if p in self.pop.by_id and p != cur), "baseline")
            if cur in path or len(path) > 200:
                break
            path.append(cur)
        return {"root": walk(root, depth), "ancestors": [self._node(a) for a in reversed(path)],
                "total": len(self.pop.ideas), "goal": self.goal, "baseline": self.pop.baseline_value,
                "margin": self._margin(),
                "version": self.version}

    # -- failures ------------------------------------------------------------------------------------
    def failures(self, per_group: int = 50) -> dict:
        groups: dict[str, list] = {g: [] for g in FAILURE_GROUPS}
        for i in sorted(self.pop.ideas, key=lambda i: -((i.note.finished_at if i.note else 0) or i.committed_at)):
            g = self.reasons.get(i.idea_id)
            if g:
                groups.setdefault(g, []).append(i)
        out = []
        for g, items in groups.items():
            if not items:
                continue
            out.append({"reason": g, "count": len(items), "ideas": [
                {"id": i.idea_id, "title": redact(i.title, self.secrets), "origin": i.origin, "epoch": i.epoch,
                 "status": i.status.value,
                 "error": (redact(i.note.error or ", ".join(i.note.tamper) or (i.note.decision or ""),
                                  self.secrets) or "")[:400]}
                for i in items[:per_group]]})
        return {"groups": out, "version": self.version}

    # -- one idea ------------------------------------------------------------------------------------
    def idea(self, ref: str, log_bytes: int = defaults.SERVE_LOG_TAIL_BYTES) -> dict | None:
        i = self.pop.resolve(ref)
        if i is None:
            return None
        repo, n, red = self.research.repo, i.note, (lambda t: redact(t, self.secrets))
        branch = branch_name(i.branch)
        diff, truncated = "", False
        if i.base_commit and i.commit:
            diff = repo.diff(i.base_commit, i.commit) or ""
            if len(diff) > defaults.SERVE_DIFF_BYTES:
                diff, truncated = diff[:defaults.SERVE_DIFF_BYTES], True
        transcript = i.trailers.transcript or (n.log if n and not i.branch else None)
        attempts = []
        if transcript:
            try:
                raw = json.loads(repo.read_blob(transcript) or b"[]")
            except ValueError:
                raw = []
            for a in raw if isinstance(raw, list) else []:
                if isinstance(a, dict):
                    attempts.append({"attempt": a.get("attempt"), "method": a.get("method"),
                                     "error": red((a.get("error") or "")[-4000:]) or None})
        check = next((a["error"] for a in reversed(attempts) if a["error"] and "check" in a["error"].lower()), None)
        if check is None and n and n.status == Status.IMPLEMENT_FAILED and n.error:
            check = red(n.error)
        logs, seen = [], set()
        trial_logs = [(t.trial_id, t.log) for t in (n.trials if n else []) if t.log]
        for name, sha in (trial_logs or ([("log", n.log)] if n and n.log and i.branch else [])):
            if sha in seen:
                continue
            seen.add(sha)
            data = repo.read_blob(sha) or b""
            logs.append({"name": name, "truncated": len(data) > log_bytes,
                         "text": red(data[-log_bytes:].decode(errors="replace"))})
        note = None
        if n is not None:
            note = {"status": n.status.value, "value": n.value, "std": n.std, "values": n.values, "seeds": n.seeds,
                    "delta": n.delta, "parent_delta": n.parent_delta, "decision": n.decision,
                    "baseline": n.baseline, "baseline_std": n.baseline_std, "error": red(n.error),
                    "host": n.host, "wall_s": n.wall_s, "gpu_s": n.gpu_s, "cpu_s": getattr(n, "cpu_s", None),
                    "accelerator": n.accelerator, "tamper": n.tamper, "flags": n.flags,
                    "duplicate_of": n.duplicate_of, "sandbox": getattr(n, "sandbox", None),
                    "trials": [{"trial": t.trial_id, "seed": t.seed, "status": t.status.value, "value": t.value,
                                "host": t.host, "wall_s": t.wall_s, "accelerator": t.accelerator,
                                "error": red(t.error), "tamper": t.tamper} for t in n.trials]}
        # a pushed branch name may hold shell metacharacters that git allows in refs: quote it
        qb = shlex.quote(branch)
        cmd = (f"git fetch origin {qb} && git checkout {qb}" if branch
               else f"git fetch origin {i.commit} && git checkout --detach {i.commit}" if i.commit else None)
        return {"id": i.idea_id, "title": red(i.title), "text": red(i.text), "status": i.status.value,
                "origin": i.origin, "epoch": i.epoch, "parents": i.parents,
                "children": self._lineage()[0].get(i.idea_id, [])[:100], "branch": branch or None, "commit": i.commit,
                "base": i.base_commit, "model": i.model, "attempts_n": i.attempts, "tokens": idea_tokens(i),
                "usd": idea_usd(i), "trailers": {k: red(v) for k, v in i.trailers.as_text().items()},
                "diff": red(diff), "diff_truncated": truncated, "note": note, "attempts": attempts, "check": check,
                "logs": logs, "leases": [{"trial": lz.trial_id, "host": lz.host, "slot": lz.slot, "state": lz.state,
                                          "elapsed_s": time.time() - lz.started} for lz in i.leases],
                "git": cmd, "failure": self.reasons.get(i.idea_id), "colour": _colour(i),
                "metric": self.research.manifest.metric, "goal": self.goal, "version": self.version}
