"""Ideas as git objects: ids, branch names, and the commit message with its provenance trailers.

An idea commit's message is the idea (title line, blank line, body) followed by trailers:
Idea-Id, Origin, Parents, Epoch, Model, Attempts, Tokens, Cost-USD, Prompt-Hash. The trailers are
believed only on commits the daemon wrote itself (`population` knows which: the daemon marks each
under refs/autoresearch/ideas/). A commit somebody pushed is `as_pushed`: its message stays the idea,
whatever trailers it carries are ignored, its id is derived from the commit and its origin is `human`.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass, field, replace
from typing import Any

from autoresearchd.store.notes import BEST_DECISIONS, Lease, Note, Status
from autoresearchd.store.refs import IDEA_BRANCHES
from autoresearchd.store.trailers import TRAILER_KEYS, Trailers, parse_trailers
from autoresearchd.inert import one_line, visible
from autoresearchd.vocab import LeaseState, Origin, known


def make_idea_id(text: str, epoch: int, salt: str = "") -> str:
    """Stable id: the same proposal (text, epoch, salt) always gets the same id, across restarts."""
    h = hashlib.sha256(f"{epoch}\0{salt}\0{text}".encode()).hexdigest()[:8]
    return f"e{epoch:03d}-{h}"


def slugify(text: str, maxlen: int = 40) -> str:
    """A branch-safe slug: ASCII letters, digits and dashes only (no shell or ref metacharacters)."""
    t = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    t = re.sub(r"[^A-Za-z0-9]+", "-", t).strip("-").lower()
    return (t[:maxlen].rstrip("-")) or "idea"


def prompt_hash(*texts: str) -> str:
    """Short, stable id of the prompt text(s) behind an idea (12 hex digits of sha256), for the
    Prompt-Hash trailer; several texts are hashed joined by NUL."""
    return hashlib.sha256("\0".join(texts).encode()).hexdigest()[:12]


def branch_for(idea_id: str, title: str, origin: Origin | str) -> str:
    group = "human" if origin == Origin.HUMAN else idea_id.split("-")[0]
    return f"{IDEA_BRANCHES}{group}/{slugify(title)}-{idea_id.split('-')[-1]}"


def sanitize_ref_component(name: str) -> str:
    """Make an arbitrary user string safe as one path component of a ref."""
    return slugify(name, 60)


@dataclass
class Idea:
    """One idea as read from git: its sources (the message, the daemon's own `trailers`, the result
    `note`, the leases) and, for a pushed commit, the daemon's placement of it. Each provenance and
    spend fact (origin, epoch, parents, model, attempts, tokens, cost_usd) is derived from those by one
    rule (the properties below, docs/notes.md "One source for each fact"), never copied: the daemon's
    note first, then the daemon's own trailers (a pushed commit has none: `as_pushed`), then the
    daemon's placement of a pushed commit, then nothing."""
    idea_id: str
    commit: str | None
    title: str
    text: str
    branch: str | None = None
    tree: str | None = None
    base_commit: str | None = None      # the first parent of the idea commit
    trailers: Trailers = field(default_factory=Trailers)    # the daemon's own; empty for a pushed commit
    note: Note | None = None
    leases: list[Lease] = field(default_factory=list)
    committed_at: int = 0
    proposal: bool = False              # proposed, not yet implemented (refs/autoresearch/proposals/)
    # a pushed commit's lineage and epoch as the daemon places it (population._placements): None for
    # the daemon's own commits, whose trailers say
    placed_parents: list[str] | None = None
    placed_epoch: int | None = None

    # -- facts, each from its sources by one precedence: note > own trailers > placement > default --
    @property
    def origin(self) -> Origin | str:
        """A member of vocab.Origin; a plain str only for a word this daemon does not know."""
        n = self.note
        if n is not None and n.origin:
            return known(Origin, n.origin)
        return known(Origin, self.trailers.origin) or Origin.HUMAN

    @property
    def epoch(self) -> int:
        n = self.note
        if n is not None and n.epoch is not None:
            return n.epoch
        if self.trailers.epoch is not None:
            return self.trailers.epoch
        return self.placed_epoch or 0

    @property
    def parents(self) -> list[str]:
        """The ideas it builds on (a note does not record them): the trailers', else the placement's."""
        if self.placed_parents is not None:
            return self.placed_parents
        return list(self.trailers.parents)

    @property
    def model(self) -> str | None:
        return self.trailers.model

    @property
    def attempts(self) -> int | None:
        return self.trailers.attempts

    @property
    def tokens(self) -> int | None:
        """LLM tokens spent on the implemented idea: the note's, else the Tokens trailer (store/spend.py
        adds a proposal's Idea-Tokens for the spend of an idea not implemented yet)."""
        n = self.note
        return n.tokens if n is not None and n.tokens is not None else self.trailers.tokens

    @property
    def cost_usd(self) -> float | None:
        """LLM USD spent on the implemented idea: the note's, else the Cost-USD trailer."""
        n = self.note
        return n.cost_usd if n is not None and n.cost_usd is not None else self.trailers.cost_usd

    @property
    def status(self) -> Status:
        if self.note is not None:
            return self.note.status
        if self.proposal:
            return Status.IMPLEMENTING
        if any(lz.state == LeaseState.RUNNING for lz in self.leases):
            return Status.RUNNING
        return Status.QUEUED

    @property
    def value(self) -> float | None:
        return self.note.value if self.note and self.note.status == Status.SUCCEEDED else None

    @property
    def confirmed(self) -> bool:
        """Measured and promoted or confirmed: a result, not a lucky run."""
        return self.value is not None and self.note.decision in BEST_DECISIONS


