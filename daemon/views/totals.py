"""The overview's population figures and curves, kept current by the ideas that changed.

`summary.population_figures` and `curves.series` walk every idea; at 10k ideas that walk was most of
the time a new note took to reach the dashboard. `Totals` holds the same results as running state:
counts, sums and per-model figures are updated by subtracting what a changed idea contributed and
adding what its new version contributes; the best results are rescanned only when the current best
changed or left; the best-so-far curve (ideas in the order their results arrived) is recomputed only
from the first position a change touches, so a new note, which lands at the end, appends a point; the
per-epoch curve recomputes only the epochs that changed. A baseline move (its commit or its note) or
a change to a large share of the population builds everything from scratch.

Ideas are compared by identity: the live reader (livepop.LivePopulation) hands out the previous
population's objects for ideas that did not change, and a new object for one that did. `advance`
returns a new Totals and leaves the old one as it was (a served snapshot may still be reading it).
"""

from __future__ import annotations

import bisect
from collections import Counter
from types import SimpleNamespace

from autoresearchd import defaults
from autoresearchd.goal import better
from autoresearchd.policies.bandit import gain as arm_gain
from autoresearchd.policies.bandit import idea_cost, idea_model, new_arm
from autoresearchd.store.ranking import idea_key, ranked
from autoresearchd.store.spend import baseline_compute_s, compute_s, idea_compute_s, idea_spend, saved_s, screens_s
from autoresearchd.views.board import changes
from autoresearchd.views.curves import NOT_ATTEMPTED, finish_key, series
from autoresearchd.views.progress import running_trials
from autoresearchd.views.summary import population_figures


