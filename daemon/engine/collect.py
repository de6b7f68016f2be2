"""Collect: bring finished trials home. Each tick polls the live leases, fetches the outcomes of
the finished ones, stores the log, writes the result note, then clears the lease (that order makes a
restart at any point re-derive the same state), and backfills decisions once the baseline is complete.
Every write goes through the lifecycle writer (store/lifecycle.py), which tells the observers. A
harvest rebuilds the slot table's occupancy from the live leases; host faults and stale trials are
Recovery's (engine/recovery.py), which it is given.
"""

from __future__ import annotations

import logging
import time

from autoresearchd import defaults
from autoresearchd.engine.judge import build_note, fill_baseline, flag_identical, seed_warning
from autoresearchd.engine.plan import baseline_complete, seeds_needed
from autoresearchd.engine.recovery import poll_states
from autoresearchd.engine.shared import Part, Shared
from autoresearchd.runners.base import PollState
from autoresearchd.runners.progress import dumps as curve_blob
from autoresearchd.store.ideas import Idea
from autoresearchd.store.notes import BASELINE_NOTE_ID, Lease, Note, Status, Trial
from autoresearchd.store.population import Population
from autoresearchd.store.trust import suspicion
from autoresearchd.vocab import MEASURED, POLLED, Decision, LeaseState, Purpose

log = logging.getLogger("autoresearchd")

KEPT = POLLED        # lease states that outlive their commit's result note (live or stale trials)


