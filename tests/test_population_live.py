"""The dashboard's incremental population read (population.LivePopulation) against a full
`read_population` of the same real git repo, after every kind of change a research repo sees: new,
amended and removed notes, leases, new and deleted branches (loose and packed), archived commits,
records, proposals and pushes that build on an idea. Also: the previous population is never modified,
and a snapshot built on the previous one equals one built from scratch."""

from __future__ import annotations

import copy

import pytest

from autoresearchd.config import load_config
from autoresearchd.research import open_research
from autoresearchd.store.ideas import format_message
from autoresearchd.store.notes import Lease, Status, format_leases, format_note
from autoresearchd.store.livepop import LivePopulation
from autoresearchd.store.population import read_population
from autoresearchd.store.refs import (ARCHIVE_PREFIX, IDEA_BRANCHES, IDEAS_PREFIX, NOTES_REF, PROPOSALS_PREFIX,
                                      RECORDS_PREFIX, RUNS_REF)
from autoresearchd.views.dashboard import Snapshot

from dashserver import add_idea, ok_note
from popbuilder import BASELINE_VALUES, build_population, race_proposals_into_branches, write_cfg

BMEAN = sum(BASELINE_VALUES) / 3
MAIN = "refs/heads/main"


def assert_same(live, repo):
    full = read_population(repo, MAIN)
    assert [i.idea_id for i in live.ideas] == [i.idea_id for i in full.ideas]
    for a, b in zip(live.ideas, full.ideas):
        assert a == b, a.idea_id
    assert (live.baseline_commit, live.baseline_note, live.baseline_leases) == \
        (full.baseline_commit, full.baseline_note, full.baseline_leases)
    assert live.by_id.keys() == full.by_id.keys() and live.by_commit.keys() == full.by_commit.keys()


def daemon_commit(repo, idea_id: str, title: str, parent: str | None = None) -> str:
    """A commit as the daemon's implementer writes it (trailers it believes), off main or a parent idea."""
    base = parent or repo.rev_parse(MAIN)
    tree = repo.tree_with_files(base, {"train.py": f"# {idea_id}\n".encode()})
    msg = format_message(title, "why it might help", {"Idea-Id": idea_id, "Origin": "explore", "Epoch": 2})
    return repo.commit_tree(tree, [base], msg)


def daemon_branch(repo, idea_id: str, parent: str | None = None) -> str:
    """A queued idea as the daemon leaves it: its branch and its own mark."""
    c = daemon_commit(repo, idea_id, f"Idea {idea_id}", parent)
    repo.update_ref(f"{IDEA_BRANCHES}explore/{idea_id}", c)
    repo.update_ref(IDEAS_PREFIX + idea_id, c)
    return c


