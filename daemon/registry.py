"""A named registry of extension classes (runners, policies, LLM providers), imported on use so the
core starts fast and optional dependencies stay optional. An unknown name lists the valid ones."""

from __future__ import annotations

import importlib


class Registry:
    def __init__(self, kind: str, plural: str, entries: dict[str, str]):
        self.kind, self.plural = kind, plural
        self._entries = dict(entries)   # name -> "module:Class"

    def names(self) -> list[str]:
        return sorted(self._entries)

    def get(self, name: str):
        if name not in self._entries:
            raise KeyError(f"unknown {self.kind} '{name}'; valid {self.plural}: {', '.join(self.names())}")
        mod, _, cls = self._entries[name].partition(":")
        return getattr(importlib.import_module(mod), cls)

    def register(self, name: str, target: str) -> None:
        self._entries[name] = target
