"""The population read by its changes (store/livepop.py), as the daemon's tick uses it, against a
from-scratch `read_population` of the same real git repo:
- a randomized run of many writes of every kind the repo sees (new ideas of the daemon, pushes that
  build on ideas, notes written, amended and removed, leases written and removed, baseline moves,
  force-pushes, deleted and archived branches, records, proposals turned into branches, refs packed,
  screened runs made, moved and deleted, with their notes and leases written and removed),
  some written by this process (ref events) and some by another writer (found by a scan), compared
  after every step;
- no read misses an idea the implementer turns from proposal into branch while it reads;
- the daemon's tick: a push by another process is seen at the next tick, the periodic full read
  replaces the incremental state (and saves the parse cache, after the pass's dispatch), and a
  refresh that moved nothing reads no commit or note;
- a read that places many ideas sorts its order once (the randomized run, once on that path too).
"""

from __future__ import annotations

import random

import pytest

from autoresearchd.store.ideas import format_message
from autoresearchd import defaults
from autoresearchd.store.livepop import LivePopulation
from autoresearchd.store.reflisting import BY_OTHERS
from autoresearchd.store.notes import Lease, Status, format_leases, format_note
from autoresearchd.store.population import read_population
from autoresearchd.store.refs import (ARCHIVE_PREFIX, IDEA_BRANCHES, IDEAS_PREFIX, NOTES_REF, PROPOSALS_PREFIX,
                                      RECORDS_PREFIX, RUNS_REF, SCREENS_PREFIX)

from dashserver import ok_note
from popbuilder import BASELINE_VALUES, build_population, race_proposals_into_branches

BMEAN = sum(BASELINE_VALUES) / 3
MAIN = "refs/heads/main"


def assert_same(live, repo, step=""):
    full = read_population(repo, MAIN)
    assert [(i.idea_id, i.commit, i.branch) for i in live.ideas] == \
        [(i.idea_id, i.commit, i.branch) for i in full.ideas], step
    for a, b in zip(live.ideas, full.ideas):
        assert a == b, (step, a.idea_id)
    assert (live.baseline_commit, live.baseline_note, live.baseline_leases, live.at_baseline) == \
        (full.baseline_commit, full.baseline_note, full.baseline_leases, full.at_baseline), step
    assert live.by_id == full.by_id and live.by_commit == full.by_commit, step
    assert live.screens == full.screens and live.unlisted == full.unlisted, step


def commit_on(repo, parent: str, text: str, trailers: dict | None = None) -> str:
    tree = repo.tree_with_files(parent, {"train.py": f"# {text}\n".encode()})
    return repo.commit_tree(tree, [parent], format_message(f"Idea {text}", "why it might help", trailers or {}))


