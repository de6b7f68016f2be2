"""Whether the baseline branch still holds the manifest the daemon runs with.

The daemon reads the `[env]` manifest once, at start, from the baseline commit. A commit on the
baseline branch may change it (docs/env-tinygpt.md tells a user to raise `time_budget_s` that way) or
break it (a deleted `metric`). Before this watch the running daemon went on with the manifest it
started with and measured the new baseline under the old rules (its time budget, its metric, its
commands), writing notes that claimed the new commit. Now a changed or invalid manifest at the
baseline holds every new dispatch and proposal, says why once in the log and in `status`, and waits
for a restart (a changed manifest) or a fixing commit (an invalid one). Trials in flight finish and
are harvested: nothing is lost.
"""

from __future__ import annotations

import logging

from autoresearchd.config import ConfigError
from autoresearchd.manifest import MANIFEST_FILE
from autoresearchd.research import load_manifest

log = logging.getLogger("autoresearchd")


class ManifestWatch:
    def __init__(self, cfg, research):
        self.cfg, self.repo, self.loaded = cfg, research.repo, research.manifest
        # a manifest given in a daemon config of its own is not the baseline's: nothing to watch
        own = cfg.path is not None and cfg.path == (self.repo.path / MANIFEST_FILE).resolve()
        self.active = cfg.env is None or own
        self._verdicts: dict[str, str | None] = {}     # baseline commit -> why it is held (None: not held)
        self.reason: str | None = None

    def check(self, commit: str | None) -> str | None:
        """Why nothing new may be dispatched on this baseline commit, or None."""
        if not self.active or not commit:
            self.reason = None
            return None
        if commit not in self._verdicts:
            try:
                why = None if load_manifest(self.repo, commit, self.cfg) == self.loaded else (
                    f"the manifest ({MANIFEST_FILE}) changed in the baseline commit {commit[:10]}; this daemon "
                    f"runs with the one it started with: restart it to use the new one "
                    f"(autoresearchd stop, then start). Nothing new is started until then")
            except ConfigError as e:
                why = (f"the baseline commit {commit[:10]} has an invalid manifest: {e}. Fix {MANIFEST_FILE} "
                       f"on the baseline branch, then restart the daemon. Nothing new is started until then")
            if why:
                log.warning("%s", why)
            self._verdicts[commit] = why
        self.reason = self._verdicts[commit]
        return self.reason
