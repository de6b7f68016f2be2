"""New cases of two closed classes, found by attacking them again (issue 26): "git obeys what a push
adds" (docs/security.md, "A push is data: git mechanisms") and "every byte from an idea is data"
(docs/security.md, "Every byte from an idea is data"). Real pushes through the installed hook, real
daemon runs, real `git log`.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from autoresearchd.manifest import parse_manifest
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.ledger import Ledger
from autoresearchd.store.notes import Note, Status
from runners.outcome import outcome_from_files

from conftest import TOY_MANIFEST, TOY_RUN, git, write_config
from test_escapes import HOSTILE, PAYLOAD, _commit, assert_inert
from test_git_steering import clone, commit_in, push, research, sh  # noqa: F401 (fixtures)


# -- class 2: refs that differ only in letter case --------------------------------------------------------
# On a case-insensitive filesystem (macOS, Windows) git stores a loose ref as a file named like the ref:
# refs/heads/MAIN is the file of refs/heads/main. The owner's allow patterns must not let such a ref
# through to the baseline, the daemon's refs, notes or replace refs.
FOLDED = ["refs/heads/MAIN", "refs/heads/Main", "refs/Autoresearch/ideas/e1", "refs/autoresearch/IDEAS/e1",
          "refs/Notes/autoresearch", "refs/notes/Autoresearch-runs", "refs/notes/Commits", "refs/Replace/{base}"]


@pytest.mark.parametrize("ref", FOLDED)
def test_a_ref_that_differs_only_in_case_from_a_guarded_one_is_refused(research, clone, ref):
    for pattern in ("refs/heads/*", "refs/*", "*"):           # the owner allows everything liftable
        git(research, "config", "--add", "autoresearchd.pushAllow", pattern)
    base = git(research, "rev-parse", "main").strip()
    ref = ref.format(base=base)
    commit_in(clone, {"run.py": TOY_RUN.replace("x = 1.0", "x = 0.5")})
    before = git(research, "for-each-ref", "--format=%(refname) %(objectname)")
    p = push(clone, "--force", f"HEAD:{ref}")
    assert p.returncode != 0 and f"refusing to update {ref} by push: it differs only in letter case" in p.stderr, \
        p.stderr
    assert git(research, "for-each-ref", "--format=%(refname) %(objectname)") == before
    # a mixed-case idea branch, and a branch the owner allowed, still go through
    assert push(clone, "HEAD:refs/heads/idea/Mixed/Case", "HEAD:refs/heads/Feature").returncode == 0


# -- class 2: objects that inflate past the caps ---------------------------------------------------------
def _bomb_commit(cl, size: int) -> str:
    """A commit whose message is `size` bytes of one letter: zlib packs it into about size/1000."""
    return git(cl, "commit-tree", git(cl, "rev-parse", "HEAD^{tree}").strip(), "-p", "HEAD",
               input="bomb\n\n" + "a" * size + "\n").strip()


@pytest.mark.parametrize("case", ["commit-message", "blob", "total"])
def test_a_push_whose_objects_inflate_past_the_caps_is_refused(research, clone, case):
    if case == "commit-message":     # the default cap: 1 MiB a commit; the pack is about 3 KiB
        sha, why = _bomb_commit(clone, 3 * 1024 * 1024), "bytes, over 1048576 once inflated"
    elif case == "blob":
        git(research, "config", "autoresearchd.pushMaxObjectBytes", "100000")
        sha, why = commit_in(clone, {"data.txt": "0" * 300_000}), "bytes, over 100000 once inflated"
    else:
        git(research, "config", "autoresearchd.pushMaxTotalBytes", "100000")
        sha = commit_in(clone, {f"d{i}.txt": f"{i}" * 40_000 for i in range(4)})
        why = "its new objects come to over 100000 bytes once inflated"
    p = push(clone, f"{sha}:refs/heads/idea/bomb")
    assert p.returncode != 0 and f"autoresearchd: refusing the push: " in p.stderr and why in p.stderr, p.stderr
    assert git(research, "for-each-ref", "refs/heads/idea/") == ""
    # the same content under the cap is an ordinary idea
    git(research, "config", "autoresearchd.pushMaxCommitBytes", str(4 * 1024 * 1024))
    git(research, "config", "autoresearchd.pushMaxObjectBytes", str(4 * 1024 * 1024))
    git(research, "config", "autoresearchd.pushMaxTotalBytes", str(4 * 1024 * 1024))
    p = push(clone, f"{sha}:refs/heads/idea/bomb")
    assert p.returncode == 0, p.stderr


# -- class 4: notes, which plain `git log` prints as they are ---------------------------------------------
def _note_text(repo, commit: str) -> str:
    """What the user's terminal gets from plain git: the note as `git log` shows it (notes.displayRef
    is set by init/start), with the commit's own header left out."""
    return subprocess.run(["git", "log", "-1", "--notes=refs/notes/autoresearch", "--format=%N", commit],
                          cwd=repo, capture_output=True, text=True, check=True).stdout


