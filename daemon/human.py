"""Ideas from people: the `queue` command. A pushed `idea/*` branch needs nothing here: the reconcile
finds it, validates it on arrival (merge-base, frozen files, sizes) and runs it with Origin human.

To queue is to record a proposal: `queue_text` checks an idea given in words (its parent, and in replay
mode that the replay file records it: there is no model to write anything else) and records it with
store/proposals.py, the same function the daemon records an LLM's proposal with, so the implementer
writes it exactly like an LLM idea. The proposal ref goes through the lifecycle writer
(store/lifecycle.py). A command, so it lives at the top beside cli.py and app.py, not in engine/.
"""

from __future__ import annotations

from autoresearchd.config import ConfigError
from autoresearchd.llm import default_replay_file, resolve_provider_name
from autoresearchd.llm.base import LLMError
from autoresearchd.llm.replay import ReplayProvider, title_of
from autoresearchd.policies.base import Proposal
from autoresearchd.store.lifecycle import Lifecycle
from autoresearchd.store.population import read_population
from autoresearchd.store.proposals import record_proposal
from autoresearchd.vocab import Origin


def queue_text(cfg, research, lifecycle: Lifecycle, text: str, parent: str | None = None,
               title: str | None = None) -> str:
    """Record an idea in words as a proposal of `research`, through `lifecycle` (makelifecycle.py: the
    writer with its observers, as the daemon's is built). Returns its idea id."""
    text = text.strip()
    if not text:
        raise ConfigError("queue: the idea text is empty")
    pop = read_population(research.repo, research.baseline_ref)
    base, parents = None, []
    if parent:
        p = pop.resolve(parent)
        if p is None or not p.branch:
            raise ConfigError(f"queue --parent: no runnable idea matches '{parent}'")
        base, parents = p.commit, [p.idea_id]
    title = replay_title(cfg, research, text, title) or title or text.splitlines()[0][:100]
    prop = Proposal(title=title, text=text, origin=Origin.HUMAN, epoch=max(pop.max_epoch(), 0), parents=parents,
                    base_commit=base)
    idea_id = record_proposal(research.repo, lifecycle, prop, research.baseline_commit,
                              research.manifest.metric)
    if idea_id is None:
        raise ConfigError("queue: this exact idea is already queued or recorded")
    return idea_id


def replay_title(cfg, research, text: str, title: str | None) -> str | None:
    """In replay mode the implementer can only serve recorded diffs: an idea in words is queued only
    when the replay file holds a matching record (then under that record's title, so it is found);
    otherwise the command says so at once instead of ending in implement_failed later."""
    if resolve_provider_name(cfg.llm, research.manifest.name)[0] != "replay":
        return None
    # why replay: chosen in the config, or the fallback of `auto` without a key
    mode = "replay mode (llm.provider = \"replay\")" if cfg.llm.provider == "replay" else "replay mode (no API key)"
    path = default_replay_file(cfg, research.manifest.name)
    if path is None:
        raise ConfigError(f"queue: {mode} has no replay file, so nothing can implement "
                          "an idea in words; set ANTHROPIC_API_KEY or OPENAI_API_KEY, or push a branch")
    try:
        rec = ReplayProvider(cfg.llm, path=path).find(title or text)
    except LLMError as e:
        raise ConfigError(f"queue: {e}") from None
    if rec is None:
        raise ConfigError(f"queue: {mode} cannot implement free text: {path.name} has no "
                          f"recorded idea matching '{title or title_of(text)}'. Set ANTHROPIC_API_KEY or "
                          f"OPENAI_API_KEY, queue a recorded title, or push a branch with the code")
    return rec.title