def test_incremental_read_equals_a_full_read(tmp_path):
    repo = build_population(tmp_path / "research", 60, seed=3)
    daemon_branch(repo, "idea-q1")
    daemon_branch(repo, "idea-q2")
    cfg = load_config(write_cfg(tmp_path, repo.path))
    research = open_research(cfg, create=False)
    live = LivePopulation(repo, MAIN)
    pop0 = live.refresh()
    assert_same(pop0, repo)
    assert live.refresh() is None and live.refresh(scan=False) is None     # nothing moved: nothing read
    snap0 = Snapshot(cfg, research, pop0, "0", secrets=[])
    frozen = copy.deepcopy(pop0.ideas)

    queued = [i for i in pop0.ideas if i.status == Status.QUEUED and i.branch]
    done = [i for i in pop0.ideas if i.value is not None and i.origin != "human"]
    assert len(queued) >= 2 and len(done) >= 4
    # a new note and an amended one: seen at once, without scanning the idea refs
    repo.note_write(NOTES_REF, queued[0].commit, format_note(ok_note(BMEAN - 0.05, BMEAN, "improved")))
    repo.note_write(NOTES_REF, done[0].commit, format_note(ok_note(BMEAN + 0.2, BMEAN, "worse")))
    pop1 = live.refresh(scan=False)
    assert pop1 is not None and pop1.by_id[queued[0].idea_id].value == pytest.approx(BMEAN - 0.05)
    assert pop1.by_id[done[0].idea_id].note.decision == "worse"
    assert_same(pop1, repo)
    assert pop0.ideas == frozen                       # the population handed out before is untouched
    assert pop1.by_id[done[3].idea_id] is pop0.by_id[done[3].idea_id]    # an unchanged idea is not rebuilt
    assert pop1.by_id[done[0].idea_id] is not pop0.by_id[done[0].idea_id]
    s1 = Snapshot(cfg, research, pop1, "1", secrets=[], prev=snap0)
    fresh = Snapshot(cfg, research, pop1, "1", secrets=[])
    assert s1.ideas(limit=1000) == fresh.ideas(limit=1000)
    assert s1.overview()["best"] == fresh.overview()["best"] and s1.failures() == fresh.failures()
    assert s1.lineage(depth=3) == fresh.lineage(depth=3)

    # a removed note, a new lease, a changed baseline note, a new proposal and a new record
    repo.note_remove(NOTES_REF, done[1].commit)
    lz = Lease(trial_id="t-live", seed=0, runner="local", host="gpu-b", slot="1")
    repo.note_write(RUNS_REF, queued[1].commit, format_leases([lz]))
    repo.note_write(NOTES_REF, repo.rev_parse(MAIN),
                    format_note(ok_note(BMEAN, BMEAN, "baseline", values=BASELINE_VALUES)))
    repo.update_ref(PROPOSALS_PREFIX + "idea-prop", daemon_commit(repo, "idea-prop", "A new proposal"))
    rec = daemon_commit(repo, "idea-rec", "Failed to implement <b>this</b>")
    repo.update_ref(RECORDS_PREFIX + "idea-rec", rec)
    repo.note_write(NOTES_REF, rec, format_note(ok_note(BMEAN, BMEAN, "x").model_copy(
        update={"status": Status.IMPLEMENT_FAILED, "value": None, "error": "check failed"})))
    pop2 = live.refresh(scan=True)
    assert pop2.by_id[queued[1].idea_id].status == Status.RUNNING
    assert pop2.by_id[done[1].idea_id].note is None and "idea-rec" in pop2.by_id and "idea-prop" in pop2.by_id
    assert_same(pop2, repo)

    # new branches: the daemon's own (trailers believed), and a person's push that builds on an idea
    daemon_branch(repo, "idea-new", parent=done[2].commit)
    tree = repo.tree_with_files(done[3].commit, {"train.py": b"# a person's tweak\n"})
    push = repo.commit_tree(tree, [done[3].commit], format_message("Origin: seed <script>", "", {"Epoch": 99}))
    repo.git("update-ref", f"{IDEA_BRANCHES}human/tweak", push)     # another writer: no event
    repo.note_write(NOTES_REF, push, format_note(ok_note(BMEAN - 0.01, BMEAN, "improved")))
    unscanned = live.refresh(scan=False)
    assert "idea-new" in unscanned.by_id              # this process's own ref writes are events: seen at once
    assert push not in unscanned.by_commit            # another process's branch waits for the next scan
    pop3 = live.refresh(scan=True)
    assert pop3.by_id["idea-new"].origin == "explore"
    pushed = pop3.by_commit[push]
    assert pushed.origin == "human" and pushed.parents == [done[3].idea_id] and pushed.epoch != 99
    assert_same(pop3, repo)

    # deleted branches: one archived (its measured commit stays), one not; then packed refs, one deleted
    arch = done[2]
    repo.update_ref(ARCHIVE_PREFIX + arch.idea_id, arch.commit)
    repo.delete_ref(arch.branch)
    repo.delete_ref(queued[0].branch)
    pop4 = live.refresh(scan=True)
    assert pop4.by_id[arch.idea_id].branch == ARCHIVE_PREFIX + arch.idea_id
    assert queued[0].idea_id not in pop4.by_id
    assert_same(pop4, repo)
    repo.git("pack-refs", "--all")
    assert live.refresh(scan=True) is None            # packing moves no ref
    repo.delete_ref(f"{IDEA_BRANCHES}human/tweak")
    pop5 = live.refresh(scan=True)
    assert push not in pop5.by_commit and "idea-new" in pop5.by_id
    assert_same(pop5, repo)
    # the same object twice (a commit reached by a branch and its archive) is still one idea
    assert len({id(i) for i in pop5.ideas}) == len(pop5.ideas)
    # deleted refs leave the reader's cache: it is bounded by the live refs, however long it serves
    assert set(live._built) == set(repo.refs(IDEA_BRANCHES, RECORDS_PREFIX, ARCHIVE_PREFIX, PROPOSALS_PREFIX))
    assert set(live._placed) <= set(live._built)


