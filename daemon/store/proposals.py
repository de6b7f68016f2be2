"""Recording a proposal: an idea in words becomes a proposal commit in git before anything is spent on it.

One function for every source of ideas: the daemon's policy (engine/loop.py, through the implementer),
a person's `autoresearchd queue "..."` (daemon/human.py) and the benchmarks. It picks the idea's id
(stable: the same text, epoch and origin give the same id across restarts), refuses an id already
taken (a proposal, a record or an idea branch holds it), and hands the lifecycle writer what the
proposal commit is made of (the base's tree, its message the idea with its trailers): the writer makes
the commit and its ref, a `proposal/*` ref, or for a proposal the policy dropped (a duplicate) a record
with its `duplicate` note.

The proposal is any object with the fields of `policies.base.Proposal` (title, text, origin, epoch,
parents, model, cost_usd, tokens, prompt_hash, base_commit, dropped_reason, duplicate_of): store/ does
not import policies/ (docs/architecture.md, the import table).
"""

from __future__ import annotations

from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.ideas import format_message, make_idea_id
from autoresearchd.store.lifecycle import Lifecycle, Made
from autoresearchd.store.notes import Note, Status
from autoresearchd.store.refs import IDEA_BRANCHES, PROPOSALS_PREFIX, RECORDS_PREFIX


def proposal_id(prop) -> str:
    """The idea id of a proposal: a dropped one is salted with why, so it never takes a live idea's id."""
    salt = prop.origin + (f"\0duplicate\0{prop.dropped_reason}" if prop.dropped_reason else "")
    return make_idea_id(prop.text, prop.epoch, salt)


def id_taken(repo: GitRepo, idea_id: str) -> bool:
    """A proposal, a record or an idea branch (its name ends in the id's hash) holds the id already."""
    if any(repo.rev_parse(prefix + idea_id) for prefix in (PROPOSALS_PREFIX, RECORDS_PREFIX)):
        return True
    tail = "-" + idea_id.split("-")[-1]
    return any(ref.endswith(tail) for ref in repo.refs(IDEA_BRANCHES))


def record_proposal(repo: GitRepo, lifecycle: Lifecycle, prop, baseline: str, metric: str) -> str | None:
    """Write `prop` to git; returns its idea id, or None when the id is taken (nothing is written).
    `baseline`: the commit it builds on unless it names its own `base_commit`; `metric`: the env's,
    for a dropped proposal's note."""
    idea_id = proposal_id(prop)
    if id_taken(repo, idea_id):
        return None
    base = prop.base_commit or baseline
    # Model is overwritten by the implementer's model; Idea-Model keeps who proposed it (the bandit's)
    trailers = {"Idea-Id": idea_id, "Origin": prop.origin, "Parents": prop.parents, "Epoch": prop.epoch,
                "Model": prop.model, "Idea-Model": prop.model,
                "Idea-Cost-USD": f"{prop.cost_usd:.6f}" if prop.cost_usd else None,
                "Idea-Tokens": prop.tokens or None, "Prompt-Hash": getattr(prop, "prompt_hash", None),
                "Base": base}
    made = Made((base,), format_message(prop.title, prop.text, trailers))    # the base's tree: no code yet
    if prop.dropped_reason:
        dup = getattr(prop, "duplicate_of", None)
        lifecycle.dropped(idea_id, made, Note(status=Status.DUPLICATE, idea_id=idea_id, error=prop.dropped_reason,
                                              duplicate_of=dup or None, metric=metric))
    else:
        lifecycle.propose(idea_id, made)
    return idea_id
