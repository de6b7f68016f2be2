"""Knobs an idea's own code introduces, against real git and the real daemon on the local runner: a
pushed commit's `.autoresearch-knobs.toml` and an LLM-implemented idea's (the local fake LLM server)
both make the tuner tune that knob, and the tuned trials receive it as AUTORESEARCH_KNOB_*; every kind
of invalid declaration is refused with its reason (the gate's `rejected` note, the implementer's
revision request); a tuned trial stopped by its learning curve enters its rebuilt study as PRUNED."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from conftest import TOY_EVAL, git, knob_manifest, run_until_settled, write_config
from fake_llm import FakeLLM, Reply

optuna = pytest.importorskip("optuna", reason="the `tune` extra (optuna) is not installed")

from autoresearchd import defaults  # noqa: E402
from autoresearchd.config import load_config  # noqa: E402
from autoresearchd.manifest import parse_manifest  # noqa: E402
from autoresearchd.store.gitrepo import GitRepo  # noqa: E402
from autoresearchd.store.lifecycle import Lifecycle  # noqa: E402
from autoresearchd.store.notes import Note, Status  # noqa: E402
from autoresearchd.store.population import read_population  # noqa: E402
from autoresearchd.tune.knobs import DECLARE_FILE, KNOBS_FILE, file_error  # noqa: E402
from autoresearchd.tune.tuner import Tuner, rebuild  # noqa: E402

NO_KNOBS = knob_manifest("")            # the toy manifest: no [[env.knobs]] at all
KNOB_X = '[[env.knobs]]\nname = "x"\nlow = -2.0\nhigh = 2.0\nbaseline = 1.5\n'

# the baseline: x fixed in code; seed 1 reads 0.2 higher (known noise, so gains are confirmed)
BASE_RUN = """import os
seed = int(os.environ.get("AUTORESEARCH_SEED", "0"))
x = 1.5
with open("out.txt", "w") as f:
    f.write(str((x - 0.3) ** 2 + (0.2 if seed == 1 else 0.0)))
"""
# the idea: a new number y of its own, read from AUTORESEARCH_KNOB_Y (default 0.5), optimum at y = 0.8
IDEA_RUN = """import os
seed = int(os.environ.get("AUTORESEARCH_SEED", "0"))
y = float(os.environ.get("AUTORESEARCH_KNOB_Y", "0.5"))
with open("out.txt", "w") as f:
    f.write(str((y - 0.8) ** 2 + (0.2 if seed == 1 else 0.0)))
"""
DECLARE_Y = '[[knobs]]\nname = "y"\ntype = "float"\nlow = 0.0\nhigh = 1.0\nbaseline = 0.5\n'


def idea_surface(y: float) -> float:
    return (y - 0.8) ** 2


def commit_files(repo, branch: str, files: dict[str, str], base: str = "main") -> str:
    """A commit on `branch` off `base` with these files (new ones included), without a checkout."""
    r = GitRepo(repo)
    tree = r.tree_with_files(base, {k: v.encode() for k, v in files.items()})
    sha = r.commit_tree(tree, [r.rev_parse(base)], "Add a knob of its own\n\nA new number y.\n")
    git(repo, "update-ref", f"refs/heads/{branch}", sha)
    return sha


def tune_cfg(tmp_path, env, trials: int = 3) -> str:
    return write_config(tmp_path, env, f"[tune]\nenabled = true\ntrials_per_study = {trials}\nparallel = 2\n"
                                       "startup_trials = 2\n")


def tuned_of(pop, study: str):
    return sorted((i for i in pop.ideas if i.trailers.tune_study == study), key=lambda i: i.trailers.tune_trial)


def check_tuned(env, pop, idea, knobs: set[str]):
    """The idea's study holds tuned commits that change only the values file, set the idea's own knob,
    and ran with it: each note's value is the idea's surface at the file's y."""
    tuned = tuned_of(pop, idea.idea_id)
    assert tuned, [(i.idea_id, i.status, i.note and i.note.decision) for i in pop.ideas]
    for t in tuned:
        assert git(env, "diff", "--name-only", idea.commit, t.commit).split() == [KNOBS_FILE]
        values = json.loads(git(env, "show", f"{t.commit}:{KNOBS_FILE}"))
        assert set(values) == knobs and t.note.tune["knobs"] == values
        seed0 = next(tr for tr in t.note.trials if tr.seed == 0)
        assert seed0.value == pytest.approx(idea_surface(values["y"]), abs=1e-6)
    # the sampler moved y: not every trial ran at the idea's default
    assert any(json.loads(git(env, "show", f"{t.commit}:{KNOBS_FILE}"))["y"] != 0.5 for t in tuned)
    return tuned


