"""The evaluation harness trials are measured with: the baseline's frozen files as a tar, its digest
and the list of frozen paths, built once per baseline commit. Dispatch ships it with each trial and
stamps its digest on the lease; collect refuses a result measured with another harness.
"""

from __future__ import annotations


class Harness:
    def __init__(self, research):
        self.research = research
        self._base: str | None = None      # the baseline commit of the population being worked on
        self._built: tuple[str, bytes | None, str | None, list[str]] | None = None

    def at(self, base: str | None) -> None:
        """Work on this baseline commit from now on (None: the research's current baseline)."""
        self._base = base

    def get(self) -> tuple[bytes | None, str | None, list[str]]:
        """(tar, digest, frozen files) of the current baseline's harness."""
        base = self._base or self.research.baseline_commit
        if self._built is None or self._built[0] != base:
            tar, digest = self.research.harness()
            self._built = (base, tar, digest, self.research.frozen_files())
        return self._built[1], self._built[2], self._built[3]

    def digest(self) -> str | None:
        return self.get()[1]
