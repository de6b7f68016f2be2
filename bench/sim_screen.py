"""Screening at low fidelity as an arm of the fair simulator's search (issue 29, section 3;
bench/sim_early.py --screen measures it): a new idea first runs short, and only what the product's rule
lets continue runs at full length.

**The short run (calibrated on tinygpt: bench/calibrate_screens.py, bench/data/screen_fit.json).** A
screen costs `COST_FRACTION` of the idea's own full-length GPU-hours (the median ratio of the real
short runs' wall seconds to the same idea's full run at the same seed: 0.27, where the step share is
0.25). Its value is the screened baseline's level (the real short baseline over the full one, times
the world's BASELINE) minus the idea's short-run effect, plus seed noise at the measured multiple of
the world's seed noise (`short_noise`). A technique's short-run effect replays the real idea whose
learning-curve profile it already replays (sim_world.TimedWorld.shape): its own final effect times that
idea's measured short / full ratio (the late schedule ideas are strong when short, their schedule
compressed, while removing dropout or rotary embeddings are weak, and a reversing one looks bad); a
no-op technique takes one real null idea's short effect, as a share of the profiled ideas' mean |final
effect|, times this world's mean |effect| (the scale between the two worlds is that assumption, not a
measurement). Pair interactions show at the step share, as the curves grow them in proportion to t.

**The decisions are the product's code.** `engine.screener.Screener` is built with the [screening]
settings model (margin, keep, the product's min_peers) and a manifest declaring the fidelity knob; its
`jobs` (a new idea's first seed becomes its screen; the baseline's screened seeds right after the
baseline's own) runs inside `engine.loop.Daemon.jobs` as in the daemon, its `finish` builds each screen's
note and its `_decide` calls `engine.screening.decide` over the screened peers and the baseline's
screened seeds and writes the `screened_out` note. What those write through the lifecycle (git notes
and refs in the product) lands here in memory (`screen_result`, `screened_out`), and `step` makes the
screens the product's `Screener.step` would commit (a screen is a key, a commit and the commit it
screens). A screened-out idea's note has no value: never a parent, never the reported best.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import statistics
from pathlib import Path
from types import SimpleNamespace

import search_world as W
import sim_world

from autoresearchd.config import ScreeningCfg
from autoresearchd.engine.screener import Screener
from autoresearchd.manifest import EnvManifest, Knob, KnobType, Screening
from autoresearchd.store.notes import Lease, Status, Trial
from autoresearchd.store.screens import Screen, screen_key
from autoresearchd.vocab import Purpose

FIT = json.loads((Path(__file__).resolve().parent / "data" / "screen_fit.json").read_text())
# a screen's GPU-hours over its idea's full-length run's; SIM_SCREEN_COST sets another (a sensitivity run:
# the fit's ratio of the means, 0.166, or the step share, 0.25: docs/policies.md)
COST_FRACTION = float(os.environ.get("SIM_SCREEN_COST") or FIT["cost_fraction"])
STEPS_FRACTION = FIT["steps_fraction"]     # the fidelity knob's share (the manifest's [env.screening])
# the short run's seed noise, in the world's seed noise; SIM_SCREEN_NOISE scales it (a sensitivity run: 0,
# noise-free screens, leaves only what the real ideas' short/full ratios get wrong)
SHORT_NOISE = FIT["short_noise"] * float(os.environ.get("SIM_SCREEN_NOISE") or 1.0)
RATIO = {r["idea"]: r["ratio"] for r in FIT["ideas"] if r["ratio"] is not None}
NULL_SHARES = [r["null_share"] for r in FIT["ideas"] if r["null_share"] is not None]
# the fidelity knob of the sim's env: 200 steps at full length, as tinygpt's curves ran
MANIFEST = EnvManifest(name="sim", run="true", metric="val_loss", goal="min", time_budget_s=600,
                       knobs=[Knob(name="steps", type=KnobType.INT, low=10, high=1000, baseline=200)],
                       screening=Screening(knob="steps", fraction=STEPS_FRACTION))


class ShortRuns:
    """One world's short runs: each technique's short-run effect, drawn once per world seed."""

    def __init__(self, tw: sim_world.TimedWorld):
        self.tw = tw
        profiles = sim_world.CURVE_FIT["profiles"]
        missing = sorted({profiles[p]["idea"] for _, p in tw.shape if p >= 0} - set(RATIO))
        if missing:
            raise SystemExit(f"no short runs for the profiles of {missing[:3]}...: screening is calibrated on "
                             "tinygpt's short runs only (bench/data/screens_tinygpt_*.json)")
        rng = random.Random(f"screen-{tw.seed}")
        scale = statistics.fmean(abs(e) for e in tw.w.effect if e) if any(tw.w.effect) else 0.0
        self.effect = [tw.w.effect[k] * RATIO[profiles[p]["idea"]] if p >= 0 else rng.choice(NULL_SHARES) * scale
                       for k, (_, p) in enumerate(tw.shape)]

    def short_effect(self, techs) -> float:
        ts = sorted(set(techs))
        inter = self.tw.w.true_effect(ts) - sum(self.tw.w.effect[k] for k in ts)
        return sum(self.effect[k] for k in ts) + STEPS_FRACTION * inter

    def value(self, techs, rng: random.Random) -> float:
        return (W.BASELINE * FIT["level"] - self.short_effect(techs)
                + rng.gauss(0, W.NOISE_SD * SHORT_NOISE))


def _sha(*parts) -> str:
    return hashlib.sha1(repr(("screen",) + parts).encode()).hexdigest()


class ScreenDriver:
    """A search's screening (bench/sim_arms.py Search calls it): the product's Screener, and the
    in-memory lifecycle it writes through."""

    def __init__(self, search, margin: float, keep: float):
        self.s = search
        self.cfg = ScreeningCfg(enabled=True, margin=margin, keep=keep)
        self.screener = Screener(self.cfg, SimpleNamespace(manifest=MANIFEST, repo=None), self, search.cfg)
        self.short = ShortRuns(search.w)
        self.rng = random.Random(f"screens-{search.w.seed}")     # its own stream: the trials' stays paired
        self.screens: dict[str, Screen] = {}
        self.by_commit: dict[str, str] = {}
        self.outs: list[dict] = []          # every screened-out idea: its true effect, the reported best's then
        self.screened: list[float] = []     # the true effect of every idea whose screen started
        self.charged: list[tuple[float, float]] = []   # (a screen's GPU-h, its idea's full-length GPU-h)
        self.decisions: list[dict] = []     # what `decide` was given and said (the test replays it)
        self._ctx: dict = {}

    # -- the lifecycle the Screener writes through (git in the product) ---------------------------------
    def screen_result(self, commit: str, note, kept: list[Lease] | None = None):
        key = self.by_commit[commit]
        s = self.screens[key]
        self.screens[key] = dataclasses.replace(s, note=note, leases=s.leases if kept is None else tuple(kept))
        if "decision" in note.screened and s.note is not None and "decision" not in s.note.screened:
            self.decisions.append({"key": key, "value": s.value, "decision": note.screened["decision"], **self._ctx})
        return note

    def screened_out(self, commit: str, idea, note):
        idea.note = note
        pick = self.s.reported()
        self.outs.append({"true": self.s.true(commit), "rule": note.screened.get("rule"),
                          "best_then": self.s.true(pick.commit) if pick is not None else 0.0})
        return note

    def _make(self, key: str, of: str) -> None:
        commit = _sha(key, of)
        self.screens[key] = Screen(key=key, commit=commit, of=of, note=None)
        self.by_commit[commit] = key

    # -- the loop's screening step (Screener.step: its commits made here, its decisions the product's) --
    def step(self, pop) -> None:
        key = self.screener.base_key(pop)
        if key and key not in self.screens:
            self._make(key, pop.baseline_commit)
        for idea in self.screener.eligible(pop):
            s = self.screens.get(idea.idea_id)
            if s is None or s.of != idea.commit:
                self._make(idea.idea_id, idea.commit)
        screens = dict(self.screens)
        base = screens.get(key)
        # what _decide reads: the baseline's screened seeds and every screened peer (kept for the test)
        self._ctx = {"base": list(base.note.screened.get("values") or []) if base and base.note else [],
                     "peers": [x.value for k, x in screens.items() if k != key and x.value is not None]}
        self.screener._decide(pop, screens, key)

    # -- a screen's trial ------------------------------------------------------------------------------
    def start(self, job) -> None:
        """A screen job of Daemon.jobs starts: f of its idea's full-length GPU-hours, on one slot."""
        s = self.s
        key = self.by_commit[job.commit]
        techs = s.techs[job.idea.commit] if job.idea is not None else frozenset()
        full = s.w.gpu_hours(techs, s.rng)
        hours = COST_FRACTION * full
        self.charged.append((hours, full))
        if job.idea is not None:
            self.screened.append(s.true(job.idea.commit))
        lz = Lease(trial_id=job.trial_id, seed=job.seed, runner="sim", host="sim", slot="gpu",
                   purpose=Purpose.SCREEN, started=s.clock.now, heartbeat=s.clock.now)
        self.screens[key] = dataclasses.replace(self.screens[key], leases=self.screens[key].leases + (lz,))
        if s.stopper is not None:      # running trials' unused hours are not yet "used" (Search.used_h)
            s.live[lz.trial_id] = dict(t0=s.clock.now, hours=hours, screen=True)
        s.clock.start(hours, (job, lz, hours))

    def finished(self, job, lz: Lease, hours: float) -> None:
        """A screen's trial ended: its result on the lease, then the product's Screener.finish."""
        s = self.s
        s.live.pop(lz.trial_id, None)
        techs = s.techs[job.idea.commit] if job.idea is not None else frozenset()
        crashed = any(self.rng.random() < s.w.w.crash[t] for t in sorted(techs))
        v = None if crashed else self.short.value(techs, self.rng)
        lz.state = "done"
        lz.result = Trial(trial_id=lz.trial_id, seed=lz.seed, value=v, wall_s=hours * 3600, gpu_s=hours * 3600,
                          gpus=1, status=Status.SUCCEEDED if v is not None else Status.FAILED,
                          exit_code=None if v is not None else 1,
                          error=None if v is not None else "Traceback: RuntimeError: CUDA error")
        key = self.by_commit[job.commit]
        sc = self.screens[key]
        self.screener.finish(sc.commit, job.idea, sc.note, list(sc.leases), s.pop())

    def metrics(self) -> dict:
        return {"screen_outs": self.outs, "screened": self.screened,
                "screen_h": sum(h for h, _ in self.charged), "screens_run": len(self.charged)}
