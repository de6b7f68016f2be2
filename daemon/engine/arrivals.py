"""The gate every idea commit passes before it may run: it shares history with the baseline and its
change is safe (no frozen files, symlinks, submodules, oversize files). Pushed branches are checked
as soon as they appear, not when they reach the front of the queue, so an invalid push gets its
`rejected` note within seconds of the push (the push wakes the tick at once).
"""

from __future__ import annotations

import logging

from autoresearchd.store.ideas import Idea
from autoresearchd.store.lifecycle import Lifecycle
from autoresearchd.store.notes import Note, Status
from autoresearchd.store.refs import branch_name
from autoresearchd.implement.safety import SafetyRules, check_tree_change
from autoresearchd.tune.knobs import file_error

log = logging.getLogger("autoresearchd")


class Gate:
    def __init__(self, cfg, research, lifecycle: Lifecycle):
        self.cfg, self.research, self.repo = cfg, research, research.repo
        self.lifecycle = lifecycle           # writes the rejected note and tells the observers
        self._why: dict[str, str | None] = {}

    def why(self, idea: Idea) -> str | None:
        """Why this commit may not run (None if it may). Cached per commit."""
        if idea.commit in self._why:
            return self._why[idea.commit]
        base = self.research.baseline_commit
        why = None
        mb = self.repo.merge_base(idea.commit, base)
        if mb is None:
            why = "the branch shares no history with the baseline (no merge-base); rebase it onto " + \
                  branch_name(self.research.baseline_ref)
        else:
            rules = SafetyRules(is_frozen=self.research.manifest.is_frozen,
                                max_file_bytes=self.cfg.implementer.max_file_bytes,
                                max_diff_bytes=self.cfg.implementer.max_diff_bytes)
            why = check_tree_change(self.repo, mb, idea.commit, rules)
            if why is None:     # the knobs it declares and the values it sets (daemon/tune/knobs.py)
                why = file_error(self.repo, idea.commit, self.research.manifest)
        self._why[idea.commit] = why
        return why

    def reject(self, idea: Idea, why: str) -> None:
        log.info("rejected %s: %s", idea.branch or idea.idea_id, why)
        self.lifecycle.rejected(idea, Note(status=Status.REJECTED, idea_id=idea.idea_id,
                                           metric=self.research.manifest.metric, error=why))

    def reject_new(self, pop) -> bool:
        """Check every idea branch not yet noted, run or implementing; note the invalid ones."""
        rejected = False
        with self.lifecycle.batch():
            for idea in pop.ideas:
                if not idea.branch or idea.proposal or idea.note is not None or idea.leases:
                    continue
                why = self.why(idea)
                if why:
                    self.reject(idea, why)
                    rejected = True
        return rejected