def test_a_failed_trials_error_reaches_git_log_inert(toy_env):
    """A run that prints a forged `not found` line and exits 127: the error names the "command", taken
    from the trial's own log, on one line of the note."""
    manifest = parse_manifest(TOY_MANIFEST)
    what = f"{HOSTILE['osc0_bel']}{HOSTILE['clear']}{HOSTILE['csi_8bit']}{HOSTILE['bidi']}x"
    out = outcome_from_files({"run.head": f"sh: 1: {what}: not found\n".encode(), "run.rc": b"127"}, manifest)
    assert what in out.error                                    # the raw text, kept as data
    repo = GitRepo(toy_env)
    commit = repo.rev_parse("refs/heads/main")
    Ledger(repo).write_note(commit, Note(status=Status.FAILED, metric="score", error=out.error))
    text = _note_text(toy_env, commit)
    assert "failed — run exited 127" in text and "\\x1b]0;PWNED-BEL" in text, text
    assert_inert(text, "git log --notes")
    assert Ledger(repo).note(commit).error == out.error     # the note reads back the raw text


def test_a_multiline_errors_first_line_reaches_git_log_inert(toy_env):
    repo = GitRepo(toy_env)
    commit = repo.rev_parse("refs/heads/main")
    err = f"run exited with code 1: Traceback {PAYLOAD}\nsecond line"
    Ledger(repo).write_note(commit, Note(status=Status.FAILED, metric="score", error=err))
    assert_inert(_note_text(toy_env, commit), "git log --notes (summary line)")
    assert Ledger(repo).note(commit).error == err


def test_a_rejected_pushs_file_name_reaches_git_log_inert(toy_env, tmp_path):
    """A pushed file whose name holds a bidi override and the 8-bit CSI (no C0 control, so the gate
    names it as it is) and is over the size limit: the daemon's `rejected` note names the file."""
    name = "big\u202e\u009b2J.txt".encode()
    sha = _commit(toy_env, {name: b"0" * 1_200_000}, b"Giant\n")
    GitRepo(toy_env).update_ref("refs/heads/idea/h/giant", sha)
    cfg = write_config(tmp_path, toy_env)
    p = subprocess.run([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), "start", "--until", "idle"],
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr
    text = _note_text(toy_env, sha)
    assert text.startswith("rejected — big\\u202e\\x9b2J.txt would be 1200000 bytes"), text
    assert_inert(text, "git log --notes (rejected)")
    assert Ledger(GitRepo(toy_env)).note(sha).error.startswith(name.decode())


# -- class 2: a pushed branch where the daemon will write its own ------------------------------------------
# The daemon writes each idea it implements to idea/<group>/<slug>-<id> (groups eNNN, human). A pushed
# branch idea/e001 is a file where git needs the directory idea/e001/; a pushed idea/e001/<slug>-<id>/x
# (the proposal's title and id are readable under refs/autoresearch/proposals/) is a directory where
# the daemon's branch must be a file. Either way the daemon's ref update fails, the proposal stays, and
# the implementation (paid LLM calls) is retried on every tick.
@pytest.mark.parametrize("blocker", ["group", "group-upper-case", "below-the-next-branch", "human-group",
                                     "allowed-upper-case-prefix"])
