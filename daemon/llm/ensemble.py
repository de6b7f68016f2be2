"""A model ensemble (`[llm] ensemble`): several providers/models proposing ideas at once.

`Ensemble` wraps the configured provider (the *main* one) and one provider per ensemble model, all
charging the same Budget. A `propose` call goes to the model named in `meta["model"]` (the policy picks
it per batch with the bandit in policies/bandit.py); every other call (implement, revise, lessons,
novelty) goes to the main provider, so the implementer stays one model whatever proposes.
"""

from __future__ import annotations

from .base import Completion, Provider


class Ensemble(Provider):
    name = "ensemble"

    def __init__(self, main: Provider, members: dict[str, Provider]):
        # no Provider.__init__: the members own their clients, limits and the shared budget
        self.main, self.members = main, members
        self.cfg, self.budget, self.model = main.cfg, main.budget, main.model

    def __getattr__(self, item):                 # anything else a caller reads is the main provider's
        return getattr(self.main, item)

    def __repr__(self) -> str:
        return f"Ensemble(main={self.main!r}, models={list(self.members)})"

    def complete(self, messages: list[dict], *, system: str | None = None, purpose: str = "other",
                 max_tokens: int | None = None, meta: dict | None = None) -> Completion:
        who = self.members.get((meta or {}).get("model")) if purpose == "propose" else None
        return (who or self.main).complete(messages, system=system, purpose=purpose,
                                           max_tokens=max_tokens, meta=meta)


def build(cfg, main: Provider, get) -> Ensemble:
    """The ensemble of `cfg.ensemble` around `main`; `get(name)` is the provider registry's lookup."""
    members = {}
    for m in cfg.ensemble:
        same = m.provider == main.name       # a model of the main provider shares its endpoint and key
        sub = cfg.model_copy(update={"provider": m.provider, "model": m.model,
                                     "base_url": m.base_url or (cfg.base_url if same else None),
                                     "api_key_env": m.api_key_env or (cfg.api_key_env if same else None),
                                     "ensemble": []})
        members[m.model] = get(m.provider)(sub, main.budget)
    return Ensemble(main, members)
