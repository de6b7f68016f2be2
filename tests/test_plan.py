"""engine/plan.py, directly: which seeds each purpose needs, which of them still lack a result and a
live lease (and what their earlier attempts cost), the order jobs run in, and when a search is settled."""

from __future__ import annotations

from autoresearchd.engine.plan import Job, baseline_complete, missing_seeds, order_key, seeds_needed, settled
from autoresearchd.store.ideas import Idea
from autoresearchd.store.trailers import Trailers
from autoresearchd.store.notes import Lease, Note, Status, Trial
from autoresearchd.store.population import Population


def note(seeds, status=Status.SUCCEEDED, decision=None, planned=None):
    trials = [Trial(trial_id=f"t{s}", seed=s, status=status, value=1.0 if status == Status.SUCCEEDED else None)
              for s in seeds]
    return Note(status=status, seeds=list(seeds), trials=trials, decision=decision, seeds_planned=planned,
                value=1.0 if status == Status.SUCCEEDED else None)


def lease(seed, state="running", retries=0, attempt=None, faults=()):
    return Lease(trial_id=f"x-s{seed}", seed=seed, runner="local", host="h", slot="0", state=state,
                 retries=retries, attempt=attempt, faults=list(faults))


def test_seeds_each_purpose_needs():
    assert seeds_needed(None, "baseline", 3, 2) == [0, 1, 2]
    assert seeds_needed(None, "idea", 3, 2) == [0]
    assert seeds_needed(note([0], decision="pending"), "idea", 3, 2) == [0, 1, 2]
    assert seeds_needed(note([0], decision="promoted"), "idea", 3, 2) == [0]


def test_missing_seeds_skip_results_and_live_leases_and_count_what_attempts_cost():
    leases = [lease(1), lease(2, "lost", retries=0, attempt=0), lease(3, "requeued", retries=1, attempt=2,
                                                                      faults=["h: disk full"])]
    got = {m.seed: m for m in missing_seeds([0, 1, 2, 3, 4], note([0]), leases)}
    assert sorted(got) == [2, 3, 4]                # 0 has a result, 1 runs
    assert (got[2].retries, got[2].attempt) == (1, 1)          # lost on a healthy host: one retry spent
    assert (got[3].retries, got[3].attempt, got[3].faults) == (1, 3, ["h: disk full"])   # host fault: none
    assert (got[4].retries, got[4].attempt, got[4].faults) == (0, 0, [])


def test_baseline_complete_waits_for_every_planned_seed_unless_one_failed():
    assert not baseline_complete(None)
    assert not baseline_complete(note([0, 1], planned=3))
    assert baseline_complete(note([0, 1, 2], planned=3))
    assert baseline_complete(note([0], status=Status.FAILED, planned=3))


def idea(n, origin="exploit", epoch=0, **kw):
    return Idea(idea_id=f"i{n}", commit=f"{n:040x}", title=f"idea {n}", text="",
                trailers=Trailers(origin=origin, epoch=epoch), committed_at=n, **kw)


def test_order_baseline_then_humans_then_confirmations_then_oldest_llm_ideas():
    base = Job("b" * 40, 1, "baseline")
    human = Job("h" * 40, 0, "idea", idea(5, origin="human"))
    confirm = Job("c" * 40, 1, "confirm", idea(3))
    old, new = Job("o" * 40, 0, "idea", idea(1)), Job("n" * 40, 0, "idea", idea(2, epoch=1))
    jobs = [new, confirm, old, human, base]
    assert sorted(jobs, key=lambda j: order_key(j, True)) == [base, human, confirm, old, new]
    # without human priority a human idea queues with the LLM's, by epoch and age
    assert sorted(jobs, key=lambda j: order_key(j, False)) == [base, confirm, old, human, new]


def test_settled_means_nothing_queued_running_pending_or_undecided():
    done = note([0, 1], planned=2)
    measured = idea(1, note=note([0], decision="worse"), branch="refs/heads/idea/x")
    assert settled(Population([measured], "b" * 40, done))
    assert not settled(Population([measured], "b" * 40, note([0], planned=2)))        # baseline seeds to go
    pending = idea(2, note=note([0], decision="pending"), branch="refs/heads/idea/y")
    assert not settled(Population([measured, pending], "b" * 40, done))
    undecided = idea(3, note=note([0]), branch="refs/heads/idea/z")                       # backfill comes next
    assert not settled(Population([measured, undecided], "b" * 40, done))
    queued = idea(4, branch="refs/heads/idea/q")
    assert not settled(Population([measured, queued], "b" * 40, done))
    running = idea(5, branch="refs/heads/idea/r", leases=[lease(0)])
    assert not settled(Population([measured, running], "b" * 40, done))
