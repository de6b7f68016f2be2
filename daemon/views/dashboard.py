"""The dashboard's data: JSON-ready views of one population snapshot (overview, leaderboard, lineage,
failures, one idea), built from the same readers as `status`, `ideas` and `show` (observe.py).

A `Snapshot` is immutable once built: it holds the research repo, one population, and indexes computed
at most once: the leaderboard index (board.py) and the overview's figures and curves (totals.py), moved
on from the previous snapshot's by the ideas that changed; the lineage's children, subtree sizes and
bests, on first use. The server builds a new one
only when git changed, so every request between two notes is served from memory. Nothing here
writes to git. Text that leaves this module passes `redact` (defence in depth: trials never see the
daemon's secrets, but a served log must not carry one even if something leaked into it).
"""

from __future__ import annotations

import json
import os
import shlex
import time

from autoresearchd import defaults
from autoresearchd.store.diffbase import diff_base
from autoresearchd.goal import better, sign
from autoresearchd.runners.trialdir import SECRET_NAME
from autoresearchd.store.notes import BAD_DECISIONS, BEST_DECISIONS, GOOD_DECISIONS, Decision, Origin, Status
from autoresearchd.store.refs import branch_name
from autoresearchd.views.summary import daemon_state, idea_tokens, idea_usd, summary
from autoresearchd.views.board import FAILURE_GROUPS, Board, changes, same_baseline
from autoresearchd.views.totals import Totals, rebuild
from autoresearchd.views.versus import versus
from autoresearchd.views.learning import curve_payload

SORT_KEYS = ("rank", "idea", "title", "value", "delta", "decision", "status", "origin", "epoch")


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


def _colour(i) -> str:
    """A result class the page colours by: best, good, neutral, worse, failed, live, pending."""
    n = i.note
    if n is None:
        return "live" if i.status in (Status.RUNNING, Status.IMPLEMENTING) else "pending"  # own word: a CSS class
    if i.value is None:
        return "failed"         # own word: a CSS class (app.css), for every result without a value
    if n.decision in BEST_DECISIONS:
        return "best"
    if n.decision in GOOD_DECISIONS or n.decision == Decision.PENDING:
        return "good"
    if n.decision in BAD_DECISIONS:
        return "worse"          # own word: a CSS class
    return "neutral"


