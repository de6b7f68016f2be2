"""Safety gates on code changes: which paths a change may touch and what a new tree may contain.

Two levels, both pure policy (git access goes through GitRepo):
- check_path: one path named by a diff or a tree (absolute, '..', '.git', control characters, frozen);
- check_tree_change: a whole commit or tree against its base, used for LLM diffs after they apply
  and for branches that people push, so it trusts nothing about how the change was made.
Each returns one clear reason (a sentence for the note and for the LLM) or None when safe.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from autoresearchd import defaults
from autoresearchd.store.gitrepo import GitRepo

SYMLINK_MODE = "120000"
GITLINK_MODE = "160000"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass
class SafetyRules:
    is_frozen: Callable[[str], bool]
    max_file_bytes: int = defaults.MAX_FILE_BYTES
    max_diff_bytes: int = defaults.MAX_DIFF_BYTES


def normalize_path(path: str) -> str:
    """'./a//b' -> 'a/b' (no resolution of '..': such paths are refused, not interpreted)."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    return "/".join(parts)


def check_path(path: str, rules: SafetyRules) -> str | None:
    """Reason why a change may not touch `path`, or None."""
    if not path or not path.strip():
        return "empty file path"
    if _CONTROL.search(path):
        return f"path {path!r} contains control characters"
    if path.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:[\\/]", path):
        return f"path {path!r} is absolute; paths must be relative to the repository root"
    parts = re.split(r"[\\/]", path)
    if ".." in parts:
        return f"path {path!r} contains '..'; paths must stay inside the repository"
    if any(p.lower().rstrip(". ") == ".git" for p in parts):
        return f"path {path!r} is inside .git/; the repository's git data may not be changed"
    norm = normalize_path(path)
    if not norm:
        return f"path {path!r} names no file"
    if rules.is_frozen(norm):
        return f"{norm} is frozen (part of the environment's fixed evaluation setup) and may not be changed"
    return None


def check_tree_change(repo: GitRepo, base_commit: str, new: str, rules: SafetyRules,
                      changes: list | None = None) -> str | None:
    """Compare `new` (a commit or tree) with base; the first reason it is unsafe, or None. `changes`:
    repo.diff_tree_raw(base_commit, new) where the caller already has it (a batch of arrivals)."""
    changes = repo.diff_tree_raw(base_commit, new) if changes is None else changes
    for c in changes:
        reason = check_path(c.path, rules)
        if reason:
            return reason
        if c.new_mode == SYMLINK_MODE:
            kind = "adds" if c.old_mode != SYMLINK_MODE else "changes"
            return f"the change {kind} a symbolic link at {c.path}; symlinks may not be created or changed"
        if c.new_mode == GITLINK_MODE:
            return f"the change adds or moves a submodule at {c.path}; submodules are not allowed"
    added = [c for c in changes if c.status != "D" and c.new_mode not in ("000000",)]
    sizes = repo.object_sizes([c.new_sha for c in added])
    for c in added:
        size = sizes.get(c.new_sha, 0)
        if size > rules.max_file_bytes:
            return (f"{c.path} would be {size} bytes, over the {rules.max_file_bytes}-byte limit per file; "
                    "generate large data at run time instead of committing it")
    blobs = repo.cat_file_batch([c.new_sha for c in added])
    for c in added:
        if b"\0" in blobs.get(c.new_sha, b""):
            return f"{c.path} would contain binary data (NUL bytes); only text files may be changed"
    return None
