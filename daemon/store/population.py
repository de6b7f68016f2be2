"""Reads the whole population from git in a fixed number of processes, whatever its size:
one for-each-ref, one notes list per ref, and one `cat-file --batch` for commits and note blobs.

The population is every idea (branches under refs/heads/idea/, measured commits kept under
refs/autoresearch/archive/ after their branch moved on, plus records of ideas that never became
runnable under refs/autoresearch/records/), the baseline, their result notes and leases.

Provenance is the daemon's: a branch commit's trailers count only if the daemon marked that commit
as its own (refs/autoresearch/ideas/<idea-id>, written by the implementer; records and proposals
live in the daemon's namespace already). Any other commit is a push: origin `human`, an id from its
sha, the parent idea its code grew from, and the epoch the daemon recorded in its note (until then
the current one).
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from dataclasses import dataclass, field

from autoresearchd.goal import best
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.ideas import Idea, as_pushed, idea_from_commit
from autoresearchd.store.notes import Note, Status, parse_leases, parse_note
from autoresearchd.store.refs import (ARCHIVE_PREFIX, HEADS, IDEA_BRANCHES, IDEAS_PREFIX, NOTES_REF, PROPOSALS_PREFIX,
                                      RECORDS_PREFIX, RUNS_REF)


@dataclass
class Population:
    ideas: list[Idea]
    baseline_commit: str | None
    baseline_note: Note | None
    baseline_leases: list = field(default_factory=list)
    by_id: dict[str, Idea] = field(default_factory=dict)
    by_commit: dict[str, Idea] = field(default_factory=dict)

    def __post_init__(self):
        for i in self.ideas:
            self.by_id.setdefault(i.idea_id, i)
            if i.commit:
                self.by_commit.setdefault(i.commit, i)

    @property
    def baseline_value(self) -> float | None:
        n = self.baseline_note
        return n.value if n and n.status == Status.SUCCEEDED else None

    @property
    def baseline_std(self) -> float | None:
        return self.baseline_note.std if self.baseline_note else None

    def queued(self) -> list[Idea]:
        return [i for i in self.ideas if i.status == Status.QUEUED]

    def running(self) -> list[Idea]:
        return [i for i in self.ideas if i.status == Status.RUNNING]

    def implementing(self) -> list[Idea]:
        return [i for i in self.ideas if i.proposal and i.note is None]

    def succeeded(self) -> list[Idea]:
        return [i for i in self.ideas if i.value is not None]

    def max_epoch(self) -> int:
        return max((i.epoch for i in self.ideas if i.origin != "human"), default=-1)

    def best(self, goal: str, confirmed: bool | None = None, exclude: str | None = None) -> Idea | None:
        """The best measured idea, the one definition of "best": confirmed=True only promoted or
        confirmed results (the best *result*), False only the others (the best unconfirmed value),
        None any; `exclude` leaves out one commit (the idea being judged)."""
        cands = [i for i in self.succeeded() if (exclude is None or i.commit != exclude)
                 and (confirmed is None or i.confirmed == confirmed)]
        if not cands:
            return None
        return best(cands, goal, key=lambda i: i.value)

    def resolve(self, ref: str) -> Idea | None:
        """Find an idea by id, id prefix, branch name, or commit prefix."""
        if ref in self.by_id:
            return self.by_id[ref]
        for i in self.ideas:
            if i.branch and (i.branch == ref or i.branch == HEADS + ref
                             or i.branch.endswith("/" + ref)):
                return i
        matches = [i for i in self.ideas if i.idea_id.startswith(ref) or (i.commit and len(ref) >= 6
                                                                          and i.commit.startswith(ref))]
        return matches[0] if len(matches) == 1 else None


def _place_pushed(ideas: list[Idea], own: set[str]) -> None:
    """Pushed ideas get the lineage and epoch the daemon decides: the parent is the idea whose commit
    the push builds on; the epoch is the one recorded in the idea's note, else the current one."""
    pushed = [i for i in ideas if i.branch and i.commit not in own]
    if not pushed:
        return
    by_commit = {i.commit: i for i in ideas if i.commit}
    current = max((i.epoch for i in ideas if i.origin != "human"), default=0)
    for i in pushed:
        parent = by_commit.get(i.base_commit) if i.base_commit else None
        i.parents = [parent.idea_id] if parent is not None and parent is not i else []
        i.epoch = i.note.epoch if i.note is not None and i.note.epoch is not None else current


