"""The implementer end to end: the real openai SDK against a local HTTP server, real git, real
checks. Self-revision, API errors, garbage, budgets, frozen files, and the prompt context."""

import json

import pytest
from needs import needs

from autoresearchd.app import make_llm
from autoresearchd.makelifecycle import make_lifecycle
from autoresearchd.config import load_config
from autoresearchd.implement.implementer import Implementer, render_files
from autoresearchd.llm import BudgetExhausted
from autoresearchd.policies.base import Proposal
from autoresearchd.research import open_research
from autoresearchd.store.notes import Status, parse_note
from autoresearchd.store.population import read_population
from autoresearchd.store.refs import PROPOSALS_PREFIX, RECORDS_PREFIX

from conftest import TOY_EVAL, TOY_MANIFEST, TOY_RUN
from fake_llm import FakeLLM, Garbage, Empty, Reply, Status as HTTP

GOOD = """I lower x.

```diff
--- a/run.py
+++ b/run.py
@@ -1,6 +1,6 @@
 import os, random
 random.seed(int(os.environ.get("AUTORESEARCH_SEED", "0")))
-x = 1.0
+x = 0.5
 with open("out.txt", "w") as f:
     f.write(str(x + random.random() * 0.01))
 print("---")
```
"""
NOWHERE = """```diff
--- a/run.py
+++ b/run.py
@@ -1,3 +1,3 @@
 import numpy as np
-y = 2.0
+y = 3.0
 print(y)
```"""
SYNTAX = GOOD.replace("+x = 0.5", "+x = (0.5")
FROZEN = """```diff
--- a/evaluate.py
+++ b/evaluate.py
@@ -1,2 +1,2 @@
-import os
+import os  # cheat
 v = float(open(os.path.join(os.environ["AUTORESEARCH_ARTIFACTS"], "out.txt")).read())
```"""


@pytest.fixture
def setup(make_repo, tmp_path):
    manifest = TOY_MANIFEST.replace('context =', 'check = "python3 run.py"\nhidden = ["notes_secret.md"]\ncontext =')
    env = make_repo({".autoresearch.toml": manifest, "run.py": TOY_RUN, "evaluate.py": TOY_EVAL,
                     "notes_secret.md": "do not show"}, "research")
    fake = FakeLLM()

    def make(extra=""):
        cfg_path = tmp_path / "c.toml"
        cfg_path.write_text(f'[research]\nrepo = "{env}"\n[llm]\nprovider = "openai"\nbase_url = "{fake.openai_url}"\n'
                            f'model = "m"\nbackoff_s = 0.01\nmax_retries = 2\ntimeout_s = 5\n'
                            f'[llm.prices.m]\ninput = 1000.0\noutput = 2000.0\n{extra}')
        cfg = load_config(cfg_path)
        research = open_research(cfg)
        llm, _ = make_llm(cfg, research)
        return cfg, research, Implementer(research, llm, cfg, make_lifecycle(cfg, research))
    yield make, fake
    fake.close()


def propose(impl, title="Lower x", text="Set x to 0.5 so the score drops."):
    return impl.record_proposal(Proposal(title=title, text=text, origin="explore", epoch=1, cost_usd=0.01,
                                         tokens=100, model="m"))


def test_self_revision_then_commit(setup):
    make, fake = setup
    cfg, research, impl = make()
    fake.script(Reply(NOWHERE, 100, 50), Reply(GOOD, 100, 50))
    idea_id = propose(impl)
    branch = impl.implement(idea_id)
    repo = research.repo
    assert branch and repo.rev_parse(branch)
    pop = read_population(repo, research.baseline_ref)
    idea = pop.by_id[idea_id]
    assert idea.attempts == 2 and idea.origin == "explore" and idea.epoch == 1 and idea.model == "m"
    assert "x = 0.5" in repo.read_files(idea.commit, ["run.py"])["run.py"].decode()
    # cost: ideation share + two implement calls at 1000/2000 USD per Mtok
    assert abs(idea.cost_usd - (0.01 + 2 * (100 * 1000 + 50 * 2000) / 1e6)) < 1e-9
    assert idea.tokens == 100 + 2 * 150
    transcript = json.loads(repo.read_blob(idea.trailers.transcript))
    assert len(transcript) == 2 and transcript[0]["error"] and "run.py" in transcript[0]["error"]
    # the revision request carried the error back to the model
    assert "could not be used" in fake.requests[1].body["messages"][-1]["content"]
    assert repo.rev_parse(PROPOSALS_PREFIX + idea_id) is None


def test_check_failure_feeds_back(setup):
    make, fake = setup
    _, research, impl = make()
    fake.script(Reply(SYNTAX), Reply(GOOD))
    assert impl.implement(propose(impl))
    assert "SyntaxError" in fake.requests[1].body["messages"][-1]["content"]