def test_a_pushed_commit_declares_a_knob_and_the_tuner_tunes_it(tmp_path, make_repo):
    env = make_repo({".autoresearch.toml": NO_KNOBS, "run.py": BASE_RUN, "evaluate.py": TOY_EVAL}, "research")
    commit_files(env, "idea/me/y", {"run.py": IDEA_RUN, DECLARE_FILE: DECLARE_Y})
    pop = run_until_settled(tune_cfg(tmp_path, env), timeout=240)
    idea = next(i for i in pop.ideas if i.branch == "refs/heads/idea/me/y")
    assert idea.confirmed, (idea.note.status, idea.note.decision)
    tuned = check_tuned(env, pop, idea, {"y"})
    assert len(tuned) == 3
    # the manifest declares no knob: the baseline has no study of its own
    assert not tuned_of(pop, "baseline")
    # the LLM's prompt shows that study, though the manifest declares no knob
    from autoresearchd.tune.surface import prompt_block
    block = prompt_block(pop, parse_manifest(NO_KNOBS))
    assert block.startswith("## Tuned knobs") and f"- {idea.idea_id}: 3 tuned runs, best " in block, block
    # a daemon with an LLM (the real SDK reaching the local fake server) builds on the tuned idea: its
    # prompt names the idea's own knob, its range and its surface, and a knobs-only answer that sets it
    # is a trial of the idea's study, with no implementation
    fake, model = FakeLLM(), Builder()
    fake.script(*([model] * 20))
    try:
        cfg = llm_cfg(tmp_path, env, fake, "greedy")
        pop = run_until_settled(cfg, timeout=240, with_llm=True)
    finally:
        fake.close()
    asks = [p for p in model.proposals if "## Tuned knobs" in p]
    assert asks, model.proposals
    for p in asks:
        assert f"- {idea.idea_id}: 3 tuned runs, best " in p and "`Knobs: name=value, name=value`" in p
        assert "its own knobs (its code reads them; a knobs-only idea built on it may set them): " \
               "y in [0, 1] (baseline 0.5)" in p, p
        assert re.search(r"^    y: (low [0-9.e-]+)?( \| )?(mid [0-9.e-]+)?( \| )?(high [0-9.e-]+)?$", p, re.M), p
    routed = next(i for i in pop.ideas if i.title == Builder.TITLE)
    assert routed.trailers.tune_study == idea.idea_id and routed.trailers.tune_sampler == "llm"
    assert routed.branch == f"refs/heads/idea/tune/{idea.idea_id}/4" and model.implemented == 0
    assert routed.note.tune["knobs"] == {"y": 0.8}
    assert next(t for t in routed.note.trials if t.seed == 0).value == pytest.approx(idea_surface(0.8), abs=1e-9)
    # status' summary and the dashboard's payload carry the same study: its own knob and its surface
    from autoresearchd.views.summary import summary
    (st,) = [s for s in summary(load_config(cfg))["tune"]["studies"] if s["study"] == idea.idea_id]
    assert st["own"] == ["y"] and [ln for ln in st["surface"] if ln.startswith("y: ")], st


class Builder:
    """Proposes one knobs-only idea that sets the tuned idea's own knob y (to its optimum)."""

    TITLE = "Set the idea's y to 0.8"

    def __init__(self):
        self.proposals: list[str] = []
        self.implemented = 0

    def __call__(self, req):
        text = req.body["messages"][-1]["content"]
        if "could not be used" in text or "Implement the research idea below" in text:
            self.implemented += 1
            return Reply("no diff", 10, 10)
        self.proposals.append(text)
        return Reply(f"[Experiment] {self.TITLE}\nThe surface of y is lowest near its top.\n"
                     "[Code Changes] Knobs: y=0.8\n[End]\n", 300, 200)


def llm_cfg(tmp_path, env, fake, policy: str, ideas: int = 1):
    """tune_cfg with the OpenAI provider on the fake server and `policy` proposing `ideas` per epoch."""
    cfg = tune_cfg(tmp_path, env)
    text = cfg.read_text().replace('[llm]\nprovider = "none"\n', "")
    text += (f'[llm]\nprovider = "openai"\nbase_url = "{fake.openai_url}"\nmodel = "m"\nbackoff_s = 0.01\n'
             '[llm.prices.m]\ninput = 1.0\noutput = 2.0\n')
    text = text.replace("[policy]\nbaseline_seeds = 2\n", f"[policy]\nbaseline_seeds = 2\nname = \"{policy}\"\n"
                        f"ideas_per_epoch = {ideas}\nbatch = 1\nqueue_buffer = 0\n")
    text = text.replace("[daemon]\ntick_s = 0.3\n", "[daemon]\ntick_s = 0.3\nmax_epochs = 1\n")
    cfg.write_text(text)
    return cfg


