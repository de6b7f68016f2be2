"""A push is data (docs/security.md, "A push is data: git mechanisms"). First what a push may write:
real `git push` from a clone into a research repo configured as `init`/`start` configure it, one
case per class of ref, each refused with its reason. Then what the daemon reads: for each git
mechanism that a pushed commit or ref (or a file beside it) could switch on, the export, the
evaluator's files, the diff, the agent's tree, the merge-base and the baseline's name are what the
commit's real tree and the full ref say. Last, one daemon run where a pushed idea and a replace ref
try to change the measured value."""

import io
import os
import subprocess
import tarfile

import pytest

from autoresearchd.config import ConfigError, load_config
from autoresearchd.research import configure, guard_problem, open_research
from autoresearchd.store.gitrepo import GitError, GitRepo

from conftest import TOY_RUN, git, run_until_settled, write_config

GIT_PLAIN = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]


def sh(cwd, *args, input: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*GIT_PLAIN, *args], cwd=cwd, input=input, capture_output=True)


@pytest.fixture
def research(toy_env):
    configure(GitRepo(toy_env))          # hooks and receive config, as `init` and `start` write them
    return toy_env


@pytest.fixture
def clone(research, tmp_path):
    git(tmp_path, "clone", "-q", f"file://{research}", str(tmp_path / "clone"))
    return tmp_path / "clone"


def commit_in(cl, files: dict[str, bytes | str], message="an idea", base="origin/main") -> str:
    git(cl, "checkout", "-q", "-B", "work", base)
    # attribute files last: staged first, they would convert the other files on the way in
    for rel, data in sorted(files.items(), key=lambda kv: kv[0].endswith(".gitattributes")):
        p = cl / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data.encode() if isinstance(data, str) else data)
        git(cl, "add", "--", rel)
    git(cl, "commit", "-qm", message)
    return git(cl, "rev-parse", "HEAD").strip()


def push(cl, *args) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "push", "origin", *args], cwd=cl, capture_output=True, text=True)


def real_tree(repo, rev) -> dict[str, bytes]:
    """path -> bytes of every file of rev's real tree (no replace objects: git's own raw objects)."""
    out = subprocess.run(["git", "--no-replace-objects", "ls-tree", "-r", "-z", rev], cwd=repo,
                         capture_output=True, check=True).stdout
    res = {}
    for rec in filter(None, out.split(b"\0")):
        meta, _, path = rec.partition(b"\t")
        sha = meta.split()[2].decode()
        res[path.decode()] = subprocess.run(["git", "--no-replace-objects", "cat-file", "blob", sha], cwd=repo,
                                            capture_output=True, check=True).stdout
    return res


