"""What the Collector and the Dispatcher are both given (engine/parts.py builds it once): the config,
the research repo, the runner, the slot table, Recovery, the lifecycle writer, the thread pool and the
harness. `Part` only holds them: it defines no behaviour, so neither part calls anything of the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autoresearchd.engine.harness import Harness
from autoresearchd.engine.recovery import Recovery
from autoresearchd.engine.slots import SlotTable
from autoresearchd.store.lifecycle import Lifecycle


@dataclass(frozen=True)
class Shared:
    cfg: Any
    research: Any
    runner: Any
    slots: SlotTable
    recovery: Recovery
    lifecycle: Lifecycle
    pool: Any                    # submits, clean-ups and probes run here, off the tick's path
    harness: Harness


class Part:
    """The shared parts as attributes; `ledger` for reads only: every write goes through the lifecycle."""

    def __init__(self, shared: Shared):
        self.cfg, self.research, self.runner, self.repo = shared.cfg, shared.research, shared.runner, \
            shared.research.repo
        self.slots, self.recovery, self.lifecycle, self.harness = \
            shared.slots, shared.recovery, shared.lifecycle, shared.harness
        self.ledger, self._pool = shared.lifecycle.ledger, shared.pool
