"""Screening at low fidelity (engine/screening.py): the manifest's [env.screening] validated at load,
the decision rule (quantile and noise margin), and the screened commits, made and read back from real
git (a restart rebuilds them: nothing lives in memory)."""

from __future__ import annotations

import json
import math

import pytest

from autoresearchd.config import ScreeningCfg
from autoresearchd.engine import screening
from autoresearchd.manifest import ManifestError, parse_manifest
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.lifecycle import Lifecycle
from autoresearchd.vocab import Change
from autoresearchd.store.notes import Note, Status
from autoresearchd.store.refs import SCREENS_PREFIX
from autoresearchd.tune.knobs import KNOBS_FILE
from autoresearchd.vocab import FAILURES, Purpose

from conftest import git, knob_manifest

STEPS = """
[[env.knobs]]
name = "steps"
type = "int"
low = 10
high = 1000
baseline = 400

[[env.knobs]]
name = "lr"
low = 0.001
high = 0.1
baseline = 0.01

[[env.knobs]]
name = "act"
type = "categorical"
choices = ["relu", "gelu"]
baseline = "relu"
"""


def manifest(screen: str):
    return parse_manifest(knob_manifest(STEPS) + "\n[env.screening]\n" + screen)


def test_fidelity_knob_accepted():
    m = manifest('knob = "steps"\nfraction = 0.25\n')
    assert m.screening.knob == "steps" and m.screening.fraction == 0.25
    assert screening.screened_value(m.knob("steps"), 0.25) == 100
    m = manifest('knob = "lr"\nfraction = 0.5\n')         # a float knob serves too
    assert screening.screened_value(m.knob("lr"), 0.5) == 0.005


@pytest.mark.parametrize("screen, says", [
    ('knob = "epochs"\nfraction = 0.25\n', "not one of [[env.knobs]]"),        # unknown knob
    ('knob = "act"\nfraction = 0.25\n', "categorical"),                         # a categorical knob
    ('knob = "steps"\nfraction = 0.0\n', "fraction"),                           # outside (0, 1)
    ('knob = "steps"\nfraction = 1.0\n', "fraction"),
    ('knob = "steps"\nfraction = 1.5\n', "fraction"),
    ('knob = "steps"\nfraction = -0.25\n', "fraction"),
    ('knob = "steps"\nfraction = nan\n', "fraction"),
    ('knob = "steps"\nfraction = 0.01\n', "not a valid value"),                 # 4 steps: below low = 10
    ('knob = "steps"\n', "fraction"),                                           # fraction missing
    ('fraction = 0.25\n', "knob"),                                              # knob missing
    ('knob = "steps"\nfraction = 0.25\nresume = true\n', "resume"),            # an unknown key
])
def test_bad_screening_refused_at_load(screen, says):
    with pytest.raises(ManifestError) as e:
        manifest(screen)
    assert says in str(e.value), str(e.value)
    assert "[env]" in str(e.value) or "screening" in str(e.value)


def test_screening_config_keys():
    assert ScreeningCfg().enabled is False and ScreeningCfg().keep == 0.5
    for bad in ({"keep": 0}, {"keep": 1.5}, {"margin": -1}, {"min_peers": 0}, {"knob": "steps"}):
        with pytest.raises(ValueError):
            ScreeningCfg(**bad)


def test_vocabulary():
    assert Status.SCREENED_OUT == "screened_out" and Status.SCREENED_OUT.terminal
    assert Status.SCREENED_OUT in FAILURES and Purpose.SCREEN == "screen"


CFG = ScreeningCfg(enabled=True, keep=0.5, margin=3.0, min_peers=2)


def test_decision_by_margin_and_quantile():
    base = [1.00, 1.02]                       # the baseline's screened seeds: mean 1.01, sd ~0.014
    # better than the baseline: continues, whatever the peers
    assert screening.decide(0.9, [0.9], base, CFG, "min") is None
    # within the margin (3 x 0.0141 = 0.042) and alone: continues
    assert screening.decide(1.04, [1.04], base, CFG, "min") is None
    # beyond the margin: out, with the evidence
    ev = screening.decide(1.2, [1.2], base, CFG, "min")
    assert ev["rule"] == "margin" and ev["cutoff"] is None and ev["baseline_seeds"] == 2
    assert math.isclose(ev["margin"], 3 * 0.0141421, rel_tol=1e-3)
    # within the margin but outside the best half of four peers: out by the quantile
    peers = [0.90, 0.95, 1.03, 1.04]
    ev = screening.decide(1.04, peers, base, CFG, "min")
    assert ev["rule"] == "quantile" and ev["cutoff"] == 0.95 and ev["peers"] == 4
    assert screening.decide(0.95, peers, base, CFG, "min") is None
    # goal max mirrors it
    assert screening.decide(0.8, [0.8], base, CFG, "max")["rule"] == "margin"
    assert screening.decide(1.1, [1.1], base, CFG, "max") is None
    # no baseline screens yet: no decision
    assert screening.decide(5.0, [5.0], [], CFG, "min") is None