class World:
    """Random writes on a real repo. `external` says a ref moved without an event since the last scan."""

    def __init__(self, repo, rng, own: bool = False):
        """`own`: the daemon's tick's world, where another process writes only where it may
        (store/reflisting.BY_OTHERS, the notes, proposals and baseline): a write under the daemon's
        own namespaces is always this process's (an event)."""
        self.repo, self.rng, self.k, self.external, self.own = repo, rng, 0, False, own

    def ideas(self) -> dict[str, str]:
        return self.repo.refs(IDEA_BRANCHES, ARCHIVE_PREFIX, RECORDS_PREFIX)

    def pick(self) -> tuple[str, str] | None:
        refs = sorted(self.ideas().items())
        return self.rng.choice(refs) if refs else None

    def ext_ref(self, ref: str, sha: str | None) -> None:
        """A ref moved by another writer (a push, the CLI): git itself, no event."""
        if self.own and not ref.startswith(BY_OTHERS + ("refs/heads/main",)):
            return self.repo.delete_ref(ref) if sha is None else self.repo.update_ref(ref, sha)
        if sha is None:
            self.repo.git("update-ref", "-d", ref)
        else:
            self.repo.git("update-ref", ref, sha)
        self.external = True

    def screen(self, of: str, key: str) -> None:
        """A screened run of `of` (engine/screening.py's commit: its message names what it screens),
        written by this process (an event) or, rarely, by another writer; sometimes a commit with no
        `Screen-Of` trailer, which is no screen."""
        trailer = f"\n\nScreen-Of: {of}\nScreen-Knob: steps\nScreen-Fraction: 0.25\n" if self.rng.random() < 0.9 else ""
        tree = self.repo.tree_with_files(of, {"knobs.json": f"{self.k}".encode()})
        c = self.repo.commit_tree(tree, [of], f"screen {key}{trailer}")
        (self.repo.update_ref if self.rng.random() < 0.7 else self.ext_ref)(SCREENS_PREFIX + key, c)

    def step(self) -> str:
        r, repo = self.rng, self.repo
        self.k += 1
        k = self.k
        op = r.choice(["daemon_idea", "daemon_idea", "push", "note", "note", "amend", "unnote", "lease",
                       "unlease", "baseline", "baseline_note", "force_push", "delete", "archive", "record",
                       "proposal", "implement", "pack", "screen", "screen", "screen_note", "screen_lease",
                       "screen_gone"])
        screens = sorted(repo.refs(SCREENS_PREFIX).items())
        shot = r.choice(screens) if screens else None
        main = repo.rev_parse(MAIN)
        picked = self.pick()
        if op == "daemon_idea":
            parent = picked[1] if picked and r.random() < 0.3 else main
            c = commit_on(repo, parent, f"d{k}", {"Idea-Id": f"idea-d{k}", "Origin": "explore",
                                                  "Epoch": r.randint(0, 4)})
            repo.update_ref(IDEAS_PREFIX + f"idea-d{k}", c)
            repo.update_ref(f"{IDEA_BRANCHES}explore/idea-d{k}", c)
        elif op == "push":
            parent = picked[1] if picked and r.random() < 0.6 else main
            self.ext_ref(f"{IDEA_BRANCHES}human/p{k}", commit_on(repo, parent, f"p{k}", {"Epoch": 99}))
        elif op in ("note", "amend") and picked:
            v = BMEAN + r.uniform(-0.1, 0.1)
            note = ok_note(v, BMEAN, r.choice(["improved", "worse", "pending", "within_noise"]))
            note = note.model_copy(update={"epoch": r.choice([None, 1, 3])})
            repo.note_write(NOTES_REF, picked[1], format_note(note))
        elif op == "unnote" and picked:
            repo.note_remove(NOTES_REF, picked[1])
        elif op == "lease" and picked:
            lz = Lease(trial_id=f"t{k}", seed=0, runner="local", host="gpu-a", slot=str(k % 4))
            repo.note_write(RUNS_REF, picked[1], format_leases([lz]))
        elif op == "unlease" and picked:
            repo.note_remove(RUNS_REF, picked[1])
        elif op == "baseline":
            # onto an idea's commit (an idea that became the baseline), or a fresh commit on main
            new = picked[1] if picked and r.random() < 0.4 else commit_on(repo, main, f"b{k}")
            (repo.update_ref if r.random() < 0.5 else self.ext_ref)(MAIN, new)
        elif op == "baseline_note":
            repo.note_write(NOTES_REF, main, format_note(ok_note(BMEAN, BMEAN, "baseline", values=BASELINE_VALUES)))
        elif op == "force_push" and picked and picked[0].startswith(IDEA_BRANCHES):
            self.ext_ref(picked[0], commit_on(repo, main, f"f{k}"))
        elif op == "delete" and picked:
            (repo.delete_ref if r.random() < 0.5 else (lambda ref: self.ext_ref(ref, None)))(picked[0])
        elif op == "archive" and picked and picked[0].startswith(IDEA_BRANCHES):
            repo.update_ref(ARCHIVE_PREFIX + picked[1], picked[1])
        elif op == "record":
            c = commit_on(repo, main, f"r{k}", {"Idea-Id": f"idea-r{k}", "Origin": "explore", "Epoch": 1})
            repo.update_ref(RECORDS_PREFIX + f"idea-r{k}", c)
        elif op == "proposal":
            c = commit_on(repo, main, f"q{k}", {"Idea-Id": f"idea-q{k}", "Origin": "exploit", "Epoch": 2})
            repo.update_ref(PROPOSALS_PREFIX + f"idea-q{k}", c)
        elif op == "implement":
            props = sorted(repo.refs(PROPOSALS_PREFIX))
            if props:
                idea_id = r.choice(props).rsplit("/", 1)[1]
                c = commit_on(repo, main, f"i{k}", {"Idea-Id": idea_id, "Origin": "exploit", "Epoch": 2})
                repo.update_ref(IDEAS_PREFIX + idea_id, c)
                repo.update_ref(f"{IDEA_BRANCHES}exploit/{idea_id}", c)
                repo.delete_ref(PROPOSALS_PREFIX + idea_id)
        elif op == "pack":
            repo.git("pack-refs", "--all")
        elif op == "screen":        # a new idea's screen, the baseline's, or one made again (a new commit)
            if picked and r.random() < 0.6:
                self.screen(picked[1], f"idea-s{k}" if r.random() < 0.7 or not shot else shot[0].rsplit("/", 1)[1])
            else:
                self.screen(main, f"baseline-{main}")
        elif op == "screen_note" and shot:
            if r.random() < 0.8:
                note = ok_note(BMEAN + r.uniform(-0.1, 0.1), BMEAN, "pending").model_copy(
                    update={"value": None, "decision": None, "cpu_s": r.uniform(0, 5),
                            "screened": {"value": BMEAN + r.uniform(0, 0.2), "decision": r.choice(["", "continue"])}})
                repo.note_write(NOTES_REF, shot[1], format_note(note))
            else:
                repo.note_remove(NOTES_REF, shot[1])
        elif op == "screen_lease" and shot:
            if r.random() < 0.7:
                lz = Lease(trial_id=f"s{k}", seed=0, runner="local", host="gpu-a", slot=str(k % 4), purpose="screen")
                repo.note_write(RUNS_REF, shot[1], format_leases([lz]))
            else:
                repo.note_remove(RUNS_REF, shot[1])
        elif op == "screen_gone" and shot:
            (repo.delete_ref if r.random() < 0.7 else (lambda ref: self.ext_ref(ref, None)))(shot[0])
        return op


