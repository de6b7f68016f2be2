"""A batch's blobs, refs and notes written together (store/gitnotes.py, GitRepo._write_together): one
fast-import that moves no ref, then one update-ref transaction for every ref. All of a harvest lands or
none of it: a lease is never cleared without its result note, a note never names a log no ref keeps;
another writer's notes are kept; a kill between the two processes leaves the refs as they were."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from conftest import git

from autoresearchd.store.gitrepo import GitError, GitRepo
from autoresearchd.store.ledger import Ledger
from autoresearchd.store.notes import Lease, Note, Status, format_note
from autoresearchd.store.refs import LOGS_PREFIX, NOTES_REF, RUNS_REF
from test_daemon_cost import processes


def _lease(tid: str) -> Lease:
    return Lease(trial_id=tid, seed=1, runner="local", host="h", slot="0")


@pytest.fixture
def setup(tmp_path):
    repo = GitRepo.init(tmp_path / "repo")
    (repo.path / "a.txt").write_text("a\n")
    base = repo.commit_all_initial("base")
    commits = [repo.commit_tree(repo.tree_of(base), [base], f"idea {i}") for i in range(3)]
    yield repo, Ledger(repo), commits
    repo.close()


def _harvest(repo: GitRepo, ledger: Ledger, commit: str, name: str) -> str:
    """What a harvest of one trial writes: its log anchored, its result note, its lease cleared."""
    with repo.notes_batch():
        sha = ledger.store_log(name, f"log of {name}\n".encode())
        repo.note_write(NOTES_REF, commit, f"status: succeeded\nlog: {sha}\n")
        ledger.write_leases(commit, [])
    return sha


def test_after_a_dispatch_round_a_harvest_is_two_processes(setup):
    repo, ledger, commits = setup
    repo.note_write(NOTES_REF, commits[2], "an older result\n")         # by `git notes`: its tip unknown
    with repo.notes_batch():                      # a dispatch round: its leases, one notes ref
        for c in commits[:2]:
            ledger.write_leases(c, [_lease(c[:6])])
    with processes() as started:
        _harvest(repo, ledger, commits[0], "t0")
    assert sorted(started) == ["git fast-import", "git rev-parse", "git update-ref"]   # the notes ref read once
    with processes() as started:
        _harvest(repo, ledger, commits[1], "t1")
    assert sorted(started) == ["git fast-import", "git update-ref"]
    assert ledger.leases(commits[0]) == ledger.leases(commits[1]) == []
    assert ledger.leases is not None and repo.note_read(NOTES_REF, commits[2]) == "an older result\n"


def test_notes_another_writer_added_or_deleted_meanwhile_are_kept(setup):
    repo, ledger, commits = setup
    with repo.notes_batch():
        for c in commits:
            ledger.write_leases(c, [_lease(c[:6])])
    _harvest(repo, ledger, commits[0], "t0")
    # another process: a note of its own on the results ref, and a lease it removes
    git(repo.path, "notes", "--ref", NOTES_REF, "add", "-m", "theirs", commits[2])
    git(repo.path, "notes", "--ref", RUNS_REF, "remove", commits[2])
    log = _harvest(repo, ledger, commits[1], "t1")
    assert git(repo.path, "notes", "--ref", NOTES_REF, "show", commits[2]) == "theirs\n"
    assert f"log: {log}" in git(repo.path, "notes", "--ref", NOTES_REF, "show", commits[1])
    assert ledger.leases(commits[1]) == [] and ledger.leases(commits[2]) == []
    # a notes ref deleted behind its back is made anew, from nothing
    git(repo.path, "update-ref", "-d", RUNS_REF)
    git(repo.path, "update-ref", "-d", NOTES_REF)
    with repo.notes_batch():
        ledger.store_log("t2", b"log of t2\n")
        repo.note_write(NOTES_REF, commits[2], "result\n")
        ledger.write_leases(commits[2], [_lease("x")])
    assert git(repo.path, "notes", "--ref", NOTES_REF, "list").split() == \
        [git(repo.path, "hash-object", "--stdin", input="result\n").strip(), commits[2]]
    assert len(git(repo.path, "rev-list", NOTES_REF).split()) == 1
    assert [lz.trial_id for lz in ledger.leases(commits[2])] == ["x"]
    assert not list(repo.git_dir.glob("fast_import_crash_*"))


def test_a_refused_ref_keeps_the_lease_and_writes_no_result(setup):
    """A ref the transaction cannot write (a directory where a ref is): none of the harvest lands,
    the lease stays for the next tick; a note queued before any blob or ref is written, as before."""
    repo, ledger, commits = setup
    ledger.write_leases(commits[1], [_lease("t1")])
    repo.update_ref(LOGS_PREFIX + "t1", commits[0])          # refs/.../logs/t1 is a ref: t1/x cannot be
    notes_before = repo.rev_parse(NOTES_REF)
    with pytest.raises(GitError):
        with repo.notes_batch():
            repo.note_write(NOTES_REF, commits[0], "queued before the log\n")
            sha = ledger.store_log("t1/x", b"the log\n")
            repo.note_write(NOTES_REF, commits[1], f"log: {sha}\n")
            ledger.write_leases(commits[1], [])
    assert repo.note_read(NOTES_REF, commits[0]) == "queued before the log\n"
    assert repo.note_read(NOTES_REF, commits[1]) is None
    assert [lz.trial_id for lz in ledger.leases(commits[1])] == ["t1"]
    assert repo.rev_parse(LOGS_PREFIX + "t1/x") is None and notes_before is None


_CHILD = """
import sys
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.ledger import Ledger
from autoresearchd.store.refs import NOTES_REF
repo = GitRepo(sys.argv[1])
ledger = Ledger(repo)
with repo.notes_batch():
    sha = ledger.store_log("t1", b"the log\\n")
    repo.note_write(NOTES_REF, sys.argv[2], "log: " + sha + "\\n")
    ledger.write_leases(sys.argv[2], [])
