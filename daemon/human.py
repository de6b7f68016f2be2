"""Ideas from people. A pushed `idea/*` branch needs nothing here: the reconcile finds it, validates
it at dispatch (merge-base, frozen files, sizes) and runs it with Origin human. `queue_text` records
an idea given in words as a proposal, so the implementer writes it exactly like an LLM idea.
"""

from __future__ import annotations

from autoresearchd.policies.base import Proposal

from .config import ConfigError
from .implementer import Implementer
from .population import read_population
from .research import open_research


def queue_text(cfg, text: str, parent: str | None = None, title: str | None = None) -> str:
    text = text.strip()
    if not text:
        raise ConfigError("queue: the idea text is empty")
    research = open_research(cfg)
    pop = read_population(research.repo, research.baseline_ref)
    base, parents = None, []
    if parent:
        p = pop.resolve(parent)
        if p is None or not p.branch:
            raise ConfigError(f"queue --parent: no runnable idea matches '{parent}'")
        base, parents = p.commit, [p.idea_id]
    title = title or text.splitlines()[0][:100]
    prop = Proposal(title=title, text=text, origin="human", epoch=max(pop.max_epoch(), 0), parents=parents,
                    base_commit=base)
    idea_id = Implementer(research, None, cfg).record_proposal(prop)
    if idea_id is None:
        raise ConfigError("queue: this exact idea is already queued or recorded")
    return idea_id