@pytest.mark.parametrize("seed,bulk", [(11, False), (12, False), (13, True)])
def test_random_writes_incremental_equals_full_read(tmp_path, seed, bulk, monkeypatch):
    """bulk: every refresh places the ideas it rebuilt by appending then sorting once (as a full read of
    more than defaults.POPULATION_BULK_WINS ideas does), not one insort each."""
    if bulk:
        monkeypatch.setattr(defaults, "POPULATION_BULK_WINS", 0)
    repo = build_population(tmp_path / "r", 40, seed=seed)
    rng = random.Random(seed)
    world = World(repo, rng)
    live = LivePopulation(repo, MAIN)
    assert_same(live.refresh(), repo, "first")
    ops, compared = [], 0
    for n in range(90):
        op = world.step()
        ops.append(op)
        scan = rng.random() < 0.5 or n % 10 == 9
        pop = live.refresh(scan=scan) or live.pop
        if scan:
            world.external = False
        if not world.external:     # everything since the last scan was told: the live read is whole
            assert_same(pop, repo, f"step {n} ({op}, ops {ops[-5:]})")
            compared += 1
    assert compared >= 60 and len(set(ops)) >= 19, (compared, sorted(set(ops)))
    assert pop.screens and any(s.note for s in pop.screens.values()), pop.screens    # screens were compared
    assert pop.unlisted, "no note was left on a commit no ref shows (an old baseline, a deleted idea)"
    # the derived state is bounded by the live refs, however long it runs
    assert set(live._built) <= set(repo.refs(IDEA_BRANCHES, RECORDS_PREFIX, ARCHIVE_PREFIX, PROPOSALS_PREFIX))
    assert set(live._placed) <= set(live._shown.shown) <= set(live._built)


