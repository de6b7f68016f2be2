"""What the daemon's own side of a trial costs in processes (issue 29, docs/benchmarks.md "Sandbox
overhead per trial"): each git or shell process is ~1.5-5 ms of CPU, and a short trial's overhead was
~21 of them. Every test counts the processes a real step starts (subprocess.Popen, counted, not
replaced: git and bash run for real) and checks that the cheaper path writes and answers exactly
what the costlier one did.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest
from needs import needs

from autoresearchd.app import build_daemon
from autoresearchd.config import RunnerCfg, load_config
from autoresearchd.engine.arrivals import Gate
from autoresearchd.manifest import EnvManifest
from autoresearchd.runners.base import TrialSpec
from autoresearchd.runners.local import LocalRunner, LocalShell
from autoresearchd.store.gitrepo import GitError, GitRepo
from autoresearchd.store.lifecycle import Lifecycle
from autoresearchd.store.notes import Lease, Note, Status, format_note
from autoresearchd.store.population import read_population
from autoresearchd.store.refs import ARCHIVE_PREFIX, LOGS_PREFIX, NOTES_REF, RUNS_REF

from conftest import branch_idea, git, run_until_settled, write_config
from fixtures_slurm import tar_of

needs_strace = needs("strace", None if shutil.which("strace") else "not installed (apt-get install strace)")


@contextmanager
def processes():
    """The argv of every process started inside the block (git subcommands as `git <name>`)."""
    started: list[str] = []
    init = subprocess.Popen.__init__

    def counted(self, args, *rest, **kw):
        argv = [str(a) for a in ([args] if isinstance(args, (str, bytes)) else args)]
        if os.path.basename(argv[0]) == "git":
            words = [w for w in argv[1:] if not w.startswith("-") and "=" not in w]
            started.append(f"git {words[0] if words else '?'}")
        else:
            started.append(" ".join(argv[:2]))
        return init(self, args, *rest, **kw)
    subprocess.Popen.__init__ = counted
    try:
        yield started
    finally:
        subprocess.Popen.__init__ = init


def repo_with_commit(tmp_path: Path) -> tuple[GitRepo, str]:
    repo = GitRepo.init(tmp_path / "repo")
    (repo.path / "a.txt").write_text("a\n")
    return repo, repo.commit_all_initial("base")


# -- notes: a write lets fast-import read the ref's tip ------------------------------------------------
def test_a_notes_write_to_a_ref_it_wrote_before_is_one_process(tmp_path):
    repo, c = repo_with_commit(tmp_path)
    repo.notes_write_many(NOTES_REF, {c: "first\n"})
    with processes() as started:
        repo.notes_write_many(NOTES_REF, {c: "second\n"})
    assert started == ["git fast-import"]            # was: rev-parse of the ref, then fast-import
    assert repo.git("notes", "--ref", NOTES_REF, "show", c) == "second\n"
    assert len(repo.git("rev-list", NOTES_REF).split()) == 2     # a commit on top of the first


def test_a_notes_ref_deleted_behind_its_back_is_read_again(tmp_path):
    """The cached "this ref exists" is wrong once someone deletes the ref: the write falls back to
    reading it (creating the ref anew) and leaves no fast-import crash report in the git dir."""
    repo, c = repo_with_commit(tmp_path)
    repo.notes_write_many(NOTES_REF, {c: "first\n"})
    git(repo.path, "update-ref", "-d", NOTES_REF)
    repo.notes_write_many(NOTES_REF, {c: "again\n"})
    assert repo.git("notes", "--ref", NOTES_REF, "show", c) == "again\n"
    assert len(repo.git("rev-list", NOTES_REF).split()) == 1
    assert not list(repo.git_dir.glob("fast_import_crash_*"))


def test_a_moved_notes_ref_is_not_overwritten(tmp_path):
    """Another writer moved the ref between two of ours: the note it wrote stays (fast-import
    builds on the tip it reads, never on a remembered one)."""
    repo, c = repo_with_commit(tmp_path)
    other = git(repo.path, "commit-tree", "-p", c, "-m", "other", git(repo.path, "rev-parse", f"{c}^{{tree}}").strip()).strip()
    repo.notes_write_many(NOTES_REF, {c: "ours\n"})
    git(repo.path, "notes", "--ref", NOTES_REF, "add", "-m", "theirs", other)
    repo.notes_write_many(NOTES_REF, {c: "ours again\n"})
    assert repo.git("notes", "--ref", NOTES_REF, "show", other) == "theirs\n"
    assert repo.git("notes", "--ref", NOTES_REF, "show", c) == "ours again\n"


# -- a harvest's logs, archive refs and notes: one process each ------------------------------------------
def test_a_harvest_of_three_trials_writes_logs_refs_notes_and_lease_clears_in_two_processes(tmp_path):
    repo, c = repo_with_commit(tmp_path)
    life = Lifecycle(repo)
    commits = [git(repo.path, "commit-tree", "-p", c, "-m", f"idea {i}",
                   git(repo.path, "rev-parse", f"{c}^{{tree}}").strip()).strip() for i in range(3)]
    with life.batch():                                    # the notes refs exist, as in a running daemon
        repo.note_write(NOTES_REF, c, "warm\n")
        for i, commit in enumerate(commits):
            life.ledger.write_leases(commit, [Lease(trial_id=f"t{i}", seed=i, runner="local", host="h", slot="0")])
    tips = {ref: repo.rev_parse(ref) for ref in (NOTES_REF, RUNS_REF)}
    logs = [f"log of trial {i}\n".encode() * 50 for i in range(3)]
    with processes() as started:
        with life.batch():
            shas = [life.store_log(f"t{i}", logs[i]) for i in range(3)]
            for i, commit in enumerate(commits):
                life.archive(commit)
                life.ledger.write_note(commit, Note(status=Status.SUCCEEDED, idea_id=f"i{i}", log=shas[i]))
                life.ledger.write_leases(commit, [])
    # was 10: a hash-object and an update-ref per log, an update-ref per archive ref, rev-parse + fast-import;
    # then 4: a fast-import for the blobs, an update-ref for the refs, a fast-import per notes ref
    assert sorted(started) == ["git fast-import", "git update-ref"]
    for i, commit in enumerate(commits):
        assert repo.read_blob(LOGS_PREFIX + f"t{i}") == logs[i]
        assert shas[i] == git(repo.path, "hash-object", "--stdin", input=logs[i].decode()).strip()
        assert repo.rev_parse(ARCHIVE_PREFIX + commit) == commit
        assert f"log: {shas[i]}" in repo.git("notes", "--ref", NOTES_REF, "show", commit)
        assert git(repo.path, "notes", "--ref", RUNS_REF, "list", commit, check=False) == ""
    for ref, tip in tips.items():                         # one commit on each notes ref, on the tip it had
        assert git(repo.path, "rev-list", "--parents", "-n", "1", ref).split()[1:] == [tip]
        assert "autoresearchd" in git(repo.path, "reflog", "-1", "--format=%gs", ref)
    git(repo.path, "fsck", "--no-progress")
    with processes() as started:                            # one log: hash-object, a third of fast-import's cost
        with life.batch():
            life.store_log("t9", b"one\n")
    assert sorted(started) == ["git hash-object", "git update-ref"]
    assert repo.read_blob(LOGS_PREFIX + "t9") == b"one\n"


def test_queued_refs_and_blobs_are_written_before_any_other_git_of_the_thread(tmp_path):
    """Inside a batch, a queued blob can be read back and a queued ref is there for the next git
    command: nothing reads around the queue."""
    repo, c = repo_with_commit(tmp_path)
    with repo.notes_batch():
        sha = repo.hash_blob(b"queued\n")
        assert repo.read_object(sha) == ("blob", b"queued\n")
        repo.update_ref("refs/autoresearch/x", c)
        assert repo.git("rev-parse", "refs/autoresearch/x").strip() == c


def test_a_queued_write_that_fails_takes_the_notes_that_may_name_it_and_no_other(tmp_path):
    """A failed blob or ref write of a batch drops the notes queued since it was queued (a result note
    naming a log no ref keeps; leases before their archive refs) and writes the ones queued before it
    and after it: as when the write failed in its own unit before it was queued."""
    repo, c = repo_with_commit(tmp_path)
    objs = [repo.commit_tree(repo.tree_of(c), [c], f"o{i}") for i in range(3)]
    repo.update_ref(LOGS_PREFIX + "t1", c)                # a ref whose name is a directory's below
    with repo.notes_batch():
        repo.note_write(NOTES_REF, objs[0], "before the write")
        sha = repo.hash_blob(b"a trial's log\n")
        repo.update_ref(LOGS_PREFIX + "t1/x", sha)        # refused at the flush: t1 is a ref, not a directory
        repo.note_write(NOTES_REF, objs[1], "names the log")
        with pytest.raises(GitError):
            repo.refs("refs/heads/")                      # the next git of the thread flushes, and fails
        repo.note_write(NOTES_REF, objs[2], "after the failure")
    assert repo.note_read(NOTES_REF, objs[0]) is not None
    assert repo.note_read(NOTES_REF, objs[1]) is None     # before the fix: written, naming a log no ref keeps
    assert repo.note_read(NOTES_REF, objs[2]) is not None
    assert repo.rev_parse(LOGS_PREFIX + "t1/x") is None


def test_a_queued_write_that_fails_at_the_batch_end_writes_only_the_notes_before_it(tmp_path):
    repo, c = repo_with_commit(tmp_path)
    objs = [repo.commit_tree(repo.tree_of(c), [c], f"o{i}") for i in range(2)]
    repo.update_ref(ARCHIVE_PREFIX + "a", c)
    with pytest.raises(GitError):
        with repo.notes_batch():
            repo.note_write(NOTES_REF, objs[0], "a lease before the archive ref")
            repo.update_ref(ARCHIVE_PREFIX + "a/b", c)    # refused when the batch ends
            repo.note_write(NOTES_REF, objs[1], "a lease that needs the archive ref")
    assert repo.note_read(NOTES_REF, objs[0]) is not None
    assert repo.note_read(NOTES_REF, objs[1]) is None


# -- the gate: a push of many branches ----------------------------------------------------------------
def test_the_gate_checks_a_push_of_many_branches_in_one_process(toy_env, tmp_path):
    d = build_daemon(load_config(write_config(tmp_path, toy_env)), with_llm=False)
    try:
        run = (toy_env / "run.py").read_text()
        ok = [branch_idea(toy_env, f"a/ok{i}", f"ok {i}", {"run.py": run.replace("x = 1.0", f"x = 0.{i + 1}")})
              for i in range(4)]
        pop = read_population(d.repo, d.research.baseline_ref)
        d.repo.read_object(ok[0]), d.repo.object_sizes([ok[0]])   # the persistent cat-files run, as in a daemon
        with processes() as started:
            assert not d.dispatcher.reject_on_arrival(pop)
        # was 5 a branch: rev-parse of the baseline, merge-base, diff-tree, cat-file --batch-check and --batch
        assert started == ["git diff-tree"]
        assert all(d.dispatcher.gate._why[c] is None for c in ok)
    finally:
        d.runner.close()


def test_the_gate_on_a_push_says_what_it_says_of_each_branch_alone(toy_env, tmp_path):
    """Frozen file, symlink, binary file, a branch off an older commit (a real merge-base), an
    orphan, and a good one: the batched gate's verdicts are the one-by-one gate's."""
    base = git(toy_env, "rev-parse", "main").strip()
    (toy_env / "notes.txt").write_text("v1\n")
    git(toy_env, "add", "notes.txt")
    git(toy_env, "commit", "-qm", "a later baseline")
    run = (toy_env / "run.py").read_text()

    def commit_with(parent: str, files: dict[str, tuple[str, bytes]]) -> str:
        """A commit on parent with these (mode, content) files, built in a throwaway index."""
        env = dict(os.environ, GIT_INDEX_FILE=str(tmp_path / "idx"))
        subprocess.run(["git", "read-tree", parent], cwd=toy_env, env=env, check=True)
        for path, (mode, data) in files.items():
            sha = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=toy_env, input=data,
                                 capture_output=True, check=True).stdout.decode().strip()
            subprocess.run(["git", "update-index", "--add", "--cacheinfo", f"{mode},{sha},{path}"],
                           cwd=toy_env, env=env, check=True)
        tree = subprocess.run(["git", "write-tree"], cwd=toy_env, env=env, capture_output=True,
                              check=True).stdout.decode().strip()
        return git(toy_env, "commit-tree", "-p", parent, "-m", "idea", tree).strip()
    tip = git(toy_env, "rev-parse", "main").strip()
    cases = {
        "frozen": commit_with(tip, {"evaluate.py": ("100644", b"print('score: 0')\n")}),
        "symlink": commit_with(tip, {"link": ("120000", b"/etc/passwd")}),
        "binary": commit_with(tip, {"data.bin": ("100644", b"\x00\x01")}),
        "older": commit_with(base, {"run.py": ("100644", run.replace("x = 1.0", "x = 0.5").encode())}),
        "good": commit_with(tip, {"run.py": ("100644", run.replace("x = 1.0", "x = 0.7").encode())}),
        "orphan": git(toy_env, "commit-tree", "-m", "orphan", git(toy_env, "rev-parse", "main^{tree}").strip()).strip(),
    }
    for name, c in cases.items():
        git(toy_env, "update-ref", f"refs/heads/idea/t/{name}", c)
    d = build_daemon(load_config(write_config(tmp_path, toy_env)), with_llm=False)
    try:
        pop = read_population(d.repo, d.research.baseline_ref)
        assert d.dispatcher.reject_on_arrival(pop)
        batched = {name: d.dispatcher.gate._why[c] for name, c in cases.items()}
        alone = Gate(d.cfg, d.research, d.lifecycle)
        single = {name: alone.why(pop.by_commit[c]) for name, c in cases.items()}
        assert batched == single
        assert batched["good"] is None and batched["older"] is None
        assert "frozen" in batched["frozen"] and "symbolic link" in batched["symlink"]
        assert "binary" in batched["binary"] and "no history" in batched["orphan"]
    finally:
        d.runner.close()


def test_diff_tree_many_answers_as_diff_tree_does(tmp_path):
    repo, c = repo_with_commit(tmp_path)
    commits = [c]
    for i, (path, data) in enumerate([("b.txt", "b\n"), ("dir/c.txt", "c\n"), ("a.txt", "A\n"), ("x\ny", "odd\n")]):
        p = repo.path / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(data)
        git(repo.path, "add", "-A")
        git(repo.path, "commit", "-qm", f"c{i}")
        commits.append(git(repo.path, "rev-parse", "HEAD").strip())
    git(repo.path, "rm", "-q", "a.txt")
    git(repo.path, "commit", "-qm", "rm")
    commits.append(git(repo.path, "rev-parse", "HEAD").strip())
    pairs = [(a, b) for a in commits for b in commits]
    with processes() as started:
        many = repo.diff_tree_raw_many(pairs)
    assert started == ["git diff-tree"]
    assert many == {p: repo.diff_tree_raw(*p) for p in pairs}
    assert any(ch.path == "x\ny" for ch in many[(commits[0], commits[-1])])


# -- a trial's archive: its tree listed from the cached tree objects -----------------------------------
def test_tree_listing_is_git_ls_tree(tmp_path):
    """Modes git reads as canonical (a legacy 100664 file is 100644), symlinks, gitlinks, nested and
    non-UTF-8 names, in git's order; a corrupt tree is an error, as it is for git."""
    repo, c = repo_with_commit(tmp_path)
    blob = git(repo.path, "hash-object", "-w", "--stdin", input="x\n").strip()
    inner = subprocess.run(["git", "mktree"], cwd=repo.path, input=f"100755 blob {blob}\trun.sh\n",
                           capture_output=True, text=True, check=True).stdout.strip()
    raw = b"".join(b"%s %s\0%s" % (mode, name, bytes.fromhex(sha)) for mode, name, sha in [
        (b"100664", b"legacy.txt", blob), (b"120000", b"link", blob), (b"160000", b"sub", c),
        (b"40000", b"tools", inner), (b"100644", b"\xff\xfename", blob)])
    tree = subprocess.run(["git", "hash-object", "-t", "tree", "-w", "--literally", "--stdin"], cwd=repo.path,
                          input=raw, capture_output=True, check=True).stdout.decode().strip()
    want = []
    for rec in filter(None, repo.git("ls-tree", "-r", "-t", "-z", tree, binary=True).split(b"\0")):
        meta, _, path = rec.partition(b"\t")
        want.append((*meta.decode().split(), path.decode(errors="surrogateescape")))
    repo.read_object(c), repo.object_sizes([c])     # the persistent cat-files run, as in a daemon
    with processes() as started:
        assert repo.tree_listing(tree) == [tuple(w) for w in want]
        assert repo.tree_listing(tree) == [tuple(w) for w in want]      # the second from the cache
    assert started == []
    assert ("100644", "blob", blob, "legacy.txt") in repo.tree_listing(tree)
    bad = subprocess.run(["git", "hash-object", "-t", "tree", "-w", "--literally", "--stdin"], cwd=repo.path,
                         input=b"100644 truncated\0\x01\x02", capture_output=True, check=True).stdout.decode().strip()
    with pytest.raises(GitError):
        repo.tree_listing(bad)
    # modes git's own parser refuses (not octal digits only), each a corrupt tree for ls-tree and for us
    for mode in (b"+100644", b"10_0644", b" 100644", b"10064x"):
        odd = subprocess.run(["git", "hash-object", "-t", "tree", "-w", "--literally", "--stdin"], cwd=repo.path,
                             input=b"%s f\0%s" % (mode, bytes.fromhex(blob)), capture_output=True,
                             check=True).stdout.decode().strip()
        assert subprocess.run(["git", "ls-tree", odd], cwd=repo.path, capture_output=True).returncode != 0, mode
        with pytest.raises(GitError):
            repo.tree_listing(odd)


