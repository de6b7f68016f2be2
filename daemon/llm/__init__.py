"""LLM provider registry. Only this package talks to LLM APIs; keys come from the environment."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from autoresearchd.registry import Registry

from .base import Budget, BudgetExhausted, Completion, LLMError, Provider, ReplayExhausted  # noqa: F401

_REGISTRY = Registry('LLM provider', 'providers', {
    "anthropic": "autoresearchd.llm.anthropic_provider:AnthropicProvider",
    "openai": "autoresearchd.llm.openai_provider:OpenAIProvider",
    "replay": "autoresearchd.llm.replay:ReplayProvider",
})
names, get, register = _REGISTRY.names, _REGISTRY.get, _REGISTRY.register


def packaged_replay(env_name: str):
    """The replay file packaged for an env (envs/replays/<name>.jsonl), or None."""
    p = Path(str(resources.files("autoresearchd.envs"))) / "replays" / f"{env_name}.jsonl"
    return p if p.is_file() else None


def default_replay_file(cfg, env_name: str) -> Path | None:
    """The replay file of a config (`cfg`: the whole Config): llm.replay_file resolved against the
    config file's directory, else the one packaged for the env, or None."""
    if cfg.llm.replay_file:
        return cfg.resolve(cfg.llm.replay_file)
    return packaged_replay(env_name)


def resolve_provider_name(cfg, env_name: str | None = None) -> tuple[str, str | None]:
    """`auto` picks anthropic or openai when their key is set, else replay when there are recorded
    ideas to replay (llm.replay_file, or a file packaged for `env_name`), else none: the daemon runs
    the baseline and the idea branches people push, and proposes nothing. Returns (name, why)."""
    if cfg.provider != "auto":
        return cfg.provider, None
    if os.environ.get(cfg.api_key_env or "ANTHROPIC_API_KEY"):
        return "anthropic", None
    if os.environ.get("OPENAI_API_KEY"):
        return "openai", None
    if cfg.replay_file or env_name is None or packaged_replay(env_name) is not None:
        return "replay", ("no ANTHROPIC_API_KEY or OPENAI_API_KEY is set: replaying recorded ideas "
                          "from the replay file instead of asking a live model")
    return "none", (f"no ANTHROPIC_API_KEY or OPENAI_API_KEY is set and env '{env_name}' has no recorded "
                    f"ideas to replay: running the baseline and the idea branches you push, proposing "
                    f"nothing (set a key for a live model)")
