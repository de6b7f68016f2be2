"""LLM provider registry. Only this package talks to LLM APIs; keys come from the environment."""

from __future__ import annotations

import importlib
import os

from .base import Budget, BudgetExhausted, Completion, LLMError, Provider, ReplayExhausted  # noqa: F401

_REGISTRY = {
    "anthropic": "autoresearchd.llm.anthropic_provider:AnthropicProvider",
    "openai": "autoresearchd.llm.openai_provider:OpenAIProvider",
    "replay": "autoresearchd.llm.replay:ReplayProvider",
}


def names() -> list[str]:
    return sorted(_REGISTRY)


def get(name: str):
    if name not in _REGISTRY:
        raise KeyError(f"unknown LLM provider '{name}'; valid providers: {', '.join(names())}")
    mod, _, cls = _REGISTRY[name].partition(":")
    return getattr(importlib.import_module(mod), cls)


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
