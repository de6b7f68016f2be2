"""The whole loop on the local runner with a toy env: baseline seeds, human branches, linking,
validation, and crash-restart harvesting exactly once. Real git, real subprocesses."""

import os
import signal
import subprocess
import sys
import time

from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.notes import Status
from autoresearchd.store.population import read_population

from conftest import branch_idea, git, run_until_settled, write_config



def test_human_branches_end_to_end(toy_env, tmp_path):
    better = branch_idea(toy_env, "alice/lower", "Lower x\n\nSet x to 0.5.", {"run.py": (toy_env / "run.py")
                         .read_text().replace("x = 1.0", "x = 0.5")})
    crash = branch_idea(toy_env, "bob/crash", "Crash", {"run.py": "raise SystemExit(3)\n"})
    git(toy_env, "checkout", "-q", "--orphan", "unrelated")
    git(toy_env, "commit", "-qm", "unrelated history")
    git(toy_env, "branch", "-q", "-f", "idea/eve/unrelated", "HEAD")
    git(toy_env, "checkout", "-q", "main")
    before = (git(toy_env, "status", "--porcelain=v2", "--branch"), (toy_env / "run.py").read_bytes(),
              (toy_env / ".git" / "index").read_bytes())
    pop = run_until_settled(write_config(tmp_path, toy_env))
    assert pop.baseline_note.status == Status.SUCCEEDED
    assert len(pop.baseline_note.values) == 2 and pop.baseline_note.std is not None
    ideas = {i.commit: i for i in pop.ideas}
    good = ideas[better].note
    assert good.status == Status.SUCCEEDED and 0.5 <= good.value < 0.52   # evaluate's number, not run's 123
    assert good.delta < -0.4 and good.decision == "promoted" and ideas[better].origin == "human"
    bad = ideas[crash].note
    assert bad.status == Status.FAILED and "exited 3" in bad.error and bad.exit_code == 3
    unrelated = [i for i in pop.ideas if i.branch and i.branch.endswith("eve/unrelated")][0].note
    assert unrelated.status == Status.REJECTED and "no merge-base" in unrelated.error
    # plain git log in the research repo shows the results
    assert "succeeded score=" in git(toy_env, "log", "-1", "idea/alice/lower")
    # the user's checkout, index and HEAD are untouched
    after = (git(toy_env, "status", "--porcelain=v2", "--branch"), (toy_env / "run.py").read_bytes(),
             (toy_env / ".git" / "index").read_bytes())
    assert before == after
    ok, out = GitRepo(toy_env).fsck()
    assert ok, out


def test_identical_tree_is_linked_not_rerun(toy_env, tmp_path):
    cfg = write_config(tmp_path, toy_env)
    a = branch_idea(toy_env, "a/one", "Lower x", {"run.py": (toy_env / "run.py").read_text().replace("1.0", "0.7")})
    run_until_settled(cfg)
    b = branch_idea(toy_env, "b/two", "Same code again", {"run.py": (toy_env / "run.py").read_text()
                    .replace("1.0", "0.7")})
    pop = run_until_settled(cfg)
    nb = pop.by_commit[b].note
    assert nb.linked == a and nb.value == pop.by_commit[a].note.value
    assert "identical code" in nb.error and nb.trials[0].trial_id == pop.by_commit[a].note.trials[0].trial_id


def test_kill_9_then_restart_harvests_exactly_once(toy_env, tmp_path):
    counter = tmp_path / "runs.log"
    slow = (toy_env / "run.py").read_text().replace(
        "x = 1.0", f"open({str(counter)!r}, 'a').write('run\\n')\nimport time; time.sleep(4)\nx = 0.9")
    idea = branch_idea(toy_env, "slow/one", "Slow idea", {"run.py": slow})
    cfg = write_config(tmp_path, toy_env)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    p = subprocess.Popen([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), "start"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 60
    while time.time() < deadline and not (counter.exists() and counter.read_text().count("run") >= 1):
        time.sleep(0.1)
    assert counter.exists(), "the first daemon never started the trial"
    os.killpg(p.pid, signal.SIGKILL)       # the daemon dies; the detached trial keeps running
    p.wait()
    pop = run_until_settled(cfg)
    note = pop.by_commit[idea].note
    assert note.status == Status.SUCCEEDED and 0.9 <= note.value < 0.92
    assert counter.read_text().count("run") == 1          # harvested, never run twice
    assert len(note.trials) == 1
    assert not GitRepo(toy_env).notes_list("refs/notes/autoresearch-runs")   # no stale leases


def test_refill_counts_an_implementation_in_flight_once(toy_env, tmp_path):
    """A proposal being implemented is both recorded in git (pop.implementing()) and in flight
    (Daemon._implementing): the refill counts it once, so the queue fills to free slots + buffer."""
    from autoresearchd.app import build_daemon
    from autoresearchd.config import load_config
    from autoresearchd.policies.base import Proposal
    from autoresearchd.store.ledger import Ledger
    from autoresearchd.store.notes import Note

    from fake_llm import FakeLLM
    with FakeLLM() as fake:
        cfg = write_config(tmp_path, toy_env)
        cfg.write_text(cfg.read_text()
                       .replace('[llm]\nprovider = "none"\n',
                                f'[llm]\nprovider = "openai"\nbase_url = "{fake.openai_url}"\nmodel = "fake-model"\n')
                       .replace("[policy]\n", '[policy]\nname = "evolutionary"\nbatch = 1\nqueue_buffer = 2\n'))
        d = build_daemon(load_config(cfg))
        try:
            Ledger(d.repo).write_note(d.research.baseline_commit, Note(status=Status.SUCCEEDED, value=1.0,
                                                                       values=[1.0], seeds=[0], seeds_planned=1))
            idea_id = d.implementer.record_proposal(Proposal("in flight", "[Experiment] x", "seed", 0))
            d._implementing.add(idea_id)              # what _submit_implementation does
            asked = []
            d.policy.propose = lambda pop, n, env, llm: asked.append(n) or []     # a spy: how many it asks for
            pop = read_population(d.repo, d.research.baseline_ref)
            assert [i.idea_id for i in pop.implementing()] == [idea_id]
            free = len(d.dispatcher.free_slots())
            d._maybe_refill(pop)
            deadline = time.monotonic() + 30
            while not asked and time.monotonic() < deadline:
                time.sleep(0.05)
            assert asked == [free + 2 - 1]            # free slots + queue_buffer - the one in flight
        finally:
            d.runner.close()