@pytest.mark.parametrize("seed", [21, 22])
def test_the_ticks_scan_lists_what_others_may_write_and_misses_nothing(tmp_path, seed):
    """The daemon's tick (own_writes): a scan lists only the namespaces another process may write
    (store/reflisting.py); every write of the daemon's own namespaces is its own, an event. After
    every scan the live read equals a full read, through random writes of every kind."""
    repo = build_population(tmp_path / "r", 40, seed=seed)
    rng = random.Random(seed)
    world = World(repo, rng, own=True)
    live = LivePopulation(repo, MAIN, own_writes=True)
    assert_same(live.refresh(), repo, "first")
    listed = []
    real = repo.git
    repo.git = lambda *a, **k: (listed.append(a) if a[0] == "for-each-ref" else None, real(*a, **k))[1]
    ops = []
    for n in range(80):
        ops.append(world.step())
        if rng.random() < 0.5 or n % 10 == 9:
            assert_same(live.refresh(scan=True) or live.pop, repo, f"step {n} ({ops[-5:]})")
    scans = [a for a in listed if "refs/notes/" in a and IDEA_BRANCHES in a]     # the scans, not the world's reads
    assert scans and all(IDEAS_PREFIX not in a and ARCHIVE_PREFIX not in a and SCREENS_PREFIX not in a
                         for a in scans), scans[:2]
    assert len(set(ops)) >= 19, sorted(set(ops))


def test_a_proposal_implemented_while_the_ticks_scan_starts_keeps_its_id(tmp_path):
    """The implementer (another thread of the daemon) turns a proposal into a branch (mark, branch,
    proposal deleted) after the tick's scan took its told refs and before its for-each-ref runs. The
    scan lists the branches, not the marks: the mark, told meanwhile, is read by name after the
    listing, so the branch is never seen without it (a human push under an `h-` id, its own id gone)."""
    repo = build_population(tmp_path / "r", 0, seed=3)
    main = repo.rev_parse(MAIN)
    prop = commit_on(repo, main, "prop", {"Idea-Id": "p01", "Origin": "explore"})
    repo.update_ref(PROPOSALS_PREFIX + "p01", prop)
    live = LivePopulation(repo, MAIN, own_writes=True)
    assert "p01" in live.refresh().by_id
    impl = commit_on(repo, main, "impl", {"Idea-Id": "p01", "Origin": "explore"})
    real, done = repo.git, []

    def git(*a, **k):       # the implementer runs between the hand-over of the told refs and the listing
        if a[0] == "for-each-ref" and "refs/notes/" in a and not done:
            done.append(1)
            repo.update_ref(IDEAS_PREFIX + "p01", impl)                  # Lifecycle.implemented's order
            repo.update_ref(f"{IDEA_BRANCHES}explore/p01", impl)
            repo.delete_ref(PROPOSALS_PREFIX + "p01")
        return real(*a, **k)
    repo.git = git
    pop = live.refresh(scan=True)
    assert done and "p01" in pop.by_id, sorted(pop.by_id)
    assert pop.by_commit[impl].origin == "explore", pop.by_commit[impl].origin
    assert_same(pop, repo)


@pytest.mark.parametrize("seed,max_events,bulk", [(31, 500, False), (32, 3, False), (33, 1, True),
                                                   (34, 500, True), (35, 2, False)])
def test_the_ticks_read_with_writes_landing_during_its_scan(tmp_path, seed, max_events, bulk, monkeypatch):
    """The tick's read (own_writes) through scans, refreshes on events alone, more events than
    MAX_EVENT_REFS (a whole listing), bulk and in-place placing, and this process's own writes landing
    between the hand-over of the told refs and the scan's listing; after the refresh that reads those
    late events, the live read equals a full read, and its idea list is its order's."""
    from autoresearchd.store import livepop
    monkeypatch.setattr(livepop, "MAX_EVENT_REFS", max_events)
    if bulk:
        monkeypatch.setattr(defaults, "POPULATION_BULK_WINS", 0)
    repo = build_population(tmp_path / "r", 30, seed=seed)
    rng = random.Random(seed)
    world = World(repo, rng, own=True)
    live = LivePopulation(repo, MAIN, own_writes=True)
    assert_same(live.refresh(), repo, "first")
    real, state = repo.git, {"busy": False, "inject": False}
    ops = []

    def git(*a, **k):
        if a[0] == "for-each-ref" and "refs/notes/" in a and state["inject"] and not state["busy"]:
            state["busy"] = True
            try:
                ops.extend("during scan: " + world.step() for _ in range(rng.randint(1, 3)))
            finally:
                state["busy"] = False
        return real(*a, **k)
    repo.git = git
    for n in range(100):
        ops.append(world.step())
        scan = rng.random() < 0.4 or n % 10 == 9
        state["inject"] = scan and rng.random() < 0.4
        live.refresh(scan=scan)
        state["inject"] = False
        if scan:
            world.external = False
        pop = live.refresh(scan=False) or live.pop      # the events that landed during the scan
        if not world.external:
            assert_same(pop, repo, f"step {n} ({ops[-6:]})")
    assert live._shown.seq == list(live.pop.ideas)
    assert sum(o.startswith("during scan") for o in ops) >= 5, ops


