"""The failures view's groups (views/board.py): a result the judge found implausible (status
`suspicious`, no tamper list, no flag) is grouped with the tampered ones, in a fresh board, in one moved
on by the changed idea, and in the dashboard's /api/failures. Before, the board tested the note's
*decision* for "suspicious" (never a decision: a dead test) and the status fell through to a group of
its own that the dashboard's list of groups does not name."""

from __future__ import annotations

from autoresearchd.config import load_config
from autoresearchd.store.notes import Note, Trial, format_note
from autoresearchd.store.refs import NOTES_REF
from autoresearchd.views.board import FAILURE_GROUPS, TAMPER_OR_SUSPICIOUS, Board, failure_reason
from autoresearchd.views.dashboard import Snapshot
from autoresearchd.views.summary import load
from autoresearchd.vocab import Status

from popbuilder import build_population, write_cfg


def test_an_implausible_result_is_grouped_with_the_tampered_ones(tmp_path):
    repo = build_population(tmp_path / "research", 24, seed=2)
    cfg = load_config(write_cfg(tmp_path, repo.path))
    research, before = load(cfg)
    first = next(i for i in before.ideas if i.value is not None and i.status == Status.SUCCEEDED)
    old_board = Board(before, research.manifest.goal)
    # as engine/collect.py files one: the trial judged implausible, no tamper list, no flag
    why = "val_loss 0.01 is outside the plausible range"
    n = Note(status=Status.SUSPICIOUS, metric="val_loss", goal="min", value=0.01, values=[0.01], error=why,
             trials=[Trial(trial_id="s", seed=0, status=Status.SUSPICIOUS, value=0.01, error=why)])
    repo.note_write(NOTES_REF, first.commit, format_note(n))
    research, pop = load(cfg)
    idea = pop.by_id[first.idea_id]
    assert idea.status == Status.SUSPICIOUS and not idea.note.tamper and not idea.note.flags
    assert failure_reason(idea) == TAMPER_OR_SUSPICIOUS in FAILURE_GROUPS

    fresh = Board(pop, research.manifest.goal)
    moved = old_board.advance([before.by_id[first.idea_id]], [idea], pop)
    for b in (fresh, moved):
        assert b.reasons[first.idea_id] == TAMPER_OR_SUSPICIOUS
        assert Status.SUSPICIOUS.value not in b.failures          # no group the dashboard does not list
        assert set(b.failures) <= set(FAILURE_GROUPS), b.failures
    assert moved.failures == fresh.failures
    assert moved.failures[TAMPER_OR_SUSPICIOUS] == old_board.failures[TAMPER_OR_SUSPICIOUS] + 1

    failures = Snapshot(cfg, research, pop, "1", secrets=[]).failures()["groups"]
    groups = {g["reason"]: [x["id"] for x in g["ideas"]] for g in failures}
    assert first.idea_id in groups[TAMPER_OR_SUSPICIOUS] and Status.SUSPICIOUS.value not in groups
