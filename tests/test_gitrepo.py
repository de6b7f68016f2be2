"""The repo handle (store/gitrepo.py over GitPython): what its git children see, its persistent
cat-file processes (reaped on close, one thread at a time, not shared with a forked child), and the
reads it answers through GitPython giving what git itself prints."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import git
from threads import run_in_threads

from autoresearchd.store.gitrepo import GitError, GitRepo

CANARY = "AR_CANARY_API_KEY"


@pytest.fixture
def repo(make_repo, monkeypatch):
    monkeypatch.setenv(CANARY, "canary-secret-value")
    monkeypatch.setenv("AR_CANARY_PLAIN", "plain-value")
    path = make_repo({"a.txt": "alpha\n", "dir/b.txt": "beta\n"})
    git(path, "commit", "-q", "--allow-empty", "-m", "second\n\nbody line\n\nTrailer: x")
    with GitRepo(path) as r:
        yield r


def _cat_file_procs(r: GitRepo) -> list:
    g = r._py.git
    return [c.proc for c in (g.cat_file_all, g.cat_file_header) if c and c.proc]


def test_gitpython_children_get_the_scrubbed_hook_free_environment(repo):
    assert repo.read_blob("HEAD:a.txt") == b"alpha\n"           # starts the persistent cat-file
    procs = _cat_file_procs(repo)
    assert procs
    for p in procs:
        environ = Path(f"/proc/{p.pid}/environ").read_bytes().split(b"\0")
        assert not any(e.startswith(CANARY.encode()) for e in environ)
        assert b"AR_CANARY_PLAIN=plain-value" in environ            # the rest of the env is kept
        assert b"core.hooksPath=/dev/null" in Path(f"/proc/{p.pid}/cmdline").read_bytes().split(b"\0")
    # any other command GitPython runs: a shell alias prints what git's own children see
    out = repo._py.git.execute(["git", "-c", "alias.showenv=!env", "showenv"])
    assert "AR_CANARY_PLAIN=plain-value" in out and CANARY not in out and "canary-secret-value" not in out
    # ... and a hook planted in the repo never runs on GitPython's ref writes
    hook = repo.git_dir / "hooks" / "reference-transaction"
    hook.write_text(f"#!/bin/sh\ntouch {repo.path / 'HOOK_RAN'}\n")
    hook.chmod(0o755)
    repo._py.git.update_ref("refs/heads/other", repo.rev_parse("HEAD"))
    assert repo.rev_parse("refs/heads/other") == repo.rev_parse("HEAD")
    assert not (repo.path / "HOOK_RAN").exists()
    with pytest.raises(GitError, match="not a valid"):
        repo._py.git.update_ref("refs/heads/x", "not-a-sha")


def test_close_reaps_the_cat_file_processes_and_the_handle_still_reads(repo):
    head = repo.rev_parse("HEAD")                                   # a ref name: through git
    assert repo.rev_parse(head + "^{tree}")                         # an object id: batch-check
    repo.read_blob("HEAD:a.txt")
    procs = _cat_file_procs(repo)
    assert len(procs) == 2 and all(p.poll() is None for p in procs)
    repo.close()
    assert all(p.returncode is not None for p in procs)             # waited for: no zombie left
    assert not any(Path(f"/proc/{p.pid}").exists() for p in procs)
    assert _cat_file_procs(repo) == []
    assert repo.read_blob("HEAD:dir/b.txt") == b"beta\n"            # started again on demand


def test_threads_share_one_handle_without_mixing_answers(repo):
    blobs = {f"f{i}.txt": f"content {i}\n".encode() * (i + 1) for i in range(8)}
    tree = repo.tree_with_files(repo.rev_parse("HEAD"), blobs)
    commit = repo.commit_tree(tree, [repo.rev_parse("HEAD")], "many files")
    wrong = []

    def reader(k: int) -> None:
        for j in range(60):
            name = f"f{(j + k) % 8}.txt"
            if repo.read_blob(f"{commit}:{name}") != blobs[name]:
                wrong.append(name)
    run_in_threads(reader, 4)
    assert wrong == []


def test_a_forked_child_starts_its_own_cat_file_and_leaves_the_parents_alone(repo):
    assert repo.read_blob("HEAD:a.txt") == b"alpha\n"
    parent_procs = _cat_file_procs(repo)
    pid = os.fork()
    if pid == 0:                                                    # the child: exit status is the verdict
        ok = repo.read_blob("HEAD:dir/b.txt") == b"beta\n" and all(
            p.pid not in [q.pid for q in _cat_file_procs(repo)] for p in parent_procs)
        repo.close()
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert all(p.poll() is None for p in parent_procs)              # the parent's processes still run
    assert repo.read_blob("HEAD:a.txt") == b"alpha\n"


def test_reads_through_gitpython_match_git(repo):
    head = git(repo.path, "rev-parse", "HEAD").strip()
    assert repo.rev_parse("HEAD") == repo.rev_parse("main") == repo.rev_parse("refs/heads/main") == head
    assert repo.rev_parse("HEAD~1") == git(repo.path, "rev-parse", "HEAD~1").strip()
    assert repo.rev_parse(head[:10]) == head                           # abbreviated: through git
    assert repo.rev_parse(head + "~1") == repo.rev_parse("HEAD~1")     # from an id: GitPython
    assert repo.rev_parse("HEAD@{0}") == head
    assert repo.rev_parse("nope") is None and repo.rev_parse("refs/notes/none") is None
    assert repo.rev_parse("f" * 40) is None
    assert repo.tree_of("HEAD") == git(repo.path, "rev-parse", "HEAD^{tree}").strip()
    with pytest.raises(GitError):
        repo.tree_of("nope")
    for rev in ("HEAD", "HEAD~1"):
        assert repo.commit_message(rev) == git(repo.path, "log", "-1", "--format=%B", rev)
    assert repo.read_blob("HEAD:dir/b.txt") == b"beta\n"
    assert repo.read_blob("HEAD:missing.txt") is None and repo.read_blob("HEAD:dir") == b""


def test_an_absent_plain_path_is_answered_without_a_git_process(repo, monkeypatch):
    """rev:path of a path the commit has not: GitPython's tree walk is the answer for a plain path
    (the dispatcher asks for two absent knob files per trial); other paths and syntax still go to
    git, and every answer is git's own."""
    import subprocess
    head = git(repo.path, "rev-parse", "HEAD").strip()
    revs = [f"{head}:{p}" for p in ("missing.txt", "dir/missing", "a.txt/x", "dir/b.txt", "a.txt", "dir",
                                    "./a.txt", "dir/../a.txt", "dir//b.txt", "a.txt^x")]
    want = {rev: git(repo.path, "rev-parse", "--verify", "-q", rev, check=False).strip() or None for rev in revs}
    repo.read_blob(f"{head}:a.txt")                  # the persistent cat-files are up
    repo.rev_parse(f"{head}~0")
    started = []
    popen_init = subprocess.Popen.__init__

    def counting(self, args, *a, **kw):              # the real Popen, counted
        started.append(list(args))
        return popen_init(self, args, *a, **kw)
    monkeypatch.setattr(subprocess.Popen, "__init__", counting)
    for rev in revs:
        assert repo.rev_parse(rev) == want[rev], rev
    gits = [" ".join(a[-4:]) for a in started]
    plain = ("missing.txt", "dir/missing", "a.txt/x", "dir/b.txt", "a.txt", "dir")
    assert not [g for g in gits if any(g.endswith(f":{p}") for p in plain)], gits
    assert len(gits) == 4, gits                      # ./a.txt, dir/../a.txt, dir//b.txt, a.txt^x: git answers
    assert repo.read_blob(f"{head}:missing.txt") is None
    # from a tree's id, a blob's, and again (the tree and its entries kept): git's answers still
    tree, blob = repo.tree_of(head), want[f"{head}:a.txt"]
    assert repo.tree_of(head) == tree == git(repo.path, "rev-parse", f"{head}^{{tree}}").strip()
    for rev in (f"{tree}:dir/b.txt", f"{tree}:dir", f"{tree}:nope", f"{blob}:x", f"{head}:dir/b.txt"):
        assert repo.rev_parse(rev) == (git(repo.path, "rev-parse", "--verify", "-q", rev, check=False).strip() or None), rev


