"""The screening step of the loop ([screening] enabled): makes the screened commits, finishes their
runs' notes, writes the decisions, and turns the plan's first seed of a new idea into its screened run
until the decision lets it continue (the rule and the commits: engine/screening.py).

Every piece of state is in git and re-read each tick: the screens/ refs, their result notes (a screen
note's `screened.decision` = `continue` lets the idea run at full length) and leases, and an idea's
`screened_out` note. The screens come with the population each step is given (Population.screens,
store/screens.py): the screener lists nothing itself. A restarted daemon picks up where the stopped one
was.
"""

from __future__ import annotations

import logging
import statistics

from autoresearchd.config import ConfigError
from autoresearchd.engine import screening
from autoresearchd.engine.judge import _total
from autoresearchd.engine.plan import Job, baseline_jobs_open, baseline_seeds, missing_seeds
from autoresearchd.store.notes import BASELINE_NOTE_ID, Lease, Note, Status, Trial
from autoresearchd.store.population import Population
from autoresearchd.vocab import POLLED, LeaseState, Purpose

log = logging.getLogger("autoresearchd")

CONTINUE = "continue"


class Screener:
    """Built by app.build_daemon with the [screening] config, the research env and the lifecycle writer."""

    def __init__(self, cfg, research, lifecycle, policy_cfg):
        m = research.manifest
        if m.screening is None:
            raise ConfigError("[screening] enabled needs the environment to declare its fidelity knob: "
                              "[env.screening] knob = \"<an int or float [[env.knobs]]>\" fraction = 0.25 "
                              "(docs/environment.md), or set [screening] enabled = false")
        self.cfg, self.research, self.lifecycle, self.p = cfg, research, lifecycle, policy_cfg
        self.repo = research.repo

    @property
    def manifest(self):
        return self.research.manifest

    def base_key(self, pop: Population) -> str | None:
        return screening.screen_key(None, pop.baseline_commit) if pop.baseline_commit else None

    def eligible(self, pop: Population):
        """New ideas: on a branch, implemented, with neither a note nor a full-length lease."""
        for idea in pop.ideas:
            if idea.branch and not idea.proposal and idea.note is None and not idea.leases and not pop.stale(idea):
                yield idea

    # -- the collector's units: each screen with leases ------------------------------------------------
    def units(self, pop: Population):
        for key, s in pop.screens.items():
            if s.leases:
                yield s.commit, pop.by_id.get(key), s.note, list(s.leases)

    def finish(self, commit: str, idea, note: Note | None, leases: list[Lease], pop: Population) -> bool:
        """A screen's note once its seeds are in (the baseline's: every baseline seed; an idea's: seed 0)."""
        needed = [0] if idea is not None else baseline_seeds(self.p.baseline_seeds)
        results = {t.seed: t for t in (note.trials if note else [])}
        for lz in leases:
            if lz.state == LeaseState.DONE and lz.result is not None:
                results.setdefault(lz.seed, lz.result)
        failed = [t for t in results.values() if t.status != Status.SUCCEEDED or t.value is None]
        if all(lz.state in POLLED for lz in leases) or not (failed or all(s in results for s in needed)):
            return False
        trials: list[Trial] = sorted(results.values(), key=lambda t: t.seed)
        m, sc = self.manifest, self.manifest.screening
        vals = [t.value for t in trials if t.status == Status.SUCCEEDED and t.value is not None]
        new = Note(status=failed[0].status if failed else Status.SUCCEEDED,
                   idea_id=idea.idea_id if idea else BASELINE_NOTE_ID, metric=m.metric, goal=m.goal,
                   baseline_commit=pop.baseline_commit, trials=trials, seeds=[t.seed for t in trials],
                   error=failed[0].error if failed else None,
                   wall_s=_total(trials, "wall_s"), cpu_s=_total(trials, "cpu_s"), gpu_s=_total(trials, "gpu_s"))
        s = next((s for s in pop.screens.values() if s.commit == commit), None)
        of = s.of if s is not None else screening.screen_of(self.repo, commit)
        new.screened = {"value": statistics.fmean(vals) if vals and not failed else None, "values": vals,
                        "of": of, "knob": sc.knob, "fraction": sc.fraction}
        self.lifecycle.screen_result(commit, new, kept=[lz for lz in leases if lz.state in POLLED])
        return True

    # -- before dispatch: screens made, decisions written -----------------------------------------------
    def step(self, pop: Population) -> bool:
        wrote = False
        screens = pop.screens
        key = self.base_key(pop)
        with self.lifecycle.batch():
            # a screen made here has no note yet, so nothing below decides on it: the loop reads the
            # population again after a step that wrote (engine/loop.py), and plans from that
            if key and key not in screens:
                screening.make_screen(self.repo, self.lifecycle, self.manifest, pop.baseline_commit, key)
                wrote = True
            for idea in self.eligible(pop):
                s = screens.get(idea.idea_id)
                if s is None or s.of != idea.commit:
                    screening.make_screen(self.repo, self.lifecycle, self.manifest, idea.commit, idea.idea_id)
                    wrote = True
            wrote |= self._decide(pop, screens, key)
        return wrote

    def _decide(self, pop: Population, screens: dict, key: str | None) -> bool:
        base = screens.get(key) if key else None
        if base is None or base.note is None:
            return False
        ref = [] if base.note.status != Status.SUCCEEDED else list(base.note.screened.get("values") or [])
        mine = [s for k, s in screens.items() if k != key and s.note is not None
                and s.note.baseline_commit == pop.baseline_commit]
        peers = [s.value for s in mine if s.value is not None]
        wrote = False
        for idea in self.eligible(pop):
            s = screens.get(idea.idea_id)
            if s is None or s.of != idea.commit or s.note is None or s.note.screened.get("decision"):
                continue
            if s.note.status != Status.SUCCEEDED or s.value is None:
                ev = {"rule": "failed", "value": None, "why": s.note.error or s.note.status.value}
            elif not ref:      # the baseline's screen failed: nothing to screen against, run full length
                ev = None
            else:
                ev = screening.decide(s.value, peers, ref, self.cfg, self.manifest.goal)
            n = s.note.model_copy(deep=True)
            n.screened["decision"] = CONTINUE if ev is None else Status.SCREENED_OUT.value
            self.lifecycle.screen_result(s.commit, n)
            if ev is not None:
                self._out(pop, idea, s, base, ev)
            wrote = True
        return wrote

    def _out(self, pop: Population, idea, s, base, ev: dict) -> None:
        sc = self.manifest.screening
        per, unit = screening.saved(base.note.trials, sc.fraction, self.manifest.gpus)
        ev.update(screen=s.commit, baseline_screen=base.commit, knob=sc.knob, fraction=sc.fraction,
                  saved_s=None if per is None else round(per, 3), saved_unit=unit)
        m = self.manifest
        why = (f"screened out at {sc.knob} x {sc.fraction:g}: its screened run failed ({ev['why']})"
               if ev["rule"] == "failed" else          # own word: the screening rule (engine/screening.py's)
               f"screened out at {sc.knob} x {sc.fraction:g}: {m.metric} {ev['value']:.4g} against the baseline's "
               f"screened {ev['baseline_mean']:.4g} (margin {ev['margin']:.3g}) and the cutoff "
               f"{'-' if ev['cutoff'] is None else format(ev['cutoff'], '.4g')} of {ev['peers']} screened ideas")
        # the screened run's compute counts like any note's (the spend rule, max_gpu_hours: store/spend.py)
        sn = s.note
        note = Note(status=Status.SCREENED_OUT, idea_id=idea.idea_id, metric=m.metric, goal=m.goal,
                    baseline=pop.baseline_value, baseline_commit=pop.baseline_commit, error=why, screened=ev,
                    wall_s=sn.wall_s, cpu_s=sn.cpu_s, gpu_s=sn.gpu_s)
        log.info("%s: %s", idea.idea_id, why)
        self.lifecycle.screened_out(idea.commit, idea, note)

    # -- the plan: a new idea's first seed is its screen until it may continue --------------------------
    def jobs(self, pop: Population, jobs: list[Job]) -> list[Job]:
        screens = pop.screens
        # the baseline's full-length seeds first (its seed 0 is the first result a user waits for), then
        # its screened seeds (every decision needs them), then the rest in the plan's order
        out: list[Job] = [j for j in jobs if j.purpose == Purpose.BASELINE]
        key = self.base_key(pop)
        base = screens.get(key) if key else None
        if base is not None and baseline_jobs_open(base.note):
            for mm in missing_seeds(baseline_seeds(self.p.baseline_seeds), base.note, list(base.leases)):
                out.append(Job(base.commit, mm.seed, Purpose.SCREEN, None, mm.retries, attempt=mm.attempt,
                               faults=mm.faults))
        for job in (j for j in jobs if j.purpose != Purpose.BASELINE):
            idea = job.idea
            if job.purpose != Purpose.IDEA or idea is None or idea.note is not None or idea.leases:
                out.append(job)
                continue
            s = screens.get(idea.idea_id)
            if s is None or s.of != idea.commit:
                continue                      # made at the next step
            if s.note is not None:
                if s.note.screened.get("decision") == CONTINUE:
                    out.append(job)
                continue                      # waiting for its decision
            for mm in missing_seeds([0], None, list(s.leases)):
                out.append(Job(s.commit, mm.seed, Purpose.SCREEN, idea, mm.retries, attempt=mm.attempt,
                               faults=mm.faults, priority=job.priority))
        return out
