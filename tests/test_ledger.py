"""store/ledger.py against a real git repo: leases (written whole, rewritten, cleared), result notes,
anchored logs and archive refs land under the ref names of store/refs.py, a result is written whole
(archive ref, note, lease clear) by one call, and a concurrent reader sees them through git alone."""

from __future__ import annotations

import subprocess

from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.ledger import Ledger
from autoresearchd.store.notes import Lease, Note, Status, parse_note
from autoresearchd.store.refs import ARCHIVE_PREFIX, LOGS_PREFIX, NOTES_REF, RUNS_REF


def lease(tid, seed, state="running"):
    return Lease(trial_id=tid, seed=seed, runner="local", host="h", slot="0", state=state)


def test_leases_notes_and_logs_round_trip_through_git(make_repo):
    repo = GitRepo(make_repo({"run.py": "print(1)\n"}))
    ledger, commit = Ledger(repo), repo.rev_parse("HEAD")
    assert ledger.leases(commit) == [] and ledger.note(commit) is None and ledger.all_leases() == {}

    # as the lifecycle writes them: the commit's whole list each time (the dispatcher's, the harvest's)
    ledger.write_leases(commit, [lease("a-s0", 0)])
    ledger.write_leases(commit, [lease("a-s0", 0), lease("a-s1", 1)])
    ledger.write_leases(commit, [lease("a-s0", 0, state="done"), lease("a-s1", 1)])   # rewritten, not added
    got = {lz.trial_id: lz.state for lz in ledger.leases(commit)}
    assert got == {"a-s0": "done", "a-s1": "running"}
    assert list(ledger.all_leases()) == [commit]
    # the lease note is plain git: any clone can read it
    shown = subprocess.run(["git", "notes", "--ref", RUNS_REF, "show", commit], cwd=repo.path,
                           capture_output=True, text=True, check=True).stdout
    assert "a-s1 on h/0" in shown

    sha = ledger.store_log("a-s0", b"step 1 loss 2.0\n")
    assert repo.rev_parse(LOGS_PREFIX + "a-s0") == sha and repo.read_blob(sha) == b"step 1 loss 2.0\n"

    ledger.write_note(commit, Note(status=Status.SUCCEEDED, value=0.5, metric="loss", goal="min", log=sha))
    n = ledger.note(commit)
    assert n.status == Status.SUCCEEDED and n.value == 0.5 and n.log == sha and n.finished_at is not None
    assert parse_note(repo.note_read(NOTES_REF, commit)).value == 0.5

    ledger.write_leases(commit, [])               # clearing the last lease removes the note
    assert ledger.leases(commit) == [] and repo.note_read(RUNS_REF, commit) is None
    assert ledger.all_leases() == {}


def test_writes_in_a_notes_batch_land_in_order_as_one_commit_per_ref(make_repo):
    repo = GitRepo(make_repo({"run.py": "print(1)\n"}))
    ledger, commit = Ledger(repo), repo.rev_parse("HEAD")
    before = repo.rev_parse(RUNS_REF)
    with repo.notes_batch():
        ledger.write_leases(commit, [lease("b-s0", 0)])
        ledger.write_result(commit, Note(status=Status.FAILED, error="boom"), kept=[])
    assert ledger.note(commit).error == "boom" and ledger.leases(commit) == []
    assert before is None or repo.rev_parse(RUNS_REF) != before
    log = subprocess.run(["git", "log", "--format=%H", NOTES_REF], cwd=repo.path, capture_output=True, text=True,
                         check=True).stdout.split()
    assert len(log) == 1                           # the result note: one commit on its ref


def test_a_result_is_written_whole_by_one_call(make_repo):
    """write_result: the archive ref (when asked), the note, the leases still kept; kept=None leaves
    the leases as they are. Read back by `git` itself, another process."""
    repo = GitRepo(make_repo({"run.py": "print(1)\n"}))
    ledger, commit = Ledger(repo), repo.rev_parse("HEAD")
    ledger.write_leases(commit, [lease("c-s0", 0), lease("c-s1", 1, state="stale")])
    ledger.write_result(commit, Note(status=Status.SUCCEEDED, value=1.5, metric="loss"), kept=[lease("c-s1", 1, "stale")],
                        archive=True)

    def git(*args):
        return subprocess.run(["git", *args], cwd=repo.path, capture_output=True, text=True, check=True).stdout
    assert git("rev-parse", ARCHIVE_PREFIX + commit).strip() == commit
    assert parse_note(git("notes", "--ref", NOTES_REF, "show", commit)).value == 1.5
    assert [lz.trial_id for lz in ledger.leases(commit)] == ["c-s1"]
    ledger.write_result(commit, Note(status=Status.SUCCEEDED, value=1.4, metric="loss"))   # kept=None
    assert [lz.trial_id for lz in ledger.leases(commit)] == ["c-s1"] and ledger.note(commit).value == 1.4