print("not killed")
"""


def test_a_kill_between_the_import_and_the_transaction_leaves_every_ref_as_it_was(setup, tmp_path):
    repo, ledger, commits = setup
    ledger.write_leases(commits[0], [_lease("t0")])
    before = git(repo.path, "for-each-ref")
    shim = tmp_path / "shim"
    shim.mkdir()        # a git that kills the daemon (its parent) when the transaction would start
    (shim / "git").write_text(textwrap.dedent(f"""\
        #!/bin/bash
        case " $* " in *" update-ref "*"--stdin"*) kill -9 $PPID; exit 1;; esac
        exec {shutil.which("git")} "$@"
        """))
    (shim / "git").chmod(0o755)
    p = subprocess.run([sys.executable, "-c", _CHILD, str(repo.path), commits[0]], capture_output=True, text=True,
                       env={**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"})
    assert p.returncode == -9 and "not killed" not in p.stdout
    assert git(repo.path, "for-each-ref") == before           # no log ref, no note, the lease still there
    assert [lz.trial_id for lz in Ledger(GitRepo(repo.path)).leases(commits[0])] == ["t0"]
    git(repo.path, "fsck", "--no-progress")       # what the import wrote is whole (dangling: gc's to drop)


def test_the_tick_reads_a_harvest_back_from_the_values_its_writes_told(setup):
    """After a harvest (log, result note, archive ref, lease cleared) the tick's refresh starts no
    process: the notes refs' and the archive ref's new values came with their events
    (store/refevents.py), and equal what a full read finds. A write that tells no value (a branch
    moved, a `git notes` write) is read from git, as before."""
    from test_livepop import assert_same

    from autoresearchd.store import refevents
    from autoresearchd.store.lifecycle import Lifecycle
    from autoresearchd.store.livepop import LivePopulation
    repo, ledger, commits = setup
    git(repo.path, "branch", "-m", "main")
    for i, c in enumerate(commits):
        git(repo.path, "update-ref", f"refs/heads/idea/a/i{i}", c)
    life = Lifecycle(repo)
    with life.batch():                              # both notes refs exist, as in a running daemon
        repo.note_write(NOTES_REF, commits[1], format_note(Note(status=Status.SUCCEEDED, idea_id="i1")))
        for c in commits:
            ledger.write_leases(c, [_lease(c[:6])])
    live = LivePopulation(repo, "refs/heads/main", own_writes=True)
    try:
        live.refresh(scan=True)
        repo.read_object(commits[0])                # the persistent cat-file runs, as in a daemon
        with life.batch():
            sha = ledger.store_log("t0", b"the log\n")
            repo.note_write(NOTES_REF, commits[0], format_note(Note(status=Status.SUCCEEDED, idea_id="i0", log=sha)))
            life.archive(commits[0])
            ledger.write_leases(commits[0], [])
        with processes() as started:
            pop = live.refresh(scan=False)
        assert started == []
        assert pop.by_commit[commits[0]].note is not None and pop.by_commit[commits[0]].leases == []
        assert_same(pop, repo, "after a harvest")
        repo.update_ref("refs/heads/idea/a/i1", commits[0])         # told without a value: read from git
        repo.note_write(NOTES_REF, commits[2], format_note(Note(status=Status.FAILED, idea_id="i2")))  # `git notes add`
        with processes() as started:
            pop = live.refresh(scan=False)
        assert started == ["git for-each-ref"]
        assert_same(pop, repo, "after writes that told no value")
        # a value told, then a write of the same ref that told none: git has the last word
        refevents.moved(repo.git_dir, RUNS_REF, "f" * 40)
        refevents.moved(repo.git_dir, RUNS_REF)
        assert refevents.read(repo, {RUNS_REF}) == {RUNS_REF: repo.rev_parse(RUNS_REF)}
    finally:
        live.close()


def test_told_values_past_the_cap_are_forgotten_and_read_from_git(setup, monkeypatch):
    from autoresearchd import defaults
    from autoresearchd.store import refevents
    repo, ledger, commits = setup
    monkeypatch.setattr(defaults, "REF_VALUES_KEPT", 2)
    with repo.notes_batch():
        for i, c in enumerate(commits):
            repo.note_write(NOTES_REF, c, f"n{i}\n")
            ledger.write_leases(c, [_lease(c[:6])])
            repo.update_ref(f"refs/autoresearch/archive/{c}", c)
    want = {ref: repo.rev_parse(ref) for ref in (NOTES_REF, RUNS_REF, *(f"refs/autoresearch/archive/{c}" for c in commits))}
    with processes() as started:
        assert refevents.read(repo, set(want)) == want
    assert started == ["git for-each-ref"]          # the values beyond the last two were forgotten
