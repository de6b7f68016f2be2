"""store/lifecycle.py: the observers hear of a state change once all of it is in git. A result,
cancelled or stopped note clears the finished trials' leases in the same change; an observer told of
it (the W&B mirror, or anything that reads git) must not see the note beside leases that still call
those trials live, nor hear of a note git does not hold. Inside `batch()` the writes are queued until
its end (store/gitnotes.py), so the events are too: told after the flush, and not at all when the
flush fails. What the observers read here is git as another process sees it (`git notes show`, a
fresh GitRepo): a read through the writer's own repo handle would flush its queue and hide the order.
A real repo, the real writer."""

from __future__ import annotations

import subprocess

import pytest
from conftest import git

from autoresearchd.store.gitproc import GitError
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.ledger import Ledger
from autoresearchd.store.lifecycle import Lifecycle
from autoresearchd.store.notes import Lease, Note, Status, parse_leases, parse_note
from autoresearchd.store.population import read_population
from autoresearchd.store.refs import ARCHIVE_PREFIX, NOTES_REF, RUNS_REF
from autoresearchd.vocab import Change, LeaseState

from popbuilder import build_population


def in_git(repo: GitRepo, ref: str, commit: str) -> str | None:
    """The note on commit as `git notes show`, a separate process, reads it (None: no note)."""
    p = subprocess.run(["git", "notes", "--ref", ref, "show", commit], cwd=repo.path, capture_output=True,
                       text=True)
    return p.stdout if p.returncode == 0 else None


def leases_of(idea) -> tuple[Lease, Lease]:
    done = Lease(trial_id=f"{idea.idea_id}-s0", seed=0, runner="local", host="local", slot="0",
                 state=LeaseState.RUNNING)
    live = Lease(trial_id=f"{idea.idea_id}-s1", seed=1, runner="local", host="local", slot="1",
                 state=LeaseState.STALE)
    return done, live


@pytest.fixture
def population(tmp_path):
    repo = build_population(tmp_path / "research", 6)
    ideas = [i for i in read_population(repo, "refs/heads/main").ideas if i.commit and i.branch][:3]
    return repo, ideas


def test_observers_are_told_after_the_leases_are_written(population):
    repo, ideas = population
    seen = {}

    def observer(ev):
        if ev.change != Change.LEASED:
            text = in_git(repo, RUNS_REF, ev.commit)
            seen[ev.change] = [lz.trial_id for lz in parse_leases(text)] if text else []
    lc = Lifecycle(repo, observers=[observer])
    for change, idea in zip((Change.RESULT, Change.CANCELLED, Change.STOPPED), ideas):
        done, live = leases_of(idea)
        lc.leased(idea.commit, [done, live])
        note = Note(status=Status.STOPPED if change == Change.STOPPED else Status.CANCELLED
                    if change == Change.CANCELLED else Status.FAILED, idea_id=idea.idea_id, error="x")
        with lc.batch():                     # as a harvest writes: one notes commit per ref
            getattr(lc, change.value)(idea.commit, idea, note, [live])
        assert seen[change] == [live.trial_id], (change, seen[change])
        assert [lz.trial_id for lz in lc.ledger.leases(idea.commit)] == [live.trial_id]
        assert lc.ledger.note(idea.commit).status == note.status


def test_inside_a_batch_the_observers_hear_only_after_the_flush(population):
    """A harvest of several results in one batch: no observer hears while the writes are queued, and
    each, when told, finds its note, its archive ref and its cleared lease in git (another process)."""
    repo, ideas = population
    told, found = [], {}

    def observer(ev):
        told.append(ev.change)
        if ev.change == Change.RESULT:
            fresh = GitRepo(repo.path)       # another handle: its read cannot flush the writer's queue
            note = in_git(repo, NOTES_REF, ev.commit)
            found[ev.commit] = (parse_note(note).value if note else None,
                                fresh.rev_parse(ARCHIVE_PREFIX + ev.commit),
                                [lz.trial_id for lz in Ledger(fresh).leases(ev.commit)])
    lc = Lifecycle(repo, observers=[observer])
    for idea in ideas:
        lc.leased(idea.commit, list(leases_of(idea)))
    told.clear()
    before = {idea.commit: in_git(repo, NOTES_REF, idea.commit) for idea in ideas}
    with lc.batch():
        for k, idea in enumerate(ideas):
            done, live = leases_of(idea)
            lc.result(idea.commit, idea, Note(status=Status.SUCCEEDED, idea_id=idea.idea_id, metric="val_loss",
                                              value=1.0 + k), kept=[live])
            assert told == [] and in_git(repo, NOTES_REF, idea.commit) == before[idea.commit]   # queued, untold
    assert told == [Change.RESULT] * len(ideas)
    for k, idea in enumerate(ideas):
        assert found[idea.commit] == (1.0 + k, idea.commit, [f"{idea.idea_id}-s1"]), found[idea.commit]


