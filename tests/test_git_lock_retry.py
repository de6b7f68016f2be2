"""Every git write of the store waits while another git holds a lock it needs (store/gitproc.py
lock_retry: one policy), and fails at once for anything else. The class, each member tested: a note
written alone, many notes on one ref, a batch's blobs, refs and notes together, several refs in one
transaction, one ref updated, one ref deleted. The lock is a real `<ref>.lock` file, as a CLI user's
git or a second daemon leaves it while it writes; it goes away after a moment, or never."""

from __future__ import annotations

import threading
import time

import pytest

from autoresearchd import defaults
from autoresearchd.store.gitrepo import GitError, GitRepo
from autoresearchd.store.refs import LOGS_PREFIX, NOTES_REF

HELD_S = 1.2          # past GIT_LOCK_SAY_S: the wait is logged


@pytest.fixture
def repo(tmp_path):
    r = GitRepo.init(tmp_path / "repo")
    (r.path / "a.txt").write_text("a\n")
    base = r.commit_all_initial("base")
    r.update_ref("refs/heads/old", base)
    r.update_ref("refs/heads/gone", base)
    r.note_write(NOTES_REF, base, "first\n")           # the notes ref exists, its tip known
    yield r, base
    r.close()


def _batch(r: GitRepo, c: str) -> None:
    with r.notes_batch():
        r.update_ref(LOGS_PREFIX + "t1", r.git("hash-object", "-w", "--stdin", input=b"log\n").strip())
        r.note_write(NOTES_REF, c, "written\n")


# each member: (the ref whose lock it needs, the write, what shows it landed)
WRITES = {
    "note_write": (NOTES_REF, lambda r, c: r.note_write(NOTES_REF, c, "written\n"),
                   lambda r, c: r.note_read(NOTES_REF, c) == "written\n"),
    "notes_write_many": (NOTES_REF, lambda r, c: r.notes_write_many(NOTES_REF, {c: "written\n"}),
                         lambda r, c: r.note_read(NOTES_REF, c) == "written\n"),
    "batch_together": (NOTES_REF, _batch,
                       lambda r, c: r.note_read(NOTES_REF, c) == "written\n" and r.rev_parse(LOGS_PREFIX + "t1")),
    "move_refs": ("refs/heads/new", lambda r, c: r.move_refs({"refs/heads/new": c, "refs/heads/old": None}),
                  lambda r, c: r.rev_parse("refs/heads/new") == c and r.rev_parse("refs/heads/old") is None),
    "update_ref": ("refs/heads/new", lambda r, c: r.update_ref("refs/heads/new", c),
                   lambda r, c: r.rev_parse("refs/heads/new") == c),
    "delete_ref": ("refs/heads/gone", lambda r, c: r.delete_ref("refs/heads/gone"),
                   lambda r, c: r.rev_parse("refs/heads/gone") is None),
}


def _hold(r: GitRepo, ref: str):
    lock = r.git_dir / (ref + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.touch()
    return lock


@pytest.mark.parametrize("member", sorted(WRITES))
def test_a_write_waits_for_a_lock_another_git_holds_a_moment(repo, member, caplog):
    r, c = repo
    ref, write, landed = WRITES[member]
    lock = _hold(r, ref)
    threading.Timer(HELD_S, lock.unlink).start()
    t0 = time.monotonic()
    write(r, c)
    assert time.monotonic() - t0 >= HELD_S - 0.05      # it waited for the lock, and did not give up
    assert landed(r, c)
    said = [m.getMessage() for m in caplog.records if "waiting for a git lock" in m.getMessage()]
    assert len(said) == 1 and str(lock) in said[0], said        # the wait is in the log, once


@pytest.mark.parametrize("member", sorted(WRITES))
def test_a_lock_held_past_the_last_try_is_git_s_own_error(repo, member, monkeypatch):
    r, c = repo
    ref, write, landed = WRITES[member]
    monkeypatch.setattr(defaults, "GIT_LOCK_TRIES", 3)
    lock = _hold(r, ref)
    t0 = time.monotonic()
    with pytest.raises(GitError) as err:
        write(r, c)
    # three tries, two waits (20 + 40 ms): git's words name the lock; the lock is not taken away
    assert time.monotonic() - t0 >= 3 * defaults.GIT_LOCK_WAIT_STEP_S - 0.01
    assert str(lock) in err.value.stderr and "File exists" in err.value.stderr
    assert lock.exists() and not landed(r, c)


@pytest.mark.parametrize("write", [
    lambda r, c: r.update_ref("refs/heads/old", c, "0" * 39 + "1"),       # not where the caller says
    lambda r, c: r.note_write(NOTES_REF, "no-such-rev", "on nothing\n"),     # no such object
    lambda r, c: r.move_refs({"refs/heads/bad..name": c}),                 # a name git refuses
], ids=["update_ref-moved", "note_write-no-object", "move_refs-bad-name"])
def test_any_other_refusal_is_raised_at_once(repo, write):
    r, c = repo
    t0 = time.monotonic()
    with pytest.raises(GitError) as err:
        write(r, c)
    assert time.monotonic() - t0 < 1.0 and "File exists" not in err.value.stderr
