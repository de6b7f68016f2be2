"""Recording a proposal (daemon/store/proposals.py), the one path for the daemon's policy and for a
person's `queue`, with real git: the proposal commit and its ref through the lifecycle writer, an id
taken refused with nothing written, a dropped duplicate recorded with its note."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import git

from autoresearchd.policies.base import Proposal
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.ideas import parse_message
from autoresearchd.store.lifecycle import Lifecycle
from autoresearchd.vocab import Change
from autoresearchd.store.notes import Status
from autoresearchd.store.proposals import id_taken, proposal_id, record_proposal
from autoresearchd.store.refs import IDEA_BRANCHES, PROPOSALS_PREFIX, RECORDS_PREFIX

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def setup(make_repo):
    repo = GitRepo(make_repo({"train.py": "x = 1\n"}))
    heard = []
    return repo, Lifecycle(repo, observers=[heard.append]), heard, repo.rev_parse("refs/heads/main")


def prop(**kw) -> Proposal:
    return Proposal(**{"title": "Warm up", "text": "[Experiment] warm up\n[Code Changes] lr", "origin": "explore",
                       "epoch": 2, "parents": ["e001-aaaa0001"], "model": "m", "cost_usd": 0.01, "tokens": 7, **kw})


def test_a_proposal_is_a_commit_on_the_base_with_its_trailers(setup):
    repo, life, heard, base = setup
    idea_id = record_proposal(repo, life, prop(), base, "val_loss")
    commit = repo.rev_parse(PROPOSALS_PREFIX + idea_id)
    assert commit and repo.tree_of(commit) == repo.tree_of(base)
    assert git(repo.path, "rev-parse", commit + "^").strip() == base
    title, _, tr = parse_message(repo.commit_message(commit))
    assert title == "Warm up" and tr["Idea-Id"] == idea_id and tr["Origin"] == "explore" and tr["Base"] == base
    assert tr["Idea-Model"] == "m" and tr["Idea-Cost-USD"] == "0.010000" and tr["Parents"] == "e001-aaaa0001"
    assert [(w.change, w.ref) for w in heard] == [(Change.PROPOSED, PROPOSALS_PREFIX + idea_id)]


def test_an_id_taken_is_refused_and_nothing_is_written(setup):
    repo, life, heard, base = setup
    first = record_proposal(repo, life, prop(), base, "val_loss")
    refs = repo.refs("refs/")
    assert record_proposal(repo, life, prop(), base, "val_loss") is None       # the same idea again
    assert repo.refs("refs/") == refs and len(heard) == 1
    # an idea branch whose name ends in the id's hash holds it too (the implemented idea, or a push)
    other = prop(text="another idea")
    oid = proposal_id(other)
    git(repo.path, "branch", f"idea/people/mine-{oid.split('-')[-1]}", base)
    assert id_taken(repo, oid) and record_proposal(repo, life, other, base, "val_loss") is None
    assert first != oid


def test_a_dropped_duplicate_is_a_record_with_its_note(setup):
    repo, life, heard, base = setup
    live = record_proposal(repo, life, prop(), base, "val_loss")
    dropped = record_proposal(repo, life, prop(dropped_reason="duplicate of e001-aaaa0001",
                                               duplicate_of="e001-aaaa0001"), base, "val_loss")
    assert dropped != live                                       # salted with why: never the live idea's id
    commit = repo.rev_parse(RECORDS_PREFIX + dropped)
    assert commit and repo.rev_parse(PROPOSALS_PREFIX + dropped) is None
    note = life.ledger.note(commit)
    assert note.status == Status.DUPLICATE and note.duplicate_of == "e001-aaaa0001" and note.metric == "val_loss"
    assert [w.change for w in heard] == [Change.PROPOSED, Change.DROPPED]


def test_a_proposal_on_a_parent_builds_on_it(setup):
    repo, life, heard, base = setup
    parent = repo.commit_tree(repo.tree_of(base), [base], "parent idea")
    git(repo.path, "branch", f"{IDEA_BRANCHES[len('refs/heads/'):]}e001/p-aaaa0001", parent)
    idea_id = record_proposal(repo, life, prop(base_commit=parent), base, "val_loss")
    commit = repo.rev_parse(PROPOSALS_PREFIX + idea_id)
    assert git(repo.path, "rev-parse", commit + "^").strip() == parent
    assert parse_message(repo.commit_message(commit))[2]["Base"] == parent


def test_queue_records_through_the_store_without_an_implementer():
    """`autoresearchd queue` records a proposal with store/proposals.py: it builds no Implementer and
    imports nothing of implement/ (before, it built Implementer(research, None, cfg) to record one)."""
    tree = ast.parse((ROOT / "daemon" / "human.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "autoresearchd.store.proposals" in imported
    assert not any(m.startswith("autoresearchd.implement") for m in imported if m)
    assert not any(isinstance(n, ast.Name) and n.id == "Implementer" for n in ast.walk(tree))
