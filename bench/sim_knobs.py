"""Knobs with response surfaces in the timed world, and the product's tuner driven in the simulator
(issue 30; bench/sim_hybrid.py measures it).

**The surface (calibrated on tinygpt's sweeps: the amplitudes and lr's width power, below).** Four knobs of a small language model, declared as the manifest's
`[[env.knobs]]` (KNOBS): lr (log), warmup (steps), weight_decay (log) and width (a fixed time budget,
so a wider model trains fewer steps and width has an optimum). A run's loss above the optimum of its
code is a sum of quadratic bowls in log space, with interactions:
  A_LR (ln(lr / lr*) / ln 3)^2 + A_WU (ln((wu + 50) / (wu* + 50)) / ln 3)^2
  + A_WD (log10(wd / wd*))^2 + A_W (log2(width / width*))^2
where lr* = lr0 x (width / 256)^LR_WIDTH_POWER x the product of the idea's techniques' lr shifts (lr interacts
with width, and an idea's code moves the optimum: a quarter of the techniques shift it by a factor
e^N(0, 0.35)), and wu* = wu0 x (lr / lr*)^0.5 (a learning rate above its optimum wants more warmup).
lr0, wu0, wd* and width* are drawn per world seed, around the baseline's values (lr off by up to 3x).
The knobs' gain of a commit is the baseline knobs' penalty minus its own, for its code, so every idea
at the baseline's knobs keeps the fixed world's effect, and the seed noise of a run is the world's.
The amplitudes (A_*) and lr's width power are fitted on tinygpt's real sweeps (bench/calibrate_knobs.py);
the optima's ranges and how ideas move lr's optimum (LR_SHIFT_*) are not calibrated.

**The tuner** is the product's: which study to tune is `tune.tuner.Tuner.targets`, the study is
`tune.tuner.rebuild` from the population (Optuna's TPE, constant liar), its suggestion `ask()` then
`rounded`, each tuned commit's trailers `tune.tuner._trailers`, and the share of new trials that
tuning gets is `tune.split.split`, used as `Daemon._maybe_tune` uses it (mirrored: it writes git).
"""

from __future__ import annotations

import hashlib
import math
import random
from enum import Enum
from types import SimpleNamespace

from autoresearchd.config import TuneCfg
from autoresearchd.manifest import EnvManifest, Knob, KnobType
from autoresearchd.store.ideas import Idea
from autoresearchd.tune.split import split
from autoresearchd.tune.tuner import Tuner, _trailers, distributions, rebuild, rounded, study_members

KNOBS = [Knob(name="lr", low=3e-4, high=3e-2, log=True, baseline=3e-3),
         Knob(name="warmup", type=KnobType.INT, low=0, high=500, step=50, baseline=100),
         Knob(name="weight_decay", low=1e-3, high=0.3, log=True, baseline=0.1),
         Knob(name="width", type=KnobType.INT, low=128, high=512, step=32, baseline=256)]
BASE_KNOBS = {k.name: k.baseline for k in KNOBS}
# Calibrated on tinygpt (bench/calibrate_knobs.py --fit bench/data/knob_sweeps_tinygpt.json: 21 knob
# settings x 3 seeds, 200 steps), each bowl's amplitude times 1.043 (the world's loss over tinygpt's,
# as bench/calibrate_curves.py scales): lr 0.047 (its optimum 3.2e-3, 3.2x the template's), warmup 0
# (flat within the noise from 0 to 60 steps: no bowl), weight decay 0.0007 (flat from 0.01 to 0.3),
# width 0.0103 (better up to the widest, 192: tinygpt trains fixed steps, not a fixed time).
# Before: 0.03, 0.006, 0.008, 0.015, guessed.
A_LR, A_WU, A_WD, A_W = 0.049, 0.0, 0.0007, 0.0108
LR_WIDTH_POWER = -0.28          # lr* ~ width^p, fitted over the lr x n_embd grid (was assumed -0.5)
LR_SHIFT_FRAC, LR_SHIFT_SD = 0.25, 0.35              # UNCALIBRATED: how ideas move the lr optimum


class TuneMode(str, Enum):
    LLM = "llm"            # LLM ideas only (knobs stay at the baseline's, or a parent's)
    TUNER = "tuner"        # the tuner only, on the baseline's knobs; no LLM
    HYBRID = "hybrid"      # both, the budget split by tune/split.py


# Each mode's one tuned parameter and its grid (bench/sim_hybrid.py --tune chooses on the tuning seeds);
# LLM only takes ours' exploit_start, tuned in bench/sim_fair_tuned.json
GRID = {TuneMode.TUNER: ("startup_trials", (5, 10, 20)), TuneMode.HYBRID: ("floor", (0.1, 0.2, 0.4))}


class Surface:
    """One world's response surface (a pure function of the world's seed)."""

    def __init__(self, seed: int, n_techs: int, scale: float = 1.0):
        self.scale = scale              # the amplitudes A_*, scaled (bench/sim_hybrid.py --knob-scale)
        rng = random.Random(f"knobs-{seed}")
        self.lr0 = 3e-3 * math.exp(rng.uniform(-1, 1) * math.log(3))
        self.wu0 = rng.uniform(100, 300)
        self.wd = math.exp(rng.uniform(math.log(0.01), math.log(0.1)))
        self.width = rng.uniform(224, 416)
        self.shift = [math.exp(rng.gauss(0, LR_SHIFT_SD)) if rng.random() < LR_SHIFT_FRAC else 1.0
                      for _ in range(n_techs)]

    def penalty(self, knobs: dict, techs) -> float:
        """Loss above the optimum of this code (techs) at these knob values."""
        lr_opt = self.lr0 * (knobs["width"] / 256) ** LR_WIDTH_POWER * math.prod(self.shift[t] for t in techs)
        r = math.log(knobs["lr"] / lr_opt)
        wu_opt = self.wu0 * math.exp(0.5 * r)
        return self.scale * (A_LR * (r / math.log(3)) ** 2
                + A_WU * (math.log((knobs["warmup"] + 50) / (wu_opt + 50)) / math.log(3)) ** 2
                + A_WD * math.log10(knobs["weight_decay"] / self.wd) ** 2
                + A_W * math.log2(knobs["width"] / self.width) ** 2)

    def gain(self, knobs: dict, techs) -> float:
        return self.penalty(BASE_KNOBS, techs) - self.penalty(knobs, techs)


