"""Recovery: the rules for when a host, not an idea, fails (host faults, silence, probes, stale trials).

- A host fault (submit failed, work root full or unwritable, the disk filled during the run, the host
  silent past the lease TTL) opens the host's circuit breaker (daemon/engine/health.py) and sends the seed
  back to the queue for a healthy host *without* spending one of the idea's retries. The lease keeps
  the fault ("host: reason") so a seed that meets `daemon.max_host_faults` of them, each on a host
  that had just passed its probe, is given up as `lost` with every reason in its note.
- Before a lease is declared lost for silence, the host gets one last probe (a fresh connect).
- A trial whose host went silent past the TTL stays in the lease note as `stale`: it may still live
  there. When the host answers again, a stale trial that finished while its seed has no result yet
  gives the result (its twin, re-run elsewhere, is cancelled); otherwise it is cancelled and its
  directory removed. The trial that does not count is listed in the note's `superseded`, never as a
  second result.
"""

from __future__ import annotations

import logging
import time

from autoresearchd.engine.health import HostHealth
from autoresearchd.engine.slots import SlotTable
from autoresearchd.runners.base import HostUnreachable, PollState
from autoresearchd.store.notes import Lease, Status, Trial
from autoresearchd.vocab import LeaseState

log = logging.getLogger("autoresearchd")


def poll_states(runner, live: list[Lease]) -> list:
    """The poll state of each live trial, hosts at once."""
    if not live:
        return []
    try:
        return runner.poll_many([lz.handle for lz in live])
    except Exception as e:  # noqa: BLE001 - an unexpected runner error counts as unreachable
        log.warning("polling failed: %s", e)
        return [PollState.UNREACHABLE] * len(live)


def _has_result(lz: Lease, leases: list, note_seeds: set[int]) -> bool:
    """The lease's seed has its result: in the note, or a done lease of the same seed (None: a lease
    settle_stale dropped earlier in its pass; reading its state raised and stalled the commit)."""
    return lz.seed in note_seeds or any(o is not None and o.state == LeaseState.DONE and o.seed == lz.seed
                                        for o in leases)