def test_a_daemon_namespace_moved_by_another_process_waits_for_the_whole_read(tmp_path):
    """The rule's edge, as documented (store/reflisting.py): a mark moved by hand (`git update-ref`,
    no event) is not seen by the tick's scan, is seen by the dashboard's scan (it lists every
    namespace), and by the tick at its next whole read (the start and every
    defaults.POPULATION_FULL_READ_TICKS passes)."""
    repo = build_population(tmp_path / "r", 10, seed=4)
    tick, dash = LivePopulation(repo, MAIN, own_writes=True), LivePopulation(repo, MAIN)
    tick.refresh(), dash.refresh()
    main = repo.rev_parse(MAIN)
    c = commit_on(repo, main, "by hand", {"Idea-Id": "idea-hand", "Origin": "explore", "Epoch": 1})
    repo.git("update-ref", f"{IDEA_BRANCHES}explore/idea-hand", c)      # a push: both see it
    repo.git("update-ref", IDEAS_PREFIX + "idea-hand", c)               # a mark by hand: no event
    assert (tick.refresh(scan=True) or tick.pop).by_commit[c].origin == "human"    # branch seen, mark not
    assert (dash.refresh(scan=True) or dash.pop).by_commit[c].origin == "explore"
    tick.reset()
    assert_same(tick.refresh(scan=True), repo, "whole read")
    assert tick.pop.by_commit[c].origin == "explore"


def test_the_commands_of_other_processes_write_only_where_others_may(toy_env, tmp_path, monkeypatch):
    """What makes the tick's scan safe: the commands run outside the daemon's process write refs only
    under store/reflisting.BY_OTHERS and the refs every refresh lists (notes, proposals). `queue` is
    the one that writes (a proposal; a duplicate's record and note); each of its ref writes is heard
    here as the daemon would hear its own (store/refevents.py)."""
    from autoresearchd.cli import main
    from autoresearchd.store import refevents

    from conftest import write_config
    cfg = write_config(tmp_path, toy_env)
    heard = []

    class Ear:
        def hear(self, ref):
            heard.append(ref)
    ear = Ear()
    refevents.listen((toy_env / ".git").resolve(), ear.hear)
    refevents.listen(toy_env / ".git", ear.hear)
    try:
        for text in ("Lower x to 0.9 and see", "Lower x to 0.9 and see"):       # the second: a duplicate
            assert main(["--config", str(cfg), "queue", text]) in (0, 2)
    finally:
        refevents.unlisten((toy_env / ".git").resolve(), ear.hear)
        refevents.unlisten(toy_env / ".git", ear.hear)
    assert any(r.startswith(PROPOSALS_PREFIX) for r in heard), heard
    assert all(r.startswith(BY_OTHERS + (PROPOSALS_PREFIX, "refs/notes/")) for r in heard), heard


def test_a_full_read_sorts_once(tmp_path, monkeypatch):
    """A read that places more than POPULATION_BULK_WINS ideas sorts the order once: one insort per
    idea moved half the list each time, n²/2 pointer moves (seconds of the daemon's start at 100k ideas)."""
    import bisect
    repo = build_population(tmp_path / "r", 30, seed=5)
    inserts = []
    real = bisect.insort
    monkeypatch.setattr(bisect, "insort", lambda a, x: (inserts.append(x), real(a, x))[1])
    monkeypatch.setattr(defaults, "POPULATION_BULK_WINS", 10)
    live = LivePopulation(repo, MAIN)
    assert_same(live.refresh(), repo, "first")
    assert inserts == [] and len(live._shown.order) >= 30
    c = commit_on(repo, repo.rev_parse(MAIN), "one more")
    repo.update_ref(f"{IDEA_BRANCHES}bench/one", c)
    assert_same(live.refresh(), repo, "one idea more")
    assert len(inserts) == 2            # a few ideas: inserted in place (the order and the id's list)


