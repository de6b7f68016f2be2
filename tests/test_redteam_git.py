"""New members of the class "git obeys what a push adds" (docs/security.md, "A push is data: git
mechanisms"), found by attacking it again: a pushed idea branch that points at a commit the daemon
already keeps as something else. Notes and provenance are keyed by commit, so such a branch would take
over what the daemon recorded for that commit: an old baseline's result (measured with the evaluator of
its day) judged and promoted as an idea's, a screened run's low-fidelity note as an idea's result, a
proposal's or a record's trailers (its origin and LLM spend) dropped as a push's. Real pushes from a
clone through the installed hook, the daemon's two readers, and one real daemon run.
"""

from __future__ import annotations


import pytest

from autoresearchd import defaults
from autoresearchd.app import build_daemon
from autoresearchd.config import load_config
from autoresearchd.policies.base import Proposal
from autoresearchd.research import open_research
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.lifecycle import Lifecycle, Made
from autoresearchd.store.livepop import LivePopulation
from autoresearchd.store.notes import Note, Status
from autoresearchd.store.population import read_population
from autoresearchd.store.proposals import record_proposal
from autoresearchd.store.refs import PROPOSALS_PREFIX, RECORDS_PREFIX, SCREENS_PREFIX
from autoresearchd.store.spend import total

from conftest import TOY_EVAL, TOY_MANIFEST, TOY_RUN, git, run_until_settled, write_config
from test_git_steering import clone, commit_in, push, research  # noqa: F401 (fixtures)


def both_readers(repo: GitRepo):
    """The population as `status` reads it (read_population) and as the daemon's tick keeps it
    (LivePopulation, a whole read): every rule must hold in both."""
    live = LivePopulation(repo, "refs/heads/main", own_writes=True)
    try:
        return [read_population(repo, "refs/heads/main"), live.refresh()]
    finally:
        live.close()


def fetch_daemon_refs(cl) -> None:
    """What any pusher can do: the research repo advertises its refs/autoresearch/* (ls-remote)."""
    git(cl, "fetch", "-q", "origin", "+refs/autoresearch/*:refs/remotes/daemon/*")


def refused(cl, commit: str, name: str, why: str) -> None:
    """A push of idea/<name> at `commit` is refused with `why`; then the branch is written anyway, as
    the owner (or a daemon older than the hook's rule) could have: the readers must hold on their own."""
    p = push(cl, f"{commit}:refs/heads/idea/{name}")
    assert p.returncode != 0 and f"refusing to update refs/heads/idea/{name} by push: {why}" in p.stderr, p.stderr
    git(cl, "push", "-q", "--receive-pack=git -c core.hooksPath=/dev/null receive-pack", "origin",
        f"{commit}:refs/heads/idea/{name}")


# -- an old baseline: its result, measured with the evaluator of its day ------------------------------
def test_a_branch_at_an_old_baseline_is_no_idea_and_its_result_is_never_promoted(toy_env, tmp_path):
    """The real daemon. A person's branch idea/old points at the baseline; the owner moves the baseline
    with a new evaluator (every score + 1), so idea/old now points at an old baseline (a pusher could push
    one there too: any clone holds the old baseline commit). On the code before,
    the old baseline's note (1.0, the old evaluator) became idea h-<old>'s result, judged against the
    new baseline (2.0): delta -1.0, `promoted`, the best idea, and its note rewritten so."""
    research = toy_env
    cfg_path = write_config(tmp_path, research, '[wandb]\nenabled = false\n')
    open_research(load_config(cfg_path), configure_repo=True)
    old = git(research, "rev-parse", "main").strip()
    pop = run_until_settled(cfg_path, timeout=240)
    assert pop.baseline_note.value == pytest.approx(1.0, abs=0.011)
    old_note = git(research, "notes", "--ref=refs/notes/autoresearch", "show", old)

    cl = tmp_path / "clone"
    git(tmp_path, "clone", "-q", f"file://{research}", str(cl))
    # a branch at the baseline itself is allowed (no idea of its own: Population.at_baseline) ...
    assert push(cl, f"{old}:refs/heads/idea/old").returncode == 0
    (research / "evaluate.py").write_text(TOY_EVAL.replace('print(f"score: {v}")', 'print(f"score: {v + 1}")'))
    git(research, "commit", "-qam", "evaluator v2: every score + 1")
    # ... and stays where the baseline was when it moves; a new branch there is refused, with the reason
    p = push(cl, f"{old}:refs/heads/idea/old-too")
    assert p.returncode != 0 and "refusing to update refs/heads/idea/old-too by push: it points at an old " \
        "baseline" in p.stderr, p.stderr
    git(cl, "fetch", "-q", "origin")
    fresh = commit_in(cl, {"run.py": TOY_RUN.replace("x = 1.0", "x = 0.5")}, "Halve x")
    assert push(cl, "HEAD:refs/heads/idea/half").returncode == 0

    pop = run_until_settled(cfg_path, timeout=240)
    assert pop.baseline_note.value == pytest.approx(2.0, abs=0.011)
    assert pop.by_commit[fresh].note.value == pytest.approx(1.5, abs=0.011)      # the push still runs
    for p in [pop, *both_readers(GitRepo(research))]:
        assert old not in p.by_commit and all(i.commit != old for i in p.ideas)
        assert old in p.unlisted            # its runs still count once (the spend)
        assert p.best("min").commit == fresh
    # the old baseline's note was not judged against the new baseline
    assert git(research, "notes", "--ref=refs/notes/autoresearch", "show", old) == old_note


