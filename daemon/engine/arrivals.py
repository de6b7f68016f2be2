"""The gate every idea commit passes before it may run: it shares history with the baseline and its
change is safe (no frozen files, symlinks, submodules, oversize files). Pushed branches are checked
as soon as they appear, not when they reach the front of the queue, so an invalid push gets its
`rejected` note within seconds of the push (the push wakes the tick at once).
"""

from __future__ import annotations

import logging

from autoresearchd import defaults
from autoresearchd.store.gitrepo import GitError
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
        self._ahead: dict[str, tuple] = {}     # commit -> (merge-base, its diff or None), read ahead

    def _merge_base(self, commit: str, base: str) -> str | None:
        # most ideas branch off the baseline's tip: then it is their merge-base, and no `git merge-base`
        # runs (the parent as git reads the commit, through the persistent cat-file)
        if self.repo.rev_parse(commit + "^1") == base:
            return base
        return self.repo.merge_base(commit, base)

    def why(self, idea: Idea, base: str | None = None) -> str | None:
        """Why this commit may not run (None if it may). Cached per commit. `base`: the baseline's
        commit as the caller read it (else the baseline branch is read)."""
        if idea.commit in self._why:
            return self._why[idea.commit]
        base = base or self.research.baseline_commit
        why = None
        mb, changes = self._ahead.pop(idea.commit, None) or (self._merge_base(idea.commit, base), None)
        if mb is None:
            why = "the branch shares no history with the baseline (no merge-base); rebase it onto " + \
                  branch_name(self.research.baseline_ref)
        else:
            rules = SafetyRules(is_frozen=self.research.manifest.is_frozen,
                                max_file_bytes=self.cfg.implementer.max_file_bytes,
                                max_diff_bytes=self.cfg.implementer.max_diff_bytes)
            why = check_tree_change(self.repo, mb, idea.commit, rules, changes)
            if why is None and mb != base:
                why = self._old_frozen(idea.commit, base)
            if why is None:     # the knobs it declares and the values it sets (daemon/tune/knobs.py)
                why = file_error(self.repo, idea.commit, self.research.manifest)
        self._why[idea.commit] = why
        return why

    def _old_frozen(self, commit: str, base: str) -> str | None:
        """A commit built on an old baseline changes no frozen file against its merge-base, yet may hold
        that baseline's frozen files where the current one changed them; `run` reads code/'s copies (a
        training script imports the env's frozen data loader), so the old file would be measured with
        the current evaluator and judged against the current baseline. Its frozen files must be the
        baseline's."""
        files = sorted(set(self.research.frozen_files(commit)) | set(self.research.frozen_files(base)))
        mine, theirs = ({e.path: e.sha for e in self.repo.ls_tree(c, files)} if files else {} for c in (commit, base))
        odd = [f for f in files if mine.get(f) != theirs.get(f)]
        if not odd:
            return None
        return (f"its frozen file {odd[0]} is not the baseline's: it builds on an old baseline, whose frozen files "
                f"differ; rebase it onto {branch_name(self.research.baseline_ref)}")

    def reject(self, idea: Idea, why: str) -> None:
        log.info("rejected %s: %s", idea.branch or idea.idea_id, why)
        self.lifecycle.rejected(idea, Note(status=Status.REJECTED, idea_id=idea.idea_id,
                                           metric=self.research.manifest.metric, error=why))

    def _read_ahead(self, new: list[Idea], base: str) -> None:
        """A push of many branches: their diffs in one process, not one each."""
        mbs = {i.commit: self._merge_base(i.commit, base) for i in new}
        try:
            diffs = self.repo.diff_tree_raw_many([(mb, c) for c, mb in mbs.items() if mb])
        except GitError:       # an unreadable commit among them: each is diffed alone, as before
            diffs = {}
        self._ahead = {c: (mb, diffs.get((mb, c))) for c, mb in mbs.items()}

    def reject_new(self, pop) -> bool:
        """Check every idea branch not yet noted, run or implementing; note the invalid ones."""
        rejected = False
        todo = [i for i in pop.ideas if i.branch and not i.proposal and i.note is None and not i.leases]
        base = pop.baseline_commit or self.research.baseline_commit
        # in batches: each arriving tip may differ from the baseline in up to PUSH_MAX_PATHS paths, and
        # many may share one such tree; held all at once, their changes grew with every ref pushed
        step = defaults.GATE_DIFF_BATCH
        try:
            with self.lifecycle.batch():
                for k in range(0, len(todo), step):
                    new = [i for i in todo[k:k + step] if i.commit not in self._why]
                    if len(new) > 1:
                        self._read_ahead(new, base)
                    for idea in todo[k:k + step]:
                        why = self.why(idea, base)
                        if why:
                            self.reject(idea, why)
                            rejected = True
                    self._ahead = {}
        finally:
            self._ahead = {}            # read ahead against this call's base: never a later call's
        return rejected