@pytest.mark.parametrize("scan", [True, False])
@pytest.mark.parametrize("own_writes", [False, True])
def test_live_read_never_misses_an_idea_turning_from_proposal_into_branch(tmp_path, scan, own_writes):
    """The implementer (another thread: its ref writes are events) writes the mark, the branch, then
    deletes the proposal while the tick refreshes: every refresh holds every idea, as a proposal or as
    a branch, with and without a scan, as the dashboard reads and as the tick reads (own_writes)."""
    repo = build_population(tmp_path / "r", 0, seed=3)
    main = repo.rev_parse(MAIN)
    props = {f"p{k:02d}": commit_on(repo, main, f"prop{k}", {"Idea-Id": f"p{k:02d}", "Origin": "explore"})
             for k in range(30)}
    for idea_id, c in props.items():
        repo.update_ref(PROPOSALS_PREFIX + idea_id, c)
    live = LivePopulation(repo, MAIN, own_writes=own_writes)
    live.refresh()
    reads, final = race_proposals_into_branches(
        repo, props, lambda i: commit_on(repo, main, f"impl {i}", {"Idea-Id": i, "Origin": "explore"}),
        lambda: live.refresh(scan=scan) or live.pop)
    assert reads >= 3 and all(final.by_id[i].branch and not final.by_id[i].proposal for i in props), reads
    assert_same(final, repo)


def test_a_refresh_that_moved_nothing_reads_no_object(tmp_path, monkeypatch):
    """Nothing moved: two listings (notes and proposals; the scan), no cat-file; one note moved: the
    cat-file reads that note's blob alone."""
    repo = build_population(tmp_path / "r", 30, seed=5)
    live = LivePopulation(repo, MAIN)
    live.refresh()
    asked = []
    real, stream = repo.cat_file_batch, repo.cat_file_stream
    monkeypatch.setattr(repo, "cat_file_batch", lambda shas: (asked.append(list(shas)), real(shas))[1])
    monkeypatch.setattr(repo, "cat_file_stream", lambda shas: (asked.append(list(shas)), stream(shas))[1])
    assert live.refresh(scan=True) is None and live.refresh(scan=False) is None and asked == []
    target = next(i for i in live.pop.ideas if i.branch)
    repo.note_write(NOTES_REF, target.commit, format_note(ok_note(BMEAN - 0.3, BMEAN, "improved")))
    pop = live.refresh(scan=False)
    assert pop.by_commit[target.commit].value == pytest.approx(BMEAN - 0.3)
    read = [s for batch in asked for s in batch]
    assert read == [repo.notes_list(NOTES_REF)[target.commit]] or \
        set(read) <= {repo.notes_list(NOTES_REF)[target.commit], *(b for b in live._bkey[1:] if b)}, read
    assert_same(pop, repo)


