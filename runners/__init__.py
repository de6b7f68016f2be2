"""Runner registry. A runner is a small class with a `name`; unknown names list the valid ones."""

from __future__ import annotations

import importlib

# name -> "module:Class", imported on use so the core starts fast and optional deps stay optional
_REGISTRY = {
    "local": "autoresearchd.runners.local:LocalRunner",
    "ssh": "autoresearchd.runners.ssh:SSHRunner",
    "slurm": "autoresearchd.runners.slurm:SlurmRunner",
}


def names() -> list[str]:
    return sorted(_REGISTRY)


def get(name: str):
    if name not in _REGISTRY:
        raise KeyError(f"unknown runner '{name}'; valid runners: {', '.join(names())}")
    mod, _, cls = _REGISTRY[name].partition(":")
    return getattr(importlib.import_module(mod), cls)


def register(name: str, target: str) -> None:
    _REGISTRY[name] = target
