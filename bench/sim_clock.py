"""The clock and the G slots of bench/sim_fair.py: a discrete-event simulation of a cluster.

A trial occupies one slot for its GPU-hours (one GPU per trial, so its wall time equals its cost);
its GPU-hours are charged when it starts. A proposal round (the LLM's answer and the ideas'
implementation) takes `latency_h` of wall time and no GPU. `advance()` moves the clock to the next
event, a trial's end or a proposal's arrival, and returns what happened then.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field


@dataclass
class Clock:
    slots: int
    now: float = 0.0                 # wall-clock hours since the search began
    gpu_h: float = 0.0               # GPU-hours charged so far
    busy_h: float = 0.0              # slot-hours spent running trials (for the utilisation)
    _events: list = field(default_factory=list)
    _seq: itertools.count = field(default_factory=itertools.count)
    running: int = 0

    def free(self) -> int:
        return self.slots - self.running

    def start(self, hours: float, payload) -> None:
        """A trial starts now on a free slot and ends `hours` later."""
        assert self.running < self.slots, "no free slot"
        self.running += 1
        self.gpu_h += hours
        self.busy_h += hours
        heapq.heappush(self._events, (self.now + hours, next(self._seq), "trial", payload))

    def later(self, hours: float, payload) -> None:
        """Something that takes wall time but no slot (a proposal round) arrives `hours` from now."""
        heapq.heappush(self._events, (self.now + hours, next(self._seq), "arrival", payload))

    def pending(self) -> bool:
        return bool(self._events)

    def advance(self) -> list[tuple[str, object]]:
        """Move to the next event time; every event due then, in the order they were scheduled."""
        t = self._events[0][0]
        self.now = max(self.now, t)
        out = []
        while self._events and self._events[0][0] <= t:
            _, _, kind, payload = heapq.heappop(self._events)
            if kind == "trial":
                self.running -= 1
            out.append((kind, payload))
        return out

    def utilisation(self) -> float:
        return self.busy_h / (self.slots * self.now) if self.now else 0.0