def test_a_trials_archive_starts_no_process(tmp_path):
    repo, c = repo_with_commit(tmp_path)
    (repo.path / "src").mkdir()
    (repo.path / "src" / "m.py").write_text("print(1)\n")
    git(repo.path, "add", "-A")
    git(repo.path, "commit", "-qm", "more")
    head = git(repo.path, "rev-parse", "HEAD").strip()
    repo.read_object(c), repo.object_sizes([c])     # the persistent cat-files run, as in a daemon
    with processes() as started:
        tar = repo.archive(head)
    assert started == []          # was 2: ls-tree and cat-file --batch
    import io
    import tarfile
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        assert sorted(t.getnames()) == ["a.txt", "src", "src/m.py"]
        assert t.extractfile("src/m.py").read() == b"print(1)\n"


# -- the host side of a submit ------------------------------------------------------------------------
class TracedShell(LocalShell):
    """The local shell, its command run under strace: how many processes the submit's bash starts."""

    def __init__(self, out: Path):
        self.out = out

    def run(self, cmd, stdin=None, timeout=60.0):
        p = subprocess.run(["strace", "-f", "-c", "-o", str(self.out), "-e", "trace=fork,vfork,clone,clone3",
                            "bash", "-c", cmd], input=stdin or b"", capture_output=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr


def forks(out: Path) -> int:
    total = [ln.split() for ln in out.read_text().splitlines() if ln.rstrip().endswith("total")]
    return int(total[-1][3]) if total else 0


@needs_strace
def test_a_submit_starts_two_processes_on_the_host(tmp_path):
    m = EnvManifest(run="true", evaluate="true", metric="score", time_budget_s=60, eval_budget_s=60,
                    frozen=["evaluate.sh"])
    r = LocalRunner(RunnerCfg(kind="local", slots=1, sandbox="none", prestage=1), m, tmp_path / "work")
    r.LAUNCH = "{ echo 1; }"          # place only: starting the wrapper is trial.sh's cost (test_trial_cost.py)
    r._shell = TracedShell(tmp_path / "strace.txt")
    spec = TrialSpec(trial_id="t1", commit="0" * 40, seed=0, manifest=m, code_tar=tar_of({"train.sh": "true\n"}),
                     eval_tar=tar_of({"evaluate.sh": "true\n"}), frozen_paths=["evaluate.sh"])
    tdir = Path(r.submit(spec, r.slots()[0])["dir"])
    assert forks(tmp_path / "strace.txt") == 2        # mkdir and tar (was 5: mkdir, rm, mkdir, tar, mkdir)
    assert (tdir / "code" / "train.sh").read_text() == "true\n" and (tdir / "trial.sh").is_file()
    (tdir / "stale").write_text("from an earlier attempt")
    r.submit(spec, r.slots()[0])                      # a retry of the same trial id starts clean
    assert forks(tmp_path / "strace.txt") == 3 and not (tdir / "stale").exists()
    assert (tdir / "code" / "train.sh").is_file()


# -- the population's notes changes: from the cached trees ---------------------------------------------
def old_notes_changes(repo: GitRepo, old: str, new: str) -> dict:
    """notes_changes as it was: one `git diff-tree -r`, the reference answer."""
    res = {}
    for ch in repo.diff_tree_raw(old, new):
        obj = ch.path.replace("/", "")
        if len(obj) not in (40, 64) or obj.strip("0123456789abcdef"):
            continue
        if ch.status == "D":
            res.setdefault(obj, None)
        else:
            res[obj] = ch.new_sha
    return res


def test_notes_changes_answer_as_diff_tree_across_a_refanned_notes_tree(tmp_path):
    """Notes added, rewritten and removed, from a few to past the count where git fans the notes tree
    out (ab/cdef...): each step's changes are diff-tree's, with no process once the trees are read."""
    import random
    repo, c = repo_with_commit(tmp_path)
    rnd = random.Random(29)
    stream = b"".join(b"commit refs/scratch\nmark :%d\ncommitter t <t> 1 +0000\ndata 2\nc\n%s\n"
                      % (i, b"from %s\n" % c.encode() if i == 1 else b"") for i in range(1, 701))
    marks = tmp_path / "marks"
    repo.git("fast-import", "--quiet", f"--export-marks={marks}", input=stream)   # 700 commits to annotate
    objs = [line.split()[1] for line in marks.read_text().splitlines()]
    tips, live = [], set()
    for step in range(8):
        items = {}
        for o in rnd.sample(objs, 150):
            items[o] = None if o in live and rnd.random() < 0.3 else f"note {step} {o}\n"
        items = {o: t for o, t in items.items() if t is not None or o in live}
        repo.notes_write_many(NOTES_REF, items)
        live |= {o for o, t in items.items() if t is not None}
        live -= {o for o, t in items.items() if t is None}
        tips.append(repo.rev_parse(NOTES_REF))
    assert any("/" in p for p in repo.git("ls-tree", "-r", "--name-only", tips[-1]).split())   # fanned out
    repo.read_object(c), repo.object_sizes([c])
    for a, b in zip(tips, tips[1:]):
        with processes() as started:
            got = repo.notes_changes(a, b)
        assert started == [] and got == old_notes_changes(repo, a, b) and got
    assert repo.notes_changes(tips[0], tips[-1]) == old_notes_changes(repo, tips[0], tips[-1])
    assert repo.notes_changes(tips[-1], tips[0]) == old_notes_changes(repo, tips[-1], tips[0])
    with pytest.raises(GitError):
        repo.notes_changes("1" * 40, tips[-1])         # a pruned old tip: the caller reads everything again


# -- a whole run with the local runner: the host side starts no shell but the submit's --------------------
def test_a_local_run_starts_one_shell_a_trial_and_few_gits(toy_env, tmp_path):
    """The real daemon loop (events, ticks, harvests, clean-up) on the local runner: its polls, read
    backs, removals and event waits start no process (runners/localhost.py), so the only shell is
    each trial's submit; the population's listings are one for-each-ref a scan, plus one after the
    pass's own writes. Was (main before issue 29's third pass): a `bash -c` for every poll, fetch,
    clean-up and event wait, and two for-each-ref a read."""
    import collections

    from autoresearchd.engine import loop
    run = (toy_env / "run.py").read_text()
    for i in range(4):
        branch_idea(toy_env, f"a/c{i}", f"cost {i}", {"run.py": run.replace("x = 1.0", f"x = 0.{i + 1}")})
    d = build_daemon(load_config(write_config(tmp_path, toy_env)), with_llm=False)
    submits, passes = [], []
    submit, tick = d.runner.submit, loop.Daemon.tick

    def counted_submit(spec, slot):
        submits.append(spec.trial_id)
        return submit(spec, slot)

    def counted_tick(self):
        passes.append(1)
        return tick(self)
    d.runner.submit = counted_submit
    loop.Daemon.tick = counted_tick
    # once a host, not a trial: its sandbox probe and its fingerprint (cached), taken before counting
    d.runner.host_sandbox("local"), d.runner.probe(d.runner.shell_for("local"), {"host": "local"})
    try:
        with processes() as started:
            pop = run_until_settled(daemon=d, timeout=120)
    finally:
        loop.Daemon.tick = tick
        d.runner.close()
    assert len(submits) >= 6, [(i.idea_id, i.status) for i in pop.ideas]
    assert all(i.note is not None and i.note.status == Status.SUCCEEDED for i in pop.ideas)
    print(f"{len(submits)} trials, {len(passes)} passes:", sorted(collections.Counter(started).items()))
    shells = [p for p in started if not p.startswith("git ")]
    assert shells == ["bash -c"] * len(submits)           # the submits' (tar, the detached wrapper)
    # was 41 for 12 passes (the notes refs' listing, the scan's, the told refs' apart) and 23.7 a trial
    assert started.count("git for-each-ref") <= 2 * len(passes) + 2
    assert len(started) / len(submits) <= 20


def test_the_populations_listings_one_a_scan_none_without_writes(tmp_path):
    """A scan lists idea refs, notes refs, proposals and the baseline in one for-each-ref (was two).
    The daemon's tick (own_writes) reads between scans only what this process wrote: nothing
    written, no process (was one for-each-ref of the notes refs each read); its own note, one
    for-each-ref of the refs it told (was two); another process's note at the next scan, as its
    pushes always were. The dashboard's reader still lists the notes refs at every refresh."""
    from test_livepop import assert_same

    from autoresearchd.store.livepop import LivePopulation
    repo, c = repo_with_commit(tmp_path)
    git(repo.path, "branch", "-m", "main")
    tree = git(repo.path, "rev-parse", f"{c}^{{tree}}").strip()
    ideas = [git(repo.path, "commit-tree", "-p", c, "-m", f"idea {i}", tree).strip() for i in range(3)]
    for i, sha in enumerate(ideas):
        git(repo.path, "update-ref", f"refs/heads/idea/a/i{i}", sha)
    git(repo.path, "update-ref", "refs/autoresearch/proposals/p1", c)

    def text(i: int, status: Status) -> str:
        return format_note(Note(status=status, idea_id=f"i{i}", finished_at=1.0))
    repo.notes_write_many(NOTES_REF, {ideas[0]: text(0, Status.SUCCEEDED)})
    live = LivePopulation(repo, "refs/heads/main", own_writes=True)     # as the daemon's tick reads
    shown = LivePopulation(repo, "refs/heads/main")                      # as the dashboard reads
    shown.refresh(scan=True)
    pop = live.refresh(scan=True)
    repo.read_object(c), repo.object_sizes([c])       # the persistent cat-files run, as in a daemon
    assert len(pop.ideas) == 3 and pop.baseline_commit == c
    with processes() as started:
        assert live.refresh(scan=True) is None
    assert started == ["git for-each-ref"]
    with processes() as started:
        assert live.refresh(scan=False) is None
    assert started == []
    repo.notes_write_many(NOTES_REF, {ideas[1]: text(1, Status.SUCCEEDED)})
    with processes() as started:
        pop = live.refresh(scan=False)
    # the notes ref's new commit is the one the write told (was one for-each-ref of the refs told); the
    # note's blob is read through the persistent cat-file, as every few changed objects are
    assert started == [] and pop.by_commit[ideas[1]].note is not None
    git(repo.path, "notes", "--ref", NOTES_REF, "add", "-m", text(2, Status.FAILED), ideas[2])
    assert live.refresh(scan=False) is None                # not this process's: the next scan's
    pop = live.refresh(scan=True)
    assert pop.by_commit[ideas[2]].note is not None
    assert_same(pop, repo, "after the scan")
    # the dashboard's reader lists the notes refs at every refresh: another process's note at once,
    # its listing and the refs this process wrote in one for-each-ref
    shown.refresh(scan=False)
    with processes() as started:
        assert shown.refresh(scan=False) is None            # a listing, nothing moved
    assert started == ["git for-each-ref"]
    git(repo.path, "notes", "--ref", NOTES_REF, "add", "-f", "-m", text(2, Status.SUCCEEDED), ideas[2])
    assert shown.refresh(scan=False).by_commit[ideas[2]].note.status == Status.SUCCEEDED
    repo.update_ref("refs/heads/idea/a/i0", ideas[1])
    repo.notes_write_many(NOTES_REF, {ideas[1]: text(1, Status.FAILED)})
    with processes() as started:
        pop = shown.refresh(scan=False)
    assert started.count("git for-each-ref") == 1 and pop.by_commit[ideas[1]].note.status == Status.FAILED
    assert ideas[0] not in pop.by_commit                    # its branch moved: told, read with the rest
    assert_same(pop, repo, "the dashboard's reader")