# -- a screened run's commit: a low-fidelity note ----------------------------------------------------------
def test_a_branch_at_a_screened_commit_is_no_idea(research, clone):  # noqa: F811
    repo = GitRepo(research)
    life = Lifecycle(repo)
    base = repo.rev_parse("refs/heads/main")
    idea = commit_in(clone, {"run.py": TOY_RUN.replace("x = 1.0", "x = 0.5")}, "Halve x")
    assert push(clone, "HEAD:refs/heads/idea/half").returncode == 0
    tree = repo.tree_with_files(idea, {".autoresearch-knobs.json": b'{"steps": 10}\n'})
    screen = life.screen("h-" + idea[:10], Made((idea,), f"screen\n\nScreen-Of: {idea}\n", tree))
    life.screen_result(screen, Note(status=Status.SUCCEEDED, idea_id="h-" + idea[:10], baseline_commit=base,
                                    screened={"value": 0.01, "of": idea}))
    git(clone, "fetch", "-q", "origin", f"+{SCREENS_PREFIX}*:refs/remotes/screens/*")
    refused(clone, screen, "screened", f"it points at the commit of {SCREENS_PREFIX}h-{idea[:10]}")
    for p in both_readers(repo):
        assert screen not in p.by_commit and [i.commit for i in p.ideas] == [idea]
        assert p.by_commit[idea].note is None and p.best("min") is None


# -- a proposal and a record: the daemon's provenance and LLM spend ----------------------------------------
def test_a_branch_at_a_proposal_or_a_record_keeps_its_provenance_and_spend(research, clone):  # noqa: F811
    """On the code before, a pushed branch at a proposal's commit showed it as a push: its
    Idea-Cost-USD left the spend (the budget a restarted daemon restores), it was no longer a proposal
    (so never implemented) and was queued to run instead; a record's origin and cost went the same way."""
    repo = GitRepo(research)
    life = Lifecycle(repo)
    base = repo.rev_parse("refs/heads/main")
    mk = dict(text="[Experiment] warm up", origin="explore", epoch=0, parents=[], model="m", tokens=1000)
    pid = record_proposal(repo, life, Proposal(title="Warm up", cost_usd=2.5, **mk), base, "score")
    rid = record_proposal(repo, life, Proposal(title="Cool down", cost_usd=1.5, dropped_reason="a duplicate",
                                               **{**mk, "text": "[Experiment] cool down"}), base, "score")
    before = [(total(p.ideas).usd, [i.idea_id for i in p.implementing()], sorted((i.idea_id, i.origin) for i in p.ideas))
              for p in both_readers(repo)]
    assert before[0][0] == pytest.approx(4.0) and before[0][1] == [pid] and before[0] == before[1]

    fetch_daemon_refs(clone)
    for name, ref in (("p", PROPOSALS_PREFIX + pid), ("r", RECORDS_PREFIX + rid)):
        refused(clone, repo.rev_parse(ref), f"steal-{name}", f"it points at the commit of {ref}")
    for p in both_readers(repo):
        assert (total(p.ideas).usd, [i.idea_id for i in p.implementing()],
                sorted((i.idea_id, i.origin) for i in p.ideas)) == before[0]
        assert p.queued() == []             # nothing to run: the proposal waits for its implementation


