"""Tuning on every runner (issue 30): the knob values a tuned commit sets reach `run` through the
environment, byte for byte, on the local, ssh and Slurm runners (shell-hostile categorical choices
through the default sandbox); and the real daemon tunes a toy env on the ssh runner (sshd on loopback)
and on Slurm (the single-node test cluster): each tuned trial's note names the sampler and its trial
number, its value is the surface at its knobs file's values, the study is rebuilt from the notes, and a
restarted daemon goes on from the next trial number. The local runner's daemon case is test_tune.py."""

from __future__ import annotations

import json
import os
import shutil
import uuid

import pytest

from conftest import KNOB_X, TOY_EVAL, git, knob_manifest, run_until_settled
from fixtures_reliability import write_cfg
from fixtures_sshd import ssh_fleet  # noqa: F401  (fixture, started only for the ssh cases)
from fixtures_slurm import slurm_cluster  # noqa: F401  (fixture, started only for the slurm cases)
from test_runner_contract import code, make_runner, manifest, run_trial  # noqa: F401  (fixtures)

optuna = pytest.importorskip("optuna", reason="the `tune` extra (optuna) is not installed")

from autoresearchd.research import load_manifest  # noqa: E402
from autoresearchd.store.gitrepo import GitRepo  # noqa: E402
from autoresearchd.tune.knobs import KNOBS_FILE, knob_env  # noqa: E402
from autoresearchd.tune.tuner import rebuild  # noqa: E402

# categorical choices that a shell would expand, split or glob if one layer forgot its quotes (every
# one printable ASCII, as a choice must be): quotes, command substitution, backticks, variables, globs,
# a backslash, separators, a leading dash and spaces at both ends
MODES = ["it's \"a\" $(touch PWNED) `id`", " b & c; $HOME \\ * ?[x] ", "-n ${IFS}|>out <in 'd'"]

MODE_TABLE = "\n[[env.knobs]]\nname = \"mode\"\ntype = \"categorical\"\nchoices = [{}]\nbaseline = {}\n".format(
    ", ".join(json.dumps(m) for m in MODES), json.dumps(MODES[0]))
KNOB_MANIFEST = knob_manifest(KNOB_X + MODE_TABLE)

# the surface: optimum at x = 0.3 and the second mode; a mode that arrived changed by a shell is not in
# MODES, so the run fails (and the trial's note says failed)
KNOB_RUN = f"""import os
MODES = {MODES!r}
x = float(os.environ.get("AUTORESEARCH_KNOB_X", "1.5"))
mode = os.environ.get("AUTORESEARCH_KNOB_MODE", MODES[0])
with open("out.txt", "w") as f:
    f.write(str((x - 0.3) ** 2 + abs(MODES.index(mode) - 1)))
"""


def surface(x: float, mode: str) -> float:
    return (x - 0.3) ** 2 + abs(MODES.index(mode) - 1)


# -- the runner: every value reaches run as it was sent -----------------------------------------------
def test_every_runner_passes_knob_values_to_run_unchanged(make_runner, code):
    """Each runner with its default sandbox; run prints each knob variable's value as JSON."""
    from autoresearchd.manifest import parse_manifest
    km = parse_manifest(KNOB_MANIFEST)
    m = manifest("python3 show.py")
    r = make_runner(m)
    show = ("import json, os\nv = {k: os.environ.get(k) for k in ('AUTORESEARCH_KNOB_X', 'AUTORESEARCH_KNOB_MODE')}\n"
            "print(json.dumps(v))\nprint('---')\nprint('score: 1')\n")
    tar = code({"show.py": show})[0]
    for mode in MODES:
        env = knob_env(km, {"x": 0.1 + 0.2, "mode": mode})        # 0.30000000000000004: every digit travels
        _, out = run_trial(r, m, tar, knobs=env)
        assert out.error is None, (out.error, out.log[-2000:])
        line = next(ln for ln in out.log.decode().splitlines() if ln.startswith("{"))
        assert json.loads(line) == {"AUTORESEARCH_KNOB_X": "0.30000000000000004", "AUTORESEARCH_KNOB_MODE": mode}


# -- the daemon: a study tuned on ssh and on Slurm ----------------------------------------------------
@pytest.fixture
def knob_env_repo(make_repo):
    return make_repo({".autoresearch.toml": KNOB_MANIFEST, "run.py": KNOB_RUN, "evaluate.py": TOY_EVAL}, "research")