def test_a_push_cannot_block_the_branch_the_daemon_writes_next(implementer_setup, tmp_path, blocker):
    from autoresearchd.research import configure
    from autoresearchd.store.ideas import branch_for
    from test_implementer import GOOD, propose
    from fake_llm import Reply
    make, fake = implementer_setup
    cfg, research, impl = make()
    configure(research.repo)
    cl = tmp_path / "cl"
    git(tmp_path, "clone", "-q", f"file://{research.repo.path}", str(cl))
    idea_id = propose(impl)                              # epoch 1, origin explore
    branch = branch_for(idea_id, "Lower x", "explore")   # refs/heads/idea/e001/lower-x-<id>
    ref = {"group": "refs/heads/idea/e001", "group-upper-case": "refs/heads/idea/E001",
           "below-the-next-branch": branch + "/x", "human-group": "refs/heads/idea/human",
           "allowed-upper-case-prefix": "refs/heads/IDEA/e001"}[blocker]
    if blocker == "allowed-upper-case-prefix":      # the owner allows other branches: IDEA/ is idea/ on macOS
        git(research.repo.path, "config", "--add", "autoresearchd.pushAllow", "refs/heads/*")
    p = push(cl, f"HEAD:{ref}")
    assert p.returncode != 0 and f"refusing to update {ref} by push: the daemon names its own" in p.stderr, p.stderr
    fake.script(Reply(GOOD, 100, 50))
    assert impl.implement(idea_id) == branch and research.repo.rev_parse(branch)
    # people's branches elsewhere, and moving or deleting a branch under a group that exists, still work
    research.repo.update_ref("refs/heads/idea/e001/old", research.baseline_commit)
    for spec in ("HEAD:refs/heads/idea/me/e001", "HEAD:refs/heads/idea/eval", "HEAD:refs/heads/idea/e001/old",
                 ":refs/heads/idea/e001/old"):
        p = push(cl, "--force", spec)
        assert p.returncode == 0, (spec, p.stderr)


@pytest.fixture
def implementer_setup(make_repo, tmp_path):
    from test_implementer import setup as _setup
    yield from _setup.__wrapped__(make_repo, tmp_path)


# -- class 4: the commits the daemon writes, which plain `git log` prints as they are ---------------------
def test_an_llm_title_and_text_reach_the_daemons_commits_inert(implementer_setup):
    from test_implementer import GOOD, propose
    from fake_llm import Reply
    make, fake = implementer_setup
    cfg, research, impl = make()
    idea_id = propose(impl, title=f"Lower x {PAYLOAD}", text=f"Set x to 0.5 {PAYLOAD}\nsecond line\tend")
    proposal = research.repo.rev_parse(f"refs/autoresearch/proposals/{idea_id}")
    fake.script(Reply(GOOD, 100, 50))
    branch = impl.implement(idea_id)
    for rev in (proposal, branch):
        out = subprocess.run(["git", "log", "-1", "--format=%B", rev], cwd=research.repo.path, capture_output=True,
                             text=True, check=True).stdout
        assert out.startswith("Lower x \\x1b[2J") and "second line\tend" in out, out
        assert_inert(out, f"git log {rev}")


# -- class 2: crafted trees fsck must refuse (these held; kept so they keep holding) ----------------------
def _tree(cl, entries) -> str:
    data = b"".join(m + b" " + n + b"\0" + bytes.fromhex(s) for m, n, s in entries)
    return sh(cl, "hash-object", "-t", "tree", "-w", "--literally", "--stdin", input=data).stdout.decode().strip()


