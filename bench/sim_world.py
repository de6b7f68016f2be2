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
  done, effect(t) = a (1 - exp(-t/tau)) + b t, with a (1 - exp(-1/tau)) + b the fixed world's final
  effect (pair interactions grow in proportion to t), of one of three shapes: `early` (all of it shows early), `late` (grows linearly) and
  `reverse` (early the opposite sign of the final effect). A curve point is the baseline's loss curve
  minus the idea's effect(t) plus that run's seed offset and a small per-point noise. The format is
  bench/collect_curves.py's ({"t": [...], "value": [...]}), so the recorded real curves can replace
  this family. **UNCALIBRATED**: the shares, tau range and baseline curve below are guesses until
  bench/collect_curves.py's 30 ideas x 3 seeds exist (docs/policies.md). The final value of every
  trial (t = 1) is exactly search_world.py's, so the curves change no search figure.
"""

from __future__ import annotations

import contextlib
import math
import random
from dataclasses import asdict, dataclass

import search_world as W

TRIAL_GPU_H = 600 / 3600     # the sim manifest's 600 s on one GPU
# The seed noise calibrated on the only baseline reruns recorded: tinygpt's val_loss over seeds 0-2,
# 3.1435 +- 0.0037 (docs/env-tinygpt.md), scaled to this world's loss (3.28 / 3.1435). Three seeds pin
# a std down only loosely (95% interval about [0.5x, 6x]); the sweep's noise rows bracket it.
CALIBRATED_NOISE_SD = round(0.0037 * W.BASELINE / 3.1435, 4)
SLOW_FRAC = 0.15
SLOW_MAX = 2.0
RUN_JITTER = 0.05
# curve shapes (UNCALIBRATED): shares of early / late / reversing techniques, and tau's range
SHAPES = (("early", 0.45), ("late", 0.40), ("reverse", 0.15))
TAU = (0.05, 0.3)
BASE_CURVE = (0.5, 0.5)      # baseline loss(t) = BASELINE + c (t^-alpha - 1): (c, alpha), UNCALIBRATED
POINT_NOISE = 0.3            # per-point noise, as a share of the seed noise (the rest is the seed offset)


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
        self.shape = []
        for e in self.w.effect:
            kind = rng.choices([s for s, _ in SHAPES], [p for _, p in SHAPES])[0]
            tau = rng.uniform(*TAU)
            norm = 1 - math.exp(-1 / tau)
            if e == 0.0:
                a = b = 0.0                      # a no-op stays a no-op all along
            elif kind == "early":
                a, b = e / norm, 0.0
            elif kind == "late":
                a, b = 0.0, e
            else:                                # early the opposite sign, by up to its own size
                a = -math.copysign(rng.uniform(0.5, 1.5) * abs(e), e) / norm
                b = e - a * norm
            self.shape.append((kind, tau, a, b))

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
            _, tau, a, b = self.shape[k]
            e += a * (1 - math.exp(-t / tau)) + b * t
        # interactions show in proportion to the training done
        e += t * (self.w.true_effect(ts) - sum(self.w.effect[k] for k in ts))
        return e

    def curve(self, techs, rng: random.Random, points: int = 10) -> dict:
        """One run's curve in bench/collect_curves.py's format; its last point is a full run's value."""
        sd = W.NOISE_SD
        offset = rng.gauss(0, sd * (1 - POINT_NOISE ** 2) ** 0.5)
        c, alpha = BASE_CURVE
        ts = [(j + 1) / points for j in range(points)]
        vals = [W.BASELINE + c * (t ** -alpha - 1) - self.effect_at(techs, t) + offset
                + rng.gauss(0, sd * POINT_NOISE) for t in ts]
        return {"t": ts, "value": vals}
