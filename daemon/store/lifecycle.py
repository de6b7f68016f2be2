"""The lifecycle writer: the only code that moves an idea from one state to the next in git.

It alone creates or moves the idea, proposal, record and archive refs, and writes result and lease
notes. It also makes the commits those refs name (a proposal, an implemented or tuned idea, a record, a
screen): the caller says what the commit is made of (`Made`: its parents, its message, its tree) and
the writer writes the commit object and its refs in one run, so a caller never holds a commit that no
ref keeps and never goes to git itself only to hand the writer an id (docs/architecture.md, the idea
walk). One typed method per state change (propose, dropped, implemented, failed, tuned, leased,
result, rejected, linked, cancelled, stopped, backfilled, and screening's three), and each tells the
observers itself, so no write path can skip them: before this module, a backfilled decision was
written straight to the ledger and never reached W&B. The one observer wired today is the W&B mirror
(daemon/makelifecycle.py); the dashboard and `status` are other processes and read git by its changes
(store/livepop.py), not by hearing events.

Observers are given at construction (`Lifecycle(repo, observers=[...])`), never added later; each is
called as `observer(event)` with a `Written`. An observer that raises is logged and never stops the
loop. An observer hears of a change only once it is in git: inside `batch()` the writes are queued
(store/gitnotes.py), so the events are queued too and told after the batch's writes are flushed; a
flush that fails tells nobody (what it wrote may then go unheard, but nothing is heard that git lacks).

Write order is the crash-safety rule (store/ledger.py): a lease before its trial starts; a log, then
the archive ref, the result note and the lease cleared, in one ledger call (`Ledger.write_result`);
a commit the writer makes before any ref that names it; an implemented idea's mark, its branch and
its proposal's deletion in one ref transaction (a record and its proposal's deletion likewise).
"""

from __future__ import annotations

import json
import logging
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterable

from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.ledger import Ledger
from autoresearchd.store.notes import Lease, Note
from autoresearchd.store.refs import (IDEA_BRANCHES, IDEAS_PREFIX, PROPOSALS_PREFIX,
                                      RECORDS_PREFIX, SCREENS_PREFIX)
from autoresearchd.vocab import Change

log = logging.getLogger("autoresearchd")


def tune_fields(idea) -> dict:
    """The note's `tune` fields of a tuned commit, from its trailers (docs/notes.md)."""
    tr = idea.trailers
    try:
        knobs = json.loads(tr.knobs or "{}")
    except ValueError:
        knobs = {}
    return {"study": tr.tune_study, "sampler": tr.tune_sampler, "trial": tr.tune_trial, "knobs": knobs}


# the changes that write a result note: the ones observers of results hear about
NOTED = (Change.DROPPED, Change.FAILED, Change.RESULT, Change.REJECTED, Change.LINKED, Change.CANCELLED,
         Change.BACKFILLED, Change.STOPPED, Change.SCREENED_OUT)


@dataclass(frozen=True)
class Written:
    """What one state change wrote, as the observers see it."""
    change: Change
    commit: str
    idea: object | None = None     # store.ideas.Idea, or None for the baseline and records
    note: Note | None = None
    ref: str | None = None         # the ref it created or moved, where one


Observer = Callable[[Written], None]


@dataclass(frozen=True)
class Made:
    """What a commit the writer makes is made of. `tree` None: its first parent's tree (a proposal, a
    record: the idea in words on its base, no code changed)."""
    parents: tuple[str, ...]
    message: str
    tree: str | None = None