def rebuild(gone: list, came: list, pop) -> bool:
    """Whether so much changed (a rewrite of much of the repo) that one pass from scratch is cheaper."""
    return len(gone) + len(came) > max(defaults.SERVE_TOTALS_REBUILD_MIN, len(pop.ideas) // 4)


class Totals:
    """Running figures for one population; `figures()` equals summary.population_figures and
    `series()` equals curves.series on that population."""

    def __init__(self, pop, env):
        self.env, self.goal, self.gpus, self.pop = env, env.goal, env.gpus, pop
        f = population_figures(pop, env)
        self.counts = Counter(f["counts"])
        self.total, self.usd, self.tokens = f["total"], f["usd"], f["tokens"]
        self.epochs = Counter(i.epoch for i in pop.ideas)     # Population.epoch: every idea's, pushed ones too
        self.stale = {id(i): i for i in f["stale"]}
        self.compute = f["gpu_s"] if self.gpus else f["cpu_s"]
        self.screen_s = screens_s(pop, self.gpus)     # screens, old baselines: recounted on each advance
        self.saved = f["saved_s"]
        self.best, self.lucky = f["best"], f["lucky"]
        self.arms = {m: dict(s) for m, s in f["arms"].items()}
        self.leased = {id(i): i for i in pop.ideas if i.leases}
        s = series(pop, self.goal, self.gpus)
        self.by_time = {k: list(v) for k, v in s["by_time"].items()}
        self.done = sorted((finish_key(i), id(i), i) for i in pop.ideas if i.note is not None)
        self.groups: dict[int, dict[int, object]] = {}
        for i in pop.ideas:
            self.groups.setdefault(i.epoch, {})[id(i)] = i
        self.per_epoch = {e: self._epoch_figures(g.values()) for e, g in self.groups.items()}

    # -- the results -----------------------------------------------------------------------------------
    def figures(self) -> dict:
        leased = sorted(self.leased.values(), key=lambda i: (i.committed_at, i.idea_id))
        run = running_trials(SimpleNamespace(baseline_leases=self.pop.baseline_leases, ideas=leased))
        return {"counts": {k: v for k, v in self.counts.items() if v}, "total": self.total,
                "epoch": max((e for e, k in self.epochs.items() if k), default=None),
                "best": self.best, "lucky": self.lucky,
                "stale": ranked(self.stale.values(), self.goal),
                "usd": self.usd, "tokens": self.tokens,
                "gpu_s": self.compute if self.gpus else 0.0, "cpu_s": 0.0 if self.gpus else self.compute,
                "saved_s": self.saved,
                "running": run,
                "arms": {m: dict(s) for m, s in self.arms.items() if s["proposals"]}}

    def series(self) -> dict:
        by_epoch = {"epoch": sorted(self.per_epoch), "raw": [], "confirmed": [], "executed": [],
                    "attempted": [], "rate": []}
        raw = conf = None
        for e in by_epoch["epoch"]:
            r, c, executed, attempted = self.per_epoch[e]
            raw = self._pick(raw, r)
            conf = self._pick(conf, c)
            by_epoch["raw"].append(raw)
            by_epoch["confirmed"].append(conf)
            by_epoch["executed"].append(executed)
            by_epoch["attempted"].append(attempted)
            by_epoch["rate"].append(executed / attempted if attempted else None)
        return {"by_time": {k: list(v) for k, v in self.by_time.items()}, "by_epoch": by_epoch}

    # -- moving on -------------------------------------------------------------------------------------
    def advance(self, pop, diff: tuple[list, list] | None = None) -> Totals:
        """The totals of `pop`, a later population of the same repo, from this one's. `diff`: the
        (gone, come) ideas between the two, when the caller has them (board.changes)."""
        old = self.pop
        if pop is old:
            return self
        if pop.baseline_commit != old.baseline_commit or pop.baseline_note != old.baseline_note \
                or pop.baseline_leases != old.baseline_leases \
                or baseline_compute_s(pop, self.gpus) != baseline_compute_s(old, self.gpus):
            return Totals(pop, self.env)        # every delta, gain and the compute axis start from the baseline
        gone, came = diff or changes(old, pop)
        if rebuild(gone, came, pop):
            return Totals(pop, self.env)
        t = Totals.__new__(Totals)
        t.env, t.goal, t.gpus, t.pop = self.env, self.goal, self.gpus, pop
        t.counts, t.epochs = Counter(self.counts), Counter(self.epochs)
        t.total, t.usd, t.tokens, t.compute = self.total, self.usd, self.tokens, self.compute
        # the screened runs and old baselines are no ideas: their compute is summed again (one pass over
        # them, as board.changes makes one over the ideas), not tracked by the ideas that changed
        t.screen_s = screens_s(pop, self.gpus)
        t.compute += t.screen_s - self.screen_s
        t.saved = self.saved
        t.arms = {m: dict(s) for m, s in self.arms.items()}
        t.leased = dict(self.leased)
        t.stale = dict(self.stale)
        t.best, t.lucky = self.best, self.lucky
        t.done = list(self.done)
        t.by_time = {k: list(v) for k, v in self.by_time.items()}
        t.groups = {e: g for e, g in self.groups.items()}      # an epoch's dict is copied when it changes
        t.per_epoch = dict(self.per_epoch)
        for i in gone:
            t._count(i, -1)
        for i in came:
            t._count(i, +1)
        t._rebest(gone, came)
        # an idea's point on the compute axis holds its screened run too: an idea whose screen moved (made
        # again, its note written) moves on the curve though the idea itself did not change
        moved = [i for k in set(old.screens) | set(pop.screens) if old.screens.get(k) is not pop.screens.get(k)
                 and (i := pop.by_id.get(k)) is not None and old.by_id.get(k) is i]
        t._curve([*gone, *moved], [*came, *moved])
        t._epochs(gone, came)
        return t

    def _count(self, i, k: int) -> None:
        self.counts[i.status.value] += k
        self.total += k
        spent = idea_spend(i)
        self.usd += k * spent.usd
        self.tokens += k * spent.tokens
        self.compute += k * compute_s(i.note, self.gpus)
        self.saved += k * saved_s(i.note)
        self.epochs[i.epoch] += k
        if i.value is not None and self.pop.stale(i):
            if k > 0:
                self.stale[id(i)] = i
            else:
                self.stale.pop(id(i), None)
        if i.leases:
            if k > 0:
                self.leased[id(i)] = i
            else:
                self.leased.pop(id(i), None)
        m = idea_model(i)
        if m is not None:
            # the status view prices ideation only (no GPU price here): compute_usd stays 0
            s = self.arms.setdefault(m, new_arm())
            s["proposals"] += k
            s["usd"] += k * idea_cost(i)
            g = arm_gain(i, self.pop, self.env)
            if g is not None:
                s["measured"] += k
                s["gain"] += k * g

    def _rebest(self, gone, came) -> None:
        """The best confirmed and unconfirmed ideas: a rescan only when the current one left."""
        for attr, confirmed in (("best", True), ("lucky", False)):
            cur = getattr(self, attr)
            if cur is not None and any(i is cur for i in gone):
                setattr(self, attr, self.pop.best(self.goal, confirmed=confirmed))
                continue
            for i in came:
                if i.value is not None and i.confirmed == confirmed and not self.pop.stale(i) \
                        and (cur is None or self._ahead(i, cur)):
                    cur = i
            setattr(self, attr, cur)

    def _ahead(self, a, b) -> bool:
        """a comes before b in the one order of "best" (store/ranking.py)."""
        return idea_key(a, self.goal) < idea_key(b, self.goal)

    def _pick(self, cur, v):
        return v if v is not None and (cur is None or better(v, cur, self.goal)) else cur

    def _curve(self, gone, came) -> None:
        """Best-so-far against results in arrival order: recomputed from the first position touched."""
        first = len(self.done)
        for i in gone:
            if i.note is None:
                continue
            k = bisect.bisect_left(self.done, (finish_key(i), id(i)))
            while self.done[k][2] is not i:
                k += 1
            del self.done[k]
            first = min(first, k)
        for i in came:
            if i.note is None:
                continue
            k = bisect.bisect_left(self.done, (finish_key(i), id(i)))
            self.done.insert(k, (finish_key(i), id(i), i))
            first = min(first, k)
        bt = self.by_time
        for vals in bt.values():
            del vals[first:]
        if first:
            gpu_h, usd, raw, conf = bt["gpu_hours"][-1], bt["usd"][-1], bt["raw"][-1], bt["confirmed"][-1]
        else:
            gpu_h, usd, raw, conf = baseline_compute_s(self.pop, self.gpus) / 3600, 0.0, None, None
        for k in range(first, len(self.done)):
            i = self.done[k][2]
            gpu_h += idea_compute_s(i, self.pop, self.gpus) / 3600
            usd += idea_spend(i).usd
            if i.value is not None and not self.pop.stale(i):
                raw = self._pick(raw, i.value)
                if i.confirmed:
                    conf = self._pick(conf, i.value)
            for key, v in (("gpu_hours", gpu_h), ("usd", usd), ("raw", raw), ("confirmed", conf), ("n", k + 1)):
                bt[key].append(v)

    def _epochs(self, gone, came) -> None:
        touched = set()
        for i, add in [(i, False) for i in gone] + [(i, True) for i in came]:
            e = i.epoch
            if e not in touched:
                self.groups[e] = dict(self.groups.get(e, {}))
                touched.add(e)
            if add:
                self.groups[e][id(i)] = i
            else:
                self.groups[e].pop(id(i), None)
        for e in touched:
            if self.groups[e]:
                self.per_epoch[e] = self._epoch_figures(self.groups[e].values())
            else:
                del self.groups[e]
                self.per_epoch.pop(e, None)

    def _epoch_figures(self, ideas) -> tuple:
        """(best value, best confirmed value, executed, attempted) within one epoch."""
        raw = conf = None
        executed = attempted = 0
        for i in ideas:
            if i.value is not None and not self.pop.stale(i):     # like with like: current-baseline results
                raw = self._pick(raw, i.value)
                if i.confirmed:
                    conf = self._pick(conf, i.value)
            if i.note is not None and i.note.status not in NOT_ATTEMPTED:
                attempted += 1
                executed += i.value is not None
        return raw, conf, executed, attempted
