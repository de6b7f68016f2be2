"""The lifecycle writer (daemon/store/lifecycle.py) is the only writer of idea state, and it writes what
each of its methods says, against a real git repository.

1. The project's code (daemon/, policies/, runners/) is read as ASTs: a call that moves a ref or writes
   a note (update_ref, delete_ref, move_refs, write_note, write_result, write_leases, note_write, note_remove, or a `.git(...)`
   call of a ref- or notes-writing subcommand) may stand only in the modules listed in WRITERS, each
   with why. The benchmarks and tests fabricate populations directly and are not scanned.
   The calls that make a commit object (commit_tree, fast_import, `git commit-tree`) may stand only in
   the modules listed in COMMITTERS: the writer makes the commits its refs name.
2. Every method writes its refs and notes, and tells the observers; an observer that raises stops
   neither the write nor the other observers.
"""

from __future__ import annotations

import ast
import threading
from pathlib import Path

import pytest
from conftest import git

from autoresearchd.store.gitrepo import GitError, GitRepo
from autoresearchd.store.ideas import Idea
from autoresearchd.store.ledger import Ledger
from autoresearchd.store.lifecycle import NOTED, Lifecycle, Made, Written
from autoresearchd.vocab import Change
from autoresearchd.store.notes import Lease, Note, Status
from autoresearchd.store.refs import (ARCHIVE_PREFIX, IDEA_BRANCHES, IDEAS_PREFIX, LOGS_PREFIX, NOTES_REF,
                                      PROPOSALS_PREFIX, RECORDS_PREFIX, SCREENS_PREFIX)
from autoresearchd.store.trailers import Trailers

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("daemon", "policies", "runners")

# the calls that move a ref or write a note
WRITE_CALLS = {"update_ref", "delete_ref", "move_refs", "write_note", "write_result", "write_leases", "note_write", "note_remove"}
# git subcommands that move refs or write notes, run through a repo's `.git(...)`
WRITE_SUBCOMMANDS = {"update-ref", "notes", "branch", "tag", "push", "fetch", "reset"}

# module -> why it may write refs or notes itself
WRITERS = {
    "daemon/store/lifecycle.py": "the lifecycle writer: every idea, proposal, record and archive ref, "
                                 "every result and lease note",
    "daemon/store/ledger.py": "the note and lease I/O the lifecycle writer calls (and the refs that keep what "
                              "they name: log blobs' anchors, archive refs)",
    "daemon/store/gitrepo.py": "the repo handle: defines update_ref/delete_ref (compare-and-swap) and "
                               "move_refs (one transaction)",
    "daemon/store/gitnotes.py": "notes I/O: defines note_write/note_remove and the batched notes commit",
    "daemon/store/lessons.py": "the lessons ref: the policies' memory, not idea state",
    "daemon/store/replaypos.py": "the replay position ref: where a replay file stopped, not idea state",
}