# -- a tree measured against an old baseline: its result is not linked -----------------------------------
def test_a_push_of_a_tree_measured_against_an_old_baseline_gets_no_stale_result(toy_env, tmp_path):
    """The real daemon. idea/half (x = 0.5) is measured with the evaluator of its day (0.5); the owner
    moves the baseline with a new evaluator (every score + 1). A push of a new commit with idea/half's
    very tree, on the old baseline (so it changes no frozen file against its merge-base), is identical
    code: on the code before, the daemon linked idea/half's result (0.51, the old evaluator's) to it
    instead of running it (the current evaluator gives 1.5). Its evaluate.py is the old baseline's: the gate refuses it
    now (Gate._old_frozen), so no result measured with another harness is ever linked."""
    research = toy_env
    cfg_path = write_config(tmp_path, research, '[wandb]\nenabled = false\n')
    open_research(load_config(cfg_path), configure_repo=True)
    cl = tmp_path / "clone"
    git(tmp_path, "clone", "-q", f"file://{research}", str(cl))
    half = commit_in(cl, {"run.py": TOY_RUN.replace("x = 1.0", "x = 0.5")}, "Halve x")
    assert push(cl, "HEAD:refs/heads/idea/half").returncode == 0
    pop = run_until_settled(cfg_path, timeout=240)
    assert pop.by_commit[half].note.value == pytest.approx(0.5, abs=0.011)

    (research / "evaluate.py").write_text(TOY_EVAL.replace('print(f"score: {v}")', 'print(f"score: {v + 1}")'))
    git(research, "commit", "-qam", "evaluator v2: every score + 1")
    twin = git(cl, "commit-tree", f"{half}^{{tree}}", "-p", f"{half}^", input="Halve x, again\n").strip()
    assert push(cl, f"{twin}:refs/heads/idea/twin").returncode == 0
    pop = run_until_settled(cfg_path, timeout=240)
    assert pop.baseline_note.value == pytest.approx(2.0, abs=0.011)
    note = pop.by_commit[twin].note
    assert note.linked is None and note.value is None and note.status == Status.REJECTED, note
    assert "evaluate.py is not the baseline's" in note.error
    assert pop.stale(pop.by_commit[half]) and pop.best("min") is None


# -- ref names that a case-insensitive filesystem folds or ignores beyond ASCII case ------------------------
# A loose ref is a file named like the ref. APFS and NTFS compare names with Unicode case folding (U+017F
# long s is s), and HFS+ ignores zero-width and direction characters in names (git's fsck refuses
# `.g<U+200C>it` for that reason). Where the owner allows every ref by pattern, such a name passed the
# ASCII-only comparison and, on such a filesystem, wrote the daemon's marks or moved the baseline.
FOLDS = ["refs/autore\u017fearch/ideas/e000-forged",        # long s: refs/autoresearch/ideas/...
         "refs/heads/ma\u200cin",                           # ZWNJ, ignored by HFS+: refs/heads/main
         "refs/heads/M\u200dAIN",                           # ZWJ and letter case
         "refs/\ufeffreplace/{base}",                       # a BOM, ignored by HFS+: a replace ref
         "refs/autoresearch\u200e"]                         # an LRM: the directory of the daemon's refs


