"""engine/recovery.py's stale trials, without a daemon: Recovery finds the stale trials that finished
while their host was away (stale_finished), the caller collects them, and settle_stale takes what was
collected (it called back into the Collector before). A real LocalRunner removes the superseded twin's
directory; the leases are the ones a harvest would hand over."""

from __future__ import annotations

from autoresearchd.config import Config, RunnerCfg
from autoresearchd.engine.health import HostHealth
from autoresearchd.engine.recovery import Recovery
from autoresearchd.engine.slots import SlotTable
from autoresearchd.manifest import parse_manifest
from autoresearchd.runners.base import PollState
from autoresearchd.runners.local import LocalRunner
from autoresearchd.store.notes import Lease, Status, Trial
from autoresearchd.vocab import LeaseState

from conftest import TOY_MANIFEST


def recovery(tmp_path) -> tuple[Recovery, LocalRunner]:
    runner = LocalRunner(RunnerCfg(kind="local", slots=2, sandbox="none"), parse_manifest(TOY_MANIFEST),
                         tmp_path / "work")
    runner.hosts = {"local": None}      # configured hosts by name, as the ssh runner keeps them
    health = HostHealth()
    return Recovery(Config(), runner, SlotTable(Config(), runner, health), health, pool=None), runner


def lease(tmp_path, trial_id: str, seed: int, state: LeaseState, host: str = "local") -> Lease:
    d = tmp_path / "work" / trial_id
    d.mkdir(parents=True, exist_ok=True)
    return Lease(trial_id=trial_id, seed=seed, runner="local", host=host, slot="0", state=state,
                 handle={"host": host, "slot": "0", "dir": str(d)})


def test_a_stale_trial_that_finished_counts_once_collected_and_its_twin_is_superseded(tmp_path):
    rec, _ = recovery(tmp_path)
    stale = lease(tmp_path, "t-s0", 0, LeaseState.STALE)
    twin = lease(tmp_path, "t-s0-r1", 0, LeaseState.RUNNING)       # its re-run elsewhere
    other = lease(tmp_path, "t-s1", 1, LeaseState.STALE)           # finished, but its seed has a result
    states = {id(stale): PollState.DONE, id(twin): PollState.RUNNING, id(other): PollState.DONE}
    leases = [stale, twin, other]
    found = rec.stale_finished(leases, states, note_seeds={1})
    assert found == [stale]
    got = stale.model_copy(deep=True)                              # what the Collector's collection makes
    got.state = LeaseState.DONE
    got.result = Trial(trial_id=got.trial_id, seed=0, status=Status.SUCCEEDED, value=0.5, host="local")
    out, superseded = rec.settle_stale(leases, states, {1}, {id(stale): got})
    assert [(lz.trial_id, lz.state) for lz in out] == [
        ("t-s0", LeaseState.DONE), ("t-s0-r1", LeaseState.SUPERSEDED), ("t-s1", LeaseState.SUPERSEDED)]
    assert superseded == ["t-s0-r1", "t-s1"]
    assert not (tmp_path / "work" / "t-s0-r1").exists() and not (tmp_path / "work" / "t-s1").exists()


def test_a_fetch_that_failed_leaves_the_trial_stale_for_the_next_tick(tmp_path):
    rec, _ = recovery(tmp_path)
    stale = lease(tmp_path, "t-s0", 0, LeaseState.STALE)
    states = {id(stale): PollState.DONE}
    assert rec.stale_finished([stale], states, set()) == [stale]
    out, superseded = rec.settle_stale([stale], states, set(), {id(stale): stale.model_copy(deep=True)})
    assert [(lz.trial_id, lz.state) for lz in out] == [("t-s0", LeaseState.STALE)] and superseded == []
    assert (tmp_path / "work" / "t-s0").exists()


def test_a_lease_dropped_earlier_in_the_pass_does_not_stall_the_rest(tmp_path):
    """A stale trial of a host no longer configured is dropped (None in the pass's list); a stale trial
    after it, whose host answers, read the dropped one's state and raised, so the commit stalled."""
    rec, _ = recovery(tmp_path)
    gone = lease(tmp_path, "t-s0", 0, LeaseState.STALE, host="gpu9")
    back = lease(tmp_path, "t-s1", 1, LeaseState.STALE)
    states = {id(gone): PollState.RUNNING, id(back): PollState.RUNNING}
    assert rec.stale_finished([gone, back], states, set()) == []
    out, superseded = rec.settle_stale([gone, back], states, set(), {})
    assert [(lz.trial_id, lz.state) for lz in out] == [("t-s1", LeaseState.RUNNING)] and superseded == []
