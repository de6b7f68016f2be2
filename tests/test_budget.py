"""Compute is part of the rule (issue 26 class 3): an idea that trains longer than the baseline, within
the time limit, is `over_budget` and never promoted; an honest one is judged as before.

The daemon runs a cheap env whose train.py burns a fixed CPU time per step (the kernel's CPU seconds
are what the cap reads) and reports its step count (`budget_metrics = ["steps"]`, the env's own rule,
as tinygpt's fixed 200 steps). Four pushed ideas: an honest gain at the same compute; 3x the steps;
3x the steps while reporting the baseline's count (the kernel's figure catches it); and 3x the steps
at the same CPU cost (the env's step rule catches it). On the local runner (root: cgroups) and over
ssh (an unprivileged account: the rusage of the sandbox's reaped tree).
"""

from __future__ import annotations

import pytest
from needs import needs

from autoresearchd.manifest import EnvManifest
from autoresearchd.runners import sandbox as sandboxes
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.notes import Status, Trial
from autoresearchd.store.trust import over_budget

from conftest import branch_idea
from fixtures_reliability import run_until_idle, write_cfg
from fixtures_sshd import ssh_fleet  # noqa: F401  (fixture, started only for the ssh case)

MANIFEST = """[env]
name = "budget"
run = "python3 train.py"
evaluate = "python3 evaluate.py"
metric = "loss"
goal = "min"
time_budget_s = 300
eval_budget_s = 60
frozen = ["evaluate.py"]
artifacts = ["model.json"]
budget_metrics = ["steps"]
"""
TRAIN = """import json, time
STEPS = {steps}
STEP_CPU = {step_cpu}
GAIN = {gain}
for _ in range(STEPS):          # one step: a fixed amount of the kernel's CPU time
    t = time.process_time() + STEP_CPU
    while time.process_time() < t:
        pass
json.dump({{"loss": 10 / (1 + STEPS * GAIN)}}, open("model.json", "w"))
print("---")
print(f"steps: {{{reported}}}")
"""
EVALUATE = """import json, os
m = json.load(open(os.path.join(os.environ["AUTORESEARCH_ARTIFACTS"], "model.json")))
print("---")
print(f"loss: {m['loss']}")
"""


def train(steps=4, step_cpu=0.4, gain=1.0, reported="STEPS") -> str:
    return TRAIN.format(steps=steps, step_cpu=step_cpu, gain=gain, reported=reported)


def ssh_runner(fleet) -> str:
    h = fleet.hosts[0]
    return ('kind = "ssh"\nsandbox = "bwrap"\n[[runner.hosts]]\n'
            f'name = "{h.name}"\nhost = "127.0.0.1"\nport = {h.port}\nuser = "{fleet.user}"\n'
            f'key = "{fleet.client_key}"\nknown_hosts = "{fleet.known_hosts}"\ngpus = 1\nslots = 2\n'
            f'work_root = "{h.work_root}"\n')


