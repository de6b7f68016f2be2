"""engine/dispatch.py and collect.py (the Dispatcher and the Collector), driven directly on a real repo and the real local runner: a
trial's lease is in git before the runner starts it, an identical tree is linked instead of run, and
collect writes the result note, then clears the lease. Every note the engine writes (a result, a
linked twin, a rejection, a cancelled old baseline, a backfill: test_wandb.py) goes through the
lifecycle writer, whose observers hear of each."""

from __future__ import annotations

import time

from autoresearchd.app import build_daemon
from autoresearchd.config import load_config
from autoresearchd.vocab import Change
from autoresearchd.store.population import read_population

from conftest import branch_idea, write_config


def heard_daemon(tmp_path, toy_env):
    """A daemon as build_daemon builds it without an LLM, whose one writer is built with an observer
    that records what it hears (observers are given at construction, never added)."""
    from autoresearchd.app import make_runner
    from autoresearchd.engine.loop import Daemon
    from autoresearchd.research import open_research
    from autoresearchd.store.lifecycle import Lifecycle
    cfg = load_config(write_config(tmp_path, toy_env))
    research = open_research(cfg, configure_repo=True)
    events = []
    lifecycle = Lifecycle(research.repo, observers=[events.append])
    return Daemon(cfg, research, make_runner(cfg, research), lifecycle=lifecycle), events


