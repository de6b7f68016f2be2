"""Packaged environment templates (tinygpt, nanogpt, grpo). Each subfolder is a self-contained
training codebase with its `[env]` manifest in `.autoresearch.toml`; `autoresearchd init --env NAME`
copies one into a fresh git repo."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def template_dir(name: str) -> Path:
    root = Path(str(resources.files("autoresearchd.envs")))
    d = root / name
    if not (d / ".autoresearch.toml").is_file():
        valid = sorted(p.name for p in root.iterdir() if (p / ".autoresearch.toml").is_file())
        raise KeyError(f"unknown env '{name}'; valid envs: {', '.join(valid)}")
    return d