def test_a_failed_flush_tells_nobody_and_raises(population):
    """The batch's ref transaction fails (the archive ref cannot be made: a ref below its name holds
    the path): nothing of the result is written, the failure surfaces as before, and no observer hears
    of a note git lacks. The next harvest's batch writes it, and then it is told. (A lock another git
    holds is waited for, and taken as stale after defaults.STALE_LOCK_S: not a failure.)"""
    repo, ideas = population
    idea = ideas[0]
    heard = []
    lc = Lifecycle(repo, observers=[heard.append])
    done, live = leases_of(idea)
    lc.leased(idea.commit, [done, live])
    heard.clear()
    before = in_git(repo, NOTES_REF, idea.commit)
    blocker = ARCHIVE_PREFIX + idea.commit + "/held"
    git(repo.path, "update-ref", blocker, idea.commit)     # another process's ref: a directory at the path
    note = Note(status=Status.SUCCEEDED, idea_id=idea.idea_id, metric="val_loss", value=0.5)
    try:
        with pytest.raises(GitError):
            with lc.batch():
                lc.result(idea.commit, idea, note.model_copy(), kept=[live])
                lc.leased(ideas[1].commit, [])
    finally:
        git(repo.path, "update-ref", "-d", blocker)
    assert heard == []
    assert in_git(repo, NOTES_REF, idea.commit) == before            # nothing of the result was written
    assert [lz.trial_id for lz in parse_leases(in_git(repo, RUNS_REF, idea.commit))] == [done.trial_id, live.trial_id]

    with lc.batch():                         # the next harvest: written, then told
        lc.result(idea.commit, idea, note.model_copy(), kept=[live])
    assert [(w.change, w.commit) for w in heard] == [(Change.RESULT, idea.commit)]
    assert parse_note(in_git(repo, NOTES_REF, idea.commit)).value == 0.5


def test_a_block_that_raises_still_flushes_and_tells_what_it_wrote(population):
    """notes_batch writes what was queued even when the block raises; the observers hear of what was
    written, and the block's exception is the one that surfaces."""
    repo, ideas = population
    heard = []
    lc = Lifecycle(repo, observers=[heard.append])
    idea = ideas[0]
    with pytest.raises(RuntimeError, match="mid-harvest"):
        with lc.batch():
            lc.result(idea.commit, idea, Note(status=Status.SUCCEEDED, idea_id=idea.idea_id, metric="val_loss",
                                              value=0.25))
            raise RuntimeError("mid-harvest")
    assert parse_note(in_git(repo, NOTES_REF, idea.commit)).value == 0.25
    assert [(w.change, w.commit) for w in heard] == [(Change.RESULT, idea.commit)]


def test_a_block_that_raises_and_a_flush_that_fails_keep_both_errors(population):
    """The block raises, then its flush fails too (the archive ref's path held, as above): the flush's
    error surfaces, raised from the block's, so neither is lost (the block's was), and nobody is told."""
    repo, ideas = population
    idea = ideas[0]
    heard = []
    lc = Lifecycle(repo, observers=[heard.append])
    before = in_git(repo, NOTES_REF, idea.commit)
    blocker = ARCHIVE_PREFIX + idea.commit + "/held"
    git(repo.path, "update-ref", blocker, idea.commit)
    try:
        with pytest.raises(GitError) as caught:
            with lc.batch():
                lc.result(idea.commit, idea, Note(status=Status.SUCCEEDED, idea_id=idea.idea_id,
                                                  metric="val_loss", value=0.5))
                raise RuntimeError("mid-harvest")
    finally:
        git(repo.path, "update-ref", "-d", blocker)
    cause = caught.value.__cause__
    assert isinstance(cause, RuntimeError) and str(cause) == "mid-harvest", repr(cause)
    assert heard == [] and in_git(repo, NOTES_REF, idea.commit) == before
