"""Reads the whole population from git in a fixed number of processes, whatever its size:
one for-each-ref, one notes list per ref, and one `cat-file --batch` for commits and note blobs.

The population is every idea (branches under refs/heads/idea/, measured commits kept under
refs/autoresearch/archive/ after their branch moved on, plus records of ideas that never became
runnable under refs/autoresearch/records/), the baseline, their result notes and leases, the
screened runs (refs/autoresearch/screens/: never ideas; store/screens.py) with theirs, and the result
notes on commits none of those refs shows (`unlisted`: an old baseline's), so the spend (store/spend.py)
sees every run once.

Provenance is the daemon's: a branch commit's trailers count only if the daemon marked that commit
as its own (refs/autoresearch/ideas/<idea-id>, written by the implementer; records and proposals
live in the daemon's namespace already). Any other commit is a push: origin `human`, an id from its
sha, the parent idea its code grew from, and the epoch the daemon recorded in its note (until then
the current one).
"""

from __future__ import annotations

import dataclasses
import gc
import threading
from collections import OrderedDict
from contextlib import closing, contextmanager
from types import MappingProxyType
from dataclasses import dataclass, field

from autoresearchd import defaults
from autoresearchd.store.frozen import freeze_parsed
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.ideas import Idea, commit_fields, pushed_fields
from autoresearchd.store.notes import BASELINE_NOTE_ID, Note, Origin, Status, parse_leases, parse_note
from autoresearchd.store.ranking import best_of
from autoresearchd.store.refs import (ARCHIVE_PREFIX, HEADS, IDEA_BRANCHES, IDEAS_PREFIX, NOTES_REF, PROPOSALS_PREFIX,
                                      RECORDS_PREFIX, RUNS_REF, SCREENS_PREFIX)
from autoresearchd.store.screens import Screen, screen_refs


@dataclass
class Population:
    ideas: list[Idea]
    baseline_commit: str | None
    baseline_note: Note | None
    baseline_leases: list = field(default_factory=list)
    by_id: dict[str, Idea] = field(default_factory=dict)
    by_commit: dict[str, Idea] = field(default_factory=dict)
    # idea branches that point at the baseline commit itself: nothing to measure, so no idea of their
    # own (listing them would count the baseline's spend twice and show it as a "+0.0000" idea)
    at_baseline: list[str] = field(default_factory=list)
    # the screened runs, by key (an idea's id, or baseline-<commit>): store/screens.py
    screens: dict[str, Screen] = field(default_factory=dict)
    # result notes on commits that are no idea, no screen and not the baseline (an old baseline's seeds,
    # a measured commit whose refs were all deleted): runs the daemon made, so the spend counts them
    unlisted: dict[str, Note] = field(default_factory=dict)

    def __post_init__(self):
        # the baseline's value, read once: `stale` asks for it for every idea of every view
        n = self.baseline_note
        self._bvalue = n.value if n and n.status == Status.SUCCEEDED else None
        # the first idea of an id or commit wins: built in reverse, so a later one is overwritten
        # (given both, as store/livepop.py keeps them, they are taken as they are)
        if not (self.by_id and self.by_commit):
            self.by_id = {i.idea_id: i for i in reversed(self.ideas)}
            self.by_commit = {i.commit: i for i in reversed(self.ideas) if i.commit}

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
        """The newest epoch of the policy's own ideas (-1: none yet): where the policy's cursor is."""
        return max((i.epoch for i in self.ideas if i.origin != Origin.HUMAN), default=-1)

    def epoch(self) -> int | None:
        """The current epoch as every view shows it: the newest epoch of any idea, a pushed idea counting
        in the epoch it was placed in (0 before the policy proposed anything); None with no idea yet."""
        return max((i.epoch for i in self.ideas), default=None)

    def stale(self, i: Idea) -> bool:
        """Measured against a baseline that is no longer the current one. Such a result is kept apart
        (docs/policies.md, "A moved baseline"): never "best", never a parent, never re-judged."""
        n = i.note
        if n is None or n.baseline is None:
            return False
        return on_old_baseline(n, self.baseline_commit, self._bvalue)

    def on_baseline(self, commit: str, note: Note) -> "Population":
        """This population as judged against another baseline commit (an old one, with its note): the
        late seeds of a result measured on it are judged where it was measured, among its own cohort.
        For judging only: its `unlisted` and `screens` are this population's, so its spend is not the
        repo's (the old baseline's note is both its baseline and unlisted; ask this population)."""
        return dataclasses.replace(self, baseline_commit=commit, baseline_note=note, baseline_leases=[],
                                   by_id={}, by_commit={})

    def comparable(self) -> list[Idea]:
        """The measured ideas judged against the current baseline: what "best" and parents choose from."""
        return [i for i in self.succeeded() if not self.stale(i)]

    def best(self, goal: str, confirmed: bool | None = None, exclude: str | None = None) -> Idea | None:
        """The best measured idea, the one definition of "best": confirmed=True only promoted or
        confirmed results (the best *result*), False only the others (the best unconfirmed value),
        None any; `exclude` leaves out one commit (the idea being judged). Results measured against an
        old baseline are never best (`stale`). Ties: store/ranking.py, the one order."""
        return best_of((i for i in self.comparable() if (exclude is None or i.commit != exclude)
                        and (confirmed is None or i.confirmed == confirmed)), goal)

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


