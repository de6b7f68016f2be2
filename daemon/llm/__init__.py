"""LLM provider registry. Only this package talks to LLM APIs; keys come from the environment."""

from __future__ import annotations

import os

from autoresearchd.registry import Registry

from .base import Budget, BudgetExhausted, Completion, LLMError, Provider, ReplayExhausted  # noqa: F401

_REGISTRY = Registry('LLM provider', 'providers', {
    "anthropic": "autoresearchd.llm.anthropic_provider:AnthropicProvider",
    "openai": "autoresearchd.llm.openai_provider:OpenAIProvider",
    "replay": "autoresearchd.llm.replay:ReplayProvider",
})
names, get, register = _REGISTRY.names, _REGISTRY.get, _REGISTRY.register


def resolve_provider_name(cfg) -> tuple[str, str | None]:
    """`auto` picks anthropic or openai when their key is set, else replay. Returns (name, why)."""
    if cfg.provider != "auto":
        return cfg.provider, None
    if os.environ.get(cfg.api_key_env or "ANTHROPIC_API_KEY"):
        return "anthropic", None
    if os.environ.get("OPENAI_API_KEY"):
        return "openai", None
    return "replay", ("no ANTHROPIC_API_KEY or OPENAI_API_KEY is set: replaying recorded ideas "
                      "from the replay file instead of asking a live model")