class LLM:
    """Proposes one code idea; implements it first with an invalid declaration (y's baseline outside
    its range), then, told why, with a valid one."""

    BAD = DECLARE_Y.replace("baseline = 0.5", "baseline = 5.0")

    def __init__(self):
        self.revise: list[str] = []
        self.implemented = 0

    @staticmethod
    def diff(declaration: str) -> str:
        decl = "".join(f"+{ln}\n" for ln in declaration.splitlines())
        return ("```diff\n--- a/run.py\n+++ b/run.py\n@@ -1,5 +1,5 @@\n import os\n"
                " seed = int(os.environ.get(\"AUTORESEARCH_SEED\", \"0\"))\n"
                "-x = 1.5\n+y = float(os.environ.get(\"AUTORESEARCH_KNOB_Y\", \"0.5\"))\n"
                " with open(\"out.txt\", \"w\") as f:\n"
                "-    f.write(str((x - 0.3) ** 2 + (0.2 if seed == 1 else 0.0)))\n"
                "+    f.write(str((y - 0.8) ** 2 + (0.2 if seed == 1 else 0.0)))\n"
                f"--- /dev/null\n+++ b/{DECLARE_FILE}\n@@ -0,0 +1,{len(declaration.splitlines())} @@\n{decl}```\n")

    def __call__(self, req):
        text = req.body["messages"][-1]["content"]
        if "could not be used" in text or "Implement the research idea below" in text:
            self.implemented += 1
            if self.implemented == 1:
                return Reply(self.diff(self.BAD), 200, 100)
            self.revise.append(text)
            return Reply(self.diff(DECLARE_Y), 200, 100)
        return Reply("[Experiment] A new number y\nMake the offset a number of its own.\n"
                     "[Code Changes] run.py reads y and declares it as a knob.\n[End]\n", 300, 200)


def test_an_llm_idea_declares_a_knob_and_the_tuner_tunes_it(tmp_path, make_repo):
    env = make_repo({".autoresearch.toml": NO_KNOBS, "run.py": BASE_RUN, "evaluate.py": TOY_EVAL}, "research")
    fake, model = FakeLLM(), LLM()
    fake.script(*([model] * 40))
    try:
        pop = run_until_settled(llm_cfg(tmp_path, env, fake, "evolutionary"), timeout=240, with_llm=True)
    finally:
        fake.close()
    # the invalid declaration went back to the model with its reason, and the kept one is in the commit
    assert len(model.revise) == 1 and "baseline 5.0 is outside [0.0, 1.0]" in model.revise[0], model.revise
    idea = next(i for i in pop.ideas if i.title == "A new number y")
    assert git(env, "show", f"{idea.commit}:{DECLARE_FILE}") == DECLARE_Y
    assert idea.confirmed, (idea.note.status, idea.note.decision)
    check_tuned(env, pop, idea, {"y"})


