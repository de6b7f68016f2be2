"""Early stopping: a running idea whose learning curve is clearly losing is stopped, its slot freed.

The loop calls `Stopper.check(pop)` after each harvest ([stopping] enabled). For every idea whose
trials run (purpose `idea`: a confirmation or a baseline seed is never stopped), it reads their curves
so far through the runner (runners/progress.py: bounded, tolerant) and compares the one furthest
along, at its latest t, with:

1. the baseline seeds' curves at the same t (the band): the idea must be worse than their mean by
   margin = k x spread, spread = their standard deviation there, at least
   defaults.STOPPING_MIN_SPREAD x |mean| (noise-aware: two seeds that happen to agree do not make
   every small difference count), and at least defaults.STOPPING_MIN_REF_SEEDS seeds must reach t.
   Values are averaged over a window of t (defaults.STOPPING_GRID)
   on both sides, since a run's intermediate numbers (a batch's train loss) are noisy;
2. with rule `median`, `asha` or `hyperband`, also its peers: the finished curves of the current
   baseline's ideas, replayed into an in-memory Optuna study with MedianPruner,
   SuccessiveHalvingPruner or HyperbandPruner on a grid of t; the pruner must say prune as well.
   With fewer than `min_peers` peer curves the band decides alone.

Nothing is stopped before `min_t`, nor once its curve reached t = 1 (training over: nothing is left
to save, and the evaluation decides). A stopped idea's running trials are cancelled through the runner
(the slot is free at the next pass of the same tick) and it gets a note with status `stopped`
(store/lifecycle.py `stopped`) holding the evidence: its curve (a blob, as a log), the reference
band at its t, the margin, the t it stopped at and the compute saved (the baseline's mean trial
GPU seconds, or CPU seconds without GPUs, x (1 - t)). The curve is the run's own report, untrusted:
it can stop an idea, never promote one; a stopped note has no value and no decision.
"""

from __future__ import annotations

import logging
import math
import statistics
import time

from autoresearchd import defaults
from autoresearchd.config import ConfigError
from autoresearchd.engine.judge import _total
from autoresearchd.runners import progress
from autoresearchd.store.notes import Note, Status, Trial
from autoresearchd.store.population import Population
from autoresearchd.vocab import MEASURED, LeaseState, Purpose

log = logging.getLogger("autoresearchd")

Curve = list[tuple[float, float]]


def window(pts: Curve, t: float, width: float) -> float | None:
    """The curve's mean over (t - width, t], or its value at t when no point falls there."""
    vals = [v for tt, v in pts if t - width < tt <= t + 1e-12]
    return statistics.fmean(vals) if vals else progress.at(pts, t)


def band(refs: list[Curve], t: float, width: float) -> tuple[float, float, int] | None:
    """(mean, standard deviation, seeds) of the reference curves at t; None when none reaches t."""
    vals = [v for c in refs if (v := window(c, t, width)) is not None and c[-1][0] >= t - 1e-12]
    if not vals:
        return None
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else 0.0), len(vals)


def gridded(pts: Curve, grid: int) -> list[tuple[int, float]]:
    """The curve at t = k / grid for each k it reaches (linear between its points)."""
    out = []
    for k in range(1, grid + 1):
        v = progress.at(pts, k / grid)
        if v is not None:
            out.append((k, v))
    return out


def pruned(rule: str, goal: str, peers: list[Curve], mine: Curve, grid: int, min_step: int) -> bool:
    """Whether Optuna's pruner for `rule` prunes `mine`, its study built from the peers' curves
    replayed in order (each reported step by step, asked should_prune as a live trial would be, then
    told complete with its last value): at any grid step from min_step on."""
    import optuna       # lazy: the [tune] extra, needed by the median and percentile rules alone
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    lo = max(1, min_step)
    pruner = {"median": lambda: optuna.pruners.MedianPruner(n_startup_trials=0, n_warmup_steps=lo - 1),
              "asha": lambda: optuna.pruners.SuccessiveHalvingPruner(min_resource=lo, reduction_factor=3),
              "hyperband": lambda: optuna.pruners.HyperbandPruner(min_resource=lo, max_resource=grid,
                                                                  reduction_factor=3)}[rule]()
    study = optuna.create_study(direction="minimize" if goal == "min" else "maximize", pruner=pruner,
                                sampler=optuna.samplers.RandomSampler(seed=0), study_name="stopping")
    for c in peers:
        pts = gridded(c, grid)
        if not pts:
            continue
        tr = study.ask()
        for k, v in pts:
            tr.report(v, k)
            tr.should_prune()
        study.tell(tr, pts[-1][1])
    tr = study.ask()
    said = False
    for k, v in gridded(mine, grid):
        tr.report(v, k)
        said |= tr.should_prune() and k >= lo
    return said


