"""Policy registry. A policy reads the population and proposes ideas; unknown names list the valid ones."""

from __future__ import annotations

from autoresearchd.registry import Registry

from .base import Policy, Proposal  # noqa: F401

_REGISTRY = Registry('policy', 'policies', {
    "evolutionary": "autoresearchd.policies.evolutionary:EvolutionaryPolicy",
    "best_of_n": "autoresearchd.policies.best_of_n:BestOfNPolicy",
    "greedy": "autoresearchd.policies.greedy:GreedyPolicy",
})
names, get, register = _REGISTRY.names, _REGISTRY.get, _REGISTRY.register