def tar_files(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        return {m.name: t.extractfile(m).read() for m in t if m.isreg()}


# -- 1. what a push may write ------------------------------------------------------------------------------
REFUSED = [
    ("HEAD:refs/tags/main", "tags are not ideas"),                   # would make `main` name the tag
    ("HEAD:refs/tags/v1", "tags are not ideas"),
    ("HEAD:refs/heads/main", "it is the baseline"),                  # the frozen evaluator's branch
    ("HEAD:refs/heads/feature", "only branches under idea/ are ideas"),
    ("HEAD:refs/heads/{base}", "only branches under idea/ are ideas"),   # a branch named like an object id
    ("HEAD:refs/heads/HEAD", "a HEAD-like name is ambiguous"),
    ("HEAD:refs/main", "only idea branches (refs/heads/idea/...) may be pushed"),   # refs/<name> wins over tags
    ("HEAD:refs/remotes/origin/main", "only idea branches"),
    ("HEAD:refs/pull/1/head", "only idea branches"),
    ("HEAD:refs/replace/{base}", "a replace ref substitutes one object for another"),
    ("HEAD:refs/notes/commits", "notes are the daemon's"),
    ("HEAD:refs/notes/autoresearch", "only the daemon writes"),
    ("HEAD:refs/notes/autoresearch-runs", "only the daemon writes"),
    ("HEAD:refs/autoresearch/ideas/e000-deadbeef", "only the daemon writes"),
    ("HEAD:refs/autoresearch/archive/{base}", "only the daemon writes"),
]


@pytest.mark.parametrize("refspec,why", REFUSED, ids=[r for r, _ in REFUSED])
def test_a_push_of_anything_but_an_idea_branch_is_refused_with_its_reason(research, clone, refspec, why):
    base = git(research, "rev-parse", "main").strip()
    commit_in(clone, {"run.py": TOY_RUN.replace("x = 1.0", "x = 0.5")})
    refspec = refspec.format(base=base)
    ref = refspec.split(":", 1)[1]
    before = git(research, "for-each-ref", "--format=%(refname) %(objectname)")
    p = push(clone, "--force", refspec)
    assert p.returncode != 0 and f"refusing to update {ref} by push: {why}" in p.stderr, p.stderr
    assert git(research, "for-each-ref", "--format=%(refname) %(objectname)") == before


# Every way the guard could be off for a push (docs/security.md, "The push guard is in force"): a
# hooks directory named by core.hooksPath in a config git reads beside the repo's own (the pusher's
# global config, the system's, a file the repo's config includes), a hook of the user's own in the
# guard's place, a guard that lost its execute bit. Each: `configure` (what init and start run) puts the
# guard in force or refuses, and a real push of a daemon ref is refused.
FORGED = "HEAD:refs/autoresearch/ideas/e000-forged"


def test_a_global_hooks_path_does_not_switch_the_guard_off(toy_env, tmp_path, monkeypatch):
    """A hooks manager's global core.hooksPath (husky, pre-commit) names a directory without the guard;
    receive-pack reads the pusher's global config. The repo's own value, which configure writes, wins."""
    empty = tmp_path / "global-hooks"
    empty.mkdir()
    cfg = tmp_path / "gitconfig"
    cfg.write_text(f"[core]\n\thooksPath = {empty}\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(cfg))
    wrote = configure(GitRepo(toy_env))
    assert any(w.startswith("core.hooksPath=") for w in wrote), wrote
    cl = tmp_path / "cl"
    git(tmp_path, "clone", "-q", f"file://{toy_env}", str(cl))
    r = push(cl, FORGED)
    assert r.returncode != 0 and "only the daemon writes" in r.stderr, r.stderr
    assert not git(toy_env, "for-each-ref", "refs/autoresearch/ideas/").strip()


@pytest.mark.parametrize("where", ["local", "included"])
def test_a_hooks_path_of_the_repos_own_config_elsewhere_refuses_the_start(toy_env, tmp_path, where):
    """The repo's own config (or a file it includes, read after it) names another hooks directory:
    configure refuses, naming the key, and writes no daemon ref; the push it would have let through is
    what the refusal prevents (shown with the guard off)."""
    other = tmp_path / "hooks-elsewhere"
    other.mkdir()
    if where == "local":
        git(toy_env, "config", "core.hooksPath", str(other))
    else:
        inc = tmp_path / "inc.cfg"
        inc.write_text(f"[core]\n\thooksPath = {other}\n")
        configure(GitRepo(toy_env))
        git(toy_env, "config", "--add", "include.path", str(inc))
    with pytest.raises(ConfigError, match="core.hooksPath") as e:
        configure(GitRepo(toy_env))
    assert "would not be checked" in str(e.value) and str(other) in str(e.value)
    cl = tmp_path / "cl"
    git(tmp_path, "clone", "-q", f"file://{toy_env}", str(cl))
    assert push(cl, FORGED).returncode == 0, "the push the refusal guards against did not go through"


def test_a_moved_research_repo_gets_its_hooks_path_back(toy_env, tmp_path):
    """The pinned value is absolute: a repo moved (or copied) after configure names its old hooks
    directory, gone or holding the daemon's guard; configure points it at the new one."""
    configure(GitRepo(toy_env))
    moved = tmp_path / "moved"
    toy_env.rename(moved)
    assert guard_problem(GitRepo(moved)) and "core.hooksPath" in guard_problem(GitRepo(moved))
    assert f"core.hooksPath={moved / '.git' / 'hooks'}" in configure(GitRepo(moved))
    assert guard_problem(GitRepo(moved)) is None
    cl = tmp_path / "cl"
    git(tmp_path, "clone", "-q", f"file://{moved}", str(cl))
    r = push(cl, FORGED)
    assert r.returncode != 0 and "only the daemon writes" in r.stderr, r.stderr


def test_a_pre_receive_hook_of_the_users_own_is_left_alone_and_refuses_the_start(toy_env):
    hook = toy_env / ".git" / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\nexit 0\n")
    hook.chmod(0o755)
    with pytest.raises(ConfigError, match="a hook of your own"):
        configure(GitRepo(toy_env))
    assert hook.read_text() == "#!/bin/sh\nexit 0\n"           # left alone: nothing of the user's lost


def test_a_guard_that_lost_its_execute_bit_is_restored(research, tmp_path):
    hook = research / ".git" / "hooks" / "pre-receive"
    hook.chmod(0o644)
    assert guard_problem(GitRepo(research)) and "not executable" in guard_problem(GitRepo(research))
    assert "hooks/pre-receive" in configure(GitRepo(research))
    assert guard_problem(GitRepo(research)) is None
    cl = tmp_path / "cl"
    git(tmp_path, "clone", "-q", f"file://{research}", str(cl))
    r = push(cl, FORGED)
    assert r.returncode != 0 and "only the daemon writes" in r.stderr, r.stderr


@pytest.mark.parametrize("kind", ["blob", "tree", "tag"])
def test_an_idea_branch_must_point_at_a_commit(research, clone, kind):
    sha = {"blob": lambda: git(clone, "hash-object", "-w", "--stdin", input="data\n").strip(),
           "tree": lambda: git(clone, "rev-parse", "HEAD^{tree}").strip(),
           "tag": lambda: (git(clone, "tag", "-a", "-m", "t", "t1"), git(clone, "rev-parse", "t1"))[1].strip()}[kind]()
    p = push(clone, f"{sha}:refs/heads/idea/{kind}")
    assert p.returncode != 0 and f"it would point at a {kind}, not a commit" in p.stderr, p.stderr
    assert git(research, "for-each-ref", "refs/heads/idea/") == ""


def test_idea_branches_are_created_moved_by_force_and_deleted(research, clone):
    one = commit_in(clone, {"run.py": TOY_RUN.replace("x = 1.0", "x = 0.5")})
    assert push(clone, "HEAD:refs/heads/idea/me/try").returncode == 0
    two = commit_in(clone, {"run.py": TOY_RUN.replace("x = 1.0", "x = 0.4")})   # not a fast-forward of one
    p = push(clone, "--force", "HEAD:refs/heads/idea/me/try")
    assert p.returncode == 0, p.stderr
    assert git(research, "rev-parse", "refs/heads/idea/me/try").strip() == two != one
    assert push(clone, "--delete", "refs/heads/idea/me/try").returncode == 0
    assert git(research, "for-each-ref", "refs/heads/idea/") == ""


def test_the_owner_may_allow_more_refs_but_never_the_daemons_the_baseline_replace_or_notes(research, clone):
    for pattern in ("refs/heads/dev/*", "refs/tags/v*", "refs/heads/*", "refs/replace/*", "refs/notes/*",
                    "refs/autoresearch/*", "*"):
        git(research, "config", "--add", "autoresearchd.pushAllow", pattern)
    base = git(research, "rev-parse", "main").strip()
    commit_in(clone, {"run.py": TOY_RUN.replace("x = 1.0", "x = 0.5")})
    git(clone, "tag", "-a", "-m", "release", "v1")
    for ok in ("HEAD:refs/heads/dev/x", "v1:refs/tags/v1", "HEAD:refs/heads/feature"):
        p = push(clone, ok)
        assert p.returncode == 0, (ok, p.stderr)
    for refspec, why in (("HEAD:refs/heads/main", "it is the baseline"),
                         (f"HEAD:refs/replace/{base}", "a replace ref"), ("HEAD:refs/notes/commits", "notes are"),
                         ("HEAD:refs/autoresearch/ideas/e1", "only the daemon"), ("HEAD:refs/heads/HEAD", "HEAD-like")):
        p = push(clone, "--force", refspec)
        assert p.returncode != 0 and why in p.stderr, (refspec, p.stderr)


def test_one_refused_ref_refuses_the_whole_push(research, clone):
    commit_in(clone, {"run.py": TOY_RUN.replace("x = 1.0", "x = 0.5")})
    p = push(clone, "HEAD:refs/heads/idea/fine", "HEAD:refs/tags/main")
    assert p.returncode != 0 and "refs/tags/main by push: tags" in p.stderr
    assert git(research, "for-each-ref", "refs/heads/idea/", "refs/tags/") == ""


@pytest.mark.parametrize("name,fsck_id", [(b"..", "hasDotdot"), (b".git", "hasDotgit"), (b".GIT", "hasDotgit")])
def test_fsck_refuses_a_pushed_tree_entry_that_would_escape_or_plant_a_git_dir(research, clone, name, fsck_id):
    blob = git(clone, "hash-object", "-w", "--stdin", input="x\n").strip()
    tree = sh(clone, "hash-object", "-t", "tree", "-w", "--literally", "--stdin",
              input=b"100644 " + name + b"\0" + bytes.fromhex(blob)).stdout.decode().strip()
    commit = git(clone, "commit-tree", tree, "-p", "HEAD", input="escape\n").strip()
    p = push(clone, f"{commit}:refs/heads/idea/escape")
    assert p.returncode != 0 and fsck_id in p.stderr, p.stderr
    assert git(research, "config", "receive.fsckObjects").strip() == "true"
    # and the daemon's export refuses such a tree where one exists anyway (written in the repo itself)
    repo = GitRepo(research)
    sha = sh(research, "hash-object", "-w", "--stdin", input=b"x\n").stdout.decode().strip()
    bad = sh(research, "hash-object", "-t", "tree", "-w", "--literally", "--stdin",
             input=b"100644 " + name + b"\0" + bytes.fromhex(sha)).stdout.decode().strip()
    with pytest.raises(GitError, match="unsafe path"):
        repo.archive(bad)


def test_a_push_over_the_size_cap_is_refused(research, clone):
    assert int(git(research, "config", "receive.maxInputSize")) == 256 * 1024 * 1024
    git(research, "config", "receive.maxInputSize", "20000")      # the cap, made small enough to test
    commit_in(clone, {"big.bin": os.urandom(100_000)})
    p = push(clone, "HEAD:refs/heads/idea/big")
    assert p.returncode != 0 and "exceeds maximum allowed size" in p.stderr, p.stderr


# -- 2. what the daemon reads: the export a trial, the evaluator and an agent get --------------------------
STEERED = "x = 0.5  # $Format:%H$ $Id$\n"          # placeholders export-subst and ident would rewrite
ATTRIBUTES = {       # case -> (.gitattributes of the pushed commit, config beside it in the research repo)
    "export-ignore": ("run.py export-ignore\n", {}),
    "export-subst": ("run.py export-subst\n", {}),
    "ident": ("run.py ident\n", {}),
    "eol-crlf": ("run.py text eol=crlf\n", {}),
    "working-tree-encoding": ("run.py working-tree-encoding=UTF-16\n", {}),
    # a filter driver configured for the user (git-lfs installs one globally), switched on by the push
    "filter-smudge": ("run.py filter=swap\n", {"filter.swap.smudge": "sed s/0.5/0.01/", "filter.swap.clean": "cat"}),
    "macro": ("[attr]quiet export-ignore\nrun.py quiet\n", {}),
    "nested-file": ("", {}),                       # sub/.gitattributes, below
    # attribute files beside the tree, not from a push: the research repo's own never steer it either
    "info-attributes": ("", {"info": "run.py export-ignore\n"}),
    "core.attributesFile": ("", {"core.attributesFile": "ATTR"}),
}


@pytest.mark.parametrize("case", list(ATTRIBUTES))
def test_the_export_is_the_commits_real_tree_whatever_its_attributes_say(research, clone, case, tmp_path):
    attrs, config = ATTRIBUTES[case]
    files = {"run.py": TOY_RUN.replace("x = 1.0\n", STEERED), "sub/x.py": "y = 1\n"}
    if attrs:
        files[".gitattributes"] = attrs
    if case == "nested-file":
        files["sub/.gitattributes"] = "* export-ignore\n"
    commit = commit_in(clone, files)
    assert push(clone, "HEAD:refs/heads/idea/attrs").returncode == 0
    for key, value in config.items():
        if key == "info":
            (research / ".git" / "info").mkdir(exist_ok=True)
            (research / ".git" / "info" / "attributes").write_text(value)
        elif value == "ATTR":
            (tmp_path / "attrs").write_text("run.py export-ignore\n")
            git(research, "config", key, str(tmp_path / "attrs"))
        else:
            git(research, "config", key, value)
    repo = GitRepo(research)
    assert tar_files(repo.archive(commit)) == real_tree(research, commit)
    assert tar_files(repo.archive(commit, exclude=["sub"])) == \
        {k: v for k, v in real_tree(research, commit).items() if not k.startswith("sub/")}


def _entries(data: bytes):
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        return [(m.name.rstrip("/"), m.type, m.mode, m.size, m.linkname, m.mtime,
                 t.extractfile(m).read() if m.isreg() else None) for m in t]


def test_the_export_has_git_archives_members_modes_and_order(research):
    """Without attributes, the tar is git archive's: the same members in the same order, modes, link
    targets, times and bytes; directories above a kept path are listed as git lists them."""
    d = research
    (d / "bin").mkdir()
    (d / "bin" / "go.sh").write_text("#!/bin/sh\necho go\n")
    (d / "bin" / "go.sh").chmod(0o755)
    (d / "link").symlink_to("bin/go.sh")
    (d / "a" / "b").mkdir(parents=True)
    (d / "a" / "b" / "c.txt").write_text("deep\n")
    git(d, "add", "-A")
    git(d, "update-index", "--add", "--cacheinfo", f"160000,{git(d, 'rev-parse', 'HEAD').strip()},vendor/lib")
    git(d, "commit", "-qm", "more")
    repo = GitRepo(d)
    plain = lambda *a: subprocess.run(["git", "archive", "--format=tar", "HEAD", *a], cwd=d,  # noqa: E731
                                      capture_output=True, check=True).stdout
    assert _entries(repo.archive("HEAD")) == _entries(plain())
    assert _entries(repo.archive("HEAD", ["a/b/c.txt", "evaluate.py"])) == \
        _entries(plain("--", "a/b/c.txt", "evaluate.py"))
    assert _entries(repo.archive("HEAD", exclude=["a", "run.py"])) == \
        _entries(plain("--", ".", ":(exclude,literal)a", ":(exclude,literal)run.py"))
    with pytest.raises(GitError, match="did not match"):
        repo.archive("HEAD", ["nope.py"])


# -- object substitution: replace refs and grafts (written in the repo, or pushed before the hook) ----------
def test_a_replace_ref_swaps_neither_the_evaluator_nor_a_commit(research, clone, tmp_path):
    base = git(research, "rev-parse", "main").strip()
    idea = commit_in(clone, {"run.py": TOY_RUN.replace("x = 1.0", "x = 0.5")})
    assert push(clone, "HEAD:refs/heads/idea/twin").returncode == 0
    # the idea's commit swapped for one with the baseline's tree: it would be linked as the baseline's
    # twin ("identical code") and never run
    twin = git(research, "commit-tree", f"{base}^{{tree}}", "-p", base, input="twin\n").strip()
    git(research, "replace", idea, twin)
    real = real_tree(research, base)
    repo = GitRepo(research)
    forged = git(research, "hash-object", "-w", "--stdin", input="print('---')\nprint('score: 0.5')\n").strip()
    git(research, "replace", git(research, "rev-parse", "main:evaluate.py").strip(), forged)
    assert "0.5" in git(research, "show", "main:evaluate.py")      # what plain git now reads
    other = git(research, "commit-tree", git(research, "mktree", input="").strip(), input="empty\n").strip()
    git(research, "replace", "-f", base, other)                       # the baseline commit itself, swapped
    assert git(research, "ls-tree", "main") == ""
    cfg = load_config(write_config(tmp_path, research))
    res = open_research(cfg)
    harness, digest = res.harness()
    assert "evaluate.py" in res.frozen_files() and tar_files(harness) == {p: real[p] for p in res.frozen_files()}
    assert tar_files(repo.archive(base)) == real
    assert repo.read_blob(f"{base}:evaluate.py") == real["evaluate.py"]
    assert repo.read_files(base) == real and repo.tree_of(base) == git(research, "--no-replace-objects",
                                                                      "rev-parse", f"{base}^{{tree}}").strip()
    assert repo.cat_file_batch([git(research, "--no-replace-objects", "rev-parse", "main:evaluate.py").strip()])
    from autoresearchd.store.population import read_population
    pop = read_population(repo, "refs/heads/main")
    assert pop.by_commit[idea].tree == git(research, "--no-replace-objects", "rev-parse", f"{idea}^{{tree}}").strip()
    assert pop.by_commit[idea].tree != repo.tree_of(base)


def test_grafts_rewrite_no_ancestry(research, clone):
    base = git(research, "rev-parse", "main").strip()
    commit = commit_in(clone, {"run.py": TOY_RUN.replace("x = 1.0", "x = 0.5")})
    assert push(clone, "HEAD:refs/heads/idea/g").returncode == 0
    (research / ".git" / "info").mkdir(exist_ok=True)
    (research / ".git" / "info" / "grafts").write_text(commit + "\n")   # the idea made a root commit
    repo = GitRepo(research)
    assert repo.merge_base(commit, base) == base                        # the gate: shares history
    assert "+x = 0.5" in repo.diffs_first_parent([commit])[commit]      # not the whole tree as new


# -- names: the baseline is a full ref, and pathspecs are paths ---------------------------------------------
@pytest.mark.parametrize("shadow", ["refs/tags/main", "refs/main"])
def test_a_tag_or_ref_named_main_decides_neither_the_manifest_nor_the_baseline(research, tmp_path, shadow):
    evil = research.parent / "evil"
    git(research, "worktree", "add", "-q", "-b", "idea/evil", str(evil), "main")
    manifest = (research / ".autoresearch.toml").read_text().replace('[env]\n', '[env]\nbaseline = "idea/evil"\n')
    (evil / ".autoresearch.toml").write_text(manifest)
    git(evil, "commit", "-qam", "a manifest naming another baseline")
    git(research, "update-ref", shadow, "refs/heads/idea/evil")          # pushed before the hook, say
    assert "idea/evil" in git(research, "show", "main:.autoresearch.toml")   # what a short name now reads
    cfg = load_config(write_config(tmp_path, research))
    res = open_research(cfg)
    assert res.baseline_ref == "refs/heads/main" and res.manifest.baseline == "main"
    from autoresearchd.validate import env_source
    assert env_source(cfg).manifest.baseline == "main"


def test_a_path_that_looks_like_pathspec_magic_is_a_path(research):
    (research / ":(exclude)run.py").write_text("odd\n")
    git(research, "add", "--", ":(literal):(exclude)run.py")
    git(research, "commit", "-qm", "an odd name")
    repo = GitRepo(research)
    assert [e.path for e in repo.ls_tree("HEAD", [":(exclude)run.py"])] == [":(exclude)run.py"]
    assert repo.read_files("HEAD", [":(exclude)run.py"]) == {":(exclude)run.py": b"odd\n"}


# -- what is shown: the diff ------------------------------------------------------------------------------
DIFF_STEERS = {      # case -> (attributes in the research repo's checkout, config)
    "binary": ("run.py -diff\n", {}),                                   # "Binary files differ": hidden
    "textconv": ("run.py diff=conv\n", {"diff.conv.textconv": "sh -c 'echo x = 1.0' --"}),
    "external": ("run.py diff=ext\n", {"diff.ext.command": "sh -c 'echo nothing to see' --"}),
}


@pytest.mark.parametrize("case", list(DIFF_STEERS))
def test_the_diff_shows_the_change_whatever_attributes_and_drivers_say(research, clone, case):
    attrs, config = DIFF_STEERS[case]
    base = git(research, "rev-parse", "main").strip()
    commit = commit_in(clone, {"run.py": TOY_RUN.replace("x = 1.0", "x = 0.5")})
    assert push(clone, "HEAD:refs/heads/idea/d").returncode == 0
    (research / ".gitattributes").write_text(attrs)      # e.g. an idea the owner merged, or their own
    for k, v in config.items():
        git(research, "config", k, v)
    repo = GitRepo(research)
    for shown in (repo.diff(base, commit), repo.diffs_first_parent([commit])[commit]):
        assert "-x = 1.0\n+x = 0.5\n" in shown, shown
    assert "run.py" in repo.diff(base, commit, stat=True)
    assert not (research / ".git" / "index.lock").exists()


# -- the daemon's own environment: no inherited GIT_* redirects a read ----------------------------------
def test_inherited_git_variables_redirect_no_read(research, make_repo, monkeypatch):
    other = make_repo({"x": "other\n"}, "other")
    repo = GitRepo(research)
    heads, real = repo.refs("refs/heads/"), real_tree(research, "main")
    for k, v in {"GIT_DIR": str(other / ".git"), "GIT_WORK_TREE": str(other), "GIT_INDEX_FILE": str(other / "idx"),
                 "GIT_OBJECT_DIRECTORY": str(other / ".git" / "objects"), "GIT_NAMESPACE": "x",
                 "GIT_REPLACE_REF_BASE": "refs/heads/", "GIT_NOTES_REF": "refs/heads/main"}.items():
        monkeypatch.setenv(k, v)                          # the daemon started from a git hook, say
    assert repo.refs("refs/heads/") == heads
    assert repo.read_blob("refs/heads/main:run.py") == TOY_RUN.encode()
    assert tar_files(repo.archive("refs/heads/main")) == real


# -- what an agent's directory becomes: its bytes, not git add's conversions --------------------------------
TREE_STEERS = {      # case -> (.gitattributes the agent's directory holds, the file's bytes, config)
    "crlf-normalised": ("*.py text\n", b"x = 0.5\r\n", {}),
    "ident-collapsed": ("*.py ident\n", b"# $Id: planted $\nx = 0.5\n", {}),
    "clean-filter": ("*.py filter=swap\n", b"x = 0.5\n", {"filter.swap.clean": "sed s/0.5/0.01/"}),
    "encoding": ("*.py working-tree-encoding=UTF-16LE\n", "x = 0.5\n".encode("utf-16-le"), {}),
}


@pytest.mark.parametrize("case", list(TREE_STEERS))
def test_an_agents_directory_is_staged_byte_for_byte(research, case, tmp_path):
    attrs, data, config = TREE_STEERS[case]
    for k, v in config.items():
        git(research, "config", k, v)
    repo = GitRepo(research)
    wt = tmp_path / "wt"
    wt.mkdir()
    tarfile.open(fileobj=io.BytesIO(repo.archive("main"))).extractall(wt, filter="data")
    (wt / ".gitattributes").write_text(attrs)
    (wt / "run.py").write_bytes(data)
    (wt / "new.py").write_bytes(data)
    tree = repo.tree_from_dir("main", wt)
    got = real_tree(research, tree)
    assert got["run.py"] == got["new.py"] == data and got[".gitattributes"] == attrs.encode()


# -- the daemon's loop: what a push adds changes no measured value ------------------------------------------
def test_pushed_attributes_and_a_replaced_evaluator_change_no_measured_value(toy_env, tmp_path):
    """The real daemon (local runner, real pushes from a clone): an idea whose attributes would rewrite
    its run.py on export, one whose filter would, and a replace ref that swaps the baseline's evaluator
    for one that prints 0.5. Every value is the one the real trees give."""
    research = toy_env
    cfg_path = write_config(tmp_path, research, '[wandb]\nenabled = false\n')
    open_research(load_config(cfg_path), configure_repo=True)
    forged = git(research, "hash-object", "-w", "--stdin", input="print('---')\nprint('score: 0.5')\n").strip()
    git(research, "replace", git(research, "rev-parse", "main:evaluate.py").strip(), forged)
    git(research, "config", "filter.swap.smudge", "sed s/0.7/0.02/")      # a driver the user has, say
    git(research, "config", "filter.swap.clean", "cat")
    cl = tmp_path / "clone"
    git(tmp_path, "clone", "-q", f"file://{research}", str(cl))
    subst = commit_in(cl, {".gitattributes": "run.py export-subst\n", "run.py": TOY_RUN.replace(
        "x = 1.0", 'x = 0.8 if "$Format:%h$".startswith("$") else 0.01')}, "Scale x by 0.8")
    assert push(cl, "HEAD:refs/heads/idea/subst").returncode == 0
    swap = commit_in(cl, {".gitattributes": "run.py filter=swap\n", "run.py": TOY_RUN.replace("x = 1.0", "x = 0.7")},
                     "Scale x by 0.7")
    assert push(cl, "HEAD:refs/heads/idea/swap").returncode == 0

    pop = run_until_settled(cfg_path, timeout=240)
    assert pop.baseline_note is not None and pop.baseline_note.value == pytest.approx(1.0, abs=0.011)
    for commit, want in ((subst, 0.8), (swap, 0.7)):
        note = pop.by_commit[commit].note
        assert note is not None and note.value == pytest.approx(want, abs=0.011), note