class Collector(Part):
    """Harvest, outcomes, finishing a unit (its result note), and backfill. Its own state: the trial
    directories to remove after this harvest, and the baseline (with its leases) last harvested."""

    def __init__(self, shared: Shared, screener=None):
        super().__init__(shared)                 # clean-ups run on its pool, off the tick's path
        self._cleanups: list[dict] = []          # handles whose notes are written: remove their dirs
        self._last_baseline: tuple[str | None, list] = (None, [])   # the baseline and its leases, last harvest
        self.screener = screener    # engine/screener.py, with [screening] enabled

    # -- harvest -------------------------------------------------------------------------------------
    def _units(self, pop: Population):
        if pop.baseline_commit:
            yield pop.baseline_commit, None, pop.baseline_note, pop.baseline_leases
        for idea in pop.ideas:       # a branch at the baseline commit is no idea (Population.at_baseline)
            if idea.leases:
                yield idea.commit, idea, idea.note, idea.leases
        if self.screener is not None:   # screened runs: their own commits, never an idea's result
            yield from self.screener.units(pop)

    def _baseline_moved(self, pop: Population) -> None:
        """The baseline branch moved (a commit or merge in the research repo) while seeds of the old
        baseline ran: cancel them and say so in the old commit's note; the new baseline is measured
        afresh. (The daemon remembers the old baseline's leases from its previous harvest.)"""
        old, leases = self._last_baseline
        self._last_baseline = (pop.baseline_commit, pop.baseline_leases)
        if old is None and pop.baseline_commit:
            # the first harvest after a start: an earlier baseline (a first-parent ancestor) may still
            # hold live leases from before the restart
            for c in self.repo.first_parent_ancestors(pop.baseline_commit, defaults.BASELINE_MOVE_SCAN):
                self._cancel_old_baseline(pop, c, self.ledger.leases(c))     # a no-op without live seeds
            return
        if old != pop.baseline_commit:
            self._cancel_old_baseline(pop, old, leases)

    def _cancel_old_baseline(self, pop: Population, old: str, leases: list[Lease]) -> None:
        live = [lz for lz in leases if lz.state in POLLED]
        if not live:
            return
        for lz in live:
            try:
                self.runner.cancel(lz.handle)
            except Exception:  # noqa: BLE001 - the host may be away; its directory goes below anyway
                pass
            self._cleanups.append(lz.handle)
        why = (f"cancelled: the baseline moved to {(pop.baseline_commit or '?')[:10]} while "
               f"{', '.join(lz.trial_id for lz in live)} ran; the new baseline is measured afresh")
        log.warning("%s", why)
        note = self.ledger.note(old)
        if note is None:
            note = Note(status=Status.CANCELLED, idea_id=BASELINE_NOTE_ID, error=why)
        else:
            note = note.model_copy(deep=True)
            note.error = "; ".join(x for x in (note.error, why) if x)
        with self.lifecycle.batch():
            self.lifecycle.cancelled(old, None, note, [lz for lz in leases if lz.state not in POLLED])

    def harvest(self, pop: Population) -> bool:
        """Poll every live trial (one batched call per host), fetch the finished ones, write notes."""
        changed = False
        self.slots.clear()
        self._baseline_moved(pop)
        self.harness.at(pop.baseline_commit)
        units = [u for u in self._units(pop) if u[3]]
        live = [lz for u in units for lz in u[3] if lz.state in POLLED]
        states = dict(zip(map(id, live), poll_states(self.runner, live)))
        self.recovery.last_probe([lz for lz in live if lz.state == LeaseState.RUNNING], states)
        for lz in live:
            if states[id(lz)] not in (PollState.UNREACHABLE, None):
                self.recovery.answered(lz.host)
        done = [lz for lz in live if states[id(lz)] == PollState.DONE]
        outcomes = dict(zip(map(id, done), self._fetch_outcomes(done)))
        with self.lifecycle.batch():       # every note and lease of this harvest: one commit per ref
            for commit, idea, note, leases in units:
                try:
                    updated = [self._poll_one(lz, states.get(id(lz)), outcomes.get(id(lz))) for lz in leases]
                    seeds = {t.seed for t in note.trials} if note else set()
                    # Recovery finds the stale trials that finished while their host was away; they are
                    # collected here, as any finished trial is, and Recovery settles the twins with them
                    found = self.recovery.stale_finished(updated, states, seeds)
                    collected = {id(lz): self._collect(lz.model_copy(deep=True), outcomes.get(id(lz)))
                                 for lz in found}
                    updated, _ = self.recovery.settle_stale(updated, states, seeds, collected)
                    # the seed's result is already in the note: a superseded twin, or a finished trial
                    # (a twin that ended after the note, or the counted one whose lease a kill left
                    # behind between the note and the lease clear): drop the leases, and name in the
                    # note every trial of them it does not count
                    # (a lost or requeued lease of such a seed is only dropped: nothing of it finished)
                    late = [lz for lz in updated if lz.seed in seeds and lz.state not in POLLED]
                    if late and any(lz.purpose == Purpose.SCREEN for lz in late):
                        updated = [lz for lz in updated if not any(lz is x for x in late)]
                    elif late:
                        counted = {t.trial_id for t in note.trials}
                        extra = {lz.trial_id for lz in late if lz.trial_id not in counted
                                 and lz.state in (LeaseState.SUPERSEDED, LeaseState.DONE)}
                        if extra - set(note.superseded):
                            note = note.model_copy(deep=True)
                            note.superseded = sorted(set(note.superseded) | extra)
                            self.lifecycle.result(commit, idea, note)
                        updated = [lz for lz in updated if not any(lz is x for x in late)]
                    moved = len(updated) != len(leases) or \
                        any(a.model_dump() != b.model_dump() for a, b in zip(updated, leases))
                    finished = self._maybe_finish(commit, idea, note, updated, pop)
                    if moved and not finished:     # a finished unit's note holds the results; its leases are rewritten
                        self.lifecycle.leased(commit, updated)
                    changed |= moved or finished
                except Exception:  # noqa: BLE001 - one stuck commit must not stop the others' harvest
                    log.exception("harvesting %s failed; retrying on the next tick", commit[:10])
                    for lz in leases:
                        if lz.state == LeaseState.RUNNING:
                            self.slots.occupy(f"{lz.host}/{lz.slot}", lz.trial_id)
        self._flush_cleanups()
        return changed

    def _fetch_outcomes(self, done: list[Lease]) -> list:
        """Outcomes (or the exception that stopped a fetch) of finished trials, hosts at once."""
        if not done:
            return []
        try:
            return self.runner.fetch_many([lz.handle for lz in done])
        except Exception as e:  # noqa: BLE001
            return [e] * len(done)

    def _flush_cleanups(self) -> None:
        """Remove the directories of trials whose notes are written, off the tick's path."""
        handles, self._cleanups = self._cleanups, []
        if not handles:
            return

        def work():
            try:
                self.runner.cleanup_many(handles)
            except Exception:  # noqa: BLE001 - a leftover dir is harmless
                pass
        self._pool.submit(work)

    def _poll_one(self, lease: Lease, state=None, outcome=None) -> Lease:
        if lease.state != LeaseState.RUNNING:
            return lease
        now = time.time()
        if state is None:
            state = poll_states(self.runner, [lease])[0]     # (a poll reads the handle, never writes it)
        # a running trial, the usual answer (every live trial, every pass), changes scalars only: a
        # shallow copy (its handle, faults and result shared with the lease, unchanged); the rest get their own
        lz = lease.model_copy(deep=state != PollState.RUNNING)
        if state == PollState.RUNNING:
            began = self.runner.started_at.pop(lz.handle.get("dir"), None)
            if lz.began is None:     # the run has begun (not just placed): views count elapsed time from here
                lz.began = began
            self.slots.occupy(f"{lz.host}/{lz.slot}", lz.trial_id)
            self.recovery.alive(lz.trial_id)
            if now - lz.heartbeat > self.cfg.daemon.heartbeat_s:
                lz.heartbeat = now
            return lz
        if state == PollState.DONE:
            return self._collect(lz, outcome)
        if state == PollState.UNREACHABLE:
            faulted = self.recovery.silent(lz)
            if faulted is None:          # within the lease TTL: the trial keeps its slot
                self.slots.occupy(f"{lz.host}/{lz.slot}", lz.trial_id)
                return lz
            return faulted
        if state == PollState.LOST and (full := self.recovery.disk_full(lz)):   # its wrapper could not write for lack of space
            self._cleanups.append(lz.handle)
            return self.recovery.host_fault(lz, full, LeaseState.REQUEUED)
        if state == PollState.MISSING and self.recovery.never_placed(lz):
            # leased by an earlier daemon process that died before the trial dir existed: the daemon's
            # fault, not the idea's, so the seed is placed again without spending a retry
            log.warning("trial %s was never placed (the daemon stopped mid-submit): back to the queue",
                        lz.trial_id)
            lz.state, lz.error = LeaseState.REQUEUED, "the daemon stopped before the trial was placed"
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
            lz.state = LeaseState.DONE
            lz.result = Trial(trial_id=lz.trial_id, seed=lz.seed, status=Status.LOST, host=lz.host,
                              error=f"{why}; gave up after {lz.retries + 1} attempts")
        else:
            lz.state = LeaseState.LOST
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
            return self.recovery.host_fault(lz, out.host_fault, LeaseState.REQUEUED)
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
        digest = self.harness.digest()
        harness = lz.model_extra.get("harness") if lz.model_extra else None
        if harness and digest and harness != digest:
            status, error = Status.REFUSED, "evaluation harness differs from the current baseline's"
        log_sha = self.lifecycle.store_log(lz.trial_id, out.log) if out.log else None
        curve_sha = self.lifecycle.store_log(f"{lz.trial_id}.curve", curve_blob(out.curve)) if out.curve else None
        budget = self.research.manifest.time_budget_s
        if lz.purpose == Purpose.BASELINE and status == Status.TIMED_OUT:
            # not retried: on the same machine it would time out again, and silently re-running it
            # hid the cause for many minutes. The note and the log say it plainly instead.
            error = (f"the baseline run took longer than the env's time_budget_s ({budget:g} s), so nothing "
                     f"can be compared with it: the machine is too slow or too loaded for this budget. "
                     f"Not retried. Raise time_budget_s in the manifest and commit it to the baseline "
                     f"branch (a new baseline commit is measured afresh), or free the machine")
            log.warning("baseline seed %d timed out: %s", lz.seed, error)
        elif lz.purpose == Purpose.BASELINE and status != Status.SUCCEEDED and lz.retries < self.cfg.daemon.max_retries:
            # every idea is measured against the baseline: a failed baseline seed is run again
            return self._lost(lz, f"baseline seed {lz.seed} {status.value}: {error}")
        lz.state = LeaseState.DONE
        lz.result = Trial(trial_id=lz.trial_id, seed=lz.seed, status=status, value=value,
                          metrics=out.metrics, exit_code=out.exit_code, host=lz.host, wall_s=out.wall_s,
                          cpu_s=out.cpu_s, gpu_s=out.gpu_s, eval_wall_s=out.eval_wall_s, eval_cpu_s=out.eval_cpu_s,
                          limit=out.limit, run_metrics=out.run_metrics, gpus=self.research.manifest.gpus, log=log_sha, curve=curve_sha, error=error, tamper=out.tamper,
                          harness=harness or digest, accelerator=out.accelerator, software=out.software,
                          sandbox=out.sandbox, trust=out.trust, faults=list(lz.faults))
        log.info("trial %s on %s: %s %s", lz.trial_id, lz.host, status.value,
                 f"{m.metric}={value:.4f}" if value is not None else (error or ""))
        return lz

    def _maybe_finish(self, commit: str, idea: Idea | None, note: Note | None, leases: list[Lease],
                      pop: Population) -> bool:
        if self.screener is not None and any(lz.purpose == Purpose.SCREEN for lz in leases):
            return self.screener.finish(commit, idea, note, leases, pop)
        p = self.cfg.policy
        needed = seeds_needed(note, Purpose.BASELINE if idea is None else Purpose.IDEA, p.baseline_seeds,
                              p.confirm_seeds)
        results = {t.seed: t for t in (note.trials if note else [])}
        for lz in leases:
            if lz.state == LeaseState.DONE and lz.result is not None:
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
        confirming = note is not None and note.decision == Decision.PENDING
        if idea is not None and note is not None and note.baseline_commit and pop.stale(idea):
            # confirmation seeds that were running when the baseline moved: judged against the baseline the
            # result was measured on, so it stays apart (docs/policies.md, "A moved baseline")
            old = self.ledger.note(note.baseline_commit)
            if old is not None:
                pop = pop.on_baseline(note.baseline_commit, old)
        new = build_note(list(results.values()), idea, pop, self.research.manifest, p, confirmed=confirming)
        new.superseded = sorted(set(note.superseded if note else []) |
                                {lz.trial_id for lz in leases if lz.state == LeaseState.SUPERSEDED})
        if idea is None:
            new.seeds_planned = len(needed)
            if flag_identical(new, self.research.manifest):
                log.warning("baseline: %s", seed_warning(new))
        # the note, then the leases still live (the crash-safe order: store/ledger.py)
        self.lifecycle.result(commit, idea, new, kept=[lz for lz in leases if lz.state in KEPT])
        self._cleanups += [lz.handle for lz in leases if lz.state == LeaseState.DONE]   # removed after this harvest
        return True

    def backfill(self, pop: Population) -> bool:
        """Notes written before the baseline was measured get their baseline, delta and decision
        (through the lifecycle writer, so the observers hear of it too)."""
        if pop.baseline_value is None:
            return False
        changed = False
        final = baseline_complete(pop.baseline_note)
        with self.lifecycle.batch():
            for idea in pop.ideas:
                if idea.note is None or idea.note.status not in MEASURED or pop.stale(idea):
                    continue        # a result measured against an old baseline is kept apart, never re-judged
                # notes measured against the baseline's first seeds get their decision when it is final
                undecided = final and idea.note.decision is None and idea.note.status == Status.SUCCEEDED
                if idea.note.baseline is not None and not undecided:
                    continue
                n = idea.note.model_copy(deep=True)    # population notes are shared, parsed once per blob
                if fill_baseline(n, idea, pop, self.research.manifest, self.cfg.policy):
                    self.lifecycle.backfilled(idea.commit, idea, n)
                    changed = True
        return changed
