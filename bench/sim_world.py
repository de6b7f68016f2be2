"""The timed research world of bench/sim_fair.py: bench/search_world.py's fixed world, plus what a
GPU cluster adds (a GPU-hour cost per trial) and learning curves, and the knobs the sweeps turn.

- **Knobs** (`Knobs`): seed noise, interaction strength (how many technique pairs interact), prior
  strength (how much the ideator's prior knows) and the ideator's duplicate rate. The defaults are
  search_world.py's fixed values; `applied(knobs)` sets them for one run and restores them, so the
  fixed world module stays byte-identical and its old table still reproduces.
- **Cost**: a trial of the baseline takes `TRIAL_GPU_H` GPU-hours; most techniques leave that alone,
  SLOW_FRAC of them make training slower (a multiplier drawn from [1.1, SLOW_MAX]), and every run
  jitters by +-RUN_JITTER. An idea's cost is the product of its techniques' multipliers.
- **Learning curves**: every technique's effect is a function of the share t in (0, 1] of training
  done, effect(t) = e g(t), with e the fixed world's final effect and g one real idea's effect
  profile (its effect at t as a share of its final one), drawn per technique from the profiles
  bench/calibrate_curves.py measured on tinygpt (bench/data/curve_fit.json: early, late, reversing
  and overshooting ones, as measured); pair interactions grow in proportion to t. A curve point is
  the real baseline's mean curve above its end (in this world's units) plus BASELINE, minus the
  idea's effect(t), plus that run's seed offset and a per-point noise at the measured multiple of
  the seed noise. The format is bench/collect_curves.py's ({"t": [...], "value": [...]}). The final
  value of every trial (t = 1) is exactly search_world.py's, so the curves change no search figure;
  they change only what a stopping rule sees. docs/policies.md, "Calibration", says how many real
  ideas stand behind the profiles.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import search_world as W

TRIAL_GPU_H = 600 / 3600     # the sim manifest's 600 s on one GPU
# The seed noise calibrated on the only baseline reruns recorded: tinygpt's val_loss over seeds 0-2,
# 3.1435 +- 0.0037 (docs/env-tinygpt.md), scaled to this world's loss (3.28 / 3.1435). Three seeds pin
# a std down only loosely (95% interval about [0.5x, 6x]); the sweep's noise rows bracket it.
CALIBRATED_NOISE_SD = round(0.0037 * W.BASELINE / 3.1435, 4)
SLOW_FRAC = 0.15
SLOW_MAX = 2.0
RUN_JITTER = 0.05
# the curves measured on tinygpt and fitted by bench/calibrate_curves.py
# SIM_CURVE_FIT names another fit (a sensitivity run: bench/data/curve_fit_makemore.json, docs/policies.md)
CURVE_FIT = json.loads(Path(os.environ.get("SIM_CURVE_FIT")
                            or Path(__file__).resolve().parent / "data" / "curve_fit.json").read_text())
# each real idea's effect profile g(t) = effect(t) / effect(1): (its shape's name, t grid, g)
PROFILES = [(p["shape"], p["t"], p["g"]) for p in CURVE_FIT["profiles"]]
# the real baseline's mean curve above its end, in this world's loss units: (t grid, loss - loss(1))
BASE_PROFILE = (CURVE_FIT["base_profile"]["t"], CURVE_FIT["base_profile"]["dl"])
# each curve point's own noise (training losses are noisier than the metric of record), as a multiple
# of the seed noise; the seed offset comes on top, shared by the run's points
POINT_NOISE = CURVE_FIT["point_noise"]


def interp(ts: list[float], ys: list[float], t: float, zero_at_0: bool) -> float:
    """ys at t, linear between the grid's points; before the first point, from 0 at t = 0 when
    zero_at_0 (an effect starts at none), else the first value."""
    if t <= ts[0]:
        return ys[0] * t / ts[0] if zero_at_0 else ys[0]
    for (t0, y0), (t1, y1) in zip(zip(ts, ys), zip(ts[1:], ys[1:])):
        if t <= t1:
            return y0 + (y1 - y0) * (t - t0) / (t1 - t0)
    return ys[-1]


@dataclass(frozen=True)
class Knobs:
    noise_sd: float = W.NOISE_SD
    n_pairs: int = W.N_PAIRS             # interaction strength: pairs of techniques that interact
    prior_signal: float = W.PRIOR_SIGNAL  # prior strength: the share of the true effect the prior knows
    dup_scale: float = 1.0               # the ideator's near-duplicate rates, scaled

    def label(self) -> str:
        d = Knobs()
        diff = {k: v for k, v in asdict(self).items() if getattr(d, k) != v}
        return ", ".join(f"{k}={v}" for k, v in diff.items()) or "default world"


@contextlib.contextmanager
def applied(k: Knobs):
    """Set the knobs on the fixed world module for one run (one process runs one search at a time)."""
    names = ("NOISE_SD", "N_PAIRS", "PRIOR_SIGNAL", "DUP_START", "DUP_PER_CALL", "DUP_MAX")
    old = {n: getattr(W, n) for n in names}
    try:
        W.NOISE_SD, W.N_PAIRS, W.PRIOR_SIGNAL = k.noise_sd, k.n_pairs, k.prior_signal
        W.DUP_START, W.DUP_PER_CALL = old["DUP_START"] * k.dup_scale, old["DUP_PER_CALL"] * k.dup_scale
        W.DUP_MAX = min(0.95, old["DUP_MAX"] * k.dup_scale)
        yield
    finally:
        for n, v in old.items():
            setattr(W, n, v)


class TimedWorld:
    """A fixed world (search_world.World) with trial costs and learning curves. `knobs` must be the
    ones applied while it was made and while it runs."""

    def __init__(self, seed: int, knobs: Knobs = Knobs()):
        self.w = W.World.make(seed)
        self.seed, self.knobs = seed, knobs
        rng = random.Random(f"timed-{seed}")
        self.cost = [rng.uniform(1.1, SLOW_MAX) if rng.random() < SLOW_FRAC else 1.0 for _ in self.w.names]
        # (its shape's name, its profile's index); a no-op has none: it stays a no-op all along
        self.shape = [("none", -1) if e == 0.0 else (PROFILES[k][0], k)
                      for e, k in ((e, rng.randrange(len(PROFILES))) for e in self.w.effect)]

    # -- what the search sees ---------------------------------------------------------------------
    def true_effect(self, techs) -> float:
        return self.w.true_effect(techs)

    def run(self, techs, rng: random.Random) -> float | None:
        return self.w.run(techs, rng)

    def gpu_hours(self, techs, rng: random.Random) -> float:
        m = math.prod(self.cost[t] for t in set(techs))
        return TRIAL_GPU_H * m * (1 + rng.uniform(-RUN_JITTER, RUN_JITTER))

    # -- learning curves (for the early-stopping rules of issue 29, section 3) --------------------
    def effect_at(self, techs, t: float) -> float:
        ts = sorted(set(techs))
        e = 0.0
        for k in ts:
            p = self.shape[k][1]
            if p >= 0:
                _, grid, g = PROFILES[p]
                e += self.w.effect[k] * interp(grid, g, t, zero_at_0=True) / g[-1]
        # interactions show in proportion to the training done
        e += t * (self.w.true_effect(ts) - sum(self.w.effect[k] for k in ts))
        return e

    def curve(self, techs, rng: random.Random, points: int = 10) -> dict:
        """One run's curve in bench/collect_curves.py's format. Its last point is a full run's value,
        with the world's seed noise exactly (search_world's run: the metric of record); the points
        before it are training losses, the measured point noise on top of the same seed offset."""
        sd = W.NOISE_SD
        offset = rng.gauss(0, sd)
        ts = [(j + 1) / points for j in range(points)]
        vals = [W.BASELINE + interp(*BASE_PROFILE, t, zero_at_0=False) - self.effect_at(techs, t) + offset
                + (rng.gauss(0, sd * POINT_NOISE) if j < points - 1 else 0.0) for j, t in enumerate(ts)]
        return {"t": ts, "value": vals}
