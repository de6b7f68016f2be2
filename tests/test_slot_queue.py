"""The order of the trials staged on one slot (runners/trial.sh, runners/base.py queued; docs/hosts.md,
"The slot's queue"): they run in the order submitted, also when one leaves the queue before its turn
(cancelled, its prepare failed, its directory cleaned away) or a trial id is staged again; and a host
that stops answering a submit is not tried again for the slot's next trial that round."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures_sshd import ssh_fleet  # noqa: F401  (fixture, started only when an ssh case runs)
from test_dispatch_prestage import (all_noted, code_tar, config, manifest, runner_for, spec,  # noqa: F401
                                    stamp, toy, wait_states)

from autoresearchd.config import load_config
from autoresearchd.manifest import EnvManifest
from autoresearchd.runners.base import PollState
from autoresearchd.store.notes import Status

from conftest import branch_idea, run_until_settled


def test_staged_trials_run_in_the_order_they_were_submitted(runner_for, tmp_path):
    # The first trial's wrapper is held up before it reaches the slot lock (its prepare step runs
    # first, and sleeps), so the wrappers staged after it reach the bare lock before it does: the
    # slot's queue must still run them in the order the dispatcher submitted them.
    m = manifest("sleep 0.2; echo ---; echo score: $AUTORESEARCH_SEED")
    slow = EnvManifest(run=m.run, metric="score", time_budget_s=60, prepare="sleep 2")
    r = runner_for(m)
    slot = r.slots()[0]
    tar = code_tar(tmp_path, {"x.txt": "x"})
    handles = [r.submit(spec(slow, tar, seed=1), slot)] + [r.submit(spec(m, tar, seed=s), slot) for s in (2, 3, 4)]
    wait_states(r, handles, {PollState.DONE})
    outs = [r.fetch(h) for h in handles]
    assert [o.metrics for o in outs] == [{"score": float(s)} for s in (1, 2, 3, 4)]
    starts = [stamp(h, "started") for h in handles]
    assert starts == sorted(starts), starts
    for before, after in zip(handles, handles[1:]):       # and one at a time, as before
        assert stamp(after, "started") >= stamp(before, "done") - 0.05


@pytest.mark.parametrize("leaves", ["cancelled", "prepare-fails", "cleaned-away"])
def test_a_trial_that_leaves_the_queue_keeps_the_order_behind_it(runner_for, tmp_path, leaves):
    # A (held up in its prepare step), B, C on one slot; B leaves before its turn (cancelled, or its
    # prepare fails): C must still wait for A, not only for B. `cleaned-away`: B is cancelled and its
    # directory cleaned away (as once its result is in) before C is even submitted: the queue is not
    # kept in trial directories.
    m = manifest("echo ---; echo score: $AUTORESEARCH_SEED")
    r = runner_for(m)
    slot = r.slots()[0]
    tar = code_tar(tmp_path, {"x.txt": "x"})
    a = r.submit(spec(EnvManifest(run=m.run, metric="score", time_budget_s=60, prepare="sleep 2.5"), tar, seed=1), slot)
    b_m = EnvManifest(run=m.run, metric="score", time_budget_s=60, prepare="exit 3") if leaves == "prepare-fails" else m
    b = r.submit(spec(b_m, tar, seed=2), slot)
    if leaves == "cleaned-away":
        r.cancel(b)
        wait_states(r, [b], {PollState.LOST, PollState.DONE})
        r.cleanup(b)
        assert not Path(b["dir"]).exists()
    c = r.submit(spec(m, tar, seed=3), slot)
    if leaves == "cancelled":
        r.cancel(b)
    wait_states(r, [a, c], {PollState.DONE})
    assert r.fetch(a).metrics == {"score": 1.0} and r.fetch(c).metrics == {"score": 3.0}
    assert stamp(c, "started") >= stamp(a, "done") - 0.05, "C ran before A"


def test_a_trial_staged_again_never_waits_on_a_trial_staged_after_it(runner_for, tmp_path):
    # A is staged, then B behind it; A is cancelled and staged again under its own id (a fresh
    # directory at the same path), now behind B. A queue that named trials by their directory made B
    # wait on the new A while the new A waited on B: neither ran. Turns are numbered at submit.
    m = manifest("echo ---; echo score: $AUTORESEARCH_SEED")
    r = runner_for(m)
    slot = r.slots()[0]
    tar = code_tar(tmp_path, {"x.txt": "x"})
    a = spec(EnvManifest(run=m.run, metric="score", time_budget_s=60, prepare="sleep 3"), tar, seed=1)
    first_a = r.submit(a, slot)
    b = r.submit(spec(EnvManifest(run=m.run, metric="score", time_budget_s=60, prepare="sleep 1.5"), tar, seed=2), slot)
    r.cancel(first_a)
    a.manifest = m
    again = r.submit(a, slot)
    states = wait_states(r, [b, again], {PollState.DONE}, timeout=30)
    assert states == [PollState.DONE, PollState.DONE]
    assert r.fetch(b).metrics == {"score": 2.0} and r.fetch(again).metrics == {"score": 1.0}


def test_a_host_that_stops_answering_is_not_tried_again_that_round(make_repo, tmp_path, caplog):
    # The host does not answer the slot's first submit of a round (here: the runner's submit raises as
    # the ssh runner does when its connection drops). The trial staged behind it on the slot is not
    # tried (it would wait out its own time-out): it goes back to the queue with no fault of its own,
    # and every trial still ends with one result.
    from autoresearchd.app import build_daemon
    from autoresearchd.runners.base import HostUnreachable
    log = tmp_path / "runs.log"
    repo = toy(make_repo, log, 0.3)
    ideas = [branch_idea(repo, f"h/{k}", f"Idea {k}", {"run.py": (repo / "run.py").read_text()
                         .replace("score: 1.0", f"score: 0.{k}")}) for k in (5, 6, 7)]
    d = build_daemon(load_config(config(tmp_path, repo, slots=1)))
    submitted, real = [], d.runner.submit

    def submit(spec, slot):
        submitted.append(spec.trial_id)
        if len(submitted) == 1:
            raise HostUnreachable("host local: the connection dropped (test)")
        return real(spec, slot)
    d.runner.submit = submit
    caplog.set_level("INFO", logger="autoresearchd")
    pop = run_until_settled(daemon=d, timeout=90, until=all_noted)
    untried = [r.getMessage() for r in caplog.records if "not tried:" in r.getMessage()]
    assert untried, "no submit was left untried: the round had one trial on the slot (test is void)"
    trials = [t for n in [pop.baseline_note] + [pop.by_commit[c].note for c in ideas] for t in n.trials]
    assert all(n.status == Status.SUCCEEDED for n in [pop.baseline_note] + [pop.by_commit[c].note for c in ideas])
    assert len(trials) == 4 and len({t.trial_id for t in trials}) == 4      # one result each
    assert not any("not tried" in f for t in trials for f in t.faults)