# every kind of invalid declaration (and a values file naming a knob nobody declared): its reason
INVALID = [
    ("knobs = [", "not valid TOML"),
    ('knobs = []\nother = 1\n', "holds only [[knobs]] tables"),
    ('knobs = "y"\n', "holds only [[knobs]] tables"),
    ('[[knobs]]\nname = "Y-1"\nlow = 0.0\nhigh = 1.0\nbaseline = 0.5\n', "lower-case letters"),
    ('[[knobs]]\nname = "y"\nlow = 1.0\nhigh = 0.0\nbaseline = 0.5\n', "needs low < high"),
    ('[[knobs]]\nname = "y"\nlow = 0.0\nhigh = 1.0\nbaseline = 5\n', "outside [0.0, 1.0]"),
    ('[[knobs]]\nname = "y"\nlow = 0.0\nhigh = 1.0\nlog = true\nbaseline = 0.5\n', "log-scale knob needs low > 0"),
    ('[[knobs]]\nname = "y"\ntype = "int"\nlow = 0\nhigh = 4\nbaseline = 1.5\n', "whole low, high, baseline"),
    ('[[knobs]]\nname = "y"\ntype = "categorical"\nchoices = ["a"]\nbaseline = "a"\n', "two or more"),
    ('[[knobs]]\nname = "y"\ntype = "complex"\nlow = 0.0\nhigh = 1.0\nbaseline = 0.5\n', "knob #1: type"),
    ('[[knobs]]\nname = "y"\nlow = 0.0\nhigh = 1.0\nbaseline = 0.5\nshell = "rm -rf /"\n', "knob #1: shell"),
    ('[[knobs]]\nname = "y"\nlow = 0.0\nhigh = 1.0\n', "knob #1: baseline"),
    ('[[knobs]]\nname = "x"\nlow = 0.0\nhigh = 1.0\nbaseline = 0.5\n', "'x' is the manifest's own"),
    (DECLARE_Y + DECLARE_Y, "'y' is declared twice"),
    ("".join(DECLARE_Y.replace('"y"', f'"k{i}"') for i in range(defaults.IDEA_KNOBS_MAX + 1)),
     f"more than the {defaults.IDEA_KNOBS_MAX}"),
    ("# " + "x" * defaults.IDEA_KNOBS_FILE_BYTES + "\n", f"more than the {defaults.IDEA_KNOBS_FILE_BYTES}"),
    (b"\xff\xfe".decode("latin-1"), "not valid TOML"),
    ('[[knobs]]\nname = "y"\nlow = 0.0\nhigh = inf\nbaseline = 0.5\n', "must be finite numbers"),
    ('[[knobs]]\nname = "y"\ntype = "categorical"\nchoices = ["a", "b\\u0000c"]\nbaseline = "a"\n',
     "printable ASCII"),
    ('[[knobs]]\nname = "y"\ntype = "categorical"\nchoices = ["a", "b\\nc"]\nbaseline = "a"\n', "printable ASCII"),
    ('[[knobs]]\nname = "y"\ntype = "categorical"\nchoices = [%s]\nbaseline = 0\n' % ", ".join(map(str, range(65))),
     "at most 64 choices"),
]


@pytest.mark.parametrize("text,why", INVALID, ids=[w for _, w in INVALID])
def test_invalid_declarations_are_refused_with_their_reason(make_repo, text, why):
    env = make_repo({".autoresearch.toml": knob_manifest(KNOB_X), "run.py": BASE_RUN, "evaluate.py": TOY_EVAL})
    sha = commit_files(env, "idea/bad", {DECLARE_FILE: text})
    m = parse_manifest(knob_manifest(KNOB_X))
    got = file_error(GitRepo(env), sha, m)
    assert got is not None and got.startswith(DECLARE_FILE) and why in got, got


def test_a_values_file_may_set_only_declared_knobs(make_repo):
    env = make_repo({".autoresearch.toml": knob_manifest(KNOB_X), "run.py": BASE_RUN, "evaluate.py": TOY_EVAL})
    m, r = parse_manifest(knob_manifest(KNOB_X)), GitRepo(env)
    undeclared = commit_files(env, "idea/a", {KNOBS_FILE: '{"y": 0.7}'})
    assert "'y' is not a knob the manifest declares" in file_error(r, undeclared, m)
    declared = commit_files(env, "idea/b", {KNOBS_FILE: '{"y": 0.7, "x": 1.0}', DECLARE_FILE: DECLARE_Y})
    assert file_error(r, declared, m) is None
    outside = commit_files(env, "idea/c", {KNOBS_FILE: '{"y": 7}', DECLARE_FILE: DECLARE_Y})
    assert "y=7 is outside [0, 1]" in file_error(r, outside, m)


def test_a_pushed_invalid_declaration_gets_a_rejected_note(tmp_path, make_repo):
    env = make_repo({".autoresearch.toml": NO_KNOBS, "run.py": BASE_RUN, "evaluate.py": TOY_EVAL}, "research")
    commit_files(env, "idea/me/bad", {"run.py": IDEA_RUN, DECLARE_FILE: LLM.BAD})
    pop = run_until_settled(write_config(tmp_path, env), timeout=120)
    bad = next(i for i in pop.ideas if i.branch == "refs/heads/idea/me/bad")
    assert bad.note.status == Status.REJECTED and not bad.note.trials
    assert bad.note.error.startswith(DECLARE_FILE) and "baseline 5.0 is outside [0.0, 1.0]" in bad.note.error