class Recovery:
    """Host faults, silence and stale trials. Its own state: when each trial was last seen alive."""

    def __init__(self, cfg, runner, slots: SlotTable, health: HostHealth, pool, wake=None):
        self.cfg, self.runner, self.slots, self.health = cfg, runner, slots, health
        self._pool = pool                        # probes run here, off the tick's path
        self._wake = wake                        # a probe passed: dispatch now (the Daemon's poke)
        self.started = time.time()
        self._last_seen: dict[str, float] = {}   # trial id -> when a poll last found it running

    # -- host faults ---------------------------------------------------------------------------------
    def host_fault(self, lz: Lease, why: str, state: str) -> Lease:
        """The host failed this trial: requeue the seed for a healthy host, keeping its retries."""
        self.health.fault(lz.host, why)
        lz.faults = list(lz.faults) + [f"{lz.host}: {why}"]
        lz.error = why
        limit = self.cfg.daemon.max_host_faults
        if len(lz.faults) >= limit:
            log.warning("trial %s: %d host faults, giving up: %s", lz.trial_id, len(lz.faults), why)
            lz.state = LeaseState.DONE
            lz.result = Trial(trial_id=lz.trial_id, seed=lz.seed, status=Status.LOST, host=lz.host,
                              error=f"no healthy host could run it: {len(lz.faults)} host faults "
                                    f"(daemon.max_host_faults = {limit}): " + "; ".join(lz.faults))
        else:
            log.warning("trial %s back to the queue (host fault %d of %d, no retry spent): %s",
                        lz.trial_id, len(lz.faults), limit, why)
            lz.state = state
        return lz

    def submit_failed(self, lz: Lease, slot_key: str, e: Exception) -> None:
        """A failed submit is the host's fault. A lost connection may have left the trial started, so
        its lease stays `stale` (looked at again when the host answers); a command that failed cleaned
        up after itself, so the lease is only `requeued`."""
        state = LeaseState.STALE if isinstance(e, HostUnreachable) else LeaseState.REQUEUED
        self.host_fault(lz, f"submit to {slot_key} failed: {e}", state)
        self.slots.invalidate()

    def not_tried(self, lz: Lease, why: str) -> None:
        """A submit the dispatcher did not make (the host did not answer the one before it on the
        slot, which counted the fault): back to the queue, with no fault of its own."""
        log.info("trial %s back to the queue: %s", lz.trial_id, why)
        lz.state = LeaseState.REQUEUED
        self.slots.invalidate()

    def disk_full(self, lz: Lease) -> str | None:
        """Why a trial that died on a host that answers left nothing: its disk is full (or None)."""
        try:
            return self.runner.disk_hint(lz.handle)
        except Exception:  # noqa: BLE001 - only a hint
            return None

    # -- silence ---------------------------------------------------------------------------------------
    def alive(self, trial_id: str) -> None:
        """A poll found the trial running."""
        self._last_seen[trial_id] = time.time()

    def answered(self, host: str) -> None:
        """A poll reached the host: a degraded one is probed at once (engine/health.py)."""
        self.health.seen(host)

    def silent(self, lz: Lease) -> Lease | None:
        """A poll could not reach the trial's host. None while the host is within the lease TTL (the
        trial keeps its slot); past it (and past the last probe) the host's fault: the lease, stale."""
        known = self.runner.hosts
        if known is not None and lz.host not in known:
            # a host this config does not list (the daemon restarted with other hosts, or after the
            # local runner): nothing will answer for it, so the seed goes back to the queue now, not
            # after the lease TTL, and no host is shown `degraded` for good (settle_stale forgets it)
            why = f"its host {lz.host} is not among this config's hosts ({', '.join(sorted(known))})"
            log.warning("trial %s back to the queue: %s", lz.trial_id, why)
            lz.faults, lz.error, lz.state = list(lz.faults) + [f"{lz.host}: {why}"], why, LeaseState.STALE
            return lz
        seen = self._last_seen.setdefault(lz.trial_id, max(lz.heartbeat, self.started))
        self.health.fault(lz.host, self.slots.unreachable_why(lz.host))
        if time.time() - seen <= self.cfg.daemon.lease_ttl_s:
            return None
        # the last probe (last_probe) failed too: the host's fault; the trial may live on
        return self.host_fault(lz, f"host {lz.host} unreachable for more than "
                                   f"{self.cfg.daemon.lease_ttl_s:.0f}s (daemon.lease_ttl_s)", LeaseState.STALE)

    def never_placed(self, lz: Lease) -> bool:
        """A missing trial leased by an earlier daemon process that died before its directory existed."""
        return lz.began is None and lz.heartbeat < self.started and lz.trial_id not in self._last_seen

    # -- probes ----------------------------------------------------------------------------------------
    def probe_due(self) -> None:
        """Probe the degraded hosts whose back-off ran out, off the tick's path; a verdict wakes the loop."""
        for host in self.health.due():
            def work(host=host):
                try:
                    why = self.runner.check_host(host)
                except Exception as e:  # noqa: BLE001 - any failure is the verdict
                    why = str(e)
                self.health.probed(host, why)
                self.slots.invalidate()
                if why is None and self._wake is not None:
                    self._wake()
            self._pool.submit(work)

    def last_probe(self, leases: list[Lease], states: dict) -> None:
        """Leases about to be declared lost for silence: reconnect to their hosts now (no back-off) and
        poll them once more. `states` (id(lease) -> PollState) is updated in place."""
        now = time.time()
        expiring = [lz for lz in leases if states.get(id(lz)) == PollState.UNREACHABLE
                    and now - self._last_seen.get(lz.trial_id, max(lz.heartbeat, self.started))
                    > self.cfg.daemon.lease_ttl_s]
        if not expiring:
            return
        for host in {lz.host for lz in expiring}:
            self.runner.reconnect(host)
            log.info("host %s silent for more than %.0fs: one last probe before its trials are lost",
                     host, self.cfg.daemon.lease_ttl_s)
        for lz, st in zip(expiring, poll_states(self.runner, expiring)):
            states[id(lz)] = st

    # -- stale trials ----------------------------------------------------------------------------------
    def stale_finished(self, leases: list[Lease], states: dict, note_seeds: set[int]) -> list[Lease]:
        """The stale trials of one commit that finished while their host was away, now that it answers,
        and whose seed has no result yet: the caller collects them (engine/collect.py) and hands what
        it collected to settle_stale. Recovery finds them and never collects (calls go one way). Two
        of one seed (from two hosts back at once) are both found and collected; settle_stale counts
        the first that came back done and supersedes the other, as when only the first was collected."""
        known = self.runner.hosts
        return [lz for lz in leases if lz.state == LeaseState.STALE and states.get(id(lz)) == PollState.DONE
                and (known is None or lz.host in known) and not _has_result(lz, leases, note_seeds)]

    def settle_stale(self, leases: list[Lease], states: dict, note_seeds: set[int],
                     collected: dict[int, Lease]) -> tuple[list[Lease], list[str]]:
        """Resolve the stale trials of one commit whose host answers again. `collected` holds, by the
        id of each lease stale_finished found, the lease its collection made (`stale` again when the
        fetch failed). Returns the new lease list and the trial ids superseded now (for the note)."""
        out = list(leases)
        superseded: list[str] = []
        for k, lz in enumerate(out):
            if lz.state != LeaseState.STALE:
                continue
            known = self.runner.hosts
            if known is not None and lz.host not in known:
                log.warning("stale trial %s: host %s is no longer configured; forgetting it", lz.trial_id, lz.host)
                out[k] = None
                continue
            st = states.get(id(lz))
            if st is None or st == PollState.UNREACHABLE:
                continue
            self.health.seen(lz.host)
            has_result = _has_result(lz, out, note_seeds)
            twins = [o for o in out if o is not None and o is not lz and o.state == LeaseState.RUNNING
                     and o.seed == lz.seed]
            if st == PollState.DONE and not has_result:
                got = collected.get(id(lz), lz)     # not found (cannot be): still stale, next tick
                if got.state == LeaseState.STALE:
                    continue               # the fetch failed: try again on the next tick
                if got.state == LeaseState.DONE:
                    log.info("stale trial %s finished on %s while its host was away: its result counts",
                             lz.trial_id, lz.host)
                    out[k] = got
                    for j, t in enumerate(out):     # the re-run elsewhere no longer counts
                        if any(t is w for w in twins) and self._remove_trial(t):
                            out[j] = self._superseded(t)
                            superseded.append(t.trial_id)
                    continue
            if st == PollState.RUNNING and not has_result and not twins:
                log.info("stale trial %s is still running on %s: kept", lz.trial_id, lz.host)
                revived = lz.model_copy(deep=True)
                revived.state, revived.heartbeat = LeaseState.RUNNING, time.time()
                self._last_seen[lz.trial_id] = time.time()
                out[k] = revived
                continue
            if not self._remove_trial(lz):
                continue                   # try again on the next tick
            if st == PollState.MISSING:    # it never started: nothing ran twice
                out[k] = None
            else:
                out[k] = self._superseded(lz)
                superseded.append(lz.trial_id)
        return [lz for lz in out if lz is not None], superseded

    @staticmethod
    def _superseded(lz: Lease) -> Lease:
        s = lz.model_copy(deep=True)
        s.state, s.result = LeaseState.SUPERSEDED, None
        return s

    def _remove_trial(self, lz: Lease) -> bool:
        """Cancel a trial and remove its directory (synchronously: its lease goes only after)."""
        try:
            self.runner.cancel(lz.handle)
            self.runner.cleanup(lz.handle)
        except Exception as e:  # noqa: BLE001 - the host went away again: next tick
            log.warning("removing trial %s on %s failed: %s", lz.trial_id, lz.host, e)
            return False
        log.info("trial %s on %s cancelled and removed (its twin counts)", lz.trial_id, lz.host)
        return True
