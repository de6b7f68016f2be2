"""The stops that end the whole search, tuning included, against the real daemon on the local runner:
the compute budget (`daemon.max_gpu_hours`, read in CPU-hours on a CPU env) and the target. Each
other stop (max_ideas, max_epochs, the LLM budget, an exhausted replay) ends the LLM's proposals
only, and tuning then gets every trial (docs/policies.md, "Tuning knobs: the hybrid search")."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import KNOB_X, TOY_EVAL, knob_manifest, run_until_settled, write_config

pytest.importorskip("optuna", reason="the `tune` extra (optuna) is not installed")

from autoresearchd.app import build_daemon  # noqa: E402
from autoresearchd.config import load_config  # noqa: E402
from autoresearchd.store.population import read_population  # noqa: E402
from autoresearchd.store.spend import budget_hours  # noqa: E402

TRIALS = 12

# each run burns 0.4 s of CPU (a CPU env: gpus = 0, so its compute is CPU time), at a value that
# depends on the knob x (optimum 0.3) and, by 0.2, on the seed (the baseline's known noise)
BURN_RUN = """import os, time
t = time.process_time()
while time.process_time() - t < 0.4:
    pass
seed = int(os.environ.get("AUTORESEARCH_SEED", "0"))
x = float(os.environ.get("AUTORESEARCH_KNOB_X", "1.5"))
with open("out.txt", "w") as f:
    f.write(str((x - 0.3) ** 2 + (0.2 if seed == 1 else 0.0)))
"""


@pytest.fixture
def burn_env(make_repo):
    return make_repo({".autoresearch.toml": knob_manifest(KNOB_X), "run.py": BURN_RUN, "evaluate.py": TOY_EVAL},
                     "research")


def tuned(pop):
    return [i for i in pop.ideas if i.origin == "tune"]


def test_a_cpu_env_honours_its_compute_budget_and_tuning_stops_with_it(tmp_path, burn_env):
    # 0.0002 h = 0.72 s: the baseline's two seeds (0.8 s of CPU and more) spend it
    cfg = write_config(tmp_path, burn_env, f"[tune]\nenabled = true\ntrials_per_study = {TRIALS}\nparallel = 2\n"
                                           "startup_trials = 2\n")
    cfg.write_text(cfg.read_text().replace("[daemon]\n", "[daemon]\nmax_gpu_hours = 0.0002\n"))
    pop = run_until_settled(cfg, timeout=240)
    spent = budget_hours(pop, 0)
    assert spent >= 0.0002          # CPU-hours measured (a CPU env has no GPU-hours: status says CPU-hours, below)
    # before the fix the budget read GPU-hours (0 here) and never stopped: the study ran all 12 trials.
    # Now only the tuned commits written before the baseline's seeds spent it run: at most parallel = 2,
    # none when the baseline's first seed alone spent it (a loaded machine)
    assert len(tuned(pop)) <= 2, [(i.idea_id, i.note and i.note.cpu_s) for i in tuned(pop)]
    d = build_daemon(load_config(cfg), with_llm=False)
    pop = read_population(d.repo, d.research.baseline_ref)
    assert d.search_stop(pop) == f"CPU-hour budget reached ({spent:.2f} h)"
    assert d.stop_condition(pop) == d.search_stop(pop)
    # `status` shows the spend against the budget in the env's unit, the budget as set (not "0.0")
    out = subprocess.run([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), "status"], text=True,
                         capture_output=True, timeout=120, env=dict(os.environ, COLUMNS="200")).stdout
    assert f"{spent:.2f} of 0.0002 CPU-hours" in out, out


def test_a_reached_target_ends_tuning(tmp_path, burn_env):
    # any confirmed idea reaches 100 (goal min): the first tuned commit confirmed on fresh seeds ends it
    cfg = write_config(tmp_path, burn_env, f"[tune]\nenabled = true\ntrials_per_study = {TRIALS}\nparallel = 2\n"
                                           "startup_trials = 2\n")
    cfg.write_text(cfg.read_text().replace("[daemon]\n", "[daemon]\ntarget = 100.0\n"))
    pop = run_until_settled(cfg, timeout=240)
    confirmed = [i for i in tuned(pop) if i.note is not None and i.note.decision == "confirmed"]
    assert confirmed, [(i.idea_id, i.value, i.note and i.note.decision) for i in tuned(pop)]
    # before the fix tuning went on to all 12 trials after the target was reached
    assert len(tuned(pop)) < TRIALS, len(tuned(pop))
    d = build_daemon(load_config(cfg), with_llm=False)
    assert d.search_stop(read_population(d.repo, d.research.baseline_ref)).startswith("target 100.0 reached by ")


def test_a_spent_budget_holds_the_queued_ideas_and_confirms_what_was_measured(tmp_path, burn_env):
    """Ideas queued once the compute budget is spent are held, not started: before, every queued idea
    ran past the budget (a replayed tinygpt search overshot it by 55-93%). The held ideas keep no note
    (nothing is lost: a raised budget runs them), `--until idle` ends, `status` says so."""
    from conftest import branch_idea
    # 0.0002 h = 0.72 s: the baseline's two seeds (0.8 s of CPU and more) spend it
    cfg = write_config(tmp_path, burn_env)
    cfg.write_text(cfg.read_text().replace("[daemon]\n", "[daemon]\nmax_gpu_hours = 0.0002\n"))
    run_until_settled(cfg, timeout=240)
    for k in range(3):          # pushed after the spend: none of them may start
        branch_idea(burn_env, f"h/x{k}", f"x = {k}", {"run.py": BURN_RUN.replace('"1.5"', f'"{0.2 + k}"')})
    d = build_daemon(load_config(cfg), with_llm=False)
    pop = run_until_settled(daemon=d, timeout=240, until=d.idle)
    assert d.idle(pop), [(i.idea_id, i.status) for i in pop.ideas]
    assert pop.baseline_note is not None and len(pop.baseline_note.values) == 2     # the baseline ran
    assert budget_hours(pop, 0) >= 0.0002
    # before the fix all three ran
    held = [i for i in pop.ideas if i.branch]
    assert len(held) == 3 and all(i.note is None and not i.leases and i.status == "queued" for i in held), \
        [(i.idea_id, i.status, i.note and i.note.status) for i in held]
    out = subprocess.run([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), "status"], text=True,
                         capture_output=True, timeout=120, env=dict(os.environ, COLUMNS="200")).stdout
    assert "compute budget spent: 3 queued idea(s) held, not started" in out, out
    # the budget raised: the held ideas run, as if never held
    cfg.write_text(cfg.read_text().replace("max_gpu_hours = 0.0002", "max_gpu_hours = 1.0"))
    pop = run_until_settled(cfg, timeout=240)
    assert all(i.note is not None for i in pop.ideas if i.branch), [(i.idea_id, i.status) for i in pop.ideas]