class Stopper:
    """The stopping rule, called by the loop after harvest. Built with what it uses: the [stopping]
    config, the env's manifest (metric, goal, gpus), the runner (curves, cancel) and the lifecycle
    writer (the `stopped` note)."""

    def __init__(self, cfg, manifest, runner, lifecycle):
        self.cfg, self.manifest, self.runner, self.lifecycle = cfg, manifest, runner, lifecycle
        if cfg.rule != "band":
            try:
                import optuna  # noqa: F401  # lazy: the [tune] extra; without it, say how to install it
            except ImportError:
                raise ConfigError(f"[stopping] rule = {cfg.rule!r} needs Optuna, which is not installed: "
                                  f"pip install 'autoresearchd[tune]' (or rule = \"band\")") from None
        self.repo = lifecycle.repo
        self._blobs: dict[str, Curve] = {}       # curve blob sha -> points (a blob never changes)
        self._seen: dict[str, float] = {}        # trial id -> the last t it was judged at

    def curve(self, sha: str | None) -> Curve:
        if not sha:
            return []
        if sha not in self._blobs:
            self._blobs[sha] = progress.loads(self.repo.read_blob(sha) or b"")
        return self._blobs[sha]

    def worse(self, a: float, b: float) -> bool:
        return a > b if self.manifest.goal == "min" else a < b

    def check(self, pop: Population) -> bool:
        """Stop the ideas whose curves lose; True when a note was written."""
        live = [(idea, lz) for idea in pop.ideas if idea.note is None and not pop.stale(idea)
                for lz in idea.leases if lz.state == LeaseState.RUNNING and lz.purpose == Purpose.IDEA]
        refs = self.refs(pop)
        if not live or not refs:
            return False
        try:
            curves = self.runner.progress_many([lz.handle for _, lz in live])
        except Exception as e:  # noqa: BLE001 - a curve is optional: the idea runs to the end
            log.warning("reading learning curves failed: %s", e)
            return False
        ids = {lz.trial_id for _, lz in live}
        self._seen = {k: v for k, v in self._seen.items() if k in ids}     # only live trials are remembered
        by_idea: dict[str, tuple] = {}
        for (idea, lz), pts in zip(live, curves):
            if pts and (idea.commit not in by_idea or pts[-1][0] > by_idea[idea.commit][2][-1][0]):
                by_idea[idea.commit] = (idea, lz, pts)
        peers = None
        wrote = False
        for idea, lz, pts in by_idea.values():
            t = pts[-1][0]
            if not self.due(t) or self._seen.get(lz.trial_id) == t:
                continue
            self._seen[lz.trial_id] = t
            if peers is None:
                peers = self._peers(pop)
            evidence = self.decide(pop, pts, refs, peers)
            if evidence is not None:
                self._stop(pop, idea, lz, pts, evidence)
                wrote = True
        return wrote

    def due(self, t: float) -> bool:
        """Whether a curve that reached `t` may be judged: not before min_t, and not at t = 1, where
        training is over: nothing is left to save, and the metric of record (its evaluation, moments
        away) decides, not the run's own curve."""
        return self.cfg.min_t <= t < 1.0 - 1e-9

    def refs(self, pop: Population) -> list[Curve]:
        """The baseline's seeds' curves: the band an idea is held to."""
        return [c for t in (pop.baseline_note.trials if pop.baseline_note else []) if (c := self.curve(t.curve))]

    def decide(self, pop: Population, pts: Curve, refs: list[Curve] | None = None,
               peers: list[Curve] | None = None) -> dict | None:
        """The whole rule for one running idea's curve `pts`, read against `pop`: the evidence for
        stopping it now, or None to let it run. check() calls it for every live trial (with the refs
        and peers read once per pass); bench/sim_stop.py replays recorded curves through it."""
        if not pts or not self.due(pts[-1][0]):
            return None
        refs = self.refs(pop) if refs is None else refs
        if not refs:
            return None
        planned = pop.baseline_note.seeds_planned or defaults.STOPPING_MIN_REF_SEEDS
        return self.judge(pts, refs, self._peers(pop) if peers is None else peers, planned)

    def judge(self, pts: Curve, refs: list[Curve], peers: list[Curve], planned: int) -> dict | None:
        """The evidence for stopping the curve `pts` now, or None to let it run; `planned`: the seeds
        the current baseline plans (a band of fewer seeds than that is not judged on)."""
        t, width = pts[-1][0], 1.0 / defaults.STOPPING_GRID
        b = band(refs, t, width)
        v = window(pts, t, width)
        if b is None or v is None:
            return None
        mean, sd, n = b
        if n < min(defaults.STOPPING_MIN_REF_SEEDS, planned):
            return None
        spread = max(sd, defaults.STOPPING_MIN_SPREAD * abs(mean))
        margin = self.cfg.margin * spread
        if not self.worse(v, mean + margin if self.manifest.goal == "min" else mean - margin):
            return None
        pruner = None
        if self.cfg.rule != "band" and len(peers) >= self.cfg.min_peers:
            if not pruned(self.cfg.rule, self.manifest.goal, peers, pts, defaults.STOPPING_GRID,
                          math.ceil(self.cfg.min_t * defaults.STOPPING_GRID)):
                return None
            pruner = {"median": "MedianPruner", "asha": "SuccessiveHalvingPruner",
                      "hyperband": "HyperbandPruner"}[self.cfg.rule]
        reference = []
        for k in range(1, int(t * defaults.STOPPING_GRID + 1e-9) + 1):
            if (bk := band(refs, k / defaults.STOPPING_GRID, width)) is not None:
                reference.append([round(k / defaults.STOPPING_GRID, 4), round(bk[0], 6), round(bk[1], 6)])
        return {"rule": self.cfg.rule, "t": round(t, 4), "value": round(v, 6), "band_mean": round(mean, 6),
                "band_std": round(sd, 6), "band_seeds": n, "k": self.cfg.margin, "margin": round(margin, 6),
                "pruner": pruner, "peers": len(peers), "reference": reference}

    def _peers(self, pop: Population) -> list[Curve]:
        """Finished curves measured against the current baseline: its seeds and its ideas' trials."""
        notes = [(pop.baseline_note.finished_at or 0, pop.baseline_note)] if pop.baseline_note else []
        notes += [(i.note.finished_at or 0, i.note) for i in pop.ideas if i.note is not None and not pop.stale(i)
                  and (i.note.status in MEASURED or i.note.status == Status.STOPPED)]
        notes.sort(key=lambda x: x[0])
        # the newest STOPPING_MAX_PEERS curves, read newest first; only they and the baseline's stay
        # cached (every curve ever read stayed: up to 200 points per finished trial, for the daemon's life)
        curves: list[Curve] = []
        keep = {t.curve for t in (pop.baseline_note.trials if pop.baseline_note else []) if t.curve}
        for tr in (tr for _, n in reversed(notes) for tr in reversed(n.trials)):
            if len(curves) >= defaults.STOPPING_MAX_PEERS:
                break
            if c := self.curve(tr.curve):
                curves.append(c)
                keep.add(tr.curve)
        self._blobs = {k: v for k, v in self._blobs.items() if k in keep}
        return curves[::-1]

    def saved_per_trial(self, pop: Population) -> tuple[float | None, str]:
        """The baseline's mean compute per trial: GPU seconds with GPUs, else CPU seconds."""
        unit = "gpu" if self.manifest.gpus else "cpu"
        vals = [x for t in (pop.baseline_note.trials if pop.baseline_note else [])
                if (x := (t.gpu_s if unit == "gpu" else t.cpu_s)) is not None]
        return (statistics.fmean(vals) if vals else None), unit

    def _stop(self, pop: Population, idea, lead, pts: Curve, evidence: dict) -> None:
        now = time.time()
        running = [lz for lz in idea.leases if lz.state == LeaseState.RUNNING]
        for lz in running:
            try:
                self.runner.cancel(lz.handle)
            except Exception as e:  # noqa: BLE001 - the host may be away; the note is written anyway
                log.warning("cancelling %s failed: %s", lz.trial_id, e)
        per, unit = self.saved_per_trial(pop)
        trials = [lz.result for lz in idea.leases if lz.state == LeaseState.DONE and lz.result is not None]
        saved = 0.0
        for lz in running:
            mine = pts if lz is lead else []
            sha = self.lifecycle.store_log(f"{lz.trial_id}.curve", progress.dumps(mine)) if mine else None
            tt = mine[-1][0] if mine else evidence["t"]
            saved += (per or 0.0) * (1 - tt)
            trials.append(Trial(trial_id=lz.trial_id, seed=lz.seed, status=Status.STOPPED, host=lz.host,
                                # from its start on the host where the runner saw it (Slurm: its placement)
                                wall_s=round(now - (lz.began or lz.started), 3), curve=sha,
                                sandbox=lz.handle.get("sandbox"), gpus=self.manifest.gpus))
            if lz is lead:
                evidence["curve"] = sha
        evidence.update(saved_s=round(saved, 3) if per is not None else None, saved_unit=unit)
        m = self.manifest
        why = (f"stopped at t={evidence['t']:g}: {m.metric} {evidence['value']:.4g} is worse than the baseline "
               f"band {evidence['band_mean']:.4g} by more than the margin {evidence['margin']:.3g} "
               f"({evidence['k']:g} x spread)" + (f" and {evidence['pruner']} pruned it" if evidence["pruner"] else ""))
        note = Note(status=Status.STOPPED, idea_id=idea.idea_id, metric=m.metric, goal=m.goal,
                    baseline=pop.baseline_value, baseline_commit=pop.baseline_commit, error=why,
                    host=lead.host, trials=trials, stopped=evidence, seeds=[t.seed for t in trials],
                    # what the trials held until they were cancelled counts like any note's compute (the
                    # spend rule, max_gpu_hours): docs/notes.md "Compute fields"
                    wall_s=_total(trials, "wall_s"), cpu_s=_total(trials, "cpu_s"), gpu_s=_total(trials, "gpu_s"))
        log.info("%s: %s", idea.idea_id, why)
        self.lifecycle.stopped(idea.commit, idea, note, [lz for lz in idea.leases if lz.state == LeaseState.STALE])
        try:
            self.runner.cleanup_many([lz.handle for lz in running])
        except Exception:  # noqa: BLE001 - a leftover directory is harmless
            pass