def test_a_stopped_tuned_trial_is_pruned_in_the_rebuilt_study(tmp_path, make_repo):
    env = make_repo({".autoresearch.toml": NO_KNOBS, "run.py": BASE_RUN, "evaluate.py": TOY_EVAL}, "research")
    sha = commit_files(env, "idea/me/y", {"run.py": IDEA_RUN, DECLARE_FILE: DECLARE_Y})
    repo = GitRepo(env)
    cfg = load_config(tune_cfg(tmp_path, env))
    research = SimpleNamespace(repo=repo, manifest=parse_manifest(NO_KNOBS))
    life = Lifecycle(repo)          # one writer for the tuner and the results below; nothing observes
    tuner = Tuner(research, cfg, life)
    root = next(i for i in read_population(repo, "refs/heads/main").ideas if i.commit == sha)
    for n, y in ((1, 0.2), (2, 0.9), (3, 0.6)):       # three trials of the idea's study, written by the tuner
        tuner.write(root.idea_id, sha, root, {"y": y}, n)
    pop = read_population(repo, "refs/heads/main")
    t1, t2, t3 = tuned_of(pop, root.idea_id)
    # trial 1 stopped at 40% of its run by its curve (engine/stopping.py's note); trial 2 measured
    life.stopped(t1.commit, t1, Note(status=Status.STOPPED, idea_id=t1.idea_id, metric="score",
                                     stopped={"t": 0.4, "value": 0.9, "margin": 3.0}), [])
    life.result(t2.commit, t2, Note(status=Status.SUCCEEDED, idea_id=t2.idea_id, metric="score", value=0.01,
                                    values=[0.01]))
    pop = read_population(repo, "refs/heads/main")
    study = rebuild(pop, tuner.knobs_of(sha), root.idea_id, "tpe", 0, 2)
    by = {t.user_attrs["trial"]: t for t in study.trials}
    S = optuna.trial.TrialState
    assert by[1].state == S.PRUNED and by[1].intermediate_values == {40: 0.9} and by[1].params == {"y": 0.2}
    assert by[2].state == S.COMPLETE and by[2].value == pytest.approx(0.01)
    assert by[3].state == S.RUNNING
    # and it is over: the study counts it as no open trial, and the next ask still works
    assert study.ask().number == 3


def test_the_prompt_shows_manifest_and_declared_knobs_of_a_study(tmp_path, make_repo):
    """Real git, notes by the one writer: a study of an idea that declares y on a manifest with x shows
    both knobs' surface lines and y's range; without the repo only the manifest's; a study whose idea
    is not in the population shows no declared knob (not the baseline's)."""
    from autoresearchd.tune.surface import prompt_block, studies
    # the baseline's tree declares z: a study whose idea is gone must not show it as the idea's
    env = make_repo({".autoresearch.toml": knob_manifest(KNOB_X), "run.py": BASE_RUN, "evaluate.py": TOY_EVAL,
                     DECLARE_FILE: DECLARE_Y.replace('"y"', '"z"')}, "research")
    sha = commit_files(env, "idea/me/y", {"run.py": IDEA_RUN, DECLARE_FILE: DECLARE_Y})
    repo, m = GitRepo(env), parse_manifest(knob_manifest(KNOB_X))
    life = Lifecycle(repo)          # one writer for the tuner and the results below; nothing observes
    tuner = Tuner(SimpleNamespace(repo=repo, manifest=m), load_config(tune_cfg(tmp_path, env)), life)
    root = next(i for i in read_population(repo, "refs/heads/main").ideas if i.commit == sha)
    for n, (x, y) in enumerate(((-1.5, 0.1), (0.2, 0.5), (1.9, 0.95)), 1):
        tuner.write(root.idea_id, sha, root, {"x": x, "y": y}, n)
    tuner.write("gone", sha, None, {"x": 0.0, "y": 0.5}, 1)          # a study named after no idea here
    pop = read_population(repo, "refs/heads/main")
    for i in (i for i in pop.ideas if i.trailers.tune_study):
        v = i.trailers.tune_trial / 10
        life.result(i.commit, i, Note(status=Status.SUCCEEDED, idea_id=i.idea_id, metric="score", value=v, values=[v]))
    pop = read_population(repo, "refs/heads/main")
    block = prompt_block(pop, m, repo)
    mine = block.split(f"- {root.idea_id}: ", 1)[1].split("\n- ", 1)[0]
    assert "its own knobs (its code reads them; a knobs-only idea built on it may set them): " \
           "y in [0, 1] (baseline 0.5)" in mine, block
    assert "    x: low 0.1 | mid 0.2 | high 0.3" in mine and "    y: low 0.1 | mid 0.2 | high 0.3" in mine, block
    gone = block.split("- gone: ", 1)[1].split("\n- ", 1)[0]
    assert "its own knobs" not in gone and "z in" not in gone and "    x: mid 0.1" in gone, block
    assert "    y: " not in prompt_block(pop, m)                     # without the repo: the manifest's only
    assert {s["study"]: s["own"] for s in studies(pop, m, repo)} == {root.idea_id: ["y"], "gone": []}