def tune_cfg(tmp_path, repo, runner: str, trials: int):
    rest = ("[daemon]\ntick_s = 0.3\n[policy]\nbaseline_seeds = 1\nconfirm_seeds = 0\n"
            f'[tune]\nenabled = true\nsampler = "tpe"\ntrials_per_study = {trials}\nparallel = 2\nstartup_trials = 2\n')
    return write_cfg(tmp_path / "cfg", repo, runner=runner, rest=rest)


def tuned(pop):
    return sorted((i for i in pop.ideas if i.origin == "tune"), key=lambda i: i.trailers.tune_trial)


def check_study(repo, pop, trials: int, host: str):
    """`trials` tuned commits of the baseline's study, each measured at its knobs file's values, its note
    naming the sampler and trial; the study rebuilt from the notes holds each as COMPLETE."""
    ideas = tuned(pop)
    assert [i.trailers.tune_trial for i in ideas] == list(range(1, trials + 1)), \
        [(i.idea_id, i.status, i.note and i.note.error) for i in pop.ideas]
    for i in ideas:
        assert i.branch == f"refs/heads/idea/tune/baseline/{i.trailers.tune_trial}"
        assert git(repo, "diff", "--name-only", pop.baseline_commit, i.commit).split() == [KNOBS_FILE]
        values = json.loads(git(repo, "show", f"{i.commit}:{KNOBS_FILE}"))
        n = i.note
        assert n is not None and n.status == "succeeded", (i.idea_id, n and n.status, n and n.error)
        assert n.tune["sampler"] == "tpe" and n.tune["trial"] == i.trailers.tune_trial
        assert n.tune["study"] == "baseline" and n.tune["knobs"] == values and set(values) == {"x", "mode"}
        assert n.value == pytest.approx(surface(values["x"], values["mode"]), abs=1e-6)
        assert {t.host for t in n.trials} == {host}, [t.host for t in n.trials]      # ran where it says
    assert pop.baseline_note.values == pytest.approx([surface(1.5, MODES[0])])   # no knob variables for it
    study = rebuild(pop, load_manifest(GitRepo(repo), "main"), "baseline", "tpe", 0, 2)
    done = {t.user_attrs["trial"]: t for t in study.trials}
    assert set(done) == set(range(1, trials + 1))
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in done.values())
    assert {n: t.value for n, t in done.items()} == pytest.approx({i.trailers.tune_trial: i.value for i in ideas})
    assert {n: t.params for n, t in done.items()} == {i.trailers.tune_trial: i.note.tune["knobs"] for i in ideas}
    return ideas


def tune_and_restart(tmp_path, repo, runner: str, host: str):
    """Two tuned trials, then a new daemon with a budget of three goes on from trial 3 (nothing in memory)."""
    pop = run_until_settled(tune_cfg(tmp_path, repo, runner, 2), timeout=240)
    first = {i.commit for i in check_study(repo, pop, 2, host)}
    pop = run_until_settled(tune_cfg(tmp_path, repo, runner, 3), timeout=240)
    assert first <= {i.commit for i in check_study(repo, pop, 3, host)}
    return pop


def test_ssh_runner_tunes_and_rebuilds_the_study(knob_env_repo, tmp_path, monkeypatch, ssh_fleet):  # noqa: F811
    from fixtures_hosts import host_toml
    monkeypatch.setenv("AUTORESEARCHD_SSH_CONFIG", os.devnull)
    pop = tune_and_restart(tmp_path, knob_env_repo, 'kind = "ssh"\n' + host_toml(ssh_fleet, 0),
                           ssh_fleet.hosts[0].name)
    assert not any(lz for i in pop.ideas for lz in i.leases)


def test_slurm_runner_tunes_and_rebuilds_the_study(knob_env_repo, tmp_path, monkeypatch, slurm_cluster):  # noqa: F811
    monkeypatch.setenv("SLURM_CONF", slurm_cluster.env["SLURM_CONF"])
    work = tmp_path / f"slurm-trials-{uuid.uuid4().hex[:6]}"
    try:
        pop = tune_and_restart(tmp_path, knob_env_repo,
                               f'kind = "slurm"\n[runner.slurm]\nwork_root = "{work}"\nmax_jobs = 2',
                               "slurm")      # the runner's host without a login node
        assert not any(lz for i in pop.ideas for lz in i.leases)
        slurm_cluster.wait_idle(30)
    finally:
        shutil.rmtree(work, ignore_errors=True)
