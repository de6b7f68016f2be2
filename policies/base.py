"""The Policy protocol: read the population, propose the next ideas.

`propose(population, n, env, llm) -> list[Proposal]`. A Proposal says what to implement and on
top of which commit; the implementer turns it into an `idea/*` branch. Policies are deterministic
given the population and `cfg.seed`: randomness is derived from (seed, epoch, batch), so a
restarted daemon continues rather than repeats.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import ClassVar

from autoresearchd.vocab import Origin


@dataclass
class Proposal:
    title: str
    text: str                       # the full idea: [Experiment] ... [Code Changes] ...
    origin: Origin                  # who proposed it (daemon/vocab.py)
    epoch: int
    parents: list[str] = field(default_factory=list)   # idea ids shown as parents
    base_commit: str | None = None  # build on this commit (None: the baseline)
    batch: int = 0
    cost_usd: float = 0.0           # this idea's share of the proposing call
    tokens: int = 0
    model: str | None = None
    dropped_reason: str | None = None  # set when the policy itself dropped it (e.g. duplicate)
    duplicate_of: str | None = None    # the idea id it duplicates, when dropped as a duplicate of one
    prompt_hash: str | None = None     # short sha256 of the prompt templates that produced it


class Policy:
    name: ClassVar[str] = "base"

    def __init__(self, cfg, prompts_dir=None, lessons_store=None, tuning=None):
        # lessons_store: where the lessons scratchpad is kept (policies/lessons.py); a policy that
        # condenses no lessons ignores it. tuning: (population, env) -> the prompt's tuning section
        # (daemon/tune/surface.py), given with [tune] enabled; a policy without prompts ignores it
        self.cfg = cfg

    def rng(self, *key) -> random.Random:
        h = hashlib.sha256(repr((self.cfg.seed, self.name) + key).encode()).digest()
        return random.Random(int.from_bytes(h[:8], "big"))

    def propose(self, population, n: int, env, llm) -> list[Proposal]:
        raise NotImplementedError