def on_old_baseline(note: Note | None, commit: str | None, value: float | None) -> bool:
    """A note judged against another baseline than `commit` (whose value is `value`). A note from
    before `baseline_commit` was written counts as old when its `baseline` differs from the current
    baseline's value; with no current value there is nothing to tell them apart by, so it is current."""
    if note is None or note.baseline is None:
        return False                # not judged yet: it will be, against the current baseline
    if note.baseline_commit is not None:
        return note.baseline_commit != commit
    return value is not None and abs(note.baseline - value) > 1e-9 * max(1.0, abs(value))


def _placements(ideas: list[Idea], own: set[str]):
    """Pushed ideas get the lineage and epoch the daemon decides: the parent is the idea whose commit
    the push builds on; the epoch is the one recorded in the idea's note, else the current one.
    Yields (index, parents, epoch) for each pushed idea; the caller applies them (in place, or on a copy
    where the idea objects are shared)."""
    by_commit = None
    current = None
    for k, i in enumerate(ideas):
        if not i.branch or i.commit in own:
            continue
        if by_commit is None:
            by_commit = {i.commit: i for i in ideas if i.commit}
            current = max((i.epoch for i in ideas if i.origin != Origin.HUMAN), default=0)
        parent = by_commit.get(i.base_commit) if i.base_commit else None
        yield k, ([parent.idea_id] if parent is not None and parent is not i else []), \
            (i.note.epoch if i.note is not None and i.note.epoch is not None else current)


class _LRU(OrderedDict):
    """Parsed objects by object id. Git objects never change, so a hit is always valid; the daemon
    re-reads the population every tick and most of that time is parsing. What it holds is shared by
    every reader, so it holds only immutable forms (store/frozen.py, MappingProxyType)."""

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


_GC = {"depth": 0, "was": True}
_GC_LOCK = threading.Lock()


@contextmanager
def bulk():
    """Build many objects with the cycle collector paused. A read builds hundreds of thousands of
    objects that form no cycles; each collection the allocations trigger walks every object alive, so
    at 100k ideas the collector took most of a cold read (loading the saved parses: 10.2 s of CPU with
    it, 2.8 s without). Nested and concurrent blocks are counted: the collector runs again after the
    last one, if it ran before the first.

    What the block built is then moved to the collector's oldest generation as it is (`gc.freeze()`
    then `gc.unfreeze()`: two list splices, no object visited). Left young, the first collections
    after the block walked all of it again, three times (a young collection, a middle one, then the
    full one those promotions triggered): 0.41 of a 1.81 s cold read at 10k ideas. In the oldest
    generation it is walked only by the full collections a long-running process makes anyway, and
    any cycle in it is still found by them. Nothing else in the process uses `gc.freeze`."""
    with _GC_LOCK:
        if _GC["depth"] == 0:
            _GC["was"] = gc.isenabled()
            gc.disable()
        _GC["depth"] += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _GC["depth"] -= 1
            if _GC["depth"] == 0:
                gc.freeze()
                gc.unfreeze()
                if _GC["was"]:
                    gc.enable()


_NOTES = _LRU(defaults.POPULATION_PARSE_CACHE)
_IDEAS = _LRU(defaults.POPULATION_PARSE_CACHE)


def _note(blob: str, objs: dict[str, bytes]) -> Note | None:
    """The parsed note for a blob, frozen: it is shared, so a caller that would change it gets an
    error; `note.model_copy()` is a mutable copy."""
    return _NOTES.get_or(blob, lambda: freeze_parsed(parse_note(objs[blob].decode(errors="replace"))))


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


