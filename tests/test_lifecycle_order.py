"""store/lifecycle.py: the observers hear of a state change once all of it is written. A result,
cancelled or stopped note clears the finished trials' leases in the same change; an observer told of
it (the W&B mirror, or anything that reads git) must not see the note beside leases that still call
those trials live (docs/architecture.md, "Walk: one result": the note, the archive ref, the leases
still live, then the observers). A real repo, the real writer."""

from __future__ import annotations

from autoresearchd.store.lifecycle import Change, Lifecycle
from autoresearchd.store.notes import Lease, Note, Status
from autoresearchd.vocab import LeaseState

from popbuilder import build_population


def test_observers_are_told_after_the_leases_are_written(tmp_path):
    from autoresearchd.store.population import read_population
    repo = build_population(tmp_path / "research", 6)
    pop = read_population(repo, "refs/heads/main")
    ideas = [i for i in pop.ideas if i.commit and i.branch][:3]
    seen = {}
    lc = Lifecycle(repo)
    lc.observe(lambda ev: seen.setdefault(ev.change, [lz.trial_id for lz in lc.ledger.leases(ev.commit)]))
    for change, idea in zip((Change.RESULT, Change.CANCELLED, Change.STOPPED), ideas):
        done = Lease(trial_id=f"{idea.idea_id}-s0", seed=0, runner="local", host="local", slot="0",
                     state=LeaseState.RUNNING)
        live = Lease(trial_id=f"{idea.idea_id}-s1", seed=1, runner="local", host="local", slot="1",
                     state=LeaseState.STALE)
        lc.leased(idea.commit, [done, live])
        note = Note(status=Status.STOPPED if change == Change.STOPPED else Status.CANCELLED
                    if change == Change.CANCELLED else Status.FAILED, idea_id=idea.idea_id, error="x")
        with lc.batch():                     # as a harvest writes: one notes commit per ref
            getattr(lc, change.value)(idea.commit, idea, note, [live])
        assert seen[change] == [live.trial_id], (change, seen[change])
        assert [lz.trial_id for lz in lc.ledger.leases(idea.commit)] == [live.trial_id]
        assert lc.ledger.note(idea.commit).status == note.status
