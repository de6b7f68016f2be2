"""Safety gates on real commits: check_tree_change must refuse whatever a pushed branch or an applied
diff could smuggle in (frozen files, symlinks, .git paths, submodules, binary or giant files), and
check_path must refuse every path that is not a plain relative path inside the repository."""

from __future__ import annotations

import os
import subprocess

import pytest
from autoresearchd.implement.safety import SafetyRules, check_path, check_tree_change
from autoresearchd.store.gitrepo import GitRepo

RULES = SafetyRules(is_frozen=lambda p: p in ("prepare.py", ".autoresearch.toml") or p.startswith("eval/"),
                    max_file_bytes=4096, max_diff_bytes=8192)


def git(repo: GitRepo, *args, input: bytes | None = None, env: dict | None = None) -> str:
    e = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
             GIT_COMMITTER_EMAIL="t@t", **(env or {}))
    p = subprocess.run(["git", *args], cwd=repo.path, input=input, capture_output=True, env=e, check=False)
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout.decode().strip()


@pytest.fixture
def repo(make_repo):
    d = make_repo({"train.py": "print('train')\n", "prepare.py": "print('prepare')\n",
                   "eval/evaluate.py": "print('eval')\n", "lib/util.py": "X = 1\n"})
    return GitRepo(d)


def commit_with(repo: GitRepo, tmp_path, entries: dict[str, tuple[str, bytes | None]]) -> str:
    """A commit on top of main with index entries path -> (mode, content); None content removes."""
    env = {"GIT_INDEX_FILE": str(tmp_path / "idx")}
    git(repo, "read-tree", "main", env=env)
    for path, (mode, data) in entries.items():
        if data is None:
            git(repo, "update-index", "--force-remove", "--", path, env=env)
            continue
        sha = git(repo, "hash-object", "-w", "--stdin", input=data)
        git(repo, "update-index", "--add", "--cacheinfo", f"{mode},{sha},{path}", env=env)
    tree = git(repo, "write-tree", env=env)
    return git(repo, "commit-tree", tree, "-p", "main", "-m", "pushed by someone")


def test_clean_change_passes(repo, tmp_path):
    c = commit_with(repo, tmp_path, {"train.py": ("100644", b"print('better')\n"),
                                     "lib/new.py": ("100755", b"#!/bin/sh\necho hi\n"),
                                     "lib/util.py": ("100644", None)})
    assert check_tree_change(repo, "main", c, RULES) is None
    assert check_tree_change(repo, "main", repo.tree_of(c), RULES) is None    # a tree id works too


@pytest.mark.parametrize("path", ["prepare.py", "eval/evaluate.py", "eval/new_metric.py"])
def test_frozen_file_change_refused(repo, tmp_path, path):
    c = commit_with(repo, tmp_path, {path: ("100644", b"print('cheat')\n")})
    reason = check_tree_change(repo, "main", c, RULES)
    assert reason and "frozen" in reason and path in reason


def test_frozen_file_deletion_refused(repo, tmp_path):
    c = commit_with(repo, tmp_path, {"prepare.py": ("100644", None)})
    assert "frozen" in check_tree_change(repo, "main", c, RULES)


@pytest.mark.parametrize("target", [b"/etc/passwd", b"../../outside", b"train.py"])
def test_symlink_added_refused(repo, tmp_path, target):
    c = commit_with(repo, tmp_path, {"data/input.txt": ("120000", target)})
    reason = check_tree_change(repo, "main", c, RULES)
    assert reason and "symbolic link" in reason and "data/input.txt" in reason


def test_file_turned_into_symlink_refused(repo, tmp_path):
    c = commit_with(repo, tmp_path, {"train.py": ("120000", b"/etc/shadow")})
    assert "symbolic link" in check_tree_change(repo, "main", c, RULES)


def test_submodule_refused(repo, tmp_path):
    env = {"GIT_INDEX_FILE": str(tmp_path / "idx")}
    git(repo, "read-tree", "main", env=env)
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{repo.rev_parse('main')},vendor/lib", env=env)
    c = git(repo, "commit-tree", git(repo, "write-tree", env=env), "-p", "main", "-m", "sub")
    assert "submodule" in check_tree_change(repo, "main", c, RULES)


