"""Where a replay stopped, kept in git: the indices of the replay file's records already served,
as a JSON blob under refs/autoresearch/replay. A restarted daemon resumes after them instead of
replaying the whole file again (which used up slots on duplicates). The position belongs to one
file: a different or edited replay file starts from its beginning.

Not idea state: the replay ref is where the LLM replay stopped, so it has its own writer here rather
than going through the lifecycle writer (store/lifecycle.py), which owns the idea, proposal, record and
archive refs and the result and lease notes.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from autoresearchd.store.gitrepo import GitError, GitRepo
from autoresearchd.store.refs import REPLAY_REF

log = logging.getLogger("autoresearchd")


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def load_position(repo: GitRepo, path: Path) -> set[int]:
    """The records of `path` already served by an earlier run (empty for another file)."""
    raw = repo.read_blob(REPLAY_REF)
    if not raw:
        return set()
    try:
        pos = json.loads(raw)
        if pos.get("digest") != file_digest(path):
            return set()
        return {int(i) for i in pos.get("served", [])}
    except (ValueError, TypeError, AttributeError):
        log.warning("%s does not hold a replay position; replaying %s from its start", REPLAY_REF, path.name)
        return set()


def saver(repo: GitRepo, path: Path):
    """A callback for the replay provider: record the served indices after each proposal."""
    digest = file_digest(path)

    def save(served: list[int]) -> None:
        body = json.dumps({"file": path.name, "digest": digest, "served": sorted(served)}, separators=(",", ":"))
        try:
            repo.update_ref(REPLAY_REF, repo.hash_blob(body.encode()), reason="replay position")
        except GitError as e:  # the position only saves work after a restart; never stop proposing
            log.warning("could not record the replay position: %s", e)
    return save
