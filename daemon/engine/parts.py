"""The engine's parts, built by construction: one slot table and one host-health breaker shared by
Recovery (host faults, stale trials, probes), the Collector (harvest, outcomes, result notes,
backfill) and the Dispatcher (gate, twins, leases, submit). Each part is given what it uses; none
calls into another's private state, and every write goes through the one lifecycle writer.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from autoresearchd import defaults
from autoresearchd.engine.collect import Collector
from autoresearchd.engine.dispatch import Dispatcher
from autoresearchd.engine.harness import Harness
from autoresearchd.engine.health import HostHealth
from autoresearchd.engine.recovery import Recovery
from autoresearchd.engine.shared import Shared
from autoresearchd.engine.slots import SlotTable
from autoresearchd.store.lifecycle import Lifecycle


@dataclass(frozen=True)
class Engine:
    slots: SlotTable
    recovery: Recovery
    collector: Collector
    dispatcher: Dispatcher


def build_engine(cfg, research, runner, lifecycle: Lifecycle, wake=None, screener=None) -> Engine:
    """The three parts over one slot table. `wake()` is called when a degraded host passes its probe;
    `screener` (engine/screener.py, [screening] enabled) finishes the screened runs the Collector harvests."""
    # A host whose submit failed, whose disk is full, or that went silent gets no new trial until a
    # probe passes. (Without it one dead host took an attempt from every queued idea in a few ticks.)
    health = HostHealth()
    slots = SlotTable(cfg, runner, health)
    pool = ThreadPoolExecutor(defaults.ENGINE_POOL_THREADS, thread_name_prefix="dispatch")   # submits, clean-ups, probes
    harness = Harness(research)
    recovery = Recovery(cfg, runner, slots, health, pool, wake)
    shared = Shared(cfg, research, runner, slots, recovery, lifecycle, pool, harness)
    return Engine(slots, recovery, Collector(shared, screener), Dispatcher(shared))