def test_incremental_read_starts_on_a_repo_without_notes(tmp_path):
    """No notes ref yet (a fresh research repo): the first note creates it, and the reader follows."""
    from autoresearchd.store.gitrepo import GitRepo
    repo = GitRepo.init(tmp_path / "r")
    base = repo.commit_tree(repo.git("mktree", input=b"").strip(), [], "baseline\n")
    repo.update_ref(MAIN, base)
    live = LivePopulation(repo, MAIN)
    assert live.refresh().ideas == []
    c = add_idea(repo, "first", "", {"train.py": b"x = 2\n"})
    assert live.refresh(scan=False).ideas[0].commit == c     # this process's branch: an event, seen at once
    assert live.refresh() is None                     # the scan finds nothing the event did not tell
    repo.note_write(NOTES_REF, c, format_note(ok_note(1.0, 1.1, "improved")))
    pop = live.refresh(scan=False)
    assert pop.ideas[0].value == 1.0
    assert_same(pop, repo)
    # the notes commit it remembers is gone (a rewritten, pruned notes ref): it lists the notes afresh
    live._notes[NOTES_REF] = ("1" * 40, {})
    repo.note_write(NOTES_REF, c, format_note(ok_note(0.9, 1.1, "improved")))
    assert live.refresh(scan=False).ideas[0].value == 0.9


def test_cached_notes_and_commits_cannot_be_changed_in_place(tmp_path):
    """The parse caches are shared by every read (and the live reader's populations): what they hold is
    immutable, a note's model_copy() is the mutable way out, and a handed-out idea's own lists and dicts
    are its own."""
    from pydantic import ValidationError

    from autoresearchd.store import population
    repo = build_population(tmp_path / "research", 20, seed=1)
    pop = read_population(repo, MAIN)
    i = next(i for i in pop.ideas if i.value is not None and i.note.trials)
    n = i.note
    with pytest.raises(ValidationError, match="frozen"):
        n.value = 0.0
    with pytest.raises(ValidationError, match="frozen"):
        n.trials[0].value = 0.0
    for change in (lambda: n.values.append(1.0), lambda: n.trials.pop(), lambda: n.flags.extend(["x"]),
                   lambda: n.cost.update(x=1.0), lambda: n.trials[0].metrics.clear()):
        with pytest.raises(TypeError, match="immutable"):
            change()
    with pytest.raises(TypeError):
        population._IDEAS[i.commit]["title"] = "changed"
    assert isinstance(population._IDEAS[i.commit]["trailers"].parents, tuple)   # parents: a fact of the trailers
    assert population._IDEAS[i.commit]["leases"] == ()
    with pytest.raises(ValidationError, match="frozen"):
        i.trailers.origin = "changed"
    mine = n.model_copy(deep=True)                   # the way to change a note: a mutable copy
    mine.value, mine.decision = 0.0, "worse"
    mine.trials[0].value = 0.0
    mine.values.append(9.9)
    i.parents.append("somebody")                     # a handed-out idea's lists are its own
    again = read_population(repo, MAIN).by_id[i.idea_id]
    assert again.note is n and again.note.value != 0.0 and 9.9 not in again.note.values
    assert "somebody" not in again.parents
    assert mine != n and n.model_copy() == n and format_note(n.model_copy()) == format_note(n)


def test_a_read_never_misses_an_idea_turning_from_proposal_into_branch(tmp_path):
    """The implementer writes the mark, the branch, then deletes the proposal, while the loop reads
    the population on another thread. Every read must hold every idea (as a proposal or as a
    branch): a missed one made the policy undercount its epoch and propose it again."""
    repo = build_population(tmp_path / "r", 0, seed=3)
    n = 30
    props = {f"p{k:02d}": daemon_commit(repo, f"p{k:02d}", f"Proposal {k}") for k in range(n)}
    for idea_id, c in props.items():
        repo.update_ref(PROPOSALS_PREFIX + idea_id, c)
    reads, final = race_proposals_into_branches(
        repo, props, lambda i: daemon_commit(repo, i, f"Proposal {i} implemented"),
        lambda: read_population(repo, MAIN))
    assert reads >= 3 and all(final.by_id[i].branch and not final.by_id[i].proposal for i in props), reads
