"""Dispatch: move work from the queue (derived from refs) onto the runner's slots.

Dispatch writes the lease before the runner starts anything; collect.py brings the results home.
Every idea is validated before it can run (frozen files, paths, symlinks, sizes, relation to the
baseline) and identical trees are linked instead of re-run.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

from autoresearchd.engine.arrivals import Gate
from autoresearchd.engine.collect import MEASURED, Collector
from autoresearchd.engine.health import HostHealth
from autoresearchd.engine.judge import fill_baseline
from autoresearchd.engine.plan import Job
from autoresearchd.store.ideas import Idea
from autoresearchd.store.ledger import Ledger
from autoresearchd.store.notes import Lease, Note
from autoresearchd.store.population import Population
from autoresearchd.store.refs import ARCHIVE_PREFIX, IDEA_BRANCHES
from autoresearchd.vocab import LeaseState, Purpose

log = logging.getLogger("autoresearchd")


class Dispatcher(Collector):
    def __init__(self, cfg, research, runner):
        self.cfg, self.research, self.runner = cfg, research, runner
        self.repo = research.repo
        self.ledger = Ledger(self.repo)
        self.started = time.time()
        self._last_seen: dict[str, float] = {}
        self._busy: dict[str, list[str]] = {}    # slot key -> trial ids placed there (running first)
        # A host whose submit failed, whose disk is full, or that went silent gets no new trial until a
        # probe passes. (Without it one dead host took an attempt from every queued idea in a few ticks.)
        self.health = HostHealth()
        self.wake = None                         # callback: a probe passed, dispatch now (Daemon.poke)
        self._slots_cache: tuple[float, list] = (0.0, [])
        self._harness: tuple[str, bytes | None, str | None, list[str]] | None = None
        self._base: str | None = None            # the baseline commit of the population being worked on
        self._cleanups: list[dict] = []          # handles whose notes are written: remove their dirs
        self._last_baseline: tuple[str | None, list] = (None, [])   # the baseline and its leases, last harvest
        self.gate = Gate(cfg, research, self._noted)   # validation, cached per commit
        self.on_note: list = []                  # callbacks(commit, idea | None, note), e.g. the W&B mirror
        self._pool = ThreadPoolExecutor(8, thread_name_prefix="dispatch")   # submits and clean-ups

    def _noted(self, commit: str, idea, note: Note) -> None:
        if note.model_config.get("frozen"):
            note = note.model_copy()        # a population's note is shared (store/frozen.py): write a copy
        if idea is not None:
            # the daemon's record of provenance: for a pushed commit this, not its trailers, is the truth
            note.origin, note.epoch = idea.origin, idea.epoch
            if idea.trailers.tune_study:       # believed: only the daemon's own commits keep trailers
                from autoresearchd.tune.tuner import note_fields
                note.tune = note_fields(idea)
        self.ledger.write_note(commit, note)
        if idea is not None and idea.branch and idea.branch.startswith(IDEA_BRANCHES):
            self.repo.update_ref(ARCHIVE_PREFIX + commit, commit)   # survives a force-push of the branch
        for cb in self.on_note:
            try:
                cb(commit, idea, note)
            except Exception:  # noqa: BLE001 - an observer must never stop the loop
                log.exception("note observer failed")

    # -- slots ---------------------------------------------------------------------------------------
    def slots(self):
        t, cached = self._slots_cache
        if time.time() - t > max(1.0, self.cfg.daemon.tick_s):
            cached = self.runner.slots()
            self._slots_cache = (time.time(), cached)
        return cached

    @property
    def depth(self) -> int:
        """Trials one slot may hold: 1 running, the rest pre-staged (waiting on the host for the slot)."""
        return max(1, int(self.runner.prestage))

    def free_slots(self):
        """Slots that can take a trial now: idle ones first, then pre-staging room, spread over hosts."""
        self.probe_due()
        slots = [s for s in self.slots() if s.reachable and len(self._busy.get(s.key, ())) < self.depth
                 and self.health.usable(s.host)]
        per_host: dict[str, int] = {}
        for k, v in self._busy.items():
            per_host[k.split("/", 1)[0]] = per_host.get(k.split("/", 1)[0], 0) + len(v)
        return sorted(slots, key=lambda s: (len(self._busy.get(s.key, ())), per_host.get(s.host, 0)))

    def _occupy(self, key: str, trial_id: str) -> None:
        self._busy.setdefault(key, []).append(trial_id)

    def slot_table(self) -> list[dict]:
        return [{"slot": s.key, "state": "unreachable" if not s.reachable else
                 "degraded" if not self.health.usable(s.host) else ("busy" if self._busy.get(s.key) else "free"),
                 "reason": self.health.reason(s.host) if s.reachable else self._unreachable_why(s.host),
                 "trial": (self._busy.get(s.key) or [None])[0], "staged": (self._busy.get(s.key) or [])[1:]}
                for s in self.slots()]

    def harness(self) -> tuple[bytes | None, str | None]:
        base = self._base or self.research.baseline_commit
        if self._harness is None or self._harness[0] != base:
            tar, digest = self.research.harness()
            self._harness = (base, tar, digest, self.research.frozen_files())
        return self._harness[1], self._harness[2]

    # -- dispatch ------------------------------------------------------------------------------------
    def validate(self, idea: Idea) -> str | None:
        return self.gate.why(idea)

    def reject_on_arrival(self, pop: Population) -> bool:
        return self.gate.reject_new(pop)

    def _measured_trees(self, pop: Population) -> dict[str, str]:
        trees = {}
        if pop.baseline_note is not None and pop.baseline_commit:
            trees[self.repo.tree_of(pop.baseline_commit)] = pop.baseline_commit
        for i in pop.ideas:
            if i.note is not None and i.note.status in MEASURED and i.tree and not i.note.linked:
                trees.setdefault(i.tree, i.commit)
        return trees

    def _link(self, idea: Idea, other: str, pop: Population) -> None:
        src = pop.baseline_note if other == pop.baseline_commit else pop.by_commit[other].note
        note = src.model_copy(deep=True)
        note.idea_id, note.linked, note.decision = idea.idea_id, other, None
        note.tokens, note.cost_usd, note.cost = idea.tokens, idea.cost_usd, {}   # this idea's spend, not the other's
        note.error = f"identical code (same tree) as {other[:10]}: result linked, not re-run"
        fill_baseline(note, idea, pop, self.research.manifest, self.cfg.policy)
        self._noted(idea.commit, idea, note)

    def dispatch(self, pop: Population, jobs: list[Job]) -> int:
        started = 0
        trees = None
        self._base = pop.baseline_commit
        batch = []
        for job in jobs:
            free = self.free_slots()
            if not free:
                break
            idea = job.idea
            if job.purpose == Purpose.BASELINE and job.seed > 0 and pop.baseline_note is None \
                    and self._busy.get(free[0].key):
                # no idle slot: a later baseline seed would be staged behind (or, racing for the
                # slot lock, ahead of) seed 0, whose result is the first note a user waits for
                continue
            if job.purpose == Purpose.IDEA and idea is not None:
                why = self.validate(idea)
                if why:
                    self.gate.reject(idea, why)
                    continue
                trees = trees if trees is not None else self._measured_trees(pop)
                if idea.tree in trees and trees[idea.tree] != idea.commit:
                    self._link(idea, trees[idea.tree], pop)
                    continue
            self._occupy(free[0].key, job.trial_id)
            batch.append((job, free[0]))
            started += 1
        self._start_many(batch, pop)
        return started

    def _start_many(self, batch: list, pop: Population) -> None:
        """Write every lease (one git commit), then submit them all on the pool."""
        if not batch:
            return
        tar, digest = self.harness()
        frozen = self._harness[3]
        current: dict[str, list[Lease]] = {}     # commit -> its leases as written (several seeds, one tick)
        staged = []
        # kept from the moment it runs: a branch deleted or force-pushed meanwhile loses no result
        # (one ref write per commit, however many of its seeds this batch places)
        for commit in {j.commit for j, _ in batch if j.idea is not None and j.idea.commit == j.commit
                       and (j.idea.branch or "").startswith(IDEA_BRANCHES)}:
            self.repo.update_ref(ARCHIVE_PREFIX + commit, commit)
        with self.repo.notes_batch():                  # all of this round's leases in one commit ...
            for job, slot in batch:
                lease = Lease(trial_id=job.trial_id, seed=job.seed, runner=self.runner.name, host=slot.host,
                              slot=slot.slot, retries=job.retries, attempt=job.attempt, faults=list(job.faults),
                              purpose=job.purpose, harness=digest)
                lease.handle = self.runner.predict_handle(job.trial_id, slot)
                have = current.get(job.commit)
                if have is None:
                    have = list(job.idea.leases) if job.idea is not None and job.idea.commit == job.commit else \
                        list(pop.baseline_leases) if job.commit == pop.baseline_commit else \
                        self.ledger.leases(job.commit)
                # the seed's earlier attempts go, except a result and trials that may still live on a host
                have = current[job.commit] = [lz for lz in have if lz.seed != job.seed
                                              or lz.state in (LeaseState.DONE, LeaseState.STALE, LeaseState.SUPERSEDED)] + [lease]
                self.ledger.write_leases(job.commit, have)
                staged.append((job, slot, lease, dict(lease.handle)))
        # ... written before any trial starts: crash-safe
        futures = [self._pool.submit(self._submit, job, slot, tar, frozen) for job, slot, _, _ in staged]
        keep = set(self.runner.REDERIVABLE)
        with self.repo.notes_batch():
            for (job, slot, lease, predicted), fut in zip(staged, futures):
                try:
                    lease.handle = fut.result()
                except Exception as e:  # noqa: BLE001 - a host failing at submit: the host's fault
                    log.warning("submit %s to %s failed: %s", job.trial_id, slot.key, e)
                    self.submit_failed(lease, slot.key, e)
                    self._slots_cache = (0.0, [])
                    if job.trial_id in self._busy.get(slot.key, []):
                        self._busy[slot.key].remove(job.trial_id)
                    lease.heartbeat = time.time()
                    self.ledger.write_leases(job.commit, current[job.commit])
                    continue
                # the lease already names the trial dir; rewrite it only for what a poll cannot re-derive
                if {k: v for k, v in lease.handle.items() if k not in keep} != \
                        {k: v for k, v in predicted.items() if k not in keep}:
                    self.ledger.write_leases(job.commit, current[job.commit])
                log.info("dispatched %s to %s", job.trial_id, slot.key)

    def _submit(self, job: Job, slot, tar, frozen) -> dict:
        from autoresearchd.runners.base import TrialSpec
        m = self.research.manifest
        spec = TrialSpec(job.trial_id, job.commit, job.seed, m, self.repo.archive(job.commit, exclude=m.heldout()),
                         tar, [f for f in frozen if f not in m.heldout()], job.purpose, self.research.prepare_key())
        if m.knobs:       # a tuned commit's values (its knobs file, validated by the gate before dispatch)
            from autoresearchd.tune.knobs import commit_values, knob_env
            spec.knobs = knob_env(m, commit_values(self.repo, job.commit, m))
        return self.runner.submit(spec, slot)