def test_the_tick_sees_pushes_at_once_and_reads_whole_periodically(toy_env, tmp_path, monkeypatch):
    """The daemon's tick (engine/loop.py) on the live read: a branch pushed by another process (git
    itself, no event) is in the next tick's population; every POPULATION_FULL_READ_TICKS passes the
    derived state is dropped and read whole, so a damaged incremental state does not outlive it."""
    from autoresearchd.app import build_daemon
    from autoresearchd.config import load_config

    from conftest import branch_idea, write_config
    from autoresearchd.store import parsecache
    from autoresearchd.store.gitrepo import state_dir
    monkeypatch.setattr(defaults, "POPULATION_FULL_READ_TICKS", 3)
    monkeypatch.setattr(defaults, "PARSE_CACHE_SAVE_NEW", 1)
    d = build_daemon(load_config(write_config(tmp_path, toy_env)), with_llm=False)
    try:
        d.tick()
        sha = branch_idea(toy_env, "carol/push", "Lower x", {"run.py": (toy_env / "run.py").read_text()
                          .replace("x = 1.0", "x = 0.9")})
        pop = d.tick()
        assert sha in pop.by_commit and pop.by_commit[sha].origin == "human"
        base = d.repo.rev_parse("refs/heads/main")
        rec = commit_on(d.repo, base, "rec", {"Idea-Id": "idea-rec", "Origin": "explore"})
        d.repo.update_ref(RECORDS_PREFIX + "idea-rec", rec)    # a record: never dispatched, never changes
        assert rec in d.tick().by_commit
        with d._tick_lock:                  # no tick meanwhile: the reads below are the test's
            shown = d.live._shown
            k = shown.order.index(shown.winner.pop(rec))   # damage the derived state: the record drops out
            del shown.order[k], shown.seq[k]
            shown.by_commit.pop(rec)
            d.repo.note_write(NOTES_REF, base, format_note(ok_note(1.0, 1.0, "baseline", values=[1.0, 1.0])))
            d._passes = 4                       # not a full-read pass: the damage shows
            damaged = d.read(scan=True)
            assert rec not in damaged.by_commit and rec not in {i.commit for i in damaged.ideas}
            d._passes = 6                       # a full-read pass: read whole, the damage is gone
            pop = d.read(scan=True)
            assert rec in pop.by_commit
            assert_same(pop, d.repo)
        assert (state_dir(d.repo) / parsecache.FILE).exists()     # a full read saved what it parsed
    finally:
        d.runner.close()
        d.live.close()


def test_the_first_pass_saves_its_parses_after_its_dispatch(toy_env, tmp_path, monkeypatch):
    """The parse cache is written at the end of the pass whose full read parsed enough, never within
    the read: at 100k ideas the save took seconds, and the first pass's trials waited for it."""
    from autoresearchd.app import build_daemon
    from autoresearchd.config import load_config
    from autoresearchd.store import parsecache
    from autoresearchd.store.gitrepo import state_dir

    from conftest import branch_idea, write_config
    monkeypatch.setattr(defaults, "PARSE_CACHE_SAVE_NEW", 1)
    branch_idea(toy_env, "carol/push", "Lower x", {"run.py": (toy_env / "run.py").read_text()
                .replace("x = 1.0", "x = 0.9")})       # an idea to parse
    d = build_daemon(load_config(write_config(tmp_path, toy_env)), with_llm=False)
    cache = state_dir(d.repo) / parsecache.FILE
    order = []
    real_save, real_dispatch = parsecache.save, d.dispatcher.dispatch
    monkeypatch.setattr(parsecache, "save", lambda repo: (order.append("save"), real_save(repo))[1])
    monkeypatch.setattr(d.dispatcher, "dispatch", lambda *a: (order.append("dispatch"), real_dispatch(*a))[1])
    try:
        with d._tick_lock:
            pop = d.read(scan=True)         # the first pass's full read: nothing saved yet
            assert pop.ideas and parsecache.size() and not cache.exists() and order == []
        d.tick()
        assert order == ["dispatch", "save"] and cache.exists()
        d.tick()                            # nothing new parsed: no second save
        assert order == ["dispatch", "save", "dispatch"]
    finally:
        d.runner.close()
        d.live.close()


def test_a_parse_that_raises_ends_the_object_stream(tmp_path, monkeypatch):
    """The cold read parses while git streams the objects: a parse that raises ends git at once, not
    when the exception and its frames are collected."""
    from autoresearchd.store import population
    from test_gitrepo import _stream_children
    repo = build_population(tmp_path / "r", 400, seed=3)
    calls = []

    def broken(sha, raw):
        calls.append(sha)
        if len(calls) == 3:
            raise ValueError("a parser bug")
        return real(sha, raw)
    real = population._parse_idea
    monkeypatch.setattr(population, "_parse_idea", broken)
    population._IDEAS.clear()
    population._NOTES.clear()
    with pytest.raises(ValueError, match="a parser bug") as info:
        LivePopulation(repo, MAIN).refresh()
    assert info.value is not None and _stream_children() == []
