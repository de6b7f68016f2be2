"""The persistent `cat-file --batch` the repo handle reads a few objects through (gitproc.PyRepo.read_objects,
GitRepo.cat_file_batch and cat_file_stream): it sees objects written after it started, loose or packed,
and across a `git gc`; it is started again when it dies; missing and malformed ids never put its
answers out of step; threads share it; and a small read starts no process."""

from __future__ import annotations

import os
import signal
import subprocess
from contextlib import closing

import pytest
from conftest import git
from threads import run_in_threads

from autoresearchd import defaults
from autoresearchd.store.gitrepo import GitRepo


@pytest.fixture
def repo(make_repo):
    path = make_repo({"a.txt": "alpha\n"})
    with GitRepo(path) as r:
        yield r


def _reader(r: GitRepo):
    c = r._py.git.cat_file_all
    return c.proc if c is not None else None


def _blobs(r: GitRepo, texts: list[str]) -> list[str]:
    return [r.git("hash-object", "-w", "--stdin", input=t.encode()).strip() for t in texts]


def _packed_blob(r: GitRepo, text: str) -> str:
    """A blob written into a new pack (fast-import keeps its pack: no unpackLimit here)."""
    data = text.encode()
    r.git("-c", "fastimport.unpackLimit=0", "fast-import", "--quiet",
          input=b"blob\ndata %d\n%s\n" % (len(data), data))
    return r.git("hash-object", "--stdin", input=data).strip()       # its id, not written again


def _count_processes(monkeypatch) -> list:
    started = []
    init = subprocess.Popen.__init__

    def counted(self, args, *rest, **kw):
        started.append(args)
        return init(self, args, *rest, **kw)
    monkeypatch.setattr(subprocess.Popen, "__init__", counted)
    return started


def test_objects_written_after_it_started_are_read_loose_packed_and_after_gc(repo):
    first = _blobs(repo, ["one\n"])[0]
    assert repo.cat_file_batch([first]) == {first: b"one\n"}
    proc = _reader(repo)
    assert proc is not None and proc.poll() is None
    loose = _blobs(repo, ["two\n", "three\n"])
    packed = _packed_blob(repo, "four\n")
    assert list(repo.git_dir.glob("objects/pack/*.pack"))
    want = {first: b"one\n", loose[0]: b"two\n", loose[1]: b"three\n", packed: b"four\n"}
    assert repo.cat_file_batch(list(want)) == want
    # every object anchored, then repacked into one pack, the old packs and loose objects removed
    for i, sha in enumerate(want):
        repo.update_ref(f"refs/keep/{i}", sha)
    git(repo.path, "gc", "-q", "--prune=now")
    assert not [p for p in (repo.git_dir / "objects").iterdir() if len(p.name) == 2]      # nothing loose
    assert dict(repo.cat_file_stream(list(want))) == want
    after = _blobs(repo, ["five\n"])[0]
    assert repo.read_object(after) == ("blob", b"five\n")
    assert _reader(repo) is proc and proc.poll() is None            # the same process all along


def test_a_killed_reader_is_started_again(repo):
    a, b = _blobs(repo, ["a\n", "b\n"])
    assert repo.read_object(a) == ("blob", b"a\n")
    old = _reader(repo)
    os.kill(old.pid, signal.SIGKILL)
    old.wait()                                  # dead before the next read (else held() may not see it yet)
    assert repo.cat_file_batch([a, b]) == {a: b"a\n", b: b"b\n"}
    new = _reader(repo)
    assert new is not None and new.pid != old.pid and new.poll() is None
    # killed while a thread holds the handle (past held()'s check): found dead when the read writes
    # into its pipe or reads its answer; that read starts another and still answers
    with repo._py.held() as r:
        os.kill(new.pid, signal.SIGKILL)
        new.wait()
        assert r.read_objects([b, a]) == {a: ("blob", b"a\n"), b: ("blob", b"b\n")}
    assert _reader(repo).pid not in (old.pid, new.pid) and _reader(repo).poll() is None


def test_missing_and_malformed_ids_keep_the_answers_in_step(repo):
    a, b = _blobs(repo, ["a\n", "b\n"])
    tree = repo.tree_of("HEAD")
    asked = ["0" * 40, a, "HEAD", "f" * 40 + "\nextra", tree, "not-an-id", b, "0" * 64]
    got = repo._py.read_objects(asked)
    assert set(got) == {a, tree, b}
    assert got[a] == ("blob", b"a\n") and got[b] == ("blob", b"b\n") and got[tree][0] == "tree"
    assert repo.read_object("0" * 40) is None and repo.read_object(a) == ("blob", b"a\n")


def test_a_small_read_starts_no_process_and_a_big_one_stays_one_stream(repo, monkeypatch):
    shas = _blobs(repo, [f"blob {i}\n" for i in range(defaults.GIT_SMALL_READ + 1)])
    repo.read_object(shas[0])                   # the persistent cat-file is running
    started = _count_processes(monkeypatch)
    small = shas[:defaults.GIT_SMALL_READ]
    with closing(repo.cat_file_stream(small)) as stream:
        assert [s for s, _ in stream] == small
    assert repo.cat_file_batch(small[:3]) == {s: f"blob {i}\n".encode() for i, s in enumerate(small[:3])}
    assert started == []
    assert dict(repo.cat_file_stream(shas)) == {s: f"blob {i}\n".encode() for i, s in enumerate(shas)}
    assert len(started) == 1                    # more than a few: the one-shot stream, as before
    # a name that is not a full object id is git's to resolve: the one-shot stream too
    assert dict(repo.cat_file_stream(["HEAD:a.txt"])) == {"HEAD:a.txt": b"alpha\n"}
    assert len(started) == 2


def test_threads_read_through_it_without_mixing_answers(repo):
    texts = [f"content {i}\n" * (i * 500 + 1) for i in range(12)]        # some larger than a pipe
    shas = _blobs(repo, texts)
    want = dict(zip(shas, (t.encode() for t in texts)))
    wrong = []

    def reader(k: int) -> None:
        for j in range(40):
            pick = [shas[(j + k + i) % len(shas)] for i in range(1 + (j % 5))]
            got = dict(repo.cat_file_stream(pick)) if j % 2 else repo.cat_file_batch(pick)
            if got != {s: want[s] for s in pick}:
                wrong.append(pick)
            if repo.read_blob(f"{pick[0]}") != want[pick[0]]:
                wrong.append(pick[0])
    run_in_threads(reader, 4)
    assert wrong == []


def test_a_reader_that_cannot_start_is_a_git_error(repo, tmp_path):
    a = _blobs(repo, ["a\n"])[0]
    other = GitRepo(repo.path)
    os.rename(repo.path / ".git", tmp_path / "moved")       # no repository any more: cat-file fails
    try:
        with pytest.raises(Exception) as info:
            other.cat_file_batch([a])
        assert type(info.value).__name__ == "GitError"
    finally:
        os.rename(tmp_path / "moved", repo.path / ".git")
        other.close()
    assert other.cat_file_batch([a]) == {a: b"a\n"}          # and once it can, it reads again