@pytest.mark.parametrize("ref", FOLDS, ids=[ascii(r) for r in FOLDS])
def test_a_ref_that_a_filesystem_folds_onto_a_guarded_one_is_refused(research, clone, ref):  # noqa: F811
    for pattern in ("refs/heads/*", "refs/*", "*"):           # the owner allows everything liftable
        git(research, "config", "--add", "autoresearchd.pushAllow", pattern)
    ref = ref.format(base=git(research, "rev-parse", "main").strip())
    commit_in(clone, {"run.py": TOY_RUN.replace("x = 1.0", "x = 0.5")})
    before = git(research, "for-each-ref", "--format=%(refname) %(objectname)")
    p = push(clone, "--force", f"HEAD:{ref}")
    assert p.returncode != 0 and f"refusing to update {ref} by push: it " in p.stderr, p.stderr
    assert ("folds or ignores" in p.stderr) != ref.endswith("\u200e") and \
        ("the name of the directory" in p.stderr) == ref.endswith("\u200e"), p.stderr
    assert git(research, "for-each-ref", "--format=%(refname) %(objectname)") == before
    # a non-ASCII idea branch and an allowed branch still go through
    assert push(clone, "HEAD:refs/heads/idea/caf\u00e9-\u017f", "HEAD:refs/heads/d\u00e9v").returncode == 0


# -- many refs that share one wide tree ---------------------------------------------------------------------
def _tree(cl, entries: list[tuple[str, str, str]]) -> str:
    return git(cl, "mktree", input="".join(f"{m} {'tree' if m == '040000' else 'blob'} {sha}\t{name}\n"
                                         for m, name, sha in entries)).strip()


def _wide(cl, n: int = 100) -> str:
    """A tree of the baseline's files and zz/ holding n x 100 files (one blob): n x 101 + 1 more paths."""
    blob = git(cl, "hash-object", "-w", "--stdin", input="x\n").strip()
    leaf = _tree(cl, [("100644", str(i), blob) for i in range(100)])
    wide = _tree(cl, [("040000", str(i), leaf) for i in range(n)])
    return _tree(cl, [(m, name, sha) for m, _, sha, name in (ln.split(None, 3) for ln in
                                                           git(cl, "ls-tree", "HEAD").splitlines())]
                 + [("040000", "zz", wide)])


def test_the_paths_of_a_pushs_tips_together_are_capped(research, clone):  # noqa: F811
    """Each tip under the per-tip cap, together over autoresearchd.pushMaxTotalPaths (lowered here from
    defaults.PUSH_MAX_TOTAL_PATHS so the test stays small); one commit under many names counts once."""
    git(research, "config", "autoresearchd.pushMaxTotalPaths", "50000")
    top = _wide(clone)                                  # 10,104 paths
    tips = [git(clone, "commit-tree", top, "-p", "HEAD", input=f"wide {i}\n").strip() for i in range(5)]
    p = push(clone, *[f"{c}:refs/heads/idea/w{i}" for i, c in enumerate(tips)])
    assert p.returncode != 0 and "the trees of its commits list more than 50000 paths together" in p.stderr, p.stderr
    assert git(research, "for-each-ref", "refs/heads/idea/") == ""
    assert push(clone, *[f"{tips[0]}:refs/heads/idea/same{i}" for i in range(10)],
                *[f"{c}:refs/heads/idea/w{i}" for i, c in enumerate(tips[1:4])]).returncode == 0


def test_many_pushed_refs_that_share_a_wide_tree_are_gated_in_bounded_batches(research, clone, tmp_path):  # noqa: F811
    """The path cap is per tip: 40 commits sharing one tree of 10,000 files are a push of a few KiB, and
    the gate read every arriving diff in one `diff-tree --stdin` and held all of them (400,000 changes
    here; 20 tips of 99,000 paths held 1.96 million changes, 1.6 GiB, growing with every ref pushed).
    Now at most defaults.GATE_DIFF_BATCH ideas' changes are held at once, and every idea is still judged
    as alone (the spy counts what each batched read returned; it reads through)."""
    top = _wide(clone)
    tips = [git(clone, "commit-tree", top, "-p", "HEAD", input=f"wide {i}\n").strip() for i in range(40)]
    p = push(clone, *[f"{c}:refs/heads/idea/w{i}" for i, c in enumerate(tips)])
    assert p.returncode == 0, p.stderr
    d = build_daemon(load_config(write_config(tmp_path, research)), with_llm=False)
    held = []
    many = d.repo.diff_tree_raw_many

    def spy(pairs):
        got = many(pairs)
        held.append(sum(map(len, got.values())))
        return got
    d.repo.diff_tree_raw_many = spy
    try:
        pop = read_population(d.repo, d.research.baseline_ref)
        d.dispatcher.reject_on_arrival(pop)
        assert held and max(held) <= defaults.GATE_DIFF_BATCH * 10_000 < 40 * 10_000, held
        assert sum(held) == 40 * 10_000               # every tip's diff was read, in batches
        assert {d.dispatcher.gate._why[c] for c in tips} == {None}      # and each passes, as alone
    finally:
        d.runner.close()