def test_notes_read_through_the_tree_match_git_notes_show_with_fanout(repo):
    ref = "refs/notes/t"
    base = repo.rev_parse("HEAD")
    commits = [repo.commit_tree(repo.tree_of(base), [base], f"c{i}") for i in range(300)]
    repo.notes_write_many(ref, {c: f"note {i}\nline two" for i, c in enumerate(commits)})
    assert any("/" in line for line in git(repo.path, "ls-tree", "-r", "--name-only", ref).splitlines())
    for c in commits[::37]:
        assert repo.note_read(ref, c) == git(repo.path, "notes", "--ref", ref, "show", c)
    assert repo.note_read(ref, base) is None and repo.note_read("refs/notes/none", base) is None


def test_config_reads_match_git_config(repo):
    repo.config_set("notes.displayRef", "refs/notes/a", add=True)
    repo.config_set("notes.displayRef", "refs/notes/b", add=True)
    git(repo.path, "config", 'remote.Origin.URL', "/tmp/x")
    assert repo.config_get("notes.displayRef") == "refs/notes/b" == \
        git(repo.path, "config", "--get", "notes.displayref").strip()
    assert repo.config_get("NOTES.displayref") == "refs/notes/b"
    assert repo.config_get("remote.Origin.url") == "/tmp/x" and repo.config_get("remote.origin.url") is None
    assert repo.config_get("core.bare") == "false" and repo.config_get("no.such") is None


