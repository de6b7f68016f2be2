"""The slot table: which trials sit in which of the runner's slots, shared by dispatch and collect.

The runner's slot list is cached for a tick (asking an ssh or Slurm runner costs a round trip); a
slot holds `depth` trials, one running and the rest pre-staged. Collect rebuilds the occupancy from
the polled leases each harvest (`clear`, then `occupy` per live trial); dispatch fills the free room
(`free`, `occupy`) and gives it back when a submit fails (`release`). A host whose breaker is open
(engine/health.py) offers no free slot. One object, passed to both by their constructors.
"""

from __future__ import annotations

import time

from autoresearchd.engine.health import HostHealth
from autoresearchd.vocab import HostState, SlotState


class SlotTable:
    def __init__(self, cfg, runner, health: HostHealth):
        self.cfg, self.runner, self.health = cfg, runner, health
        self._cache: tuple[float, list] = (0.0, [])
        self._busy: dict[str, list[str]] = {}    # slot key -> trial ids placed there (running first)

    def slots(self) -> list:
        """The runner's slots, asked at most once a tick."""
        t, cached = self._cache
        if time.time() - t > max(1.0, self.cfg.daemon.tick_s):
            cached = self.runner.slots()
            self._cache = (time.time(), cached)
        return cached

    def invalidate(self) -> None:
        """A host changed (a submit failed, a probe passed): ask the runner again next time."""
        self._cache = (0.0, [])

    @property
    def depth(self) -> int:
        """Trials one slot may hold: 1 running, the rest pre-staged (waiting on the host for the slot)."""
        return max(1, int(self.runner.prestage))

    def busy(self, key: str) -> list[str]:
        return self._busy.get(key, [])

    def free(self) -> list:
        """Slots that can take a trial now: idle ones first, then pre-staging room, spread over hosts."""
        slots = [s for s in self.slots() if s.reachable and len(self._busy.get(s.key, ())) < self.depth
                 and self.health.usable(s.host)]
        per_host: dict[str, int] = {}
        for k, v in self._busy.items():
            per_host[k.split("/", 1)[0]] = per_host.get(k.split("/", 1)[0], 0) + len(v)
        return sorted(slots, key=lambda s: (len(self._busy.get(s.key, ())), per_host.get(s.host, 0)))

    def clear(self) -> None:
        """A harvest starts: occupancy is re-derived from the live leases it polls."""
        self._busy = {}

    def occupy(self, key: str, trial_id: str) -> None:
        if trial_id not in self._busy.get(key, ()):
            self._busy.setdefault(key, []).append(trial_id)

    def release(self, key: str, trial_id: str) -> None:
        if trial_id in self._busy.get(key, ()):
            self._busy[key].remove(trial_id)

    def unreachable_why(self, host: str) -> str:
        return self.runner.errors.get(host) or f"host {host} does not answer"

    def table(self) -> list[dict]:
        """Each slot for daemon.json: its state, why it is not usable, its trial and staged ones."""
        return [{"slot": s.key, "state": SlotState.UNREACHABLE if not s.reachable else
                 SlotState.DEGRADED if not self.health.usable(s.host) else
                 (SlotState.BUSY if self._busy.get(s.key) else SlotState.FREE),
                 "reason": self.health.reason(s.host) if s.reachable else self.unreachable_why(s.host),
                 "trial": (self._busy.get(s.key) or [None])[0], "staged": (self._busy.get(s.key) or [])[1:]}
                for s in self.slots()]

    def hosts(self) -> dict[str, dict]:
        """Each host's health for daemon.json: breaker state and reason, or the connection error."""
        table = self.health.table()
        for host, why in self.runner.errors.items():
            row = table.setdefault(host, {"state": HostState.OK, "reason": None})
            if row.get("state") == HostState.OK:
                row.update(state=HostState.UNREACHABLE, reason=why)
        return table
