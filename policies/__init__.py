"""Policy registry. A policy reads the population and proposes ideas; unknown names list the valid ones."""

from __future__ import annotations

import importlib

from .base import Policy, Proposal  # noqa: F401

_REGISTRY = {
    "evolutionary": "autoresearchd.policies.evolutionary:EvolutionaryPolicy",
    "best_of_n": "autoresearchd.policies.best_of_n:BestOfNPolicy",
    "greedy": "autoresearchd.policies.greedy:GreedyPolicy",
}


def names() -> list[str]:
    return sorted(_REGISTRY)


def get(name: str):
    if name not in _REGISTRY:
        raise KeyError(f"unknown policy '{name}'; valid policies: {', '.join(names())}")
    mod, _, cls = _REGISTRY[name].partition(":")
    return getattr(importlib.import_module(mod), cls)