@needs("bwrap", sandboxes.get("bwrap").available())
@pytest.mark.parametrize("where", ["local", "ssh"])
def test_an_idea_that_trains_longer_is_over_budget_and_never_promoted(make_repo, tmp_path, request, where):
    runner = ('kind = "local"\nslots = 2\nsandbox = "bwrap"' if where == "local"
              else ssh_runner(request.getfixturevalue("ssh_fleet")))
    repo = make_repo({".autoresearch.toml": MANIFEST, "evaluate.py": EVALUATE, "train.py": train()}, "research")
    ideas = {
        "honest": branch_idea(repo, "i/honest", "A better update rule\n\nSame steps.", {"train.py": train(gain=1.5)}),
        "longer": branch_idea(repo, "i/longer", "Train three times longer\n\nMore steps.", {"train.py": train(steps=12)}),
        "liar": branch_idea(repo, "i/liar", "Train longer, say otherwise\n\nMore steps.",
                            {"train.py": train(steps=12, reported="4")}),
        "cheap": branch_idea(repo, "i/cheap", "Many cheap steps\n\nMore, smaller steps.",
                             {"train.py": train(steps=12, step_cpu=0.4 / 3)}),
    }
    cfg = write_cfg(tmp_path / "cfg", repo, runner=runner)
    run_until_idle(cfg, timeout=400)
    from autoresearchd.store.population import read_population
    pop = read_population(GitRepo(repo), "refs/heads/main")
    base = pop.baseline_note
    assert base.status == Status.SUCCEEDED and base.trials[0].run_metrics == {"steps": 4.0}, base
    assert 1.5 <= base.cpu_s <= 2.5, base.cpu_s          # 4 steps x 0.4 s of CPU, plus start-up
    honest = pop.by_commit[ideas["honest"]].note
    assert honest.status == Status.SUCCEEDED and honest.decision == "promoted", honest
    assert not honest.budget
    for kind in ("longer", "liar", "cheap"):
        i = pop.by_commit[ideas[kind]]
        n = i.note
        assert n.status == Status.OVER_BUDGET and n.decision is None, (kind, n)
        assert i.value is None and not i.confirmed, kind        # never a result, a parent or a best
        assert n.error.startswith("over_budget") and any(f.startswith("over_budget") for f in n.flags)
        if kind == "cheap":                 # the env's own rule: 12 steps reported, the baseline's 4
            assert n.budget == {"unit": "steps", "used": 12.0, "baseline": 4.0}, n.budget
            assert n.cpu_s < 1.25 * base.cpu_s
        else:                               # the kernel's CPU seconds, whatever the run says
            assert n.budget["unit"] == "cpu_s" and n.budget["cap"] == 1.25
            assert n.budget["used"] > 2.5 * n.budget["baseline"], n.budget
            assert str(round(n.budget["allowed"], 1)) in n.error, n.error
    best = pop.best("min", confirmed=None)
    assert best is not None and best.commit == ideas["honest"]


# -- the rule, as a pure function ----------------------------------------------------------------------
def t(seed, status="succeeded", **kw):
    return Trial(trial_id=f"t{seed}", seed=seed, status=Status(status), **kw)


def env(**kw):
    return EnvManifest(run="x", metric="loss", **kw)


def test_the_cap_reads_gpu_seconds_on_a_gpu_env_and_can_be_turned_off():
    base = [t(0, cpu_s=100.0, gpu_s=10.0, gpus=1), t(1, cpu_s=100.0, gpu_s=12.0, gpus=1),
            t(2, cpu_s=100.0, gpu_s=11.0, gpus=1)]
    # a GPU env: the GPU seconds decide (CPU seconds three times the baseline's do not matter)
    assert over_budget([t(0, cpu_s=300.0, gpu_s=13.0)], base, env(gpus=1)) is None
    why, figs = over_budget([t(0, cpu_s=100.0, gpu_s=15.0)], base, env(gpus=1))
    assert figs == {"unit": "gpu_s", "used": 15.0, "baseline": 11.0, "cap": 1.25, "slack_s": 1.0, "allowed": 14.75}
    assert "GPU seconds" in why and "14.8" in why
    # within the cap's absolute slack (the measurement's start-up noise): not over
    assert over_budget([t(0, cpu_s=100.0, gpu_s=14.5)], base, env(gpus=1)) is None
    # a CPU env: CPU seconds; the cap is the manifest's; 0 turns it off
    assert over_budget([t(0, cpu_s=127.0)], base, env()) is not None
    assert over_budget([t(0, cpu_s=127.0)], base, env(compute_cap=1.5)) is None
    assert over_budget([t(0, cpu_s=1e6)], base, env(compute_cap=0)) is None
    # only measured seeds count: a failed seed's compute, or a baseline without figures, decides nothing
    assert over_budget([t(0, "failed", cpu_s=1e6)], base, env()) is None
    assert over_budget([t(0, cpu_s=1e6)], [t(0)], env()) is None


def test_a_budget_metric_the_run_stops_reporting_is_over_budget():
    base = [t(0, cpu_s=10.0, run_metrics={"steps": 200.0})]
    m = env(budget_metrics=["steps"])
    assert over_budget([t(0, cpu_s=10.0, run_metrics={"steps": 200.0})], base, m) is None
    assert over_budget([t(0, cpu_s=10.0, run_metrics={"steps": 150.0})], base, m) is None   # fewer: fine
    why, _ = over_budget([t(0, cpu_s=10.0)], base, m)
    assert "did not report" in why
    why, figs = over_budget([t(0, cpu_s=10.0, run_metrics={"steps": 201.0})], base, m)
    assert figs["unit"] == "steps" and "201" in why
