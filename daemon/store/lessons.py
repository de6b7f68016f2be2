"""The lessons scratchpad's record and its storage in git: a JSON blob (text, the idea ids it condenses,
updates, spend) under refs/autoresearch/lessons, rewritten at each update (policies/lessons.py decides
when and asks the LLM). A restarted daemon reads it back, so the lessons and what they cover survive
restarts. Read it with `git cat-file blob refs/autoresearch/lessons`.

Not idea state: the lessons ref is the policies' memory, so it has its own writer here rather than
going through the lifecycle writer (store/lifecycle.py), which owns the idea, proposal, record and
archive refs and the result and lease notes. The policy is given a `GitLessonsStore` when it is built
(app.make_policy).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from autoresearchd.store.gitrepo import GitError, GitRepo
from autoresearchd.store.refs import LESSONS_REF

log = logging.getLogger("autoresearchd")


@dataclass
class Lessons:
    text: str = ""
    covered: list[str] = field(default_factory=list)   # idea ids condensed into text, in order
    updates: int = 0
    cost_usd: float = 0.0                              # spent on lessons calls so far
    model: str | None = None

    def to_json(self) -> dict:
        return {"text": self.text, "covered": self.covered, "updates": self.updates,
                "cost_usd": round(self.cost_usd, 6), "model": self.model}

    @classmethod
    def from_json(cls, d: dict) -> Lessons:
        return cls(text=str(d.get("text") or ""), covered=[str(x) for x in d.get("covered") or []],
                   updates=int(d.get("updates") or 0), cost_usd=float(d.get("cost_usd") or 0),
                   model=d.get("model"))


class GitLessonsStore:
    """The lessons of one research repo (load, save), cached in this process."""

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
