"""Early-stopping rules of bench/sim_early.py (issue 29, section 3), over the learning curves of
bench/sim_world.py: a running idea reports its loss at checkpoints t = 1/P .. (P-1)/P of its training,
and a rule says at each one whether it stops there. A stopped trial frees its slot and costs GPU-hours
only up to its stop (bench/sim_clock.py `stop`).

The rules (`Rule`):
- **band**: against the baseline's band at the same t, noise-aware: stop when the idea's loss at t is
  above the mean of the baseline's curves at t by more than `k` noise stds, the std pooled over the
  baseline's curves at every checkpoint (each curve's deviations from the mean at that t), times
  sqrt(1 + 1/n) for a single run against a mean of n. No stop before `t_min`, or with fewer than two
  baseline curves. Written plainly: Optuna has no pruner that compares with a fixed reference band.
- **asha**: asynchronous successive halving, Optuna's `SuccessiveHalvingPruner` (rungs at
  min_resource x reduction_factor^k checkpoints; at a rung, a trial continues only if its loss is in
  the best 1/reduction_factor of the losses every trial reported at that rung). **asha-late**: the
  same with its first rung at the third checkpoint (t = 0.3), where more of an effect has shown.
- **median**: Optuna's `MedianPruner` (stop when the loss at a checkpoint is worse than the median of
  the completed trials' losses at that checkpoint, after `n_startup_trials` completed trials and from
  checkpoint `n_warmup_steps` on).
- **product** (and **product-median**, **product-asha**): the daemon's own rule, not a rewrite: at each
  checkpoint the decision is daemon/engine/stopping.py's `Stopper.judge`, on a `Stopper` built through
  its real constructor with config.StoppingCfg (`rule` band, median or asha; `margin` = k, the tuned
  parameter; `min_t`, `min_peers` the product's defaults). It is fed as `Stopper.check` feeds it: the
  idea's curve so far as (t, value) points, the curves of the current baseline note's trials as the
  references (the seeds planned from that note), the product's own `Stopper._peers` over the search's
  real `Population` as the peers (finished notes' trials, newest last, at most 200), and not before
  `min_t` nor at t = 1. A trial's curve is read back through `Trial.curve`, a key into this module's
  store of the curves reported so far (the product reads a git blob there).
The Optuna rules are driven through an in-memory study with ask/report/should_prune/tell, one study
trial per simulated trial (the baseline's seeds included, as peers, never stopped). Only an idea's
first run can be stopped: confirmation seeds and the baseline always run to the end.
"""

from __future__ import annotations

import statistics
from enum import Enum
from types import SimpleNamespace

from autoresearchd import defaults
from autoresearchd.config import StoppingCfg
from autoresearchd.engine import stopping
from autoresearchd.manifest import EnvManifest
from autoresearchd.runners import progress


class Rule(str, Enum):
    NONE = "none"          # run everything to full length (the reference), curves still recorded
    BAND = "band"
    ASHA = "asha"
    ASHA_LATE = "asha-late"
    MEDIAN = "median"
    PRODUCT = "product"                # the daemon's Stopper.judge: the band alone
    PRODUCT_MEDIAN = "product-median"  # the band, and Optuna's MedianPruner over the peers must agree
    PRODUCT_ASHA = "product-asha"      # the band, and Optuna's SuccessiveHalvingPruner must agree


# each product rule's [stopping] rule
PRODUCT_RULES = {Rule.PRODUCT: "band", Rule.PRODUCT_MEDIAN: "median", Rule.PRODUCT_ASHA: "asha"}

# Each rule's one tuned parameter and its grid (bench/sim_early.py --tune chooses on the tuning seeds)
GRID = {Rule.BAND: ("k", (1.0, 2.0, 3.0)),
        Rule.ASHA: ("reduction_factor", (2, 3, 4)),
        Rule.ASHA_LATE: ("reduction_factor", (2, 3, 4)),
        Rule.MEDIAN: ("n_warmup_steps", (1, 3, 5)),
        # the product's margin k: its default 3, and below, where it stops anything here (the product's
        # least spread, 1% of the band's mean, is about 3.7 of this world's noise stds at t = 0.3: one
        # tuning seed, 3, stopped 0, 1, 15 and 57 ideas at k = 3, 1, 0.5 and 0.25: docs/policies.md)
        **{r: ("k", (0.5, 1.0, 3.0)) for r in PRODUCT_RULES}}
BAND_T_MIN = 0.2            # the band rule never stops an idea before 20% of its training
MEDIAN_STARTUP = 5          # completed trials before the median rule stops anything (Optuna's default)
ASHA_MIN_RESOURCE = {Rule.ASHA: 1, Rule.ASHA_LATE: 3}   # the first rung: that checkpoint


