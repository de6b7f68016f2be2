"""Knobs: the manifest's [[env.knobs]] (every validation rule), the knobs file a commit carries
(every way it can be wrong, each refused by the gate with a note before anything runs), the variables
a trial gets, and tinygpt's knobs (declared baselines equal the code's defaults)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import KNOB_X, TOY_EVAL, knob_manifest, run_until_settled, write_config

from autoresearchd.manifest import ManifestError, parse_manifest
from autoresearchd.tune.knobs import KNOBS_FILE, KnobFileError, knob_env, parse_values

ROOT = Path(__file__).resolve().parents[1]
HEAD = "[env]\nrun = 'x'\nmetric = 'v'\n"


def knobs(*tables: str):
    return parse_manifest(HEAD + "".join(f"[[env.knobs]]\n{t}\n" for t in tables)).knobs


GOOD = [
    ("name = 'lr'\nlow = 1e-4\nhigh = 1e-2\nlog = true\nbaseline = 1e-3", "lr", "AUTORESEARCH_KNOB_LR"),
    ("name = 'width'\ntype = 'int'\nlow = 64\nhigh = 192\nstep = 32\nbaseline = 128", "width", "AUTORESEARCH_KNOB_WIDTH"),
    ("name = 'act'\ntype = 'categorical'\nchoices = ['gelu', 'relu']\nbaseline = 'gelu'", "act", "AUTORESEARCH_KNOB_ACT"),
]


@pytest.mark.parametrize("table,name,env", GOOD)
def test_valid_knobs(table, name, env):
    (k,) = knobs(table)
    assert k.name == name and k.env == env


# every rule of Knob._valid, each with the phrase its error names
BAD = [
    ("name = 'LR'\nlow = 0.1\nhigh = 1.0\nbaseline = 0.5", "lower-case letters"),
    ("name = '1x'\nlow = 0.1\nhigh = 1.0\nbaseline = 0.5", "lower-case letters"),
    ("name = 'a-b'\nlow = 0.1\nhigh = 1.0\nbaseline = 0.5", "lower-case letters"),
    ("name = 'x'\nlow = 1.0\nhigh = 1.0\nbaseline = 1.0", "low < high"),
    ("name = 'x'\nhigh = 1.0\nbaseline = 1.0", "low < high"),
    ("name = 'x'\nlow = 0.0\nhigh = 1.0\nlog = true\nbaseline = 0.5", "log-scale knob needs low > 0"),
    ("name = 'x'\nlow = 0.1\nhigh = 1.0\nbaseline = 2.0", "outside"),
    ("name = 'x'\nlow = 0.1\nhigh = 1.0\nbaseline = 'big'", "must be a number"),
    ("name = 'x'\ntype = 'int'\nlow = 0\nhigh = 10\nbaseline = 2.5", "whole"),
    ("name = 'x'\ntype = 'int'\nlow = 0\nhigh = 10\nstep = 3\nbaseline = 3", "grid"),
    ("name = 'x'\ntype = 'int'\nlow = 0\nhigh = 9\nstep = 3\nbaseline = 4", "grid"),
    ("name = 'x'\nlow = 0.0\nhigh = 1.0\nstep = 0.1\nbaseline = 0.5", "int knobs only"),
    ("name = 'x'\nlow = 0.0\nhigh = 1.0\nchoices = [1, 2]\nbaseline = 0.5", "categorical knobs only"),
    ("name = 'x'\ntype = 'categorical'\nchoices = ['a']\nbaseline = 'a'", "two or more"),
    ("name = 'x'\ntype = 'categorical'\nchoices = ['a', 'b']\nlow = 0\nhigh = 1\nbaseline = 'a'", "no low/high/log"),
    ("name = 'x'\ntype = 'categorical'\nchoices = ['a', 'b']\nbaseline = 'c'", "not one of choices"),
    ("name = 'x'\ntype = 'float32'\nlow = 0\nhigh = 1\nbaseline = 0", "type"),
    ("name = 'x'\nlow = 0\nhigh = 1\nbaseline = 0\nvia = 'file'", "via"),
]


@pytest.mark.parametrize("table,phrase", BAD)
def test_invalid_knobs_are_refused_with_the_reason(table, phrase):
    with pytest.raises(ManifestError) as e:
        knobs(table)
    assert phrase in str(e.value) and "knobs" in str(e.value)


def test_a_knob_declared_twice_is_refused():
    with pytest.raises(ManifestError, match="declared twice"):
        knobs("name = 'x'\nlow = 0\nhigh = 1\nbaseline = 0", "name = 'x'\nlow = 0\nhigh = 2\nbaseline = 0")


M = parse_manifest(HEAD + "".join(f"[[env.knobs]]\n{t}\n" for t, _, _ in GOOD))

# every way a knobs file can be wrong
BAD_FILES = [
    (b"{not json", "not valid JSON"),
    (b"\xff\xfe", "not valid JSON"),
    (b"[1, 2]", "JSON object"),
    (b'{"depth": 3}', "not a knob the manifest declares"),
    (b'{"lr": 1.0}', "outside"),
    (b'{"lr": "0.001"}', "not a number"),
    (b'{"lr": true}', "not a number"),
    (b'{"lr": NaN}', "not a number"),
    (b'{"width": 96.5}', "whole number"),
    (b'{"act": "swish"}', "not one of"),
    (b'{"lr": "$(touch /tmp/x)"}', "not a number"),
]


@pytest.mark.parametrize("data,phrase", BAD_FILES)
def test_invalid_knob_files_are_refused(data, phrase):
    with pytest.raises(KnobFileError, match=None) as e:
        parse_values(data, M)
    assert phrase in str(e.value)


def test_knob_values_become_exact_variables():
    vals = parse_values(b'{"lr": 0.0023, "width": 96, "act": "relu"}', M)
    env = knob_env(M, vals)
    assert env == {"AUTORESEARCH_KNOB_LR": "0.0023", "AUTORESEARCH_KNOB_WIDTH": "96", "AUTORESEARCH_KNOB_ACT": "relu"}
    assert float(env["AUTORESEARCH_KNOB_LR"]) == 0.0023   # repr: bit-identical when read back


def test_trial_env_passes_knobs_to_run_quoted():
    from autoresearchd.runners.protocol import Slot, TrialSpec
    from autoresearchd.runners.trialdir import trial_env
    spec = TrialSpec("t", "c" * 40, 0, M, b"", knobs={"AUTORESEARCH_KNOB_ACT": "a b'$(x)"})
    text = trial_env(spec, Slot("local", "0"), "/usr/bin", 10, 10, {})
    line = next(ln for ln in text.splitlines() if ln.startswith("AR_KNOBS="))
    # bash reads the array back to exactly the value given: nothing in it is expanded
    out = subprocess.run(["bash", "-c", line + '\nprintf "%s" "${AR_KNOBS[0]}"'], capture_output=True, text=True)
    assert out.stdout == "AUTORESEARCH_KNOB_ACT=a b'$(x)"


KNOB_MANIFEST = knob_manifest(KNOB_X)
KNOB_RUN = """import os
x = float(os.environ.get("AUTORESEARCH_KNOB_X", "1.5"))
open("out.txt", "w").write(str(x * x))
"""


def test_pushed_knob_files_run_or_are_rejected_by_the_gate(tmp_path, make_repo):
    """A person may push a knobs file too (tuning by hand): a valid one runs with its values, an
    invalid one is rejected with a note naming the problem, before anything runs."""
    repo = make_repo({".autoresearch.toml": KNOB_MANIFEST, "run.py": KNOB_RUN, "evaluate.py": TOY_EVAL}, "research")
    ok = _commit_file(repo, "me/half", '{"x": 0.5}\n')
    bad = {}
    for name, text in {"range": '{"x": 7}', "unknown": '{"y": 1}', "json": "{"}.items():
        bad[name] = _commit_file(repo, f"me/{name}", text)
    pop = run_until_settled(write_config(tmp_path, repo), timeout=120)
    assert pop.by_commit[ok].note.value == pytest.approx(0.25)
    assert pop.baseline_value == pytest.approx(2.25)
    for name, phrase in {"range": "outside", "unknown": "not a knob", "json": "not valid JSON"}.items():
        n = pop.by_commit[bad[name]].note
        assert n.status == "rejected" and KNOBS_FILE in n.error and phrase in n.error, n.error
        assert not n.trials


def _commit_file(repo: Path, branch: str, text: str) -> str:
    from conftest import git
    wt = repo.parent / f"wt-{branch.replace('/', '-')}"
    git(repo, "worktree", "add", "-q", "-b", f"idea/{branch}", str(wt), "main")
    (wt / KNOBS_FILE).write_text(text)
    git(wt, "add", KNOBS_FILE)
    git(wt, "commit", "-qm", f"knobs {branch}")
    sha = git(wt, "rev-parse", "HEAD").strip()
    git(repo, "worktree", "remove", "--force", str(wt))
    return sha


# -- tinygpt ---------------------------------------------------------------------------------------
TINY = ROOT / "envs" / "tinygpt"


def test_tinygpt_knob_baselines_are_the_code_defaults():
    """At the knobs' baseline values the run is the untuned baseline: the declared `baseline` of each
    knob equals train.py's Config default, and exporting those values changes no field."""
    pytest.importorskip("torch", reason="tinygpt's train.py needs torch (the `tinygpt` extra)")
    m = parse_manifest((TINY / ".autoresearch.toml").read_text())
    assert {k.name for k in m.knobs} == {"lr", "warmup_steps", "weight_decay", "n_embd"}
    code = f"""
import json, sys
sys.path.insert(0, {str(TINY)!r})
import train
m = json.loads(sys.argv[1])
d = train.Config()
assert set(train.KNOBS) == set(m), (train.KNOBS, m)
for k, v in m.items():
    assert getattr(d, k) == v and type(getattr(d, k)) is type(v), (k, getattr(d, k), v)
env = {{n: t for n, t in json.loads(sys.argv[2]).items()}}
assert train.apply_knobs(train.Config(), env) == d
moved = train.apply_knobs(train.Config(), {{"AUTORESEARCH_KNOB_LR": "0.002", "AUTORESEARCH_KNOB_N_EMBD": "96"}})
assert (moved.lr, moved.n_embd) == (0.002, 96)
print("ok")
"""
    import json
    base = {k.name: k.baseline for k in m.knobs}
    env = knob_env(m, base)
    out = subprocess.run([sys.executable, "-c", code, json.dumps(base), json.dumps(env)], capture_output=True,
                         text=True, cwd=TINY, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.stdout.strip() == "ok", out.stderr


def test_tuning_without_optuna_says_how_to_install_it(tmp_path, make_repo):
    """[tune] enabled with Optuna missing: the daemon refuses to start with a ConfigError naming the
    `tune` extra (Optuna is hidden from the child process, as if not installed)."""
    repo = make_repo({".autoresearch.toml": KNOB_MANIFEST, "run.py": KNOB_RUN, "evaluate.py": TOY_EVAL}, "research")
    cfg = write_config(tmp_path, repo, "[tune]\nenabled = true\n")
    code = f"""
import sys
sys.modules["optuna"] = None          # import optuna now raises ImportError
from autoresearchd.app import build_daemon
from autoresearchd.config import ConfigError, load_config
try:
    build_daemon(load_config({str(cfg)!r}), with_llm=False)
except ConfigError as e:
    print("ConfigError:", e)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert "ConfigError:" in out.stdout and "autoresearchd[tune]" in out.stdout, out.stdout + out.stderr


def test_a_pushed_commit_with_tune_trailers_joins_no_study(make_repo):
    """Provenance: Tune-* trailers count only on commits the daemon marked; a push carrying them is a
    human idea, in no study (the tuner would otherwise rebuild its study from a forged point)."""
    from conftest import git

    from autoresearchd.store.gitrepo import GitRepo
    from autoresearchd.store.population import read_population
    from autoresearchd.tune.tuner import study_members
    repo = make_repo({".autoresearch.toml": KNOB_MANIFEST, "run.py": KNOB_RUN, "evaluate.py": TOY_EVAL}, "research")
    sha = _commit_file(repo, "me/forged", '{"x": 0.1}')
    msg = "forged\n\nTune-Study: baseline\nTune-Sampler: tpe\nTune-Trial: 1\nKnobs: {\"x\": 0.1}\nOrigin: tune\n"
    forged = git(repo, "commit-tree", git(repo, "rev-parse", sha + "^{tree}").strip(), "-p", "main", "-m", msg).strip()
    git(repo, "update-ref", "refs/heads/idea/tune/baseline/1", forged)
    pop = read_population(GitRepo(repo), "refs/heads/main")
    i = pop.by_commit[forged]
    assert i.origin == "human" and i.trailers.tune_study is None
    assert study_members(pop, "baseline") == []


def _idea(idea_id, origin, value, hours, parents=()):
    from autoresearchd.store.ideas import Idea
    from autoresearchd.store.notes import Note, Status
    note = Note(status=Status.SUCCEEDED if value is not None else Status.FAILED, value=value, cpu_s=hours * 3600)
    from autoresearchd.store.trailers import Trailers
    return Idea(idea_id=idea_id, commit=idea_id * 5, title=idea_id, text="",
                trailers=Trailers(origin=origin, parents=tuple(parents)), note=note)


def _pop(*ideas):
    from autoresearchd.store.notes import Note, Status
    from autoresearchd.store.population import Population
    return Population(list(ideas), "b" * 40, Note(status=Status.SUCCEEDED, value=1.0, values=[1.0]))


# each case of the split rule (daemon/tune/split.py), goal min, baseline 1.0, floor 0.2
SPLITS = [
    ("no LLM proposing: tuning gets every trial", [_idea("a", "seed", 0.5, 1)], False, 1.0),
    ("nothing measured: even", [], True, 0.5),
    ("no gain yet: even", [_idea("a", "seed", 1.2, 1), _idea("t", "tune", 1.1, 1)], True, 0.5),
    ("only tuning gained: capped at 1 - floor", [_idea("a", "seed", 1.2, 1), _idea("t", "tune", 0.9, 1)], True, 0.8),
    ("only the LLM gained: tuning keeps its floor", [_idea("a", "seed", 0.9, 1), _idea("t", "tune", 1.1, 1)], True, 0.2),
    ("same gain, tuning spent 3x the hours: 1/4", [_idea("a", "seed", 0.9, 1), _idea("t", "tune", 0.9, 3)], True, 0.25),
    # tuning gained 0.1 over its parent (0.6 over the baseline would give it 0.55): 0.1 / 0.6, floored
    ("gain is over the parent idea, not the baseline",
     [_idea("p", "seed", 0.5, 1), _idea("t", "tune", 0.4, 1, ["p"])], True, 0.2),
    ("tuning gained 0.3 over its parent, the LLM 0.5: 3/8",
     [_idea("p", "seed", 0.5, 1), _idea("t", "tune", 0.2, 1, ["p"])], True, 0.375),
    ("failed runs spend hours and gain nothing",
     [_idea("a", "seed", 0.9, 1), _idea("t", "tune", 0.9, 1), _idea("f", "tune", None, 2)], True, 0.25),
    ("human ideas belong to neither arm", [_idea("h", "human", 0.1, 1), _idea("t", "tune", 0.9, 1)], True, 0.8),
]


@pytest.mark.parametrize("why,ideas,llm_on,share", SPLITS, ids=[s[0] for s in SPLITS])
def test_budget_split_rule(why, ideas, llm_on, share):
    from autoresearchd.tune.split import split
    sp = split(_pop(*ideas), "min", 0.2, llm_on)
    assert sp.tune == pytest.approx(share), sp.line()
    assert sp.line().startswith(f"budget split: tune {sp.tune:.0%} / llm {1 - sp.tune:.0%}")


def test_a_baseline_with_an_invalid_knobs_file_is_refused_at_start(tmp_path, make_repo):
    """Ideas are gated on their knobs file; the baseline's is checked where its manifest is read, so
    `start` refuses with the reason instead of failing every baseline seed at submit."""
    from autoresearchd.config import ConfigError
    from autoresearchd.research import load_manifest
    from autoresearchd.store.gitrepo import GitRepo
    repo = make_repo({".autoresearch.toml": KNOB_MANIFEST, "run.py": KNOB_RUN, "evaluate.py": TOY_EVAL,
                      KNOBS_FILE: '{"x": 5}'}, "research")
    with pytest.raises(ConfigError, match=r"\.autoresearch-knobs\.json: x=5 is outside"):
        load_manifest(GitRepo(repo), "main")
    ok = make_repo({".autoresearch.toml": KNOB_MANIFEST, "run.py": KNOB_RUN, "evaluate.py": TOY_EVAL,
                    KNOBS_FILE: '{"x": 0.5}'}, "research2")
    assert load_manifest(GitRepo(ok), "main").knob("x").baseline == 1.5