def test_cutoff_quantile():
    assert screening.cutoff([3, 1, 2, 4], 0.5, "min") == 2
    assert screening.cutoff([3, 1, 2, 4], 0.5, "max") == 3
    assert screening.cutoff([3, 1, 2], 0.5, "min") == 2        # ceil(1.5) = 2 kept
    assert screening.cutoff([7], 0.1, "min") == 7               # at least one kept


def test_saved_compute():
    from autoresearchd.store.notes import Trial
    tr = [Trial(trial_id="a", seed=0, status=Status.SUCCEEDED, cpu_s=10.0),
          Trial(trial_id="b", seed=1, status=Status.SUCCEEDED, cpu_s=30.0)]
    assert screening.saved(tr, 0.25, 0) == (15.0, "cpu")
    assert screening.saved(tr, 0.25, 1) == (None, "gpu")


def test_screen_commit_is_the_idea_plus_knobs_and_survives_a_restart(make_repo):
    m = manifest('knob = "steps"\nfraction = 0.25\n')
    path = make_repo({".autoresearch.toml": knob_manifest(STEPS), "run.py": "print(1)\n"})
    git(path, "checkout", "-q", "-b", "idea/human/x")
    (path / KNOBS_FILE).write_text(json.dumps({"lr": 0.02}))
    (path / "run.py").write_text("print(2)\n")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "knobs")
    idea = git(path, "rev-parse", "HEAD").strip()
    repo = GitRepo(path)
    seen = []
    lc = Lifecycle(repo, observers=[seen.append])
    c = screening.make_screen(repo, lc, m, idea, "x1")
    # only the knobs file differs from the idea; the idea's own knob values are kept
    assert git(path, "diff", "--name-only", idea, c).split() == [KNOBS_FILE]
    assert json.loads(git(path, "show", f"{c}:{KNOBS_FILE}")) == {"lr": 0.02, "steps": 100}
    assert git(path, "rev-parse", f"{c}^").strip() == idea
    assert git(path, "rev-parse", SCREENS_PREFIX + "x1").strip() == c
    assert seen[-1].change == Change.SCREEN
    # made once: asked again (a restarted daemon), the same commit
    assert screening.make_screen(repo, Lifecycle(repo), m, idea, "x1") == c
    # its result: the value moves to `screened`, never the metric of record
    lc.screen_result(c, Note(status=Status.SUCCEEDED, idea_id="x1", metric="score", goal="min",
                             screened={"value": 1.25, "of": idea, "knob": "steps", "fraction": 0.25}))
    assert seen[-1].change == Change.SCREEN_RESULT
    # a fresh reader (a restart) rebuilds the screen from git alone: the population carries it
    from autoresearchd.store.population import read_population
    pop = read_population(GitRepo(path), "main")
    got = pop.screens
    assert set(got) == {"x1"} and got["x1"].of == idea and got["x1"].value == 1.25
    assert got["x1"].note.value is None and got["x1"].note.decision is None
    # the screened commit is never an idea of the population
    assert all(i.commit != c for i in pop.ideas)


def test_enabled_without_a_fidelity_knob_refused_at_start(toy_env, tmp_path):
    """[screening] enabled on an env whose manifest declares no [env.screening]: a clear ConfigError."""
    from autoresearchd.app import build_daemon
    from autoresearchd.config import ConfigError, load_config
    from conftest import write_config
    (tmp_path / "cfg").mkdir()
    cfg = write_config(tmp_path / "cfg", toy_env, "[screening]\nenabled = true\n")
    with pytest.raises(ConfigError, match=r"\[env.screening\]"):
        build_daemon(load_config(cfg))