def calls_in(path: Path, names: set[str], subcommands: set[str]) -> list[tuple[int, str]]:
    """(line, what) of every call in one module to a function named in `names`, or to `git` with a
    subcommand in `subcommands`."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
        if name in names:
            out.append((node.lineno, name))
        elif name == "git" and node.args and isinstance(node.args[0], ast.Constant) \
                and node.args[0].value in subcommands:
            out.append((node.lineno, f"git {node.args[0].value}"))
    return out


def write_calls(path: Path) -> list[tuple[int, str]]:
    """(line, what) of every ref- or note-writing call in one module."""
    return calls_in(path, WRITE_CALLS, WRITE_SUBCOMMANDS)


def project_writes() -> dict[str, list[tuple[int, str]]]:
    found = {}
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            if calls := write_calls(path):
                found[path.relative_to(ROOT).as_posix()] = calls
    return found


def test_the_scan_finds_each_kind_of_write(tmp_path):
    """The scanner itself: each call it must catch is caught, and reads are not."""
    src = tmp_path / "m.py"
    src.write_text("\n".join(f"repo.{n}('x', 'y')" for n in sorted(WRITE_CALLS)) + "\n"
                   + "\n".join(f"repo.git({s!r}, 'x')" for s in sorted(WRITE_SUBCOMMANDS)) + "\n"
                   + "update_ref('x', 'y')\nrepo.git('rev-parse', 'HEAD')\nrepo.read_blob('x')\n")
    got = {what for _, what in write_calls(src)}
    assert got == WRITE_CALLS | {f"git {s}" for s in WRITE_SUBCOMMANDS}


def test_the_lifecycle_writer_is_the_only_writer_of_idea_state():
    outside = {mod: calls for mod, calls in project_writes().items() if mod not in WRITERS}
    assert not outside, ("refs or notes written outside the lifecycle writer (daemon/store/lifecycle.py); "
                         f"write through it, or list the module in WRITERS with why: {outside}")


# the calls that make a commit object, and module -> why it may make one itself. An idea's, a
# proposal's, a record's and a screen's commit are made by the writer with their refs (lifecycle.Made):
# a caller that made one itself would hold a commit no ref keeps, and enter git once more to hand it on.
COMMIT_CALLS = {"commit_tree", "fast_import"}
COMMITTERS = {
    "daemon/store/lifecycle.py": "the lifecycle writer: every commit an idea, proposal, record or screen ref names",
    "daemon/store/gitnotes.py": "a notes ref's first, empty commit (notes I/O, not idea state)",
}


def commit_calls(path: Path) -> list[tuple[int, str]]:
    """(line, what) of every call in one module that makes a commit object."""
    return calls_in(path, COMMIT_CALLS, {"commit-tree"})


def test_only_the_writer_makes_the_commits_it_records(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("repo.commit_tree('t', [], 'm')\nrepo.fast_import(b'')\nrepo.git('commit-tree', 't')\n"
                   "repo.tree_of('x')\n")
    assert [what for _, what in commit_calls(src)] == ["commit_tree", "fast_import", "git commit-tree"]
    found = {}
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            if calls := commit_calls(path):
                found[path.relative_to(ROOT).as_posix()] = calls
    outside = {mod: calls for mod, calls in found.items() if mod not in COMMITTERS}
    assert not outside, ("a commit made outside the lifecycle writer: hand it what the commit is made of "
                         f"(store/lifecycle.py Made), or list the module in COMMITTERS with why: {outside}")
    assert set(COMMITTERS) <= set(found), f"makes no commit any more: {set(COMMITTERS) - set(found)}"


def test_only_the_writer_opens_a_notes_batch():
    """Lifecycle.batch() holds the observers' events until the batch's writes are flushed; a notes
    batch opened around the writer by anyone else would flush after the writer told them (a note heard
    of before it is in git). So the project opens one only through the writer."""
    opened = []
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and node.func.attr == "notes_batch" and rel != "daemon/store/lifecycle.py":
                    opened.append(f"{rel}:{node.lineno}")
    assert not opened, f"a notes batch opened outside store/lifecycle.py (use lifecycle.batch()): {opened}"


def test_the_allowlists_name_modules_that_exist_and_write():
    """An entry whose module no longer writes is stale: remove it."""
    found = project_writes()
    for mod in WRITERS:
        assert (ROOT / mod).is_file(), mod
        assert mod in found, f"{mod} writes nothing any more: take it off the allowlist"


# -- behaviour, with real git --------------------------------------------------------------------------
@pytest.fixture
def repo(make_repo) -> GitRepo:
    return GitRepo(make_repo({"train.py": "x = 1\n"}))


@pytest.fixture
def heard() -> list[Written]:
    return []


@pytest.fixture
def life(repo, heard) -> Lifecycle:
    return Lifecycle(repo, observers=[heard.append])


def commit_on(repo: GitRepo, message: str) -> str:
    head = repo.rev_parse("refs/heads/main")
    return repo.commit_tree(repo.tree_of(head), [head], message)


def on_main(repo: GitRepo, message: str, tree: str | None = None) -> Made:
    """What a commit on main is made of: the writer makes it (main's tree unless `tree`)."""
    return Made((repo.rev_parse("refs/heads/main"),), message, tree)


def idea_at(commit: str, branch: str | None = None, origin: str = "explore", epoch: int = 3,
            trailers: Trailers | None = None) -> Idea:
    """An idea of the daemon's own: its provenance from its trailers (no note read yet)."""
    tr = (trailers or Trailers()).model_copy(update={"origin": origin, "epoch": epoch})
    return Idea(idea_id="e001-abcd1234", commit=commit, title="t", text="x", branch=branch, trailers=tr)


def lease(n: int) -> Lease:
    return Lease(trial_id=f"t{n}", seed=n, runner="local", host="h", slot="h:0")


def test_proposals_and_implementations(repo, life, heard):
    head = repo.rev_parse("refs/heads/main")
    prop = life.propose("e001-abcd1234", on_main(repo, "proposal"))
    assert repo.rev_parse(PROPOSALS_PREFIX + "e001-abcd1234") == prop
    # the writer made the commit: main's tree, main its parent, the message as given
    assert repo.tree_of(prop) == repo.tree_of(head) and git(repo.path, "rev-parse", prop + "^").strip() == head
    assert repo.commit_message(prop) == "proposal\n"

    tree = repo.tree_with_files(head, {"train.py": b"x = 2\n"})
    branch = IDEA_BRANCHES + "e001/faster-abcd1234"
    done = life.implemented("e001-abcd1234", on_main(repo, "implemented", tree), branch)
    assert repo.rev_parse(IDEAS_PREFIX + "e001-abcd1234") == done and repo.rev_parse(branch) == done
    assert repo.tree_of(done) == tree and repo.commit_message(done) == "implemented\n"
    assert repo.rev_parse(PROPOSALS_PREFIX + "e001-abcd1234") is None       # the proposal went

    prop2 = life.propose("e001-fail0001", on_main(repo, "proposal 2"))
    note = Note(status=Status.IMPLEMENT_FAILED, idea_id="e001-fail0001", error="no diff")
    rec = life.failed("e001-fail0001", on_main(repo, "failed"), note)
    assert repo.rev_parse(RECORDS_PREFIX + "e001-fail0001") == rec and repo.tree_of(rec) == repo.tree_of(head)
    assert repo.rev_parse(PROPOSALS_PREFIX + "e001-fail0001") is None
    assert life.ledger.note(rec).status == Status.IMPLEMENT_FAILED

    dup = life.dropped("e001-dup00001", on_main(repo, "duplicate"),
                       Note(status=Status.DUPLICATE, idea_id="e001-dup00001", error="same"))
    assert repo.rev_parse(RECORDS_PREFIX + "e001-dup00001") == dup
    assert life.ledger.note(dup).status == Status.DUPLICATE

    tuned = life.tuned("base-t1", on_main(repo, "tuned", tree), IDEA_BRANCHES + "tune/base/1")
    assert repo.rev_parse(IDEAS_PREFIX + "base-t1") == tuned == repo.rev_parse(IDEA_BRANCHES + "tune/base/1")
    assert repo.tree_of(tuned) == tree

    screen = life.screen("e001-abcd1234", Made((done,), "screen", tree))
    assert repo.rev_parse(SCREENS_PREFIX + "e001-abcd1234") == screen
    assert git(repo.path, "rev-parse", screen + "^").strip() == done

    assert [(w.change, w.commit) for w in heard] == [
        (Change.PROPOSED, prop), (Change.IMPLEMENTED, done), (Change.PROPOSED, prop2), (Change.FAILED, rec),
        (Change.DROPPED, dup), (Change.TUNED, tuned), (Change.SCREEN, screen)]
    assert heard[0].ref == PROPOSALS_PREFIX + "e001-abcd1234" and heard[1].ref == branch
    assert heard[3].note.status == Status.IMPLEMENT_FAILED and heard[4].note.error == "same"


def test_an_implemented_ideas_refs_move_together_or_not_at_all(repo, life, heard):
    """The mark, the branch and the proposal's deletion are one transaction: a branch git refuses (its
    name under an existing branch's) leaves no mark without a branch, and the proposal in place."""
    prop = life.propose("e001-abcd1234", on_main(repo, "proposal"))
    git(repo.path, "branch", "idea/e001", "main")
    with pytest.raises(GitError):
        life.implemented("e001-abcd1234", on_main(repo, "implemented"), IDEA_BRANCHES + "e001/x-abcd1234")
    assert repo.rev_parse(IDEAS_PREFIX + "e001-abcd1234") is None
    assert repo.rev_parse(PROPOSALS_PREFIX + "e001-abcd1234") == prop
    assert [w.change for w in heard] == [Change.PROPOSED]          # nothing told of what git refused


def test_a_lock_another_git_holds_is_waited_for(repo, life):
    """Deleting the proposal takes packed-refs.lock, which another git may hold a moment (a harvest's
    transaction, a gc): the writer's transaction waits for it, as the notes flush does, and moves all.
    Held past git's own wait for it (core.packedRefsTimeout, 1 s), so the writer's wait is what counts."""
    life.propose("e001-abcd1234", on_main(repo, "proposal"))
    lock = repo.git_dir / "packed-refs.lock"
    lock.touch()
    threading.Timer(1.5, lock.unlink).start()
    done = life.implemented("e001-abcd1234", on_main(repo, "implemented"), IDEA_BRANCHES + "e001/x-abcd1234")
    assert not lock.exists() and repo.rev_parse(IDEAS_PREFIX + "e001-abcd1234") == done
    assert repo.rev_parse(PROPOSALS_PREFIX + "e001-abcd1234") is None


def test_results_leases_and_logs(repo, life, heard):
    c = commit_on(repo, "idea")
    idea = idea_at(c, IDEA_BRANCHES + "e001/faster-abcd1234")
    life.leased(c, [lease(0), lease(1)])
    assert [lz.trial_id for lz in life.ledger.leases(c)] == ["t0", "t1"]
    life.leased(c, [])
    assert life.ledger.leases(c) == []                                   # an empty list removes the note

    blob = life.store_log("e001-abcd1234-implement", b"transcript")
    assert repo.rev_parse(LOGS_PREFIX + "e001-abcd1234-implement") == blob and repo.read_blob(blob) == b"transcript"

    life.leased(c, [lease(0), lease(1)])
    written = life.result(c, idea, Note(status=Status.SUCCEEDED, metric="val_loss", value=3.1), kept=[lease(1)])
    on_disk = Ledger(repo).note(c)
    # provenance is the daemon's record of the idea, not the note's; a runnable idea is archived
    assert on_disk.value == 3.1 and (on_disk.origin, on_disk.epoch) == ("explore", 3) == (written.origin, written.epoch)
    assert repo.rev_parse(ARCHIVE_PREFIX + c) == c
    assert [lz.trial_id for lz in life.ledger.leases(c)] == ["t1"]

    life.result(c, idea, Note(status=Status.SUCCEEDED, metric="val_loss", value=3.0))     # kept=None: leases stay
    assert [lz.trial_id for lz in life.ledger.leases(c)] == ["t1"]

    life.cancelled(c, idea, Note(status=Status.CANCELLED, metric="val_loss"), kept=[])
    assert Ledger(repo).note(c).status == Status.CANCELLED and life.ledger.leases(c) == []

    r = commit_on(repo, "rejected")
    life.rejected(idea_at(r, IDEA_BRANCHES + "e001/bad-abcd1234"), Note(status=Status.REJECTED, error="frozen"))
    assert Ledger(repo).note(r).status == Status.REJECTED and repo.rev_parse(ARCHIVE_PREFIX + r) == r

    t = commit_on(repo, "twin")
    life.linked(idea_at(t), Note(status=Status.SUCCEEDED, metric="val_loss", value=3.1))
    assert Ledger(repo).note(t).value == 3.1
    assert repo.rev_parse(ARCHIVE_PREFIX + t) is None                   # no idea branch: nothing to keep

    # a backfill fills the decision in; the note keeps the provenance it had
    n = Note(status=Status.SUCCEEDED, metric="val_loss", value=3.1, origin="seed", epoch=0, decision="improved")
    life.backfilled(c, idea_at(c, origin="explore", epoch=7), n)
    back = Ledger(repo).note(c)
    assert back.decision == "improved" and (back.origin, back.epoch) == ("seed", 0)

    noted = [w for w in heard if w.change != Change.LEASED]
    assert [w.change for w in noted] == [Change.RESULT, Change.RESULT, Change.CANCELLED, Change.REJECTED,
                                         Change.LINKED, Change.BACKFILLED]
    assert all(w.note is not None and w.change in NOTED for w in noted)
    assert [w.commit for w in heard if w.change == Change.LEASED] == [c, c, c]


def test_every_change_is_told(repo, life, heard):
    """Each Change member is made by a method, and every method tells the observers."""
    life.propose("e001-aaaa0001", on_main(repo, "p"))
    life.dropped("e001-aaaa0002", on_main(repo, "d"), Note(status=Status.DUPLICATE))
    c = life.implemented("e001-aaaa0001", on_main(repo, "c"), IDEA_BRANCHES + "e001/a-aaaa0001")
    life.failed("e001-aaaa0003", on_main(repo, "f"), Note(status=Status.IMPLEMENT_FAILED))
    life.tuned("b-t1", on_main(repo, "t"), IDEA_BRANCHES + "tune/b/1")
    life.result(c, idea_at(c), Note(status=Status.SUCCEEDED, value=1.0))
    life.rejected(idea_at(c), Note(status=Status.REJECTED))
    life.linked(idea_at(c), Note(status=Status.SUCCEEDED, value=1.0))
    life.cancelled(c, idea_at(c), Note(status=Status.CANCELLED), [])
    life.stopped(c, idea_at(c), Note(status=Status.STOPPED), [])
    life.backfilled(c, idea_at(c), Note(status=Status.SUCCEEDED, value=1.0, decision="improved"))
    s = life.screen("e001-aaaa0001", Made((c,), "screen"))
    life.screen_result(s, Note(status=Status.SUCCEEDED, screened={"value": 1.2}))
    life.screened_out(c, idea_at(c), Note(status=Status.SCREENED_OUT))
    life.leased(c, [lease(0)])
    told = {w.change for w in heard}
    assert set(Change) <= told, set(Change) - told
    assert heard[-1] == Written(Change.LEASED, c) and [lz.trial_id for lz in life.ledger.leases(c)] == ["t0"]


def test_an_observer_that_raises_stops_neither_the_write_nor_the_others(repo, heard):
    def broken(event):
        raise RuntimeError("observer down")
    life = Lifecycle(repo, observers=[broken, heard.append])
    c = commit_on(repo, "idea")
    life.result(c, idea_at(c), Note(status=Status.SUCCEEDED, metric="val_loss", value=3.1))
    p = life.propose("e001-abcd1234", on_main(repo, "p"))
    assert Ledger(repo).note(c).value == 3.1 and repo.rev_parse(PROPOSALS_PREFIX + "e001-abcd1234") == p
    assert [w.change for w in heard] == [Change.RESULT, Change.PROPOSED]


def test_observers_are_given_at_construction_only(repo, heard):
    """Wiring by construction: the writer's observers are fixed when it is built (no `observe`)."""
    life = Lifecycle(repo, observers=[heard.append])
    assert life.observers == (heard.append,) and not hasattr(life, "observe")
    life.propose("e001-abcd1234", on_main(repo, "p"))
    assert len(heard) == 1


def test_a_batch_is_one_notes_commit(repo, life):
    cs = [commit_on(repo, f"idea {k}") for k in range(3)]
    before = git(repo.path, "rev-list", "--count", NOTES_REF, check=False).strip() or "0"
    with life.batch():
        for k, c in enumerate(cs):
            life.result(c, idea_at(c), Note(status=Status.SUCCEEDED, metric="val_loss", value=float(k)))
    after = git(repo.path, "rev-list", "--count", NOTES_REF).strip()
    assert int(after) == int(before) + 1
    assert [Ledger(repo).note(c).value for c in cs] == [0.0, 1.0, 2.0]


def test_trailers_of_a_tuned_idea_go_into_its_note(repo, life):
    c = commit_on(repo, "tuned")
    tr = Trailers.model_validate({"Idea-Id": "base-t2", "Tune-Study": "base", "Tune-Sampler": "tpe",
                                  "Tune-Trial": 2, "Knobs": '{"x": 0.5}'})
    life.result(c, idea_at(c, trailers=tr), Note(status=Status.SUCCEEDED, metric="val_loss", value=1.0))
    assert Ledger(repo).note(c).tune == {"study": "base", "sampler": "tpe", "trial": 2, "knobs": {"x": 0.5}}