@pytest.mark.parametrize("case,fsck_id", [
    ("duplicate-entries", "duplicateEntries"),     # two run.py: the diff shows one, tar extraction keeps the last
    ("unsorted", "treeNotSorted"),
    ("file-and-directory", "duplicateEntries"),    # `a`, `a.txt`, `a/`: not adjacent, still one name twice
    ("hfs-dotgit", "hasDotgit"),                   # .g<ZWNJ>it is .git on HFS+
    ("ntfs-dotgit", "hasDotgit"),                  # git~1 is .git on NTFS
    ("gitmodules-symlink", "gitmodulesSymlink"),
])
def test_a_crafted_tree_is_refused_by_fsck_on_push(research, clone, case, fsck_id):
    a = git(clone, "hash-object", "-w", "--stdin", input="a\n").strip()
    b = git(clone, "hash-object", "-w", "--stdin", input="b\n").strip()
    entries = {
        "duplicate-entries": [(b"100644", b"run.py", a), (b"100644", b"run.py", b)],
        "unsorted": [(b"100644", b"z", a), (b"100644", b"a", b)],
        "file-and-directory": [(b"100644", b"a", a), (b"100644", b"a.txt", a),
                               (b"40000", b"a", _tree(clone, [(b"100644", b"x", a)]))],
        "hfs-dotgit": [(b"100644", ".g\u200cit".encode(), a)],
        "ntfs-dotgit": [(b"100644", b"git~1", a)],
        "gitmodules-symlink": [(b"120000", b".gitmodules", a)],
    }[case]
    commit = git(clone, "commit-tree", _tree(clone, entries), "-p", "HEAD", input="crafted\n").strip()
    p = push(clone, f"{commit}:refs/heads/idea/crafted")
    assert p.returncode != 0 and fsck_id in p.stderr, p.stderr
    assert git(research, "for-each-ref", "refs/heads/idea/") == ""


# -- class 2: a tree that lists exponentially many paths ("git bomb") ------------------------------------
def test_a_tree_that_names_one_subtree_many_times_is_refused(research, clone):
    """Seven levels of ten entries, each naming the level below: 10^7 paths from under 3 KiB of trees.
    Accepted, the gate's `diff-tree -r` and the export's `ls-tree -r` would walk every path."""
    blob = git(clone, "hash-object", "-w", "--stdin", input="x\n").strip()
    tree = _tree(clone, [(b"100644", b"f", blob)])
    for _ in range(7):
        tree = _tree(clone, [(b"40000", b"d%d" % i, tree) for i in range(10)])
    commit = git(clone, "commit-tree", tree, "-p", "HEAD", input="bomb\n").strip()
    p = push(clone, f"{commit}:refs/heads/idea/bomb")
    assert p.returncode != 0 and f"the tree of {commit} lists more than 100000 paths" in p.stderr, p.stderr
    assert git(research, "for-each-ref", "refs/heads/idea/") == ""
    # a wide but honest tree under the cap goes through
    git(research, "config", "autoresearchd.pushMaxPaths", "20000000")
    tree = _tree(clone, [(b"40000", b"d%d" % i, _tree(clone, [(b"100644", b"f", blob)])) for i in range(10)])
    ok = git(clone, "commit-tree", tree, "-p", "HEAD", input="wide\n").strip()
    assert push(clone, f"{ok}:refs/heads/idea/wide").returncode == 0


# -- class 2: a ref named like a directory the daemon needs ------------------------------------------------
@pytest.mark.parametrize("ref", ["refs/autoresearch", "refs/notes", "refs/heads/idea", "refs/heads",
                                 "refs/Autoresearch"])
def test_a_ref_named_like_a_directory_the_daemon_writes_into_is_refused(research, clone, ref):
    """Even where the owner allows every liftable ref (`*`): refs/autoresearch as a branch would make every
    result, lease and record the daemon writes fail (a file where git needs a directory)."""
    for pattern in ("refs/*", "*"):
        git(research, "config", "--add", "autoresearchd.pushAllow", pattern)
    commit_in(clone, {"run.py": TOY_RUN.replace("x = 1.0", "x = 0.5")})
    p = push(clone, f"HEAD:{ref}")
    assert p.returncode != 0 and f"refusing to update {ref} by push: it would take the name of the directory" \
        in p.stderr, p.stderr
    assert ref not in git(research, "for-each-ref", "--format=%(refname)").split()
    GitRepo(research).update_ref("refs/autoresearch/records/e000-1", git(research, "rev-parse", "main").strip())
