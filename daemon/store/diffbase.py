"""What an idea's change is shown against, in every view (`show --diff`, the dashboard, W&B, export).

The daemon writes each of its idea commits on the parent it chose (the baseline or a parent idea), so
its first parent is the right base. A pushed idea is the tip of whatever the person pushed: baseline
-> X -> M is one idea, M, and the gate checks and the trial measures M's whole change against the
baseline (engine/arrivals.py: merge-base). Showing M against X hid X's change from every view, so a
pushed idea is shown against its nearest first-parent ancestor that was measured (an idea with a
result, or the baseline), else against its merge-base with the baseline: the same change the gate
checked.
"""

from __future__ import annotations

from typing import Callable

from autoresearchd import defaults
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.ideas import pushed_id
from autoresearchd.store.refs import NOTES_REF


def is_pushed(idea) -> bool:
    """A commit the daemon did not write (store/ideas.as_pushed gives it the id from its commit)."""
    return bool(idea.commit) and idea.idea_id == pushed_id(idea.commit)


def diff_base(repo: GitRepo, idea, baseline: str | None,
              measured: Callable[[str], bool] | None = None) -> str | None:
    """The commit to diff `idea.commit` against. `measured(commit)` says whether a commit is a
    measured idea (default: it has a result note); `baseline` is the baseline commit or ref."""
    if not idea.commit or not is_pushed(idea) or not idea.base_commit:
        return idea.base_commit
    if measured is None:
        def measured(c: str) -> bool:
            return repo.note_read(NOTES_REF, c) is not None
    base = repo.rev_parse(baseline) if baseline else None
    for c in repo.first_parent_ancestors(idea.commit, defaults.DIFF_BASE_SCAN):
        if c == base or measured(c):
            return c
    return (repo.merge_base(idea.commit, base) if base else None) or idea.base_commit