def test_a_path_that_is_no_repository_is_a_one_line_git_error(tmp_path):
    with pytest.raises(GitError, match="not a git repository"):
        GitRepo(tmp_path)


def _stream_children() -> list[int]:
    """Pids of this process's `cat-file --batch --buffer` children (the stream's git)."""
    out = []
    for d in Path("/proc").iterdir():
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (d / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and b"cat-file" in cmd and b"--buffer" in cmd:
            out.append(int(d.name))
    return out


def test_the_object_stream_reads_what_the_batch_reads_and_reaps_git(repo, tmp_path):
    """cat_file_stream (the population's cold read parses while git reads): more ids than a pipe holds
    (the input is written by a thread), missing ids left out, the same bytes as cat_file_batch; a
    caller that stops early leaves no git behind; a git that fails is a GitError."""
    files = []
    for k in range(2500):
        f = tmp_path / f"b{k}"
        f.write_bytes(f"blob {k}\n".encode() * (k % 7 + 1))
        files.append(str(f))
    ids = repo.git("hash-object", "-w", "--stdin-paths", input="\n".join(files).encode()).split()
    wanted = ids + ["0" * 40, "HEAD", "HEAD:a.txt"]
    got = list(repo.cat_file_stream(wanted))
    assert dict(got) == repo.cat_file_batch(wanted) and len(got) == len(ids) + 2
    assert [s for s, _ in got] == ids + ["HEAD", "HEAD:a.txt"]
    assert dict(got)["HEAD:a.txt"] == b"alpha\n"
    stream = repo.cat_file_stream(ids)
    next(stream)
    assert len(_stream_children()) == 1
    stream.close()
    assert _stream_children() == []
    other = GitRepo(repo.path)
    os.rename(repo.path / ".git", tmp_path / "moved")       # no repository any more: git fails
    try:
        with pytest.raises(GitError):
            list(other.cat_file_stream(ids[:3]))
    finally:
        os.rename(tmp_path / "moved", repo.path / ".git")
    assert _stream_children() == []