def _parse_idea(sha: str, raw: bytes) -> MappingProxyType:
    """The fields of the idea a commit shows, as the parse cache holds them (trailers: a frozen model)."""
    tree, parents, msg, ts = _parse_commit(raw)
    fields = commit_fields(sha, tree, parents[0] if parents else None, msg, None, ts)
    fields["leases"] = ()
    return MappingProxyType(fields)


def read_objects(repo: GitRepo, wanted: list[str], commits: set[str], notes: set[str]) -> dict[str, bytes]:
    """Every object of `wanted` (one `cat-file --batch` stream), the commits among them parsed as ideas
    and the note blobs as notes into the parse caches as they arrive: the parsing runs while git reads
    the next objects, on another core, instead of after git read them all (git's CPU was 2.8 s of a
    cold read at 100k ideas; docs/benchmarks.md). The raw objects are returned too: what an eviction
    would drop from the caches is parsed again from them."""
    objs: dict[str, bytes] = {}
    with closing(repo.cat_file_stream(wanted)) as stream:      # a parse that raises ends git at once
        for sha, raw in stream:
            objs[sha] = raw
            if sha in commits:
                _IDEAS.get_or(sha, lambda: _parse_idea(sha, raw))      # noqa: B023 (called at once)
            elif sha in notes:
                _note(sha, objs)
    return objs


def _make_screen(key: str, sha: str, note_blob: str | None, lease_blob: str | None,
                 objs: dict[str, bytes]) -> Screen | None:
    """The screen a screens/ ref shows, through the caches an idea is read through (None: the commit is
    unreadable or screens nothing). Its trailers are believed: only the daemon writes under screens/."""
    if sha not in objs and sha not in _IDEAS:
        return None
    of = _IDEAS.get_or(sha, lambda: _parse_idea(sha, objs[sha]))["trailers"].screen_of
    if not of:
        return None
    note = _note(note_blob, objs) if note_blob and (note_blob in objs or note_blob in _NOTES) else None
    leases = parse_leases(objs[lease_blob].decode(errors="replace")) if lease_blob and lease_blob in objs else ()
    return Screen(key, sha, of, note, tuple(leases))


def _make_idea(ref: str, sha: str, own: set[str], note_blob: str | None, lease_blob: str | None,
               objs: dict[str, bytes]) -> Idea:
    """The idea a ref shows (before pushed ideas are placed): a fresh object, free for the caller."""
    fields = _IDEAS.get_or(sha, lambda: _parse_idea(sha, objs[sha]))     # immutable: each idea gets its own lists
    # the idea's __dict__ copied from the parsed fields, not Idea(**fields): the dataclass's __init__
    # (and as_pushed's replace(), a second one) cost twice the copy, 100k times in a cold read
    d = fields.copy()           # a MappingProxyType's copy() is its dict's: {**fields} went key by key
    d["leases"] = []
    on_branch = ref.startswith((IDEA_BRANCHES, ARCHIVE_PREFIX))
    if on_branch and sha not in own:
        d.update(pushed_fields(sha))        # ideas.as_pushed
    d["branch"] = ref if on_branch else None
    d["proposal"] = ref.startswith(PROPOSALS_PREFIX)
    if note_blob and (note_blob in objs or note_blob in _NOTES):
        d["note"] = _note(note_blob, objs)
    if lease_blob and lease_blob in objs:
        d["leases"] = parse_leases(objs[lease_blob].decode(errors="replace"))
    idea = object.__new__(Idea)
    idea.__dict__ = d
    return idea


def ref_rank(ref: str) -> tuple[int, str]:
    """Which ref shows a commit reached by several: the daemon's proposal or record first (a branch
    pushed at it must not turn it into a push: its trailers, provenance and spend are the daemon's),
    then a branch, then an archive ref; then by name (two branches on one commit are one idea)."""
    return (0 if ref.startswith((PROPOSALS_PREFIX, RECORDS_PREFIX)) else 1 if ref.startswith(IDEA_BRANCHES) else 2,
            ref)


def _ref_order(refs: dict[str, str]) -> list[tuple[str, str]]:
    return sorted(refs.items(), key=lambda kv: ref_rank(kv[0]))


def not_an_idea(idea: Idea, screened: bool) -> bool:
    """A commit an idea branch (or archive ref) reaches that is no idea of its own, as the baseline
    itself is not: a screened run's commit (its note is a screen's, at low fidelity) or an old
    baseline (its note is the baseline's, measured with the evaluator of its day). A pushed branch,
    or one left where the baseline was when it moved, would make that note an idea's result, judged
    against the current baseline (docs/security.md, "A push is data: git mechanisms")."""
    return bool(idea.branch) and (screened or (idea.note is not None and idea.note.idea_id == BASELINE_NOTE_ID))


