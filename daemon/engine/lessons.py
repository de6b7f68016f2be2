"""The lessons scratchpad kept in git: a JSON blob (text, the idea ids it condenses, updates, spend)
under refs/autoresearch/lessons, rewritten at each update (policies/lessons.py decides when and asks
the LLM). A restarted daemon reads it back, so the lessons and what they cover survive restarts.
Read it with `git cat-file blob refs/autoresearch/lessons`.
"""

from __future__ import annotations

import json
import logging

from autoresearchd.policies.lessons import Lessons
from autoresearchd.store.gitrepo import GitError, GitRepo
from autoresearchd.store.refs import LESSONS_REF

log = logging.getLogger("autoresearchd")


class GitLessonsStore:
    def __init__(self, repo: GitRepo, ref: str = LESSONS_REF):
        self.repo, self.ref = repo, ref
        self._cache: Lessons | None = None

    def load(self) -> Lessons:
        if self._cache is None:
            raw = self.repo.read_blob(self.ref)
            try:
                self._cache = Lessons.from_json(json.loads(raw)) if raw else Lessons()
            except (ValueError, TypeError, AttributeError):
                log.warning("%s does not hold lessons; starting a new scratchpad", self.ref)
                self._cache = Lessons()
        return self._cache

    def save(self, lessons: Lessons) -> None:
        self._cache = lessons
        body = json.dumps(lessons.to_json(), indent=1).encode()
        try:
            self.repo.update_ref(self.ref, self.repo.hash_blob(body), reason="lessons")
        except GitError as e:   # the lessons only help the next prompts; never stop proposing
            log.warning("could not record the lessons: %s", e)


def attach(policy, repo: GitRepo) -> None:
    """Give an LLM policy a lessons store in the research repo."""
    if hasattr(policy, "lessons_store"):
        policy.lessons_store = GitLessonsStore(repo)
