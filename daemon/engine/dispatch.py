"""Dispatch and harvest: move work between the queue (derived from refs), the runner and notes.

Dispatch writes the lease before the runner starts anything; harvest stores the log, writes the
result note, then clears the lease. Every idea is validated before it can run (frozen files, paths,
symlinks, sizes, relation to the baseline) and identical trees are linked instead of re-run.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

from autoresearchd.engine.arrivals import Gate
from autoresearchd.engine.judge import Job, baseline_complete, seeds_needed
from autoresearchd.engine.health import HostHealth
from autoresearchd.store.ideas import Idea
from autoresearchd.store.notes import Lease, Note, Status, Trial
from autoresearchd.store.population import ARCHIVE_PREFIX, BRANCH_PREFIX, Population
from autoresearchd.engine.recovery import Recovery
from autoresearchd.engine.judge import build_note, fill_baseline, flag_identical, seed_warning
from autoresearchd.store.ledger import Ledger
from autoresearchd.store.trust import suspicion
from autoresearchd.runners.base import PollState

log = logging.getLogger("autoresearchd")

MEASURED = (Status.SUCCEEDED, Status.FAILED, Status.TIMED_OUT)
POLLED = ("running", "stale")      # lease states whose trials are asked about each harvest
KEPT = ("running", "stale")        # lease states that outlive their commit's result note


class Dispatcher(Recovery):
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
        self.gate = Gate(cfg, research, self._noted)   # validation, cached per commit
        self.on_note: list = []                  # callbacks(commit, idea | None, note), e.g. the W&B mirror
        self._pool = ThreadPoolExecutor(8, thread_name_prefix="dispatch")   # submits and clean-ups

    def _noted(self, commit: str, idea, note: Note) -> None:
        if idea is not None:
            # the daemon's record of provenance: for a pushed commit this, not its trailers, is the truth
            note.origin, note.epoch = idea.origin, idea.epoch
        self.ledger.write_note(commit, note)
        if idea is not None and idea.branch and idea.branch.startswith(BRANCH_PREFIX):
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
        return max(1, int(getattr(self.runner, "prestage", 1)))

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

    # -- harvest -------------------------------------------------------------------------------------
    def _units(self, pop: Population):
        if pop.baseline_commit:
            yield pop.baseline_commit, None, pop.baseline_note, pop.baseline_leases
        for idea in pop.ideas:
            if idea.leases:
                yield idea.commit, idea, idea.note, idea.leases

    def harvest(self, pop: Population) -> bool:
        """Poll every live trial (one batched call per host), fetch the finished ones, write notes."""
        changed = False
        self._busy = {}
        self._base = pop.baseline_commit
        units = [u for u in self._units(pop) if u[3]]
        live = [lz for u in units for lz in u[3] if lz.state in POLLED]
        states = dict(zip(map(id, live), self._poll_states(live)))
        self.last_probe([lz for lz in live if lz.state == "running"], states)
        for lz in live:
            if states[id(lz)] not in (PollState.UNREACHABLE, None):
                self.health.seen(lz.host)
        done = [lz for lz in live if states[id(lz)] == PollState.DONE]
        outcomes = dict(zip(map(id, done), self._fetch_outcomes(done)))
        with self.repo.notes_batch():      # every note and lease of this harvest: one commit per ref
            for commit, idea, note, leases in units:
                try:
                    updated = [self._poll_one(lz, states.get(id(lz)), outcomes.get(id(lz))) for lz in leases]
                    seeds = {t.seed for t in note.trials} if note else set()
                    updated, _ = self.settle_stale(commit, updated, states, outcomes, seeds)
                    late = [lz for lz in updated if lz.state == "superseded" and lz.seed in seeds]
                    if late:     # the seed's result is already in the note: record them there, drop the leases
                        note = note.model_copy(deep=True)
                        note.superseded = sorted(set(note.superseded) | {lz.trial_id for lz in late})
                        self._noted(commit, idea, note)
                        updated = [lz for lz in updated if not any(lz is x for x in late)]
                    moved = len(updated) != len(leases) or \
                        any(a.model_dump() != b.model_dump() for a, b in zip(updated, leases))
                    finished = self._maybe_finish(commit, idea, note, updated, pop)
                    if moved and not finished:     # a finished unit's note holds the results; its leases are rewritten
                        self.ledger.write_leases(commit, updated)
                    changed |= moved or finished
                except Exception:  # noqa: BLE001 - one stuck commit must not stop the others' harvest
                    log.exception("harvesting %s failed; retrying on the next tick", commit[:10])
                    for lz in leases:
                        if lz.state == "running" and lz.trial_id not in self._busy.get(f"{lz.host}/{lz.slot}", []):
                            self._occupy(f"{lz.host}/{lz.slot}", lz.trial_id)
        self._flush_cleanups()
        return changed

    def _poll_states(self, live: list[Lease]) -> list:
        many = getattr(self.runner, "poll_many", None)
        if many is not None and live:
            try:
                return many([lz.handle for lz in live])
            except Exception as e:  # noqa: BLE001 - an unexpected runner error counts as unreachable
                log.warning("polling failed: %s", e)
                return [PollState.UNREACHABLE] * len(live)
        out = []
        for lz in live:
            try:
                out.append(self.runner.poll(lz.handle))
            except Exception as e:  # noqa: BLE001
                log.warning("poll %s failed: %s", lz.trial_id, e)
                out.append(PollState.UNREACHABLE)
        return out

    def _fetch_outcomes(self, done: list[Lease]) -> list:
        """Outcomes (or the exception that stopped a fetch) of finished trials, hosts at once."""
        many = getattr(self.runner, "fetch_many", None)
        if many is not None and done:
            try:
                return many([lz.handle for lz in done])
            except Exception as e:  # noqa: BLE001
                return [e] * len(done)
        out = []
        for lz in done:
            try:
                out.append(self.runner.fetch(lz.handle))
            except Exception as e:  # noqa: BLE001
                out.append(e)
        return out

    def _flush_cleanups(self) -> None:
        """Remove the directories of trials whose notes are written, off the tick's path."""
        handles, self._cleanups = self._cleanups, []
        if not handles:
            return

        def work():
            try:
                many = getattr(self.runner, "cleanup_many", None)
                if many is not None:
                    many(handles)
                else:
                    for h in handles:
                        self.runner.cleanup(h)
            except Exception:  # noqa: BLE001 - a leftover dir is harmless
                pass
        self._pool.submit(work)

    def _poll_one(self, lease: Lease, state=None, outcome=None) -> Lease:
        if lease.state != "running":
            return lease
        lz = lease.model_copy(deep=True)
        now = time.time()
        if state is None:
            state = self._poll_states([lz])[0]
        if state == PollState.RUNNING:
            began = getattr(self.runner, "started_at", {}).pop(lz.handle.get("dir"), None)
            if lz.began is None:     # the run has begun (not just placed): views count elapsed time from here
                lz.began = began
            self._occupy(f"{lz.host}/{lz.slot}", lz.trial_id)
            self._last_seen[lz.trial_id] = now
            if now - lz.heartbeat > self.cfg.daemon.heartbeat_s:
                lz.heartbeat = now
            return lz
        if state == PollState.DONE:
            return self._collect(lz, outcome)
        if state == PollState.UNREACHABLE:
            seen = self._last_seen.setdefault(lz.trial_id, max(lz.heartbeat, self.started))
            self.health.fault(lz.host, self._unreachable_why(lz.host))
            if now - seen <= self.cfg.daemon.lease_ttl_s:
                self._occupy(f"{lz.host}/{lz.slot}", lz.trial_id)
                return lz
            # the last probe (Recovery.last_probe) failed too: the host's fault; the trial may live on
            return self._host_fault(lz, f"host {lz.host} unreachable for more than "
                                        f"{self.cfg.daemon.lease_ttl_s:.0f}s (daemon.lease_ttl_s)", "stale")
        if state == PollState.LOST and (full := self.disk_full(lz)):   # its wrapper could not write for lack of space
            self._cleanups.append(lz.handle)
            return self._host_fault(lz, full, "requeued")
        if state == PollState.MISSING and lz.began is None and lz.heartbeat < self.started \
                and lz.trial_id not in self._last_seen:
            # leased by an earlier daemon process that died before the trial dir existed: the daemon's
            # fault, not the idea's, so the seed is placed again without spending a retry
            log.warning("trial %s was never placed (the daemon stopped mid-submit): back to the queue",
                        lz.trial_id)
            lz.state, lz.error = "requeued", "the daemon stopped before the trial was placed"
            return lz
        return self._lost(lz, f"trial vanished on {lz.host} ({state.value})")

    def _lost(self, lz: Lease, why: str) -> Lease:
        log.warning("trial %s lost: %s (retry %d of %d)", lz.trial_id, why, lz.retries, self.cfg.daemon.max_retries)
        try:
            self.runner.cancel(lz.handle)
        except Exception:  # noqa: BLE001 - the host may be gone
            pass
        self._cleanups.append(lz.handle)        # what it left (wrapper log, partial output) goes too
        lz.error = why
        if lz.retries >= self.cfg.daemon.max_retries:
            lz.state = "done"
            lz.result = Trial(trial_id=lz.trial_id, seed=lz.seed, status=Status.LOST, host=lz.host,
                              error=f"{why}; gave up after {lz.retries + 1} attempts")
        else:
            lz.state = "lost"
        return lz

    def _collect(self, lz: Lease, out=None) -> Lease:
        try:
            if out is None:
                out = self.runner.fetch(lz.handle)
            elif isinstance(out, Exception):
                raise out
        except Exception as e:  # noqa: BLE001
            log.warning("fetch %s failed: %s", lz.trial_id, e)
            return lz  # try again next tick
        if out.requeue:
            return self._lost(lz, out.error or "the scheduler requeued the job")
        if out.host_fault:       # e.g. the disk filled during the run: not the idea's failure
            self._cleanups.append(lz.handle)
            return self._host_fault(lz, out.host_fault, "requeued")
        m = self.research.manifest
        value = out.metrics.get(m.metric)
        if out.timed_out:
            status = Status.TIMED_OUT
        elif out.error or value is None:
            status = Status.FAILED
        else:
            status = Status.SUCCEEDED
        error = out.error
        if status == Status.SUCCEEDED:
            why = suspicion(value, out.tamper, m)
            if why:
                status, error = Status.SUSPICIOUS, why
        _, digest = self.harness()
        harness = lz.model_extra.get("harness") if lz.model_extra else None
        if harness and digest and harness != digest:
            status, error = Status.REFUSED, "evaluation harness differs from the current baseline's"
        log_sha = self.ledger.store_log(lz.trial_id, out.log) if out.log else None
        budget = self.research.manifest.time_budget_s
        if lz.purpose == "baseline" and status == Status.TIMED_OUT:
            # not retried: on the same machine it would time out again, and silently re-running it
            # hid the cause for many minutes. The note and the log say it plainly instead.
            error = (f"the baseline run took longer than the env's time_budget_s ({budget:g} s), so nothing "
                     f"can be compared with it: the machine is too slow or too loaded for this budget. "
                     f"Not retried. Raise time_budget_s in the manifest and commit it to the baseline "
                     f"branch (a new baseline commit is measured afresh), or free the machine")
            log.warning("baseline seed %d timed out: %s", lz.seed, error)
        elif lz.purpose == "baseline" and status != Status.SUCCEEDED and lz.retries < self.cfg.daemon.max_retries:
            # every idea is measured against the baseline: a failed baseline seed is run again
            return self._lost(lz, f"baseline seed {lz.seed} {status.value}: {error}")
        lz.state = "done"
        lz.result = Trial(trial_id=lz.trial_id, seed=lz.seed, status=status, value=value,
                          metrics=out.metrics, exit_code=out.exit_code, host=lz.host, wall_s=out.wall_s,
                          gpus=self.research.manifest.gpus, log=log_sha, error=error, tamper=out.tamper,
                          harness=harness or digest, accelerator=out.accelerator, software=out.software,
                          sandbox=out.sandbox, faults=list(lz.faults))
        log.info("trial %s on %s: %s %s", lz.trial_id, lz.host, status.value,
                 f"{m.metric}={value:.4f}" if value is not None else (error or ""))
        return lz

    def _maybe_finish(self, commit: str, idea: Idea | None, note: Note | None, leases: list[Lease],
                      pop: Population) -> bool:
        p = self.cfg.policy
        needed = seeds_needed(note, "baseline" if idea is None else "idea", p.baseline_seeds, p.confirm_seeds)
        results = {t.seed: t for t in (note.trials if note else [])}
        for lz in leases:
            if lz.state == "done" and lz.result is not None:
                results.setdefault(lz.seed, lz.result)
        if all(lz.state in KEPT for lz in leases):
            return False     # only live or stale trials left: nothing new to write
        if idea is None:
            # the baseline's note is written as soon as seed 0 is in (the first result a user sees),
            # then amended as each later seed arrives
            if 0 not in results or note is not None and set(results) <= {t.seed for t in note.trials}:
                return False
        elif not all(s in results for s in needed):
            return False
        confirming = note is not None and note.decision == "pending"
        new = build_note(list(results.values()), idea, pop, self.research.manifest, p, confirmed=confirming)
        new.superseded = sorted(set(note.superseded if note else []) |
                                {lz.trial_id for lz in leases if lz.state == "superseded"})
        if idea is None:
            new.seeds_planned = len(needed)
            if flag_identical(new, self.research.manifest):
                log.warning("baseline: %s", seed_warning(new))
        self._noted(commit, idea, new)
        self._cleanups += [lz.handle for lz in leases if lz.state == "done"]   # removed after this harvest
        self.ledger.write_leases(commit, [lz for lz in leases if lz.state in KEPT])
        return True

    def backfill(self, pop: Population) -> bool:
        """Notes written before the baseline was measured get their baseline, delta and decision."""
        if pop.baseline_value is None:
            return False
        changed = False
        final = baseline_complete(pop.baseline_note)
        for idea in pop.ideas:
            if idea.note is None or idea.note.status not in MEASURED:
                continue
            # notes measured against the baseline's first seeds get their decision when it is final
            undecided = final and idea.note.decision is None and idea.note.status == Status.SUCCEEDED
            if idea.note.baseline is not None and not undecided:
                continue
            n = idea.note.model_copy(deep=True)    # population notes are shared, parsed once per blob
            if fill_baseline(n, idea, pop, self.research.manifest, self.cfg.policy):
                self.ledger.write_note(idea.commit, n)
                changed = True
        return changed

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
            if job.purpose == "baseline" and job.seed > 0 and pop.baseline_note is None \
                    and self._busy.get(free[0].key):
                # no idle slot: a later baseline seed would be staged behind (or, racing for the
                # slot lock, ahead of) seed 0, whose result is the first note a user waits for
                continue
            if job.purpose == "idea" and idea is not None:
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
        predict = getattr(self.runner, "predict_handle", None)
        current: dict[str, list[Lease]] = {}     # commit -> its leases as written (several seeds, one tick)
        staged = []
        with self.repo.notes_batch():                  # all of this round's leases in one commit ...
            for job, slot in batch:
                lease = Lease(trial_id=job.trial_id, seed=job.seed, runner=self.runner.name, host=slot.host,
                              slot=slot.slot, retries=job.retries, attempt=job.attempt, faults=list(job.faults),
                              purpose=job.purpose, harness=digest)
                if predict is not None:
                    lease.handle = predict(job.trial_id, slot)
                have = current.get(job.commit)
                if have is None:
                    have = list(job.idea.leases) if job.idea is not None and job.idea.commit == job.commit else \
                        list(pop.baseline_leases) if job.commit == pop.baseline_commit else \
                        self.ledger.leases(job.commit)
                # the seed's earlier attempts go, except a result and trials that may still live on a host
                have = current[job.commit] = [lz for lz in have if lz.seed != job.seed
                                              or lz.state in ("done", "stale", "superseded")] + [lease]
                self.ledger.write_leases(job.commit, have)
                staged.append((job, slot, lease, dict(lease.handle)))
        # ... written before any trial starts: crash-safe
        futures = [self._pool.submit(self._submit, job, slot, tar, frozen) for job, slot, _, _ in staged]
        keep = set(getattr(self.runner, "REDERIVABLE", ()))
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
        return self.runner.submit(spec, slot)