class Snapshot:
    """One consistent view of the search at one git version."""

    def __init__(self, cfg, research, pop, version: str, secrets: list[str] | None = None,
                 prev: "Snapshot | None" = None):
        self.cfg, self.research, self.pop, self.version = cfg, research, pop, version
        self.secrets = secrets_in_env() if secrets is None else secrets
        self.goal = research.manifest.goal
        self.built_at = time.time()
        # Ideas the live reader did not rebuild are the very objects `prev` had: the leaderboard and the
        # overview's totals move on by the changed ones only (a new note at 10k ideas builds one row).
        diff = changes(prev.pop, pop) if prev is not None else None
        planned = cfg.policy.baseline_seeds
        if diff is None or rebuild(*diff, pop) or not same_baseline(prev.pop, pop):
            # a moved baseline changes every row's comparison (views/versus.py): built afresh
            self.board, self.totals = Board(pop, self.goal, planned), Totals(pop, research.manifest)
        else:
            self.board, self.totals = prev.board.advance(*diff, pop), prev.totals.advance(pop, diff)
        self.rows, self.row_by_id, self.reasons = self.board.rows, self.board.by_id, self.board.reasons
        self._tree = None                       # built on first use: a note need not wait for it
        self._summary = self._summary_state = self._fixed = None

    # -- overview ------------------------------------------------------------------------------------
    def overview(self) -> dict:
        """summary.summary plus the curves, what runs and failures by reason. The population
        parts are computed once per snapshot; the summary again only when the daemon's state changed."""
        st = daemon_state(self.research.repo, self.cfg.daemon.tick_s)
        key = json.dumps({k: v for k, v in (st or {}).items() if k not in ("heartbeat", "fresh")}, sort_keys=True,
                         default=str)
        if self._fixed is None:
            by_time = self.totals.series()
            self._fixed = {
                "curves": dict(by_time, by_time=steps(by_time["by_time"])),
                "running": self.totals.figures()["running"],
                "failures": dict(self.board.failures),
                "noise_margin": self._margin(), "env": self.research.manifest.name}
        if self._summary is None or key != self._summary_state:
            s = summary(self.cfg, self.research, self.pop, figures=self.totals.figures())
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
        page = [dict(r, rank=self.board.rank(r), margin=margin, title=redact(r["title"], self.secrets),
                     error=(redact(r["error"], self.secrets) or "")[:300] or None)
                for r in rows[offset:offset + limit]]
        return {"total": len(self.rows), "matched": len(rows), "offset": offset, "rows": page,
                "facets": self.board.facet_counts(),
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
                        delta=None, decision=None, origin=Origin.BASELINE, epoch=None)
        cmp = {k: r[k] for k in ("delta_kind", "delta_mean", "deltas_differ", "delta_text", "baseline",
                                 "baseline_commit", "stale", "decision_text")} if r else {}
        return dict(base, **cmp, title=redact(i.title, self.secrets), value=i.value, colour=_colour(i),
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
            return self._baseline(log_bytes) if ref == "baseline" and self.pop.baseline_commit else None
        repo, n, red = self.research.repo, i.note, (lambda t: redact(t, self.secrets))
        branch = branch_name(i.branch)
        diff, truncated = "", False
        base = diff_base(repo, i, self.pop.baseline_commit, self.pop.by_commit.__contains__)
        if base and i.commit:
            diff = repo.diff(base, i.commit) or ""
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
        logs = self._logs(n, bool(i.branch), log_bytes)
        note = self._note(n)
        if note is not None:        # what its delta is, against which baseline (views/versus.py)
            note.update(versus(i, self.pop, self.board.waiting))
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
                "logs": logs, "leases": _leases(i.leases),
                "curve": curve_payload(repo, n, self.pop.baseline_note),    # views/learning.py
                "git": cmd, "failure": self.reasons.get(i.idea_id), "colour": _colour(i),
                "metric": self.research.manifest.metric, "goal": self.goal, "version": self.version}

    def _logs(self, n, own_log: bool, log_bytes: int) -> list[dict]:
        """The tail of each trial's log (or the note's own log where it has no trials)."""
        logs, seen = [], set()
        trial_logs = [(t.trial_id, t.log) for t in (n.trials if n else []) if t.log]
        for name, sha in (trial_logs or ([("log", n.log)] if n and n.log and own_log else [])):
            if sha in seen:
                continue
            seen.add(sha)
            data = self.research.repo.read_blob(sha) or b""
            logs.append({"name": name, "truncated": len(data) > log_bytes,
                         "text": redact(data[-log_bytes:].decode(errors="replace"), self.secrets)})
        return logs

    def _note(self, n) -> dict | None:
        """A result note as the idea page shows it."""
        if n is None:
            return None
        red = (lambda t: redact(t, self.secrets))
        return {"status": n.status.value, "value": n.value, "std": n.std, "values": n.values, "seeds": n.seeds,
                "delta": n.delta, "parent_delta": n.parent_delta, "decision": n.decision,
                "baseline": n.baseline, "baseline_std": n.baseline_std, "error": red(n.error),
                "stopped": n.stopped or None,
                "host": n.host, "wall_s": n.wall_s, "gpu_s": n.gpu_s, "cpu_s": getattr(n, "cpu_s", None),
                "accelerator": n.accelerator, "tamper": n.tamper, "flags": n.flags,
                "duplicate_of": n.duplicate_of, "sandbox": getattr(n, "sandbox", None),
                "trials": [{"trial": t.trial_id, "seed": t.seed, "status": t.status.value, "value": t.value,
                            "host": t.host, "wall_s": t.wall_s, "accelerator": t.accelerator,
                            "error": red(t.error), "tamper": t.tamper} for t in n.trials]}

    def _baseline(self, log_bytes: int) -> dict:
        """The baseline's page (`#/idea/baseline`): its commit and message, per-seed values, each
        seed's log, the ideas that grew from it and the command that checks it out."""
        pop, repo, red = self.pop, self.research.repo, (lambda t: redact(t, self.secrets))
        commit, n = pop.baseline_commit, pop.baseline_note
        title, _, text = (repo.commit_message(commit) or "").partition("\n")
        ref = branch_name(self.research.baseline_ref) or self.research.baseline_ref
        q = shlex.quote(ref)
        return {"id": "baseline", "title": red("baseline: " + title.strip()), "text": red(text.strip()),
                "status": n.status.value if n else Status.QUEUED.value, "origin": Origin.BASELINE, "epoch": None, "parents": [],
                "children": self._lineage()[0].get("baseline", [])[:100], "branch": ref, "commit": commit,
                "base": None, "model": None, "attempts_n": None, "tokens": 0, "usd": 0.0, "trailers": {},
                "diff": "", "diff_truncated": False, "note": self._note(n), "attempts": [], "check": None,
                "logs": self._logs(n, True, log_bytes), "leases": _leases(pop.baseline_leases),
                "curve": curve_payload(repo, None, n),
                "git": f"git fetch origin {q} && git checkout --detach {commit}", "failure": None,
                "colour": "baseline", "baseline": True, "seeds_planned": (n.seeds_planned if n else None)
                or self.cfg.policy.baseline_seeds,
                "metric": self.research.manifest.metric, "goal": self.goal, "version": self.version}


def _leases(leases) -> list[dict]:
    return [{"trial": lz.trial_id, "host": lz.host, "slot": lz.slot, "state": lz.state,
             "elapsed_s": time.time() - lz.started} for lz in leases]
