"""One search of bench/sim_fair.py on G slots, in the asynchronous loop (the daemon's) or the barrier
loop (the paper's), judged by the daemon's rule (noise-aware, confirmation seeds) or the paper's (one
run each, the best single run wins). Budgets are GPU-hours.

What runs the daemon's own code, and what does not (and why):
- **Which job runs next** is `engine.loop.Daemon.jobs` itself (with `engine.plan`'s `seeds_needed`,
  `missing_seeds`, `order_key`), called on a real `Population` of `Idea`s with real `Lease`s: the
  baseline's seeds first, confirmations ahead of new ideas, oldest ideas first.
- **When a result is complete and what it means** follows `engine.collect.Dispatcher._maybe_finish`
  (every needed seed in, then `engine.judge.build_note`, with `confirmed` for a pending idea) and the
  backfill (`engine.judge.fill_baseline` on results that came before the baseline's last seed). Those
  two methods read and write git notes and leases through the ledger, so their few lines are mirrored
  here rather than called; the judging they call is the real one.
- **When to propose** mirrors `Daemon._maybe_refill` (want = free slots + queue_buffer - ideas ready,
  one proposal round at a time, later epochs only once the baseline is measured), which needs the
  daemon's threads, implementer and dispatcher. Proposals are the real policy's, through the real
  openai provider, to the simulated ideator over local HTTP.
- **The budget** (`max_gpu_hours`): the daemon stops proposing once it is spent; here, in addition, no
  new idea starts once it is spent (both loops alike), while the confirmation seeds of a pending idea
  still run, as the daemon waits for them before it is settled. GPU-hours used are reported.
The paper's rule is not the daemon's code: it is written here (`_paper_decision`).

Two options on top (issue 29): `Arm.stop`, an early-stopping rule of bench/sim_stop.py (every trial
then reports its learning curve at checkpoints, and an idea's first run may stop at one of them; the
`product` rules decide by the daemon's own engine.stopping, reading this search's Population and its
trials' `curve`, stamped with `finished_at` as the ledger stamps a note), and
`Arm.ahead`, the refill sized to what the slots consume while a proposal round is written (the fix of
the slow-proposal row, docs/policies.md). `Arm.tune` adds the knob tuner of bench/sim_knobs.py, and
`Arm.screen` screening at low fidelity (bench/sim_screen.py: the product's Screener in Daemon.jobs).
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass
from enum import Enum
from types import SimpleNamespace

import search_world as W
from search_ideator import Ideator
from sim_clock import Clock
from sim_stop import Rule, Stopper
from sim_world import TRIAL_GPU_H, TimedWorld

from autoresearchd import policies
from autoresearchd.config import LLMCfg, PolicyCfg, Price
from autoresearchd.engine.judge import build_note, fill_baseline
from autoresearchd.engine.loop import Daemon
from autoresearchd.engine.plan import baseline_complete, seeds_needed
from autoresearchd.llm.openai_provider import OpenAIProvider
from autoresearchd.manifest import EnvManifest
from autoresearchd.store.ideas import Idea, make_idea_id
from autoresearchd.store.notes import Lease, Note, Status, Trial
from autoresearchd.store.population import Population
from autoresearchd.store.trailers import Trailers

ENV = EnvManifest(name="sim", run="true", metric="val_loss", goal="min", time_budget_s=600,
                  context="Improve the training recipe of a small language model.")
SIM = dict(ideas_per_epoch=30, batch=5, max_parents=30)   # the paper's 80/10/100, scaled to the budget
MAX_STALLS = 10        # proposal rounds in a row with nothing new: the search stops proposing
POINTS = 10            # learning-curve points per trial, at t = 0.1 .. 1.0 (checkpoints at the first 9)
BASE = "b" * 40


class LoopKind(Enum):
    ASYNC = "async"        # the daemon's: the queue is refilled batch by batch as slots free up
    BARRIER = "barrier"    # the paper's: an epoch's ideas all proposed before any of their results


class JudgeKind(Enum):
    OURS = "ours"          # engine.judge: baseline_seeds, noise margins, confirmation seeds, dedupe
    PAPER = "paper"        # one baseline run, one run per idea, the best single run wins, no dedupe


@dataclass(frozen=True)
class Arm:
    loop: LoopKind
    judge: JudgeKind
    overrides: tuple = ()            # PolicyCfg overrides, as (name, value) pairs
    stop: tuple = ()                 # (Rule, its parameter or None): curves, and that stopping rule
    ahead: bool = False              # size a proposal round to what the slots use while it is written
    tune: tuple = ()                 # (sim_knobs.TuneMode, its parameter or None[, knob scale]): the tuner
    screen: tuple = ()               # (margin, keep): screening at low fidelity (bench/sim_screen.py)

    @property
    def name(self) -> str:
        over = ", ".join(f"{k}={v}" for k, v in self.overrides)
        return f"{self.judge.value} judge, {self.loop.value} loop" + (f" ({over})" if over else "")


def _sha(*parts) -> str:
    return hashlib.sha1(repr(parts).encode()).hexdigest()


class Search:
    """One search in one world. `go()` returns its metrics. Run it under sim_world.applied(knobs)."""

    def __init__(self, srv, world: TimedWorld, arm: Arm, budget_h: float, slots: int, latency_h: float):
        self.w, self.arm, self.budget_h, self.latency_h = world, arm, budget_h, latency_h
        self.paper = arm.judge is JudgeKind.PAPER
        over = dict(arm.overrides)
        if self.paper:
            over.update(baseline_seeds=1, confirm_seeds=0)
        self.cfg = cfg = PolicyCfg(name="evolutionary", seed=world.seed, **{**SIM, **over})
        if self.paper:
            cfg.duplicate_threshold = 101.0        # token_set_ratio never exceeds 100: no dedupe
        self.policy = policies.get("evolutionary")(cfg)
        self.ideator = srv.ideator = Ideator(world.w)
        srv.ideators = {"sim-ideator": self.ideator}
        self.llm = OpenAIProvider(LLMCfg(provider="openai", base_url=srv.base_url, model="sim-ideator",
                                         max_retries=0, prices={"sim-ideator": Price(input=1.0, output=4.0)}))
        self.clock = Clock(slots)
        self.rng = random.Random(f"trials-{world.seed}")
        self.ideas: list[Idea] = []
        self.techs: dict[str, frozenset] = {}
        self.bnote: Note | None = None
        self.bleases: list[Lease] = []
        self.proposing = False
        self.stalls = 0
        self.ran: set[frozenset] = set()
        self.m = dict(duplicates_run=0, implement_failed=0, crashed=0, confirm_trials=0, usd=0.0)
        self.stopper = Stopper(arm.stop[0], arm.stop[1], POINTS, pop=self.pop) if arm.stop else None
        self.live: dict[str, dict] = {}          # trials running with a curve (stop arms)
        self.trajectory: list[tuple[float, float]] = []   # (GPU-h used, true effect of the reported best)
        self.stops: list[dict] = []              # every stopped idea: its true effect and the t it stopped at
        self.first_runs: list[float] = []        # true effects of every idea's first run (stop arms)
        self.tuning = None
        if arm.tune:
            from sim_knobs import TuneDriver
            self.tuning = TuneDriver(self, *arm.tune)
        self.screening = None
        if arm.screen:
            from sim_screen import ScreenDriver
            self.screening = ScreenDriver(self, *arm.screen)
        # Daemon.jobs reads cfg.policy, cfg.daemon (human_priority; max_gpu_hours: none, since the sim's
        # own clock holds new ideas at its budget just as budget_spent would), the manifest, the screener
        self._shim = SimpleNamespace(cfg=SimpleNamespace(policy=cfg, daemon=SimpleNamespace(
            human_priority=True, max_gpu_hours=None, target=None)), research=SimpleNamespace(manifest=ENV),
            screener=self.screening.screener if self.screening else None, _said_held=0)

    def pop(self) -> Population:
        return Population(list(self.ideas), BASE, self.bnote, baseline_leases=list(self.bleases),
                          screens=dict(self.screening.screens) if self.screening else {})

    def spent(self) -> bool:
        return self.clock.gpu_h >= self.budget_h

    # -- dispatch: the daemon's own job list and order ----------------------------------------------
    def _dispatch(self) -> None:
        if self.screening is not None:
            self.screening.step(self.pop())         # Screener.step, before the plan as in the tick
        if not self.clock.free():
            return
        for job in Daemon.jobs(self._shim, self.pop()):
            if not self.clock.free():
                return
            if job.purpose != "confirm" and self.spent():
                continue
            if job.purpose == "screen":
                self.screening.start(job)
                continue
            techs = self.techs[job.commit] if job.idea is not None else frozenset()
            hours = self.w.gpu_hours(techs, self.rng)
            lz = Lease(trial_id=job.trial_id, seed=job.seed, runner="sim", host="sim", slot="gpu",
                       purpose=job.purpose, started=self.clock.now, heartbeat=self.clock.now)
            (job.idea.leases if job.idea is not None else self.bleases).append(lz)
            self.m["confirm_trials"] += job.purpose == "confirm"
            if self.stopper is None:
                self.clock.start(hours, (job, lz, hours))
                continue
            # the run's whole curve is drawn now (its last point is its value); the rule sees it point
            # by point, at each checkpoint's time
            crashed = any(self.rng.random() < self.w.w.crash[t] for t in sorted(techs))
            curve = self.w.curve(techs, self.rng, POINTS)["value"]
            key = lz.trial_id
            self.live[key] = dict(job=job, lz=lz, hours=hours, t0=self.clock.now, curve=curve, crashed=crashed,
                                  handle=self.clock.start(hours, (job, lz, hours)),
                                  stoppable=job.idea is not None and job.purpose == "idea")
            if job.purpose == "idea" and job.idea is not None:
                self.first_runs.append(self.w.true_effect(techs))
            self.stopper.begin(key, baseline=job.idea is None)
            for j in range(1, POINTS):
                self.clock.later(hours * j / POINTS, (key, j), kind="check")

    def _check(self, key: str, j: int) -> None:
        st = self.live.get(key)
        if st is None:
            return
        if self.stopper.check(key, j, st["curve"][j - 1], st["stoppable"]):
            used = st["hours"] * j / POINTS
            self.clock.stop(st["handle"], st["hours"] - used)
            del self.live[key]
            job = st["job"]
            pick = self.reported()          # was it better than what the search reports right now?
            self.stops.append({"true": self.true(job.commit), "t": j / POINTS, "saved_h": st["hours"] - used,
                               "best_then": self.true(pick.commit) if pick is not None else 0.0})
            why = f"stopped early at t = {j / POINTS:.1f} ({self.stopper.rule.value})"
            self._finished(job, st["lz"], used, stopped=why)

    def used_h(self) -> float:
        """GPU-hours used so far: charged, less what the running trials have still to run."""
        return self.clock.gpu_h - sum(st["t0"] + st["hours"] - self.clock.now for st in self.live.values())

    # -- results: Dispatcher._maybe_finish and backfill, mirrored -----------------------------------
    def _finished(self, job, lz: Lease, hours: float, stopped: str | None = None) -> None:
        if job.purpose == "screen":
            return self.screening.finished(job, lz, hours)
        techs = self.techs[job.commit] if job.idea is not None else frozenset()
        st = self.live.pop(lz.trial_id, None) if self.stopper is not None else None
        if stopped:
            v = None
        elif st is not None:
            v = None if st["crashed"] else st["curve"][-1]
            self.stopper.end(lz.trial_id, v)
        else:
            v = self.w.run(techs, self.rng)
        if self.tuning is not None and v is not None:
            v -= self.tuning.gain(job.commit if job.idea is not None else None)
        if v is None and not stopped:
            self.m["crashed"] += 1
        lz.state = "done"
        lz.result = Trial(trial_id=lz.trial_id, seed=lz.seed, value=v, wall_s=hours * 3600, gpus=1,
                          # its learning curve, as the runner stores it (stop arms; the product rule reads it)
                          curve=self.stopper.blob(lz.trial_id) if self.stopper is not None else None,
                          status=Status.SUCCEEDED if v is not None else Status.FAILED,
                          exit_code=None if v is not None else 1,
                          error=None if v is not None else stopped or "Traceback: RuntimeError: CUDA error")
        idea = job.idea
        if idea is None:
            trials = (self.bnote.trials if self.bnote else []) + [lz.result]
            self.bleases.remove(lz)
            self.bnote = build_note(trials, None, self.pop(), ENV, self.cfg)
            self.bnote.seeds_planned = self.cfg.baseline_seeds
            self.bnote.finished_at = self.clock.now      # the ledger stamps a note it writes
            if baseline_complete(self.bnote):
                self._backfill()
            return
        note = idea.note
        needed = seeds_needed(note, "idea", self.cfg.baseline_seeds, self.cfg.confirm_seeds)
        results = {t.seed: t for t in (note.trials if note else [])}
        for x in idea.leases:
            if x.state == "done" and x.result is not None:
                results.setdefault(x.seed, x.result)
        if not all(s in results for s in needed):
            return
        confirming = note is not None and note.decision == "pending"
        idea.leases = [x for x in idea.leases if x.state == "running"]
        new = build_note(list(results.values()), idea, self.pop(), ENV, self.cfg, confirmed=confirming)
        if self.paper:
            new.decision = self._paper_decision(new)
        new.finished_at = self.clock.now
        idea.note = new

    def _backfill(self) -> None:
        pop = self.pop()
        for i in self.ideas:
            n = i.note
            if n is not None and n.status == Status.SUCCEEDED and n.decision is None and not self.paper:
                fill_baseline(n, i, pop, ENV, self.cfg)

    def _paper_decision(self, note: Note) -> str | None:
        """The paper: the best single run so far (and better than the baseline's one run) wins."""
        if note.status != Status.SUCCEEDED:
            return None
        prior = [i.note.value for i in self.ideas if i.value is not None]
        if self.bnote is not None and self.bnote.value is not None:
            prior.append(self.bnote.value)
        return "promoted" if all(note.value < x for x in prior) else None

    # -- proposals: Daemon._maybe_refill, mirrored -------------------------------------------------------
    def _refill(self) -> None:
        if self.tuning is not None and not self.spent():
            self.tuning.refill()            # Daemon._maybe_tune, before _maybe_refill as in the tick
        if self.proposing or self.spent() or self.stalls >= MAX_STALLS or not self.llm_on():
            return
        pop = self.pop()
        if self.bnote is None and pop.max_epoch() >= 0:
            return                # epoch 0 is proposed once; later epochs need the measured baseline
        epoch, done = self.policy.cursor(pop)
        if self.arm.loop is LoopKind.ASYNC:
            want = self.clock.free() + self.cfg.queue_buffer - len(pop.queued())
            if self.arm.ahead:
                # the fix: also the trials the slots will start while this round is being written
                want += math.ceil(self.clock.slots * self.latency_h / TRIAL_GPU_H)
            if want <= 0:
                return
            n = max(want, self.cfg.batch)
        else:
            # the barrier: every result of the epoch so far is in (pending confirmations included)
            if pop.queued() or pop.running() or any(i.note is not None and i.note.decision == "pending"
                                                    for i in self.ideas):
                return
            if self.ideas and not (self.bnote and baseline_complete(self.bnote)):
                return
            n = self.cfg.ideas_per_epoch - done
        props = self.policy.propose(pop, n, ENV, self.llm)
        self.proposing = True
        self.clock.later(self.latency_h, props)

    def _arrived(self, props) -> None:
        self.proposing = False
        if not any(p.dropped_reason is None for p in props):
            self.stalls += 1             # only duplicates: the ideator is saturated
            return
        self.stalls = 0
        for p in props:
            self.m["usd"] += p.cost_usd
            commit = _sha(self.w.seed, len(self.ideas), p.text)
            idea = Idea(idea_id=make_idea_id(p.text, p.epoch, commit[:6]), commit=commit, title=p.title,
                        text=p.text, base_commit=p.base_commit, committed_at=len(self.ideas),
                        trailers=Trailers(origin=p.origin, parents=tuple(p.parents), epoch=p.epoch,
                                          idea_model=p.model))
            if p.dropped_reason:
                idea.note = Note(status=Status.DUPLICATE, duplicate_of=p.duplicate_of, error=p.dropped_reason)
                self.ideas.append(idea)
                continue
            techs = frozenset(self.ideator.techs(p.text)) | self.techs.get(p.base_commit or "", frozenset())
            self.techs[commit] = techs
            if self.tuning is not None:
                self.tuning.inherit(commit, p.base_commit)
            if not techs or self.w.w.implement_fails(techs, self.rng):
                self.m["implement_failed"] += 1
                idea.note = Note(status=Status.IMPLEMENT_FAILED, error="the diff did not apply after 2 revisions")
            else:
                idea.branch = f"autoresearch/{idea.idea_id}"
                if techs in self.ran:
                    self.m["duplicates_run"] += 1
                self.ran.add(techs)
            self.ideas.append(idea)

    # -- the search ---------------------------------------------------------------------------------
    def go(self) -> dict:
        while True:
            self._dispatch()
            self._refill()
            if not self.clock.pending():
                break
            for kind, payload in self.clock.advance():
                if kind == "trial":
                    self._finished(*payload)
                elif kind == "check":
                    self._check(*payload)
                else:
                    self._arrived(payload)
            if self.stopper is not None or self.tuning is not None or self.screening is not None:
                pick = self.reported()
                best = self.true(pick.commit) if pick is not None else 0.0
                if not self.trajectory or self.trajectory[-1][1] != best:
                    self.trajectory.append((round(self.used_h(), 4), best))
        return self._metrics()

    def llm_on(self) -> bool:
        return self.tuning is None or self.tuning.llm_on

    def true(self, commit: str) -> float:
        """The true effect of a commit: its techniques', plus its knobs' gain in a world with knobs."""
        e = self.w.true_effect(self.techs[commit])
        return e + self.tuning.gain(commit) if self.tuning is not None else e

    def reported(self) -> Idea | None:
        """What the search reports as its best: ours, the daemon's `Population.best(confirmed=True)`;
        the paper, its best single run if it beat the baseline's."""
        pop = self.pop()
        if not self.paper:
            return pop.best(ENV.goal, confirmed=True)
        ran = [i for i in self.ideas if i.value is not None]
        top = min(ran, key=lambda i: i.value, default=None)
        b = self.bnote.value if self.bnote else None
        return top if top is not None and (b is None or top.value < b) else None

    def _metrics(self) -> dict:
        true = {c: self.true(c) for c in self.techs}
        ran = [true[i.commit] for i in self.ideas if i.value is not None]
        pick = self.reported()
        best = true[pick.commit] if pick is not None else 0.0
        best_run = max([0.0] + ran)         # the baseline (0) is always a valid report
        opt = self.w.w.optimum()
        return {**self.m, "true_best": best, "best_run": best_run, "regret": best_run - best,
                "no_best": pick is None, "share_of_opt": best / opt if opt else 0.0,
                "gpu_h": self.clock.gpu_h, "wall_h": self.clock.now, "util": self.clock.utilisation(),
                "ideas_run": len(ran), "noise_sd": W.NOISE_SD, **self._extra()}

    def _extra(self) -> dict:
        """Stop arms: the stops, the first runs and the trajectory; tune arms: the tuner's counts."""
        out = {}
        if self.stopper is not None:
            out.update(stops=self.stops, first_runs=self.first_runs, trajectory=self.trajectory,
                       saved_h=sum(x["saved_h"] for x in self.stops))
        if self.tuning is not None:
            out.update(trajectory=self.trajectory, **self.tuning.metrics())
        if self.screening is not None:
            out.update(trajectory=self.trajectory, **self.screening.metrics())
        return out