class Lifecycle:
    """Writes every idea state change to one research repo and tells the observers."""

    def __init__(self, repo: GitRepo, observers: Iterable[Observer] = ()):
        self.repo = repo
        self.ledger = Ledger(repo)       # reads stay public through self.ledger; writes go through here
        self._observers: tuple[Observer, ...] = tuple(observers)
        self._held = threading.local()   # batch(): this thread's events, told once its writes are in git

    @property
    def observers(self) -> tuple[Observer, ...]:
        return self._observers

    @contextmanager
    def batch(self):
        """Every note written inside: one notes commit per notes ref (store/gitnotes.py). The observers
        hear of the changes made inside after those writes are flushed, never before (a W&B run for a
        note never written, when the flush failed); a failed flush raises, as it always did, and tells
        nobody (raised from the block's own error when the block raised too). Nested: the outer block
        flushes and tells. The project opens a notes batch only here (tests/test_lifecycle.py): one
        opened around the writer would flush after the writer told."""
        if getattr(self._held, "events", None) is not None:
            yield
            return
        self._held.events = []
        raised = None
        try:
            with self.repo.notes_batch():
                try:
                    yield
                except BaseException as e:   # noqa: BLE001 - re-raised below, after the flush and the telling
                    raised = e              # notes_batch flushes what was queued even when the block raised
            events = self._held.events       # the flush succeeded: all of it is in git
        except BaseException as flush_error:
            if raised is None:
                raise
            # Both failed. The flush's error is the one raised: it says what is true of git now (what
            # the block wrote before it raised is not all there), which a caller must not take for the
            # block's failure alone. Chained `from` the block's error, a traceback shows that one
            # first: where the change went wrong, then that its flush failed too (it was lost before).
            raise flush_error from raised
        finally:
            self._held.events = None
        for event in events:
            self._tell_now(event)
        if raised is not None:
            raise raised

    def _tell(self, event: Written) -> None:
        held = getattr(self._held, "events", None)
        if held is not None:
            held.append(event)              # inside batch(): queued with the writes, told after the flush
        else:
            self._tell_now(event)

    def _tell_now(self, event: Written) -> None:
        for obs in self._observers:
            try:
                obs(event)
            except Exception:  # noqa: BLE001 - an observer must never stop the loop
                log.exception("observer of %s failed", event.change)

    def _note(self, change: Change, commit: str, idea, note: Note, kept: list[Lease] | None = None) -> Note:
        """The archive ref, the note and the leases still kept (None: left as they are), in one ledger
        call, then the observers: told of the whole change, never of a note whose finished trials still
        look leased."""
        if note.model_config.get("frozen"):
            note = note.model_copy()        # a population's note is shared (store/frozen.py): write a copy
        if idea is not None and change != Change.BACKFILLED:
            # the daemon's record of provenance: for a pushed commit this, not its trailers, is the truth
            note.origin, note.epoch = idea.origin, idea.epoch
            if idea.trailers.tune_study:       # believed: only the daemon's own commits keep trailers
                note.tune = tune_fields(idea)
        # archived: survives a force-push or deletion of the branch
        archive = idea is not None and bool(idea.branch) and idea.branch.startswith(IDEA_BRANCHES)
        self.ledger.write_result(commit, note, kept, archive=archive)
        self._tell(Written(change, commit, idea, note))
        return note

    def _commit(self, made: Made) -> str:
        """The commit object `made` describes (no ref names it yet: the caller's next call does)."""
        tree = made.tree or self.repo.tree_of(made.parents[0])
        return self.repo.commit_tree(tree, list(made.parents), made.message)

    # -- proposals and implementations --------------------------------------------------------------
    def propose(self, idea_id: str, made: Made) -> str:
        """The proposal commit and its proposal/<id> ref; returns the commit."""
        commit = self._commit(made)
        self.repo.update_ref(PROPOSALS_PREFIX + idea_id, commit)
        self._tell(Written(Change.PROPOSED, commit, ref=PROPOSALS_PREFIX + idea_id))
        return commit

    def dropped(self, idea_id: str, made: Made, note: Note) -> str:
        """A proposal dropped before implementation: its commit, its note, then its record."""
        commit = self._commit(made)
        self.ledger.write_result(commit, note)
        self.repo.update_ref(RECORDS_PREFIX + idea_id, commit)
        self._tell(Written(Change.DROPPED, commit, note=note, ref=RECORDS_PREFIX + idea_id))
        return commit

    def implemented(self, idea_id: str, made: Made, branch: str) -> str:
        """The idea's commit, its mark, its branch; then its proposal goes. Returns the commit."""
        commit = self._commit(made)
        # one transaction: a branch git refuses leaves no mark behind (three update-refs did). A reader
        # meanwhile sees the mark first (given first, and first by name; it is what makes the
        # population believe this commit's trailers), then the branch; the proposal goes last
        self.repo.move_refs({IDEAS_PREFIX + idea_id: commit, branch: commit, PROPOSALS_PREFIX + idea_id: None})
        self._tell(Written(Change.IMPLEMENTED, commit, ref=branch))
        return commit

    def failed(self, idea_id: str, made: Made, note: Note) -> str:
        """Implementation failed (or a safety rule refused it): the record's commit, its note, the
        record ref, then the proposal goes. Returns the record."""
        record = self._commit(made)
        self.ledger.write_result(record, note)
        self.repo.move_refs({RECORDS_PREFIX + idea_id: record, PROPOSALS_PREFIX + idea_id: None})   # deletion last
        self._tell(Written(Change.FAILED, record, note=note, ref=RECORDS_PREFIX + idea_id))
        return record

    def tuned(self, idea_id: str, made: Made, branch: str) -> str:
        """A tuned trial's commit, its mark, its branch (tune/tuner.py). Returns the commit."""
        commit = self._commit(made)
        self.repo.move_refs({IDEAS_PREFIX + idea_id: commit, branch: commit})    # as for implemented
        self._tell(Written(Change.TUNED, commit, ref=branch))
        return commit

    # -- trials ---------------------------------------------------------------------------------------
    def archive(self, commit: str) -> None:
        """Keep a commit that runs or ran: a branch deleted or force-pushed meanwhile loses nothing."""
        self.ledger.archive(commit)

    def leased(self, commit: str, leases: list[Lease]) -> None:
        """Write the commit's lease note as given (an empty list removes it)."""
        self.ledger.write_leases(commit, leases)
        self._tell(Written(Change.LEASED, commit))

    def store_log(self, name: str, data: bytes) -> str:
        """Anchor a trial's or a transcript's log blob; returns its sha."""
        return self.ledger.store_log(name, data)

    def result(self, commit: str, idea, note: Note, kept: list[Lease] | None = None) -> Note:
        """A result note from measured trials; then the leases still kept (None: left as they are)."""
        return self._note(Change.RESULT, commit, idea, note, kept)

    def rejected(self, idea, note: Note) -> Note:
        return self._note(Change.REJECTED, idea.commit, idea, note)

    def linked(self, idea, note: Note) -> Note:
        return self._note(Change.LINKED, idea.commit, idea, note)

    def cancelled(self, commit: str, idea, note: Note, kept: list[Lease]) -> Note:
        return self._note(Change.CANCELLED, commit, idea, note, kept)

    def stopped(self, commit: str, idea, note: Note, kept: list[Lease]) -> Note:
        """An idea stopped early by its curve (its trials already cancelled): the `stopped` note with
        the evidence, then the leases still kept (engine/stopping.py)."""
        return self._note(Change.STOPPED, commit, idea, note, kept)

    def backfilled(self, commit: str, idea, note: Note) -> Note:
        """The note's baseline, delta and decision filled in after the fact (provenance unchanged)."""
        return self._note(Change.BACKFILLED, commit, idea, note)

    # -- screening (engine/screening.py) ----------------------------------------------------------------
    def screen(self, key: str, made: Made) -> str:
        """A screened commit and its ref, screens/<key> (an idea id, or baseline-<commit>): kept from gc,
        and outside every prefix the population lists, so it is never an idea of its own. Returns it."""
        commit = self._commit(made)
        self.repo.update_ref(SCREENS_PREFIX + key, commit)
        self._tell(Written(Change.SCREEN, commit, ref=SCREENS_PREFIX + key))
        return commit

    def screen_result(self, commit: str, note: Note, kept: list[Lease] | None = None) -> Note:
        """A screened run's note on the screened commit (low fidelity: no decision, never a best), then
        the leases still kept. Not archived: the screens/ ref keeps the commit."""
        self.ledger.write_result(commit, note, kept)
        self._tell(Written(Change.SCREEN_RESULT, commit, note=note))
        return note

    def screened_out(self, commit: str, idea, note: Note) -> Note:
        """An idea whose screened run lost: its note with status screened_out and the evidence."""
        return self._note(Change.SCREENED_OUT, commit, idea, note)