class TuneDriver:
    """The tuning side of one sim_arms.Search: which commits carry which knob values, and the tuned
    commits written as Daemon._maybe_tune would."""

    def __init__(self, search, mode: TuneMode, param=None, scale: float = 1.0):
        self.s, self.mode = search, TuneMode(mode)
        self.surface = Surface(search.w.seed, len(search.w.w.names), scale)
        self.knobs: dict[str, dict] = {}                      # commit -> its knob values (not baseline)
        over = {}
        if self.mode is TuneMode.TUNER:
            # the tuner alone: one study (the baseline's) as long as the budget, all slots
            over = dict(trials_per_study=10_000, parallel=search.clock.slots,
                        startup_trials=int(param if param is not None else GRID[self.mode][1][0]))
        elif self.mode is TuneMode.HYBRID:
            over = dict(floor=float(param if param is not None else GRID[self.mode][1][1]))
        self.cfg = TuneCfg(enabled=True, seed=search.w.seed, **over)
        self.manifest = EnvManifest(**{**search_env().model_dump(), "knobs": [k.model_dump() for k in KNOBS]})
        # knobs_of: the simulated ideas declare no knobs of their own (no .autoresearch-knobs.toml)
        self._tuner = SimpleNamespace(research=SimpleNamespace(manifest=self.manifest), t=self.cfg,
                                      knobs_of=lambda commit: self.manifest)
        self.llm_on = self.mode is not TuneMode.TUNER
        self.tuned = 0
        self.shares: list[float] = []

    def gain(self, commit: str | None) -> float:
        k = self.knobs.get(commit) if commit else None
        return 0.0 if k is None else self.surface.gain(k, self.s.techs[commit])

    def inherit(self, commit: str, base: str | None) -> None:
        """An LLM idea built on a tuned commit keeps its knob values (its code is the tuned tree)."""
        if base in self.knobs:
            self.knobs[commit] = self.knobs[base]

    def refill(self) -> None:
        """Daemon._maybe_tune: tuned commits up to tuning's share of the trials in flight."""
        if self.mode is TuneMode.LLM:
            return
        pop = self.s.pop()
        if pop.baseline_value is None:
            return                  # the product's targets need the measured baseline too
        sp = split(pop, "min", self.cfg.floor, self.llm_on)
        self.shares.append(sp.tune)
        room = self.s.clock.slots + self.s.cfg.queue_buffer
        want = max(1, round(sp.tune * room)) - sum(1 for i in pop.ideas if i.origin == "tune" and i.note is None)
        if want <= 0:
            return
        made = 0
        for study, commit, root in Tuner.targets(self._tuner, pop):
            members = study_members(pop, study)
            open_ = sum(1 for i in members if i.note is None)
            while made < want and len(members) < self.cfg.trials_per_study and open_ < self.cfg.parallel:
                st = rebuild(pop, self.manifest, study, self.cfg.sampler, self.cfg.seed, self.cfg.startup_trials)
                params = rounded(self.manifest, st.ask(distributions(self.manifest)).params)
                number = max((i.trailers.tune_trial or 0 for i in members), default=0) + 1
                idea = self._write(study, commit, root, params, number)
                members.append(idea)
                open_ += 1
                made += 1
                pop = self.s.pop()

    def _write(self, study: str, base: str, root: Idea | None, params: dict, number: int) -> Idea:
        sha = hashlib.sha1(repr((self.s.w.seed, study, number, sorted(params.items()))).encode()).hexdigest()
        desc = ", ".join(f"{k} = {v:.4g}" if isinstance(v, float) else f"{k} = {v}" for k, v in sorted(params.items()))
        text = (root.text if root is not None else "The baseline.") + f"\n\nTuned knobs: {desc}."
        # the trailers Tuner.write gives a tuned commit (origin tune, the study's root as its parent)
        tr = _trailers(study, self.cfg.sampler, number, params)
        tr = tr.model_copy(update={"parents": (root.idea_id,) if root is not None else (),
                                   "epoch": root.epoch if root is not None else 0, "base": base})
        idea = Idea(idea_id=f"{study}-t{number}", commit=sha, title=f"tune {study} #{number}", text=text,
                    base_commit=base, branch=f"autoresearch/tune/{study}/{number}", committed_at=len(self.s.ideas),
                    trailers=tr)
        self.s.techs[sha] = self.s.techs.get(base, frozenset())
        self.knobs[sha] = params
        self.s.ideas.append(idea)
        self.tuned += 1
        return idea

    def metrics(self) -> dict:
        return {"tuned": self.tuned, "tune_share": sum(self.shares) / len(self.shares) if self.shares else 0.0,
                "knob_gain_best": max((self.gain(c) for c in self.knobs), default=0.0)}


def search_env() -> EnvManifest:
    from sim_arms import ENV
    return ENV
