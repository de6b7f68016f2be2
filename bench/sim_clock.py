"""The clock and the G slots of bench/sim_fair.py: a discrete-event simulation of a cluster.

A trial occupies one slot for its GPU-hours (one GPU per trial, so its wall time equals its cost);
its GPU-hours are charged when it starts. A proposal round (the LLM's answer and the ideas'
implementation) takes `latency_h` of wall time and no GPU. `advance()` moves the clock to the next
event, a trial's end, a proposal's arrival or a trial's checkpoint, and returns what happened then.
A trial stopped early (`stop()`) frees its slot at once and is refunded the GPU-hours it did not use.
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
    _stopped: set = field(default_factory=set)
    running: int = 0

    def free(self) -> int:
        return self.slots - self.running

    def start(self, hours: float, payload) -> int:
        """A trial starts now on a free slot and ends `hours` later; returns its handle for `stop`."""
        assert self.running < self.slots, "no free slot"
        self.running += 1
        self.gpu_h += hours
        self.busy_h += hours
        seq = next(self._seq)
        heapq.heappush(self._events, (self.now + hours, seq, "trial", payload))
        return seq

    def later(self, hours: float, payload, kind: str = "arrival") -> None:
        """Something that takes wall time but no slot (a proposal round, a running trial's checkpoint)
        happens `hours` from now."""
        heapq.heappush(self._events, (self.now + hours, next(self._seq), kind, payload))

    def stop(self, handle: int, unused_h: float) -> None:
        """A running trial stops now: its slot is free, and the `unused_h` it was charged for but will
        not run are refunded (its end event is dropped when it comes up)."""
        assert handle not in self._stopped
        self._stopped.add(handle)
        self.running -= 1
        self.gpu_h -= unused_h
        self.busy_h -= unused_h

    def pending(self) -> bool:
        self._drop_stopped()
        return bool(self._events)

    def _drop_stopped(self) -> None:
        while self._events and self._events[0][2] == "trial" and self._events[0][1] in self._stopped:
            heapq.heappop(self._events)

    def advance(self) -> list[tuple[str, object]]:
        """Move to the next event time; every event due then, in the order they were scheduled."""
        self._drop_stopped()
        t = self._events[0][0]
        self.now = max(self.now, t)
        out = []
        while self._events and self._events[0][0] <= t:
            _, seq, kind, payload = heapq.heappop(self._events)
            if kind == "trial":
                if seq in self._stopped:
                    continue
                self.running -= 1
            out.append((kind, payload))
        return out

    def utilisation(self) -> float:
        return self.busy_h / (self.slots * self.now) if self.now else 0.0
