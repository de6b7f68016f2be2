"""Dispatch: move work from the queue (derived from refs) onto the slot table's free slots.

Dispatch writes the lease before the runner starts anything; engine/collect.py brings the results
home. Every idea is validated before it can run (the gate, engine/arrivals.py: frozen files, paths,
symlinks, sizes, relation to the baseline) and identical trees are linked instead of re-run. Every
write (archive ref, leases, linked and rejected notes) goes through the lifecycle writer. Its own
state: the gate's verdicts; slots, host faults, the harness and the submit pool it is given.
"""

from __future__ import annotations

import logging
import time

from autoresearchd.engine.arrivals import Gate
from autoresearchd.engine.judge import fill_baseline
from autoresearchd.engine.plan import Job
from autoresearchd.engine.shared import Part, Shared
from autoresearchd.runners.base import HostUnreachable, TrialSpec
from autoresearchd.store.ideas import Idea
from autoresearchd.store.notes import Lease
from autoresearchd.store.population import Population
from autoresearchd.store.refs import IDEA_BRANCHES
from autoresearchd.tune.knobs import commit_env
from autoresearchd.vocab import MEASURED, LeaseState, Purpose

log = logging.getLogger("autoresearchd")


class NotTried(RuntimeError):
    """A submit not made: the host did not answer the one before it on the slot (requeued, not stale)."""


class Dispatcher(Part):
    def __init__(self, shared: Shared):
        super().__init__(shared)                 # submits run on its pool, hosts at once
        self.gate = Gate(shared.cfg, shared.research, shared.lifecycle)   # validation, cached per commit

    def free_slots(self):
        """Slots that can take a trial now (degraded hosts whose back-off ran out are probed first)."""
        self.recovery.probe_due()
        return self.slots.free()

    # -- dispatch ------------------------------------------------------------------------------------
    def validate(self, idea: Idea, base: str | None = None) -> str | None:
        return self.gate.why(idea, base)

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
        self.lifecycle.linked(idea, note)

    def dispatch(self, pop: Population, jobs: list[Job]) -> int:
        started = 0
        trees = None
        self.harness.at(pop.baseline_commit)
        batch = []
        for job in jobs:
            free = self.free_slots()
            if not free:
                break
            idea = job.idea
            if job.purpose == Purpose.BASELINE and job.seed > 0 and pop.baseline_note is None \
                    and self.slots.busy(free[0].key):
                # no idle slot: a later baseline seed would be staged behind (or, racing for the
                # slot lock, ahead of) seed 0, whose result is the first note a user waits for
                continue
            if job.purpose in (Purpose.IDEA, Purpose.SCREEN) and idea is not None:
                why = self.validate(idea, pop.baseline_commit)   # a screen runs the idea's code: the same gate first
                if why:
                    self.gate.reject(idea, why)
                    continue
            if job.purpose == Purpose.IDEA and idea is not None:
                trees = trees if trees is not None else self._measured_trees(pop)
                if idea.tree in trees and trees[idea.tree] != idea.commit:
                    self._link(idea, trees[idea.tree], pop)
                    continue
            self.slots.occupy(free[0].key, job.trial_id)
            batch.append((job, free[0]))
            started += 1
        self._start_many(batch, pop)
        return started

    def _start_many(self, batch: list, pop: Population) -> None:
        """Write every lease (one git commit), then submit them all on the pool."""
        if not batch:
            return
        tar, digest, frozen = self.harness.get()
        current: dict[str, list[Lease]] = {}     # commit -> its leases as written (several seeds, one tick)
        staged = []
        with self.lifecycle.batch():                  # all of this round's leases in one commit ...
            # kept from the moment it runs: a branch deleted or force-pushed meanwhile loses no result
            # (one ref per commit, however many of its seeds this batch places; all of them in one
            # transaction, written before the leases)
            for commit in {j.commit for j, _ in batch if j.idea is not None and j.idea.commit == j.commit
                           and (j.idea.branch or "").startswith(IDEA_BRANCHES)}:
                self.lifecycle.archive(commit)
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
                self.lifecycle.leased(job.commit, have)
                staged.append((job, slot, lease, dict(lease.handle)))
        # ... written before any trial starts: crash-safe
        # One pool task per slot, its trials in batch order: the host queues a slot's staged trials in
        # the order they arrive (runners/base.py queued), and that order is the dispatcher's.
        by_slot: dict[str, list[int]] = {}
        for i, (_, slot, _, _) in enumerate(staged):
            by_slot.setdefault(slot.key, []).append(i)
        futures = {key: self._pool.submit(self._submit_in_order, [staged[i] for i in idx], tar, frozen)
                   for key, idx in by_slot.items()}
        answers = {i: a for key, idx in by_slot.items() for i, a in zip(idx, futures[key].result())}
        keep = set(self.runner.REDERIVABLE)
        with self.lifecycle.batch():
            for i, (job, slot, lease, predicted) in enumerate(staged):
                got = answers[i]
                if isinstance(got, NotTried):
                    self.recovery.not_tried(lease, str(got))
                elif isinstance(got, Exception):        # a host failing at submit: the host's fault
                    log.warning("submit %s to %s failed: %s", job.trial_id, slot.key, got)
                    self.recovery.submit_failed(lease, slot.key, got)
                if isinstance(got, Exception):
                    self.slots.release(slot.key, job.trial_id)
                    lease.heartbeat = time.time()
                    self.lifecycle.leased(job.commit, current[job.commit])
                    continue
                lease.handle = got
                # the lease already names the trial dir; rewrite it only for what a poll cannot re-derive
                if {k: v for k, v in lease.handle.items() if k not in keep} != \
                        {k: v for k, v in predicted.items() if k not in keep}:
                    self.lifecycle.leased(job.commit, current[job.commit])
                log.info("dispatched %s to %s", job.trial_id, slot.key)

    def _submit_in_order(self, items: list, tar, frozen) -> list:
        """One slot's submits, one after another: each its handle, or the exception it raised. Once
        the host does not answer, the slot's later trials are not tried (each would wait out its own
        time-out in turn, holding the tick); they go back to the queue, having started nowhere."""
        out: list = []
        for job, slot, _, _ in items:
            if out and isinstance(out[-1], HostUnreachable | NotTried):
                out.append(NotTried(f"not tried: {slot.host} did not answer the submit before it"))
                continue
            try:
                out.append(self._submit(job, slot, tar, frozen))
            except Exception as e:  # noqa: BLE001 - reported per trial by the caller
                out.append(e)
        return out

    def _submit(self, job: Job, slot, tar, frozen) -> dict:
        m = self.research.manifest
        spec = TrialSpec(job.trial_id, job.commit, job.seed, m, self.repo.archive(job.commit, exclude=m.heldout()),
                         tar, [f for f in frozen if f not in m.heldout()], job.purpose, self.research.prepare_key())
        # a tuned commit's values (its knobs file, checked against the manifest's knobs and the ones its
        # idea declares; the gate validated both before dispatch)
        spec.knobs = commit_env(self.repo, job.commit, m)
        return self.runner.submit(spec, slot)
