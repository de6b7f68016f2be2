"""Host health: one circuit breaker per host, so a host's faults cost the host, never an idea.

A host fault (a failed submit, a full or unwritable work root, a host gone past the lease TTL, a
disk that filled during a run) opens the host's breaker: the host is `degraded`, with the reason,
and gets no new trial. It is probed again after `HOST_PROBE_S[0]` seconds, then twice as long each
time it fails, at most `HOST_PROBE_S[1]`; the first probe that passes (it connects, the work root is
writable, enough space is free) closes the breaker and the host takes work again.

The state lives in memory and is published in the daemon's state file (daemon.json), not in git: it
describes the hosts as this process sees them now, changes every few seconds while a host flaps (a
git commit per change would bury the research history), and means nothing to a restarted daemon,
which simply probes again. `status` reads it from daemon.json.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import asdict, dataclass

from autoresearchd import defaults
from autoresearchd.vocab import HostState

log = logging.getLogger("autoresearchd")


@dataclass
class Breaker:
    """One host's breaker (its fields but the last two are the host's row in daemon.json)."""
    state: HostState = HostState.OK   # DEGRADED while the breaker is open
    reason: str | None = None         # why it is degraded (the fault's text, whole)
    since: float | None = None        # degraded since (epoch seconds)
    faults: int = 0                   # consecutive faults and failed probes
    probe_at: float = 0.0             # monotonic time of the next probe
    probing: bool = False


class HostHealth:
    """Breakers for every host; thread-safe (probes run on the dispatcher's pool)."""

    def __init__(self, backoff: tuple[float, float] = defaults.HOST_PROBE_S):
        self.backoff = backoff
        self._hosts: dict[str, Breaker] = {}
        self._lock = threading.Lock()

    def _get(self, host: str) -> Breaker:
        return self._hosts.setdefault(host, Breaker())

    def fault(self, host: str, reason: str) -> None:
        """The host failed: open its breaker (again), with backoff."""
        with self._lock:
            h = self._get(host)
            if h.state != HostState.DEGRADED or h.reason != reason:
                log.warning("host %s degraded: %s", host, reason)
            if h.state != HostState.DEGRADED:
                h.since = time.time()
            h.state, h.reason, h.faults = HostState.DEGRADED, reason, h.faults + 1
            lo, hi = self.backoff
            h.probe_at = time.monotonic() + min(hi, lo * 2 ** (h.faults - 1))

    def recovered(self, host: str) -> None:
        """A probe passed: close the breaker."""
        with self._lock:
            h = self._get(host)
            if h.state == HostState.DEGRADED:
                log.info("host %s healthy again (was: %s)", host, h.reason)
            self._hosts[host] = Breaker()

    def seen(self, host: str) -> None:
        """The host answered (a poll worked): a degraded host is probed at once rather than after
        its backoff, since the cause may be gone (it was only unreachable)."""
        with self._lock:
            h = self._hosts.get(host)
            if h is not None and h.state == HostState.DEGRADED and not h.probing:
                h.probe_at = min(h.probe_at, time.monotonic())

    def usable(self, host: str) -> bool:
        with self._lock:
            h = self._hosts.get(host)
            return h is None or h.state == HostState.OK

    def due(self) -> list[str]:
        """Degraded hosts whose probe is due; each is marked probing until `probed` is called."""
        now = time.monotonic()
        with self._lock:
            out = [n for n, h in self._hosts.items() if h.state == HostState.DEGRADED and not h.probing and h.probe_at <= now]
            for n in out:
                self._hosts[n].probing = True
        return out

    def probed(self, host: str, why: str | None) -> None:
        """A probe's verdict: None = healthy, else the reason it is still degraded."""
        with self._lock:
            self._get(host).probing = False
        if why is None:
            self.recovered(host)
        else:
            self.fault(host, why)

    def reason(self, host: str) -> str | None:
        with self._lock:
            h = self._hosts.get(host)
            return h.reason if h is not None and h.state == HostState.DEGRADED else None

    def table(self) -> dict[str, dict]:
        """For daemon.json: every host that has had a fault, with its state and reason."""
        now = time.monotonic()
        with self._lock:
            return {n: {**{k: v for k, v in asdict(h).items() if k not in ("probe_at", "probing")},
                        "next_probe_s": max(0.0, h.probe_at - now) if h.state == HostState.DEGRADED else None}
                    for n, h in self._hosts.items()}