class Stopper:
    """One search's rule. `begin(key)` when a trial starts, `check(key, j, value)` at checkpoint j
    (1-based; t = j / points) returns True to stop it there, `end(key, value)` when it completes.
    The product rules need the search's population: `pop`, a callable returning it now, and each
    finished trial's `Trial.curve` set to `blob(key)`."""

    def __init__(self, rule: Rule, param: float | None, points: int, pop=None):
        self.rule, self.points, self.pop = rule, points, pop
        # the grid's middle value unless told
        self.param = param if param is not None else (GRID[rule][1][1] if rule in GRID else None)
        self.base: dict[str, list[float]] = {}     # baseline trial -> its curve so far
        self._trials: dict[str, object] = {}
        self.study = None
        self.curves: dict[str, list[tuple[float, float]]] = {}   # product rules: trial -> (t, value) so far
        self.product = product_stopper(PRODUCT_RULES[rule], self.param, self) if rule in PRODUCT_RULES else None
        if rule in (Rule.ASHA, Rule.ASHA_LATE, Rule.MEDIAN):
            import optuna
            optuna.logging.set_verbosity(optuna.logging.WARNING)
            if rule is not Rule.MEDIAN:
                pruner = optuna.pruners.SuccessiveHalvingPruner(
                    min_resource=ASHA_MIN_RESOURCE[rule], reduction_factor=int(self.param), min_early_stopping_rate=0)
            else:
                pruner = optuna.pruners.MedianPruner(n_startup_trials=MEDIAN_STARTUP,
                                                     n_warmup_steps=int(self.param), interval_steps=1)
            self.study = optuna.create_study(direction="minimize", pruner=pruner,
                                             sampler=optuna.samplers.RandomSampler(seed=0))

    def begin(self, key: str, baseline: bool) -> None:
        if baseline:
            self.base[key] = []
        if self.study is not None:
            self._trials[key] = self.study.ask()

    def check(self, key: str, j: int, value: float, stoppable: bool) -> bool:
        if key in self.base:
            self.base[key].append(value)
        if self.product is not None:
            self.curves.setdefault(key, []).append((j / self.points, value))
            return stoppable and self._product(key)
        if self.study is not None:
            tr = self._trials[key]
            tr.report(value, j)
            if stoppable and tr.should_prune():
                self.study.tell(tr, state=_pruned())
                del self._trials[key]
                return True
            return False
        if self.rule is Rule.BAND and stoppable:
            return self._band(j, value)
        return False

    def end(self, key: str, value: float | None) -> None:
        if self.product is not None and value is not None:
            self.curves.setdefault(key, []).append((1.0, value))      # the last point: the run's value
        if self.study is not None and key in self._trials:
            tr = self._trials.pop(key)
            if value is None:
                self.study.tell(tr, state=_failed())
            else:
                self.study.tell(tr, value)

    def _band(self, j: int, value: float) -> bool:
        if j / self.points < BAND_T_MIN:
            return False
        curves = [c for c in self.base.values() if len(c) >= j]
        if len(curves) < 2:
            return False
        mean = statistics.fmean(c[j - 1] for c in curves)
        sd = band_sd(curves)
        return value > mean + self.param * sd * (1 + 1 / len(curves)) ** 0.5

    # -- the product rules ----------------------------------------------------------------------------
    def blob(self, key: str) -> str | None:
        """What a trial's `Trial.curve` holds: the key of its curve here (None without a curve)."""
        return key if self.curves.get(key) else None

    def read_blob(self, key: str) -> bytes | None:
        """The product Stopper's read of a curve blob (GitRepo.read_blob), from the curves reported."""
        pts = self.curves.get(key)
        return progress.dumps(pts) if pts else None

    def _product(self, key: str) -> bool:
        """engine/stopping.py's decision for one running idea: Stopper.decide, its gate included."""
        return self.product.decide(self.pop(), list(self.curves[key])) is not None


def product_stopper(rule: str, k: float, blobs) -> stopping.Stopper:
    """The daemon's Stopper through its constructor: the [stopping] settings model (k the margin, the
    rest the product's defaults) and the sim's manifest. Its runner is never used by judge, curve or
    _peers (None); its lifecycle only lends `repo` to read curve blobs from, here `blobs.read_blob`."""
    cfg = StoppingCfg(enabled=True, rule=rule, margin=k)
    manifest = EnvManifest(name="sim", run="true", metric="val_loss", goal="min")
    return stopping.Stopper(cfg, manifest, None, SimpleNamespace(repo=blobs))


def band_sd(curves: list[list[float]]) -> float:
    """The noise std pooled over the checkpoints every curve reached: at each checkpoint, the curves'
    squared deviations from their mean there, over (n - 1) degrees of freedom per checkpoint."""
    m = min(len(c) for c in curves)
    ss = df = 0.0
    for j in range(m):
        xs = [c[j] for c in curves]
        mu = statistics.fmean(xs)
        ss += sum((x - mu) ** 2 for x in xs)
        df += len(xs) - 1
    return (ss / df) ** 0.5 if df else 0.0


def _pruned():
    from optuna.trial import TrialState
    return TrialState.PRUNED


def _failed():
    from optuna.trial import TrialState
    return TrialState.FAIL