def _by_time(ideas: list[Idea]) -> None:
    ideas.sort(key=lambda i: (i.committed_at, i.idea_id))


def read_population(repo: GitRepo, baseline_ref: str) -> Population:
    with bulk():
        return _read_population(repo, baseline_ref)


def _read_population(repo: GitRepo, baseline_ref: str) -> Population:
    # One listing, not one per prefix: the implementer turns a proposal into a branch (mark, branch,
    # then the proposal deleted) while the loop reads. Listed apart, an idea could fall between the
    # branch listing and the proposal listing and be missed, and the policy, counting the epoch's
    # ideas, proposed it again. for-each-ref walks refs/autoresearch/ before refs/heads/, so a
    # proposal gone by then has its branch listed.
    listed = repo.refs(IDEA_BRANCHES, IDEAS_PREFIX, RECORDS_PREFIX, PROPOSALS_PREFIX, ARCHIVE_PREFIX, SCREENS_PREFIX)
    own = {sha for ref, sha in listed.items() if ref.startswith(IDEAS_PREFIX)}
    screens = screen_refs(listed)
    refs = {ref: sha for ref, sha in listed.items() if not ref.startswith((IDEAS_PREFIX, SCREENS_PREFIX))}
    baseline = repo.rev_parse(baseline_ref)
    note_list = repo.notes_list(NOTES_REF)
    lease_list = repo.notes_list(RUNS_REF)
    commits = list(dict.fromkeys([*refs.values(), *screens.values()]))
    # One batch for every commit and every note blob that matters.
    wanted = commits + [note_list[c] for c in commits if c in note_list] + \
        [lease_list[c] for c in commits if c in lease_list]
    if baseline:
        wanted += [m[baseline] for m in (note_list, lease_list) if baseline in m]
    others = unlisted_notes(note_list, set(commits), baseline)
    wanted += others.values()
    # what the caches already hold need not be read from git at all
    wanted = [w for w in wanted if w not in _NOTES and w not in _IDEAS]
    blobs = {note_list[c] for c in commits if c in note_list} | set(others.values())
    objs = read_objects(repo, wanted, set(commits), blobs)
    ideas: list[Idea] = []
    seen: set[str] = {baseline} if baseline else set()
    screened = set(screens.values())
    for ref, sha in _ref_order(refs):
        if sha in seen or (sha not in objs and sha not in _IDEAS):
            continue
        seen.add(sha)
        idea = _make_idea(ref, sha, own, note_list.get(sha), lease_list.get(sha), objs)
        if not not_an_idea(idea, sha in screened):
            ideas.append(idea)
        elif idea.note is not None and sha not in screened:
            others[sha] = note_list[sha]        # an old baseline's note: its runs still count (spend)
    _by_time(ideas)
    for k, parents, epoch in list(_placements(ideas, own)):
        ideas[k].placed_parents, ideas[k].placed_epoch = parents, epoch     # fresh copies: safe to set in place
    return Population(ideas, baseline, *_baseline_notes(baseline, note_list.get(baseline), lease_list.get(baseline),
                                                           objs), at_baseline=_at_baseline(refs, baseline),
                      screens={k: s for k, sha in screens.items()
                               if (s := _make_screen(k, sha, note_list.get(sha), lease_list.get(sha), objs))},
                      unlisted={c: _note(b, objs) for c, b in others.items() if b in objs or b in _NOTES})


def unlisted_notes(note_list: dict[str, str], listed: set[str], baseline: str | None) -> dict[str, str]:
    """commit -> note blob of the result notes on commits no listed ref (idea, record, proposal, archive,
    screen) shows and that are not the baseline: Population.unlisted."""
    return {c: b for c, b in note_list.items() if c not in listed and c != baseline}


def _at_baseline(refs: dict[str, str], baseline: str | None) -> list[str]:
    return sorted(r for r, s in refs.items() if baseline and s == baseline and r.startswith(IDEA_BRANCHES))


def _baseline_notes(baseline: str | None, note_blob: str | None, lease_blob: str | None, objs: dict[str, bytes]):
    """(note, leases) of the baseline commit, from blobs read (or notes parsed) already."""
    bnote = _note(note_blob, objs) if baseline and note_blob and (note_blob in objs or note_blob in _NOTES) else None
    bleases = parse_leases(objs[lease_blob].decode(errors="replace")) if baseline and lease_blob in objs else []
    return bnote, bleases
