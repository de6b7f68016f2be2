"""The simulated research world of bench/search_sim.py: latent techniques, their true effects, trials.

FIXED WORLD PARAMETERS. They were chosen and committed before any search mechanism was tuned, and
must not be changed to flatter a mechanism (docs/policies.md says so next to the table). A world is a
pure function of its seed: the same seed gives the same techniques, effects, interactions and noise.

- N_TECHNIQUES latent techniques, each named by two distinctive words ("warmup cosine").
  True effect on the metric (lower is better, a loss around BASELINE): HELP_FRAC help (an
  improvement drawn from an exponential with mean HELP_MEAN), HURT_FRAC hurt (exponential, mean
  HURT_MEAN), the rest do nothing.
- N_PAIRS random pairs interact: their joint effect adds an extra term (normal, sd PAIR_SD).
- A trial's value = BASELINE - true effect + gaussian seed noise (sd NOISE_SD).
- An idea is a set of up to MAX_TECHS techniques. It fails to implement with probability
  IMPLEMENT_FAIL, more for larger ideas (+IMPLEMENT_FAIL_PER_TECH per extra technique); each
  technique has its own crash probability (most near 0, CRASHY_FRAC of them crash often).
- The ideator's prior: what a model "believes" about a technique before seeing results, correlated
  with the true effect only weakly (PRIOR_SIGNAL of the effect plus PRIOR_NOISE noise).
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

N_TECHNIQUES = 300
HELP_FRAC = 0.12
HURT_FRAC = 0.18
HELP_MEAN = 0.012
HURT_MEAN = 0.02
N_PAIRS = 60
PAIR_SD = 0.008
BASELINE = 3.28
NOISE_SD = 0.01
MAX_TECHS = 3
IMPLEMENT_FAIL = 0.08
IMPLEMENT_FAIL_PER_TECH = 0.04
CRASHY_FRAC = 0.08
CRASHY_P = 0.6
BASE_CRASH_P = 0.02
PRIOR_SIGNAL = 0.5
PRIOR_NOISE = 0.012

# The simulated ideator (bench/search_ideator.py), fixed with the world:
DUP_START = 0.10        # share of re-proposed near-duplicates in its first answer
DUP_PER_CALL = 0.015    # ... growing by this much per answer (saturation, as in the paper)
DUP_MAX = 0.50          # ... up to this share
PRIOR_TEMP = 0.01       # softmax temperature over the prior when it picks an unseen technique
EXPLOIT_TOP = 5         # an exploit answer builds on the best few ideas shown, by their shown score

_ADJ = ("adaptive cyclic sparse gated rotary fused grouped tied scaled shifted mixed layered dynamic "
        "staged decoupled stochastic banded hybrid nested annealed clipped centered smoothed warped "
        "orthogonal residual lagged pooled quantized").split()
_NOUN = ("warmup decay dropout attention embedding norm optimizer momentum schedule bias gating "
         "tokenizer initialization curriculum batching loss regularizer activation kernel cache "
         "projection ensemble averaging mixing routing pruning distillation sampler precision "
         "accumulation").split()


@dataclass
class World:
    seed: int
    names: list[str]
    effect: list[float]                      # true improvement (positive = lower loss)
    crash: list[float]
    prior: list[float]
    pairs: dict[tuple[int, int], float] = field(default_factory=dict)

    @classmethod
    def make(cls, seed: int) -> World:
        rng = random.Random(f"world-{seed}")
        combos = [f"{a} {n}" for a in _ADJ for n in _NOUN]
        names = rng.sample(combos, N_TECHNIQUES)
        effect, crash, prior = [], [], []
        for _ in range(N_TECHNIQUES):
            u = rng.random()
            if u < HELP_FRAC:
                e = rng.expovariate(1 / HELP_MEAN)
            elif u < HELP_FRAC + HURT_FRAC:
                e = -rng.expovariate(1 / HURT_MEAN)
            else:
                e = 0.0
            effect.append(e)
            crash.append(CRASHY_P if rng.random() < CRASHY_FRAC else BASE_CRASH_P)
            prior.append(PRIOR_SIGNAL * e + rng.gauss(0, PRIOR_NOISE))
        pairs = {}
        while len(pairs) < N_PAIRS:
            a, b = sorted(rng.sample(range(N_TECHNIQUES), 2))
            pairs[(a, b)] = rng.gauss(0, PAIR_SD)
        return cls(seed, names, effect, crash, prior, pairs)

    def true_effect(self, techs) -> float:
        ts = sorted(set(techs))
        e = sum(self.effect[t] for t in ts)
        e += sum(self.pairs.get(p, 0.0) for p in itertools.combinations(ts, 2))
        return e

    def implement_fails(self, techs, rng: random.Random) -> bool:
        return rng.random() < IMPLEMENT_FAIL + IMPLEMENT_FAIL_PER_TECH * (len(set(techs)) - 1)

    def run(self, techs, rng: random.Random) -> float | None:
        """One trial with a fresh seed: the measured value, or None when it crashed."""
        for t in set(techs):
            if rng.random() < self.crash[t]:
                return None
        return BASELINE - self.true_effect(techs) + rng.gauss(0, NOISE_SD)

    def optimum(self) -> float:
        """The reachable optimum: the best true effect of an idea of at most MAX_TECHS techniques.
        Searched exactly over the techniques that help alone or in a helping pair (the others cannot
        be in the best set unless a pair term outweighs their own effect, which is covered by
        taking every technique of a helping pair)."""
        cand = {t for t in range(N_TECHNIQUES) if self.effect[t] > 0}
        cand |= {t for p, v in self.pairs.items() if v > 0 for t in p}
        cand = sorted(cand, key=lambda t: -self.effect[t])[:40]
        best = 0.0
        for k in range(1, MAX_TECHS + 1):
            for combo in itertools.combinations(cand, k):
                best = max(best, self.true_effect(combo))
        return best
