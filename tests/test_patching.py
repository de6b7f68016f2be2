"""The diff corpus (tests/data/diffs) against a real git repo of its base codebase: every case that
should apply gives exactly the expected files; every unsafe case is refused; every broken case fails
with an error that names the hunk and shows the file's real lines. The user's work tree, index and
HEAD stay byte-identical throughout."""

from __future__ import annotations

import hashlib

import pytest
from autoresearchd.implement.patching import apply_diff, extract_diff
from autoresearchd.store.gitrepo import GitRepo
from fixtures_patching import CASES, DATA, expected_files, git, make_base_repo, response, rules


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    d = make_base_repo(tmp_path_factory.mktemp("env") / "repo")
    # a user mid-work: a staged change and an unstaged one
    (d / "README.md").write_text("# staged edit\n")
    git(d, "add", "README.md")
    (d / "train.py").write_text((d / "train.py").read_text() + "# local edit\n")
    return GitRepo(d)


def snapshot(repo: GitRepo) -> str:
    h = hashlib.sha256()
    for p in sorted(repo.path.rglob("*")):
        if p.is_file() and ".git/objects" not in p.as_posix():
            h.update(p.as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def run_case(repo: GitRepo, name: str):
    return apply_diff(repo, "main", extract_diff(response(name)) or "", rules())


@pytest.mark.parametrize("name", sorted(CASES))
def test_corpus_case(repo, name):
    spec = CASES[name]
    before = snapshot(repo)
    res = run_case(repo, name)
    assert snapshot(repo) == before, "the user's work tree, index or HEAD changed"
    if spec["expect"] == "applied":
        assert res.ok, f"{name} did not apply: {res.error}"
        got = repo.read_files(res.tree)
        want = expected_files(spec)
        assert sorted(got) == sorted(want)
        for path in want:
            assert got[path] == want[path], f"{name}: {path} differs from the expected content"
        assert res.method in ("git-apply", "normalized", "fuzzy")
        assert res.changed == sorted(set(spec.get("edits", {})) | set(spec.get("create", {}))
                                     | set(spec.get("delete", [])))
    elif spec["expect"] == "rejected":
        assert not res.ok and res.rejected, f"{name} was not rejected: {res}"
        assert spec["reason"] in res.reason, res.reason
        assert res.error
    else:
        assert not res.ok and not res.rejected, f"{name}: {res}"
        for piece in spec["error"]:
            assert piece in res.error, f"{name}: {piece!r} not in error:\n{res.error}"


def test_corpus_size_and_coverage():
    kinds = [c["expect"] for c in CASES.values()]
    assert len(CASES) >= 45
    assert kinds.count("applied") >= 35 and kinds.count("rejected") >= 8 and kinds.count("failed") >= 6


def test_error_names_hunk_and_shows_real_lines(repo):
    res = run_case(repo, "case_46_removed_line_not_present.txt")
    assert "hunk 1 of 1 in train.py" in res.error
    base = (DATA / "base" / "train.py").read_text().splitlines()
    for n in (40, 41, 42):                       # the real lines around where the hunk was meant to go
        assert f"{n:>5}| {base[n - 1]}" in res.error
    assert "SGD" in res.error                    # and the hunk's own lines, to compare


def test_error_lists_parts_that_apply(repo):
    diff = (
        "--- a/data.py\n+++ b/data.py\n@@ -5,3 +5,3 @@\n \n-def load_text(path, split=0.9):\n"
        "+def load_text(path, split=0.8):\n     with open(path) as f:\n"
        "--- a/train.py\n+++ b/train.py\n@@ -13,2 +13,3 @@\n LEARNING_RATE = 3e-3\n-MAX_STEPS = 5000\n"
        "+MAX_STEPS = 800\n"
        "@@ -16,1 +16,1 @@\n-WARMUP_STEPS = 0\n+WARMUP_STEPS = 10\n")
    res = apply_diff(repo, "main", diff, rules())
    assert not res.ok and not res.rejected
    assert "hunk 1 of 2 in train.py" in res.error
    assert "Hunks 2 of train.py fit" in res.error
    assert "data.py (1 hunk)" in res.error
    assert "   14| MAX_STEPS = 500" in res.error


def test_ambiguous_refused_even_where_git_apply_would_guess(repo):
    """git apply takes the match nearest the stated line; we refuse to guess."""
    diff = ("--- a/model.py\n+++ b/model.py\n@@ -30,3 +30,4 @@\n         x = self.proj(x)\n"
            "         x = self.drop(x)\n+        x = x + 1\n         return x\n")
    assert repo.apply_to_tree("main", diff.encode())      # git alone would apply it somewhere
    res = apply_diff(repo, "main", diff, rules())
    assert not res.ok and "match 2 places" in res.error


def test_extract_diff_variants():
    assert extract_diff("") is None and extract_diff("no diff here\n") is None
    two = "a\n```diff\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n```\ntext\n```diff\n--- a/y\n+++ b/y\n```\n"
    assert extract_diff(two) == "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n--- a/y\n+++ b/y\n"
    cut = "```diff\n--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n-a\n+b"
    assert extract_diff(cut) == "--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n-a\n+b"   # no final newline: cut off
    assert extract_diff("x\r\n--- a/x\r\n+++ b/x\r\n@@ -1 +1 @@\r\n-a\r\n+b\r\n") == \
        "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"


def test_result_tree_is_committable(repo):
    res = run_case(repo, "case_18_multi_file_git.txt")
    commit = repo.commit_tree(res.tree, [repo.rev_parse("main")], "idea")
    assert repo.read_files(commit, ["data.py"])["data.py"].count(b"split=0.95") == 1
    assert repo.git("fsck", "--no-progress", check=False) is not None


def test_already_applied_hunk_is_named(repo):
    diff = ("--- a/train.py\n+++ b/train.py\n@@ -14,3 +14,3 @@\n MAX_STEPS = 500\n-EVAL_EVERY = 50\n"
            "+EVAL_EVERY = 100\n WARMUP_STEPS = 0\n")
    res = apply_diff(repo, "main", diff, rules())
    assert not res.ok and "already" in res.error and "hunk 1 of 1 in train.py" in res.error


def test_same_file_in_two_sections_keeps_both_changes(repo):
    diff = ("--- a/train.py\n+++ b/train.py\n@@ -11,1 +11,1 @@\n-BATCH_SIZE = 32\n+BATCH_SIZE = 16\n"
            "--- a/model.py\n+++ b/model.py\n@@ -46,1 +46,1 @@\n-        self.pos = nn.Embedding(256, n_embd)\n"
            "+        self.pos = nn.Embedding(128, n_embd)\n"
            "--- a/train.py\n+++ b/train.py\n@@ -16,1 +16,1 @@\n-WARMUP_STEPS = 0\n+WARMUP_STEPS = 5\n")
    res = apply_diff(repo, "main", diff, rules())
    assert res.ok, res.error
    train = repo.read_files(res.tree, ["train.py"])["train.py"].decode()
    assert "BATCH_SIZE = 16\n" in train and "WARMUP_STEPS = 5\n" in train
    assert res.changed == ["model.py", "train.py"]


def test_crlf_file_stays_crlf(tmp_path):
    d = tmp_path / "crlf"
    d.mkdir()
    git(d, "init", "-q", "-b", "main")
    (d / "cfg.py").write_bytes(b"A = 1\r\nB = 2\r\nC = 3\r\n")
    git(d, "add", "-A")
    git(d, "commit", "-q", "-m", "b")
    r = GitRepo(d)
    res = apply_diff(r, "main", "--- a/cfg.py\n+++ b/cfg.py\n@@ -1,3 +1,3 @@\n A = 1\n-B = 2\n+B = 20\n C = 3\n",
                     rules())
    assert res.ok, res.error
    assert r.read_files(res.tree)["cfg.py"] == b"A = 1\r\nB = 20\r\nC = 3\r\n"


def test_rename_onto_existing_file_fails(repo):
    diff = "diff --git a/utils.py b/data.py\nsimilarity index 100%\nrename from utils.py\nrename to data.py\n"
    res = apply_diff(repo, "main", diff, rules())
    assert not res.ok and "already exists" in res.error


def test_mangled_diffs_never_apply_wrong(repo):
    """Random edits, written as diffs with random LLM slips: each applies exactly or fails."""
    from fixtures_patching import mangled_cases
    ok = 0
    for text, path, new, slips in mangled_cases(seed=7, n=120):
        res = apply_diff(repo, "main", extract_diff(text) or "", rules())
        if res.ok:
            got = repo.read_files(res.tree, [path])[path].decode()
            assert got == new, f"wrong apply with slips {slips}:\n{text}"
            ok += 1
    assert ok >= 0.8 * 120