def harvest_until(d, done, timeout=90.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pop = read_population(d.repo, d.research.baseline_ref)
        d.collector.harvest(pop)
        d.collector.backfill(pop)
        pop = read_population(d.repo, d.research.baseline_ref)
        if done(pop):
            return pop
        time.sleep(0.2)
    raise AssertionError("no result in time")


def test_lease_before_submit_then_note_before_the_lease_goes(toy_env, tmp_path):
    d, events = heard_daemon(tmp_path, toy_env)
    try:
        disp, seen = d.dispatcher, {}
        real = disp.runner.submit

        def submit(spec, slot):            # a spy: what git holds when the runner is asked to start
            seen[spec.trial_id] = [lz.trial_id for lz in disp.ledger.leases(spec.commit)]
            return real(spec, slot)
        disp.runner.submit = submit
        pop = read_population(d.repo, d.research.baseline_ref)
        jobs = d.jobs(pop)
        assert [(j.purpose, j.seed) for j in jobs] == [("baseline", 0), ("baseline", 1)]
        assert disp.dispatch(pop, jobs) == 2
        assert set(seen) == {j.trial_id for j in jobs}
        assert all(tid in leases for tid, leases in seen.items())      # its own lease was already there
        pop = harvest_until(d, lambda p: p.baseline_note is not None and len(p.baseline_note.trials) == 2)
        assert pop.baseline_note.seeds == [0, 1] and pop.baseline_note.value is not None
        assert disp.ledger.leases(pop.baseline_commit) == []           # cleared after the note
        assert d.jobs(pop) == [] and disp.dispatch(pop, []) == 0       # nothing left to run

        # two branches with one tree: the first runs, the second is linked to its result
        edit = {"run.py": (toy_env / "run.py").read_text().replace("x = 1.0", "x = 0.9")}
        first = branch_idea(toy_env, "a/one", "one", edit)
        twin = branch_idea(toy_env, "a/two", "two", edit)
        pop = read_population(d.repo, d.research.baseline_ref)
        assert disp.dispatch(pop, [j for j in d.jobs(pop) if j.commit == first]) == 1
        harvest_until(d, lambda p: p.by_commit[first].note is not None)
        pop = read_population(d.repo, d.research.baseline_ref)
        disp.dispatch(pop, d.jobs(pop))
        pop = read_population(d.repo, d.research.baseline_ref)
        assert pop.by_commit[twin].note.linked == first
        assert pop.by_commit[twin].note.value == pop.by_commit[first].note.value
        told = {(e.change, e.commit) for e in events}
        assert {(Change.RESULT, pop.baseline_commit), (Change.RESULT, first), (Change.LINKED, twin)} <= told

        # a branch that shares no history with the baseline: rejected on arrival, and the observers hear it
        from conftest import git
        orphan = git(toy_env, "commit-tree", "-m", "Unrelated", git(toy_env, "rev-parse", "main^{tree}").strip()).strip()
        git(toy_env, "update-ref", "refs/heads/idea/a/orphan", orphan)
        assert disp.reject_on_arrival(read_population(d.repo, d.research.baseline_ref))
        assert read_population(d.repo, d.research.baseline_ref).by_commit[orphan].note.status.value == "rejected"
        assert (Change.REJECTED, orphan) in {(e.change, e.commit) for e in events}
    finally:
        d.runner.close()


def test_a_deleted_branch_or_a_moved_baseline_loses_nothing(toy_env, tmp_path):
    """A branch deleted while its trial runs still gets its result (kept under archive/ from dispatch);
    a baseline that moves while its seed runs has that seed cancelled, said in the old commit's note,
    and no lease is left behind."""
    from conftest import git
    slow = (toy_env / "run.py").read_text().replace("x = 1.0", "import time; time.sleep(4)\nx = 1.0")
    (toy_env / "run.py").write_text(slow)
    git(toy_env, "commit", "-qam", "a slower run")
    d, events = heard_daemon(tmp_path, toy_env)
    try:
        disp = d.dispatcher
        pop = read_population(d.repo, d.research.baseline_ref)
        old_base = pop.baseline_commit
        assert disp.dispatch(pop, d.jobs(pop)[:1]) == 1             # baseline seed 0 runs (4 s)
        d.collector.harvest(read_population(d.repo, d.research.baseline_ref))
        (toy_env / "README").write_text("moved\n")                  # the owner commits on the baseline
        git(toy_env, "add", "README")
        git(toy_env, "commit", "-qm", "docs")
        pop = harvest_until(d, lambda p: p.baseline_commit != old_base)
        note = disp.ledger.note(old_base)
        assert note is not None and note.status.value == "cancelled" and "baseline moved" in note.error, note
        assert disp.ledger.leases(old_base) == []
        assert (Change.CANCELLED, old_base) in {(e.change, e.commit) for e in events}   # once written to the ledger unseen

        # an idea branch deleted while it runs: its result is written and kept
        assert disp.dispatch(pop, d.jobs(pop)) == 2                   # the new baseline's two seeds
        pop = harvest_until(d, lambda p: p.baseline_note is not None and len(p.baseline_note.trials) == 2)
        sha = branch_idea(toy_env, "a/gone", "gone", {"run.py": slow.replace("x = 1.0", "x = 0.9")})
        pop = read_population(d.repo, d.research.baseline_ref)
        assert disp.dispatch(pop, [j for j in d.jobs(pop) if j.commit == sha]) == 1
        git(toy_env, "branch", "-D", "idea/a/gone")
        pop = harvest_until(d, lambda p: sha in p.by_commit and p.by_commit[sha].note is not None)
        assert pop.by_commit[sha].note.value is not None and disp.ledger.leases(sha) == []

        # the baseline moves while a seed runs and the daemon restarts: the new process finds the old
        # baseline's live seed among the new baseline's ancestors and cancels it
        def commit_on_main(name):
            (toy_env / name).write_text(name + "\n")
            git(toy_env, "add", name)
            git(toy_env, "commit", "-qm", name)
            return git(toy_env, "rev-parse", "HEAD").strip()
        third = commit_on_main("NOTES")
        pop = read_population(d.repo, d.research.baseline_ref)
        assert pop.baseline_commit == third and disp.dispatch(pop, d.jobs(pop)[:1]) == 1
        commit_on_main("CHANGES")
    finally:
        d.runner.close()
    d2 = build_daemon(load_config(write_config(tmp_path, toy_env)), with_llm=False)
    try:
        harvest_until(d2, lambda p: (n := d2.dispatcher.ledger.note(third)) is not None and n.status.value == "cancelled")
        assert d2.dispatcher.ledger.leases(third) == []
    finally:
        d2.runner.close()


def test_the_daemon_is_wired_by_its_constructor(toy_env, tmp_path):
    """The agreed signature: a Lifecycle (with its observers) given to Daemon(...) is the one every
    part writes through; nothing is set on the daemon afterwards."""
    from autoresearchd.app import make_runner
    from autoresearchd.engine.loop import Daemon
    from autoresearchd.research import open_research
    from autoresearchd.store.lifecycle import Lifecycle
    cfg = load_config(write_config(tmp_path, toy_env))
    research = open_research(cfg)
    events = []
    lifecycle = Lifecycle(research.repo, observers=[events.append])
    d = Daemon(cfg, research, make_runner(cfg, research), lifecycle=lifecycle, tuner=None)
    try:
        assert d.lifecycle is lifecycle and d.collector.lifecycle is lifecycle and d.dispatcher.lifecycle is lifecycle
        assert d.collector.slots is d.dispatcher.slots is d.slots        # one slot table, shared
        d.tick()                                                          # the baseline's seeds start
        pop = harvest_until(d, lambda p: p.baseline_note is not None)
        assert (Change.RESULT, pop.baseline_commit) in {(e.change, e.commit) for e in events}
    finally:
        d.runner.close()


def test_a_done_lease_for_a_seed_already_noted_is_cleared(toy_env, tmp_path):
    """A kill between a result note and its lease clear leaves a `done` lease for a seed the note
    holds. For an idea the next harvest rewrote the note and cleared it; for the baseline (whose note
    is final once its seeds are in) it stayed forever: `stale leases after idle` in the kill-9 test.
    The counted trial's lease is just dropped; a second trial of that seed (a twin that finished after
    the note) is named in the note's `superseded`, never counted."""
    from autoresearchd.store.ledger import Ledger
    from autoresearchd.store.notes import Lease, Note, Status, Trial
    from autoresearchd.vocab import LeaseState, Purpose
    cfg = load_config(write_config(tmp_path, toy_env))
    cfg.policy.baseline_seeds = 1
    d = build_daemon(cfg, with_llm=False)
    try:
        base = read_population(d.repo, d.research.baseline_ref).baseline_commit
        counted = Trial(trial_id="b-s0-r0", seed=0, status=Status.SUCCEEDED, value=1.0, host="local")
        twin = Trial(trial_id="b-s0-r1", seed=0, status=Status.SUCCEEDED, value=1.1, host="local")
        ledger = Ledger(d.repo)
        ledger.write_note(base, Note(status=Status.SUCCEEDED, idea_id="baseline", value=1.0, values=[1.0],
                                     seeds=[0], trials=[counted], seeds_planned=1))

        def lease(t):
            return Lease(trial_id=t.trial_id, seed=0, runner="local", host="local", slot="0",
                         purpose=Purpose.BASELINE, state=LeaseState.DONE, result=t)
        ledger.write_leases(base, [lease(counted), lease(twin)])
        d.collector.harvest(read_population(d.repo, d.research.baseline_ref))
        assert ledger.leases(base) == []
        note = ledger.note(base)
        assert [t.trial_id for t in note.trials] == ["b-s0-r0"] and note.value == 1.0
        assert note.superseded == ["b-s0-r1"]
    finally:
        d._pool.shutdown()
        d.dispatcher._pool.shutdown()