def format_message(title: str, body: str, trailers: Trailers | dict[str, Any]) -> str:
    """An idea commit's message. `trailers` may be a dict keyed by trailer name: it is validated
    into `Trailers` here, so every message the daemon writes carries typed, versioned trailers."""
    # An LLM wrote the title and text, and plain `git log` prints a commit's message as it is: the daemon
    # writes no control or format character into a commit (docs/security.md, "Every byte from an idea
    # is data"); each is written out (`\x1b`), as every view would show it
    title = " ".join(one_line(title).split())[:200] or "untitled idea"
    lines = [title, ""]
    body = visible(body.replace("\r\n", "\n").strip())          # a CRLF is a line end, not a control
    if body:
        lines += [body, ""]
    tr = trailers if isinstance(trailers, Trailers) else Trailers.model_validate(
        {k: v for k, v in trailers.items() if v is not None})
    lines += tr.lines()
    return "\n".join(lines) + "\n"


def parse_message(msg: str) -> tuple[str, str, dict[str, str]]:
    """(title, body, raw trailers). Trailers are the final paragraph's `Key: value` lines we know."""
    lines = msg.rstrip("\n").split("\n")
    title = lines[0].strip() if lines else ""
    rest = lines[1:]
    trailers: dict[str, str] = {}
    end = len(rest)
    # a line is a trailer when the text before its first ": " is a key we know (every known key is a
    # capitalised word with dashes: tests/test_coldread.py checks this equals the pattern match it
    # replaced, which cost half of parsing a message: 8.3 against 4.4 µs per commit)
    while end > 0 and rest[end - 1].strip():
        key, sep, value = rest[end - 1].partition(": ")
        if not sep or key not in TRAILER_KEYS:
            break
        trailers[key] = value.strip()
        end -= 1
    if not trailers:
        end = len(rest)
    body = "\n".join(rest[:end]).strip()
    return title, body, trailers


def commit_fields(commit: str, tree: str, first_parent: str | None, message: str,
                  branch: str | None, committed_at: int = 0) -> dict[str, Any]:
    """Every field of the Idea a commit shows, as a dict in the dataclass's order (what `vars` of
    `idea_from_commit` gives): the population reader keeps these and builds each idea by copying
    them into its `__dict__`, where the dataclass's `__init__` of 14 arguments cost twice as much."""
    title, body, raw = parse_message(message)
    tr = parse_trailers(raw)
    return {"idea_id": tr.idea_id or pushed_id(commit), "commit": commit, "title": title, "text": body or title,
            "branch": branch, "tree": tree, "base_commit": first_parent, "trailers": tr, "note": None,
            "leases": [], "committed_at": committed_at, "proposal": False, "placed_parents": None,
            "placed_epoch": None}


def idea_from_commit(commit: str, tree: str, first_parent: str | None, message: str,
                     branch: str | None, committed_at: int = 0) -> Idea:
    return Idea(**commit_fields(commit, tree, first_parent, message, branch, committed_at))


def pushed_id(commit: str) -> str:
    return f"h-{commit[:10]}"


_NO_TRAILERS = Trailers()       # frozen: one serves every pushed idea


def pushed_fields(commit: str | None) -> dict[str, Any]:
    """What `as_pushed` changes of an idea: its id from its commit, no trailers, no parents until placed."""
    return {"idea_id": pushed_id(commit or ""), "trailers": _NO_TRAILERS, "placed_parents": []}


def as_pushed(idea: Idea) -> Idea:
    """A commit the daemon did not write. Its message is kept as the idea (title and body, trailers
    left out of the text), but provenance is the daemon's to decide: an `Origin: seed`, `Epoch: 99` or
    `Cost-USD: 1e9` line in a pushed commit must not move the origin, the epoch or the budget. Its
    trailers are dropped, so every fact derived from them is the daemon's (origin `human`, no parents
    until placed, no spend)."""
    return replace(idea, **pushed_fields(idea.commit))
