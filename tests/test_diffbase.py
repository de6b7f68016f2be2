"""A pushed idea's change is shown whole, as the gate checked it (store/diffbase.py): a push of two
commits, baseline -> X -> M, is one idea M, and every view (`show --diff`, the dashboard, W&B,
`export`) shows X's change too, not only M's against X. A push on top of a measured idea is shown
against that idea. Real git pushes from a clone; the views read the research repo."""

from __future__ import annotations

import io

from rich.console import Console

from autoresearchd.config import load_config
from autoresearchd.store.diffbase import diff_base, is_pushed
from autoresearchd.store.ledger import Ledger
from autoresearchd.store.notes import Note, Status
from autoresearchd.views.dashboard import Snapshot
from autoresearchd.views.export import records
from autoresearchd.views.observe import show
from autoresearchd.views.summary import load
from autoresearchd.views.wandb_mirror import WandbMirror

from conftest import git, write_config


def _commit(cl, path, text, message):
    (cl / path).write_text(text)
    git(cl, "add", path)
    git(cl, "commit", "-qm", message)
    return git(cl, "rev-parse", "HEAD").strip()


def _two_commit_push(toy_env, tmp_path, start="origin/main", name="carol/two"):
    cl = tmp_path / "clone"
    if not cl.exists():
        git(tmp_path, "clone", "-q", f"file://{toy_env}", str(cl))
    git(cl, "fetch", "-q", "origin")
    git(cl, "checkout", "-q", "-B", name.replace("/", "-"), start)
    _commit(cl, "helper_x.py", "HIDDEN_IN_X = 1\n", "X: a helper")
    run = (cl / "run.py").read_text().replace("x = 1.0", "x = 0.9")
    sha = _commit(cl, "run.py", run, "M: use it")
    git(cl, "push", "-q", "origin", f"HEAD:refs/heads/idea/{name}")
    return cl, sha


def _show(cfg, ref) -> str:
    buf = io.StringIO()
    show(load_config(cfg), Console(file=buf, width=200, color_system=None), ref, diff=True)
    return buf.getvalue()


def test_every_view_shows_a_two_commit_push_whole(toy_env, tmp_path):
    cfg = write_config(tmp_path, toy_env)
    _, sha = _two_commit_push(toy_env, tmp_path)
    c = load_config(cfg)
    research, pop = load(c)
    idea = pop.by_commit[sha]
    assert is_pushed(idea) and idea.base_commit != pop.baseline_commit     # first parent is X
    assert diff_base(research.repo, idea, pop.baseline_commit, pop.by_commit.__contains__) == pop.baseline_commit

    out = _show(cfg, sha[:10])
    assert "HIDDEN_IN_X" in out and "x = 0.9" in out

    page = Snapshot(c, research, pop, "1", secrets=[]).idea(sha[:10])
    assert "HIDDEN_IN_X" in page["diff"] and "x = 0.9" in page["diff"]

    rec = next(r for r in records(c) if r["idea_id"] == idea.idea_id)
    assert "HIDDEN_IN_X" in rec["code_diff"] and "x = 0.9" in rec["code_diff"]

    mirror = WandbMirror(c.wandb, research.manifest, repo=research.repo, background=False,
                         baseline_ref=research.baseline_ref)
    assert "HIDDEN_IN_X" in mirror._diff(sha, idea)


def test_a_push_on_a_measured_idea_is_shown_against_that_idea(toy_env, tmp_path):
    cfg = write_config(tmp_path, toy_env)
    cl = tmp_path / "clone"
    git(tmp_path, "clone", "-q", f"file://{toy_env}", str(cl))
    git(cl, "checkout", "-q", "-b", "parent", "origin/main")
    parent = _commit(cl, "parent_only.py", "PARENT_CHANGE = 1\n", "P: the measured parent")
    git(cl, "push", "-q", "origin", "HEAD:refs/heads/idea/carol/parent")
    # the parent has a result: it is a measured idea (what the daemon writes after its trials)
    Ledger(load(load_config(cfg))[0].repo).write_note(parent, Note(status=Status.SUCCEEDED, value=1.0))
    _, sha = _two_commit_push(toy_env, tmp_path, start=parent, name="carol/child")
    out = _show(cfg, sha[:10])
    assert "HIDDEN_IN_X" in out and "x = 0.9" in out
    assert "PARENT_CHANGE" not in out          # the parent's own change is the parent's, not this idea's


def test_the_daemons_own_ideas_keep_their_first_parent(toy_env, tmp_path):
    """An idea commit the daemon wrote is diffed against the parent it chose (no git call needed)."""
    cfg = write_config(tmp_path, toy_env)
    research, pop = load(load_config(cfg))

    class Own:      # the shape of an implemented idea: its id is not derived from its commit
        idea_id, commit, base_commit = "e0-abc-12345678", "1" * 40, "2" * 40
    assert diff_base(research.repo, Own(), pop.baseline_commit) == "2" * 40