class _LRU(OrderedDict):
    """Parsed objects by object id. Git objects never change, so a hit is always valid; the daemon
    re-reads the population every tick and most of that time is parsing."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def get_or(self, key: str, make):
        if key in self:
            self.move_to_end(key)
            return self[key]
        val = self[key] = make()
        if len(self) > self.size:
            self.popitem(last=False)
        return val


_NOTES = _LRU(50_000)
_IDEAS = _LRU(50_000)


def _note(blob: str, objs: dict[str, bytes]) -> Note | None:
    """The parsed note for a blob; callers that modify a note must copy it first."""
    return _NOTES.get_or(blob, lambda: parse_note(objs[blob].decode(errors="replace")))


def _parse_commit(raw: bytes) -> tuple[str, list[str], str, int]:
    """(tree, parents, message, committer time) from a raw commit object."""
    head, _, msg = raw.partition(b"\n\n")
    tree, parents, ts = "", [], 0
    for line in head.split(b"\n"):
        if line.startswith(b"tree "):
            tree = line[5:].decode()
        elif line.startswith(b"parent "):
            parents.append(line[7:].decode())
        elif line.startswith(b"committer "):
            try:
                ts = int(line.rsplit(b" ", 2)[1])
            except (ValueError, IndexError):
                ts = 0
    return tree, parents, msg.decode(errors="replace"), ts


def read_population(repo: GitRepo, baseline_ref: str) -> Population:
    refs = repo.refs(IDEA_BRANCHES)
    own = set(repo.refs(IDEAS_PREFIX).values())
    refs.update(repo.refs(RECORDS_PREFIX))
    refs.update(repo.refs(PROPOSALS_PREFIX))
    refs.update(repo.refs(ARCHIVE_PREFIX))
    baseline = repo.rev_parse(baseline_ref)
    note_list = repo.notes_list(NOTES_REF)
    lease_list = repo.notes_list(RUNS_REF)
    commits = list(dict.fromkeys(refs.values()))
    # One batch for every commit and every note blob that matters.
    wanted = commits + [note_list[c] for c in commits if c in note_list] + \
        [lease_list[c] for c in commits if c in lease_list]
    if baseline:
        wanted += [m[baseline] for m in (note_list, lease_list) if baseline in m]
    # what the caches already hold need not be read from git at all
    wanted = [w for w in wanted if w not in _NOTES and w not in _IDEAS]
    objs = repo.cat_file_batch(wanted)
    ideas: list[Idea] = []
    seen: set[str] = set()
    # a commit still on its branch is seen through the branch, not through its archive ref
    for ref, sha in sorted(refs.items(), key=lambda kv: (not kv[0].startswith(IDEA_BRANCHES), kv[0])):
        if sha in seen or (sha not in objs and sha not in _IDEAS):
            continue  # two branches on one commit are one idea
        seen.add(sha)

        def make(sha=sha):
            tree, parents, msg, ts = _parse_commit(objs[sha])
            return idea_from_commit(sha, tree, parents[0] if parents else None, msg, None, ts)
        idea = dataclasses.replace(_IDEAS.get_or(sha, make))
        if ref.startswith((IDEA_BRANCHES, ARCHIVE_PREFIX)) and sha not in own:
            idea = as_pushed(idea)
        idea.branch = ref if ref.startswith((IDEA_BRANCHES, ARCHIVE_PREFIX)) else None
        idea.proposal = ref.startswith(PROPOSALS_PREFIX)
        if sha in note_list and (note_list[sha] in objs or note_list[sha] in _NOTES):
            idea.note = _note(note_list[sha], objs)
        if sha in lease_list and lease_list[sha] in objs:
            idea.leases = parse_leases(objs[lease_list[sha]].decode(errors="replace"))
        ideas.append(idea)
    ideas.sort(key=lambda i: (i.committed_at, i.idea_id))
    _place_pushed(ideas, own)
    bnote, bleases = None, []
    if baseline and baseline in note_list and (note_list[baseline] in objs or note_list[baseline] in _NOTES):
        bnote = _note(note_list[baseline], objs)
    if baseline and baseline in lease_list and lease_list[baseline] in objs:
        bleases = parse_leases(objs[lease_list[baseline]].decode(errors="replace"))
    return Population(ideas, baseline, bnote, bleases)