@pytest.mark.parametrize("top", [".git", ".GIT", ".git."])
def test_git_dir_path_refused(repo, tmp_path, top):
    # git's own index refuses such paths, so craft the tree directly with mktree, as a hostile
    # push could.
    blob = git(repo, "hash-object", "-w", "--stdin", input=b"[core]\n\thooksPath = /tmp/evil\n")
    inner = git(repo, "mktree", input=f"100644 blob {blob}\tconfig\n".encode())
    base = {line.split("\t")[1]: line for line in git(repo, "ls-tree", "main").splitlines()}
    base[top] = f"040000 tree {inner}\t{top}"
    tree = git(repo, "mktree", input=("\n".join(base.values()) + "\n").encode())
    c = git(repo, "commit-tree", tree, "-p", "main", "-m", "x")
    reason = check_tree_change(repo, "main", c, RULES)
    assert reason and ".git" in reason


def test_nested_git_dir_refused(repo, tmp_path):
    blob = git(repo, "hash-object", "-w", "--stdin", input=b"ref: refs/heads/x\n")
    inner = git(repo, "mktree", input=f"100644 blob {blob}\tHEAD\n".encode())
    sub = git(repo, "mktree", input=f"040000 tree {inner}\t.git\n".encode())
    base = {line.split("\t")[1]: line for line in git(repo, "ls-tree", "main").splitlines()}
    base["vendored"] = f"040000 tree {sub}\tvendored"
    tree = git(repo, "mktree", input=("\n".join(base.values()) + "\n").encode())
    assert ".git" in check_tree_change(repo, "main", tree, RULES)


def test_binary_file_refused(repo, tmp_path):
    c = commit_with(repo, tmp_path, {"weights.bin": ("100644", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")})
    assert "binary" in check_tree_change(repo, "main", c, RULES)


def test_giant_file_refused(repo, tmp_path):
    c = commit_with(repo, tmp_path, {"table.py": ("100644", b"x = 1\n" * 1000)})
    reason = check_tree_change(repo, "main", c, RULES)
    assert reason and "table.py" in reason and "6000 bytes" in reason and "4096" in reason


def test_human_branch_on_older_base(repo, tmp_path):
    """Works on any commit: a branch two commits ahead, compared with its fork point."""
    c1 = commit_with(repo, tmp_path, {"train.py": ("100644", b"v1\n")})
    git(repo, "update-ref", "refs/heads/idea/me/x", c1)
    env = {"GIT_INDEX_FILE": str(tmp_path / "idx2")}
    git(repo, "read-tree", c1, env=env)
    sha = git(repo, "hash-object", "-w", "--stdin", input=b"cheat\n")
    git(repo, "update-index", "--add", "--cacheinfo", f"100644,{sha},eval/evaluate.py", env=env)
    c2 = git(repo, "commit-tree", git(repo, "write-tree", env=env), "-p", c1, "-m", "second")
    assert check_tree_change(repo, "main", c1, RULES) is None
    assert "frozen" in check_tree_change(repo, "main", c2, RULES)


@pytest.mark.parametrize("path,word", [
    ("/etc/passwd", "absolute"), ("\\\\server\\share", "absolute"), ("C:\\x.py", "absolute"),
    ("~/x.py", "absolute"), ("../x.py", "'..'"), ("a/../../x.py", "'..'"), ("a\\..\\x", "'..'"),
    (".git/config", ".git"), ("sub/.Git/hooks/x", ".git"), ("a\nb.py", "control"), ("a\x00b", "control"),
    ("prepare.py", "frozen"), ("./prepare.py", "frozen"), ("eval//evaluate.py", "frozen"),
    (".autoresearch.toml", "frozen"), ("", "empty"), ("./", "names no file"),
])
def test_check_path_refuses(path, word):
    reason = check_path(path, RULES)
    assert reason and word in reason


@pytest.mark.parametrize("path", ["train.py", "lib/util.py", "a..b.py", ".github/workflows/x.yml",
                                  ".gitignore", "evaluation/x.py", "dir with space/f.py"])
def test_check_path_allows(path):
    assert check_path(path, RULES) is None