# -- a pushed idea as the base of the daemon's own commit ---------------------------------------------------
def test_a_pushed_bases_attributes_change_no_patch_the_daemon_applies(research, clone):  # noqa: F811
    """An implementation may build on a pushed idea: the daemon applies the LLM's patch onto its tree
    (`apply --cached` in a scratch index) or writes whole files into it. The pushed tree's
    .gitattributes (a filter the owner has configured, eol, ident) rewrite neither: the blobs are the
    patch's bytes. Closed before this pass (checked here, no row tested it)."""
    git(research, "config", "filter.swap.clean", "sed s/x/HACKED/")
    git(research, "config", "filter.swap.smudge", "sed s/x/HACKED/")
    base = commit_in(clone, {".gitattributes": "*.py filter=swap text eol=crlf ident\n"}, "attributes")
    assert push(clone, "HEAD:refs/heads/idea/attrs").returncode == 0
    repo = GitRepo(research)
    lines = TOY_RUN.splitlines(keepends=True)
    patch = ("--- a/run.py\n+++ b/run.py\n@@ -2,3 +2,3 @@\n " + lines[1] + "-x = 1.0\n+x = 2.0  # $Id$\n "
             + lines[3]).encode()
    tree = repo.apply_to_tree(base, patch)
    assert repo.read_blob(f"{tree}:run.py") == TOY_RUN.replace("x = 1.0", "x = 2.0  # $Id$").encode()
    tree = repo.tree_with_files(base, {"new.py": b"x = 3\n"})
    assert repo.read_blob(f"{tree}:new.py") == b"x = 3\n"


# -- a push on an old baseline runs with that baseline's frozen files ----------------------------------------
LIB_MANIFEST = TOY_MANIFEST.replace('frozen = ["evaluate.py"]', 'frozen = ["evaluate.py", "lib.py"]')
LIB_RUN = TOY_RUN.replace("x = 1.0", "from lib import FACTOR\nx = 1.0 * FACTOR")


def test_a_push_on_an_old_baseline_runs_with_no_frozen_file_of_its_day(make_repo, tmp_path):
    """The real daemon. run.py imports a frozen lib.py (as a training script imports the env's frozen
    data loader); the owner fixes it on the baseline (FACTOR 0.5 -> 1.0). A push whose parent is the old
    baseline changes only a comment: against its merge-base it changes no frozen file, so the gate let it
    through, and its run imported the old lib.py: 0.5, promoted against the fixed baseline's 1.0. It is
    refused now, naming the file, as a push that changes a frozen file is."""
    research = make_repo({".autoresearch.toml": LIB_MANIFEST, "run.py": LIB_RUN, "lib.py": "FACTOR = 0.5\n",
                          "evaluate.py": TOY_EVAL}, "research")
    cfg_path = write_config(tmp_path, research, '[wandb]\nenabled = false\n')
    open_research(load_config(cfg_path), configure_repo=True)
    old = git(research, "rev-parse", "main").strip()
    (research / "lib.py").write_text("FACTOR = 1.0\n")
    git(research, "commit", "-qam", "lib: the factor fixed")
    cl = tmp_path / "clone"
    git(tmp_path, "clone", "-q", f"file://{research}", str(cl))
    idea = commit_in(cl, {"run.py": LIB_RUN + "# tidied\n"}, "Tidy run.py", base=old)
    assert push(cl, "HEAD:refs/heads/idea/tidy").returncode == 0
    pop = run_until_settled(cfg_path, timeout=240)
    assert pop.baseline_note.value == pytest.approx(1.0, abs=0.011)
    note = pop.by_commit[idea].note
    assert note.status == Status.REJECTED and "lib.py" in note.error and note.value is None, note