def test_500_then_success(setup):
    make, fake = setup
    _, research, impl = make()
    fake.script(HTTP(500), Reply(GOOD))
    assert impl.implement(propose(impl))


@pytest.mark.parametrize("item,reason", [(Garbage(), "LLM call failed"), (Empty(), "LLM call failed"),
                                         (Reply("I cannot help with that."), "no unified diff found")])
def test_unusable_responses_are_recorded(setup, item, reason):
    make, fake = setup
    _, research, impl = make("[implementer]\nmax_revisions = 0\n")
    fake.script(item, item, item)
    idea_id = propose(impl)
    assert impl.implement(idea_id) is None
    repo = research.repo
    rec = repo.rev_parse(RECORDS_PREFIX + idea_id)
    note = parse_note(repo.note_read("refs/notes/autoresearch", rec))
    assert note.status == Status.IMPLEMENT_FAILED and reason in note.error


def test_frozen_file_rejected(setup):
    make, fake = setup
    _, research, impl = make("[implementer]\nmax_revisions = 0\n")
    fake.script(Reply(FROZEN))
    idea_id = propose(impl)
    assert impl.implement(idea_id) is None
    note = parse_note(research.repo.note_read("refs/notes/autoresearch",
                                              research.repo.rev_parse(RECORDS_PREFIX + idea_id)))
    assert note.status == Status.REJECTED and "evaluate.py" in note.error


def test_budget_exhaustion_stops_cleanly(setup):
    make, fake = setup
    cfg, research, impl = make()
    impl.llm.budget.max_calls = 1
    fake.script(Reply(NOWHERE), Reply(GOOD))
    idea_id = propose(impl)
    with pytest.raises(BudgetExhausted):
        impl.implement(idea_id)
    assert fake.count == 1
    # the proposal is kept for later, not lost
    assert research.repo.rev_parse(PROPOSALS_PREFIX + idea_id)


def test_prompt_context(setup):
    make, fake = setup
    _, research, impl = make()
    text = render_files(research.repo, research.baseline_commit, research.manifest)
    assert text.index("## .autoresearch.toml") < text.index("## evaluate.py") < text.index("## run.py")
    assert "## evaluate.py (READ-ONLY: frozen)" in text
    assert "(hidden from this view)" in text and "do not show" not in text
    assert "    3| x = 1.0" in text


def test_safety_rejection_is_final_not_sent_back(setup):
    """A diff refused by a safety rule (here: a frozen file) ends the idea at once: the model is not
    asked again, although revisions are left."""
    make, fake = setup
    _, research, impl = make("[implementer]\nmax_revisions = 2\n")
    fake.script(Reply(FROZEN), Reply(GOOD), Reply(GOOD))
    idea_id = propose(impl)
    assert impl.implement(idea_id) is None
    assert len(fake.requests) == 1, "a safety rejection was sent back to the model"
    note = parse_note(research.repo.note_read("refs/notes/autoresearch",
                                              research.repo.rev_parse(RECORDS_PREFIX + idea_id)))
    assert note.status == Status.REJECTED and "evaluate.py" in note.error


MISCOUNTED = """```diff
--- a/run.py
+++ b/run.py
@@ -2,7 +2,9 @@
 random.seed(int(os.environ.get("AUTORESEARCH_SEED", "0")))
-x = 1.0
+x = 0.5
 with open("out.txt", "w") as f:
```
"""


def test_complete_diff_with_wrong_counts_is_recounted(setup):
    """The answer is complete (closed fence) but its @@ header declares 7/9 lines for a 3/3 hunk: the
    counts are recounted and the diff applies on the first attempt; nothing calls it truncated."""
    make, fake = setup
    _, research, impl = make("[implementer]\nmax_revisions = 0\n")
    fake.script(Reply(MISCOUNTED))
    branch = impl.implement(propose(impl))
    assert branch, "a complete diff with wrong hunk counts was refused"
    assert b"x = 0.5" in research.repo.read_files(branch, ["run.py"])["run.py"]


@needs("bwrap", None if __import__("shutil").which("bwrap") else "bubblewrap is needed for the sandboxed check")
def test_the_check_runs_the_ideas_code_in_the_sandbox(setup):
    """The check executes LLM-written code on the daemon's machine: in the sandbox, the research
    repo's .git (its hooks) is out of reach."""
    make, fake = setup
    cfg, research, impl = make()
    hook = research.repo.git_dir / "hooks" / "post-commit-check-probe"
    line = (f'[open(p, "w").close() for p in [{str(hook)!r}] '
            f'if __import__("os").access(__import__("os").path.dirname(p), 2)]')
    fake.script(Reply(GOOD.replace("+x = 0.5\n", f"+x = 0.5\n+{line}\n").replace("@@ -1,6 +1,6 @@", "@@ -1,6 +1,7 @@")))
    assert impl.implement(propose(impl))
    assert not hook.exists(), "the check reached the research repo's .git"
