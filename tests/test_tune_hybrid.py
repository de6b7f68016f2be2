"""The hybrid search with an LLM (the local fake LLM server) and the tuner together: the LLM's prompt
carries the knobs and how to ask for a knobs-only run; a knobs-only idea is routed to the tuner (a
tuned commit, no implementation call), a code idea is implemented as usual; the budget split shows in
`status`' summary and in the dashboard's payload; the prompt section renders the response surface."""

from __future__ import annotations

import re

import pytest

from conftest import TOY_EVAL, run_until_settled, write_config
from fake_llm import FakeLLM, Reply

pytest.importorskip("optuna", reason="the `tune` extra (optuna) is not installed")

from test_tune import KNOB_MANIFEST, KNOB_RUN, surface  # noqa: E402

from autoresearchd.config import load_config  # noqa: E402
from autoresearchd.research import load_manifest  # noqa: E402
from autoresearchd.store.gitrepo import GitRepo  # noqa: E402
from autoresearchd.tune.surface import prompt_block  # noqa: E402
from autoresearchd.tune.tuner import knobs_only  # noqa: E402

KNOBS_IDEA = ("[Experiment] Set x to 0.3 and k to 1\nThe surface looks centred there.\n"
              "[Code Changes] Knobs: x=0.3, k=1\n[End]\n")
CODE_IDEA = ("[Experiment] Move the default x to 0.9 {n}\nA new default in code, variant {n}.\n"
             "[Code Changes] Edit run.py: the default of x.\n[End]\n")
DIFF = ("```diff\n--- a/run.py\n+++ b/run.py\n@@ -1,3 +1,3 @@\n import os\n"
        " seed = int(os.environ.get(\"AUTORESEARCH_SEED\", \"0\"))\n"
        "-x = float(os.environ.get(\"AUTORESEARCH_KNOB_X\", \"1.5\"))\n"
        "+x = float(os.environ.get(\"AUTORESEARCH_KNOB_X\", \"0.9\"))\n```\n")


class Model:
    def __init__(self):
        self.proposals: list[str] = []
        self.implemented: list[str] = []
        self.n = 0

    def __call__(self, req):
        text = req.body["messages"][-1]["content"]
        if "Implement the research idea below" in text or "could not be used" in text:
            first = next(m["content"] for m in req.body["messages"] if m["role"] == "user")
            self.implemented.append(first.split("# The idea\n", 1)[1].splitlines()[0])
            return Reply(DIFF, 200, 100)
        self.proposals.append(text)
        self.n += 1
        first = KNOBS_IDEA if self.n == 1 else CODE_IDEA.format(n=f"{self.n}b")
        return Reply(first + CODE_IDEA.format(n=self.n), 300, 200)


def config(tmp_path, env, fake):
    cfg = write_config(tmp_path, env, "")
    text = cfg.read_text().replace('[llm]\nprovider = "none"\n', "")
    text += (f'[llm]\nprovider = "openai"\nbase_url = "{fake.openai_url}"\nmodel = "m"\nbackoff_s = 0.01\n'
             f'[llm.prices.m]\ninput = 1.0\noutput = 2.0\n'
             '[tune]\nenabled = true\ntrials_per_study = 3\nparallel = 1\nstartup_trials = 2\n')
    text = text.replace("[policy]\nbaseline_seeds = 2\n", "[policy]\nbaseline_seeds = 2\nname = \"evolutionary\"\n"
                        "ideas_per_epoch = 2\nbatch = 2\nqueue_buffer = 0\nconfirm_seeds = 0\n")
    text = text.replace("[daemon]\ntick_s = 0.3\n", "[daemon]\ntick_s = 0.3\nmax_epochs = 2\n")
    cfg.write_text(text)
    return cfg


def test_knobs_only_ideas_go_to_the_tuner_and_the_llm_sees_the_knobs(tmp_path, make_repo):
    env = make_repo({".autoresearch.toml": KNOB_MANIFEST, "run.py": KNOB_RUN, "evaluate.py": TOY_EVAL}, "research")
    fake, model = FakeLLM(), Model()
    fake.script(*([model] * 100))
    try:
        cfg_path = config(tmp_path, env, fake)
        pop = run_until_settled(cfg_path, timeout=240, with_llm=True)
    finally:
        fake.close()
    # every proposal prompt shows the knobs and how to ask for a knobs-only run
    first_asks = [p for p in model.proposals if "## Answer format" in p]      # not the follow-ups
    assert first_asks
    for p in first_asks:
        assert "## Tuned knobs" in p and "x in [-2, 2] (baseline 1.5)" in p and "Knobs: name=value" in p
    # the knobs-only idea: a tuned commit in the baseline's study, measured at its values, never implemented
    routed = [i for i in pop.ideas if i.title.startswith("Set x to 0.3")]
    assert len(routed) == 1
    r = routed[0]
    assert r.branch.startswith("refs/heads/idea/tune/baseline/") and r.trailers.tune_sampler == "llm"
    assert r.origin == "seed" and r.trailers.knobs and r.note.tune["knobs"] == {"x": 0.3, "k": 1}
    assert r.note.value == pytest.approx(surface(0.3, 1), abs=1e-9)
    assert "Set x to 0.3 and k to 1" not in model.implemented
    assert r.cost_usd and r.cost_usd > 0 and r.attempts is None      # the proposal's spend, no implementation
    # code ideas were implemented as usual, and the tuner tuned as well
    assert any(t.startswith("Move the default x to 0.9") for t in model.implemented)
    assert any(i.title.startswith("Move the default") and i.branch and i.note for i in pop.ideas)
    assert any(i.origin == "tune" and i.note for i in pop.ideas)
    # one study holds the routed point and the sampler's: trial numbers are distinct and consecutive
    nums = sorted(i.trailers.tune_trial for i in pop.ideas if i.trailers.tune_study == "baseline")
    assert nums == list(range(1, len(nums) + 1))
    # a routed idea that became the best continues the baseline's study: no study of its own
    # (a code idea confirmed before the routed one was measured may have been the best for a while and
    # got a study of its own then: which comes first is the machine's timing, not the rule)
    studies = {i.trailers.tune_study for i in pop.ideas if i.trailers.tune_study}
    assert "baseline" in studies and r.idea_id not in studies
    assert all(pop.by_id[s].trailers.tune_study is None for s in studies - {"baseline"})   # roots: code ideas
    # status and the dashboard's payload show the split
    from autoresearchd.views.summary import summary
    s = summary(load_config(cfg_path))
    assert s["tune"]["line"].startswith("budget split: tune ")
    assert 0 < s["tune"]["tune"] <= 1 and s["tune"]["studies"][0]["study"] == "baseline"
    # `status` prints it as one line
    import io

    from rich.console import Console

    from autoresearchd.views.observe import status
    out = io.StringIO()
    status(load_config(cfg_path), Console(file=out, width=400))
    assert [ln for ln in out.getvalue().splitlines() if ln.startswith("budget split: tune ")] == [s["tune"]["line"]]
    # ... and the dashboard's overview payload (what /api/overview serves) carries the same split
    from autoresearchd.research import open_research
    from autoresearchd.views.dashboard import Snapshot
    cfg = load_config(cfg_path)
    research = open_research(cfg, create=False)
    over = Snapshot(cfg, research, pop, "v").overview()
    assert over["tune"]["line"] == s["tune"]["line"] and over["tune"]["arms"]["tune"]["ideas"] >= 1, (over["tune"], [(i.idea_id, i.origin, i.note and i.note.cpu_s) for i in pop.ideas])
    # the prompt section, rendered on what was measured: the best tuned values and the surface lines
    m = load_manifest(GitRepo(env), "main")
    block = prompt_block(pop, m)
    assert "What tuning measured so far" in block and "- baseline: " in block
    assert re.search(r"^    x: (low|mid|high) [0-9.e-]+", block, re.M) and re.search(r"^    k: ", block, re.M)


M = None


def _m():
    from autoresearchd.manifest import parse_manifest
    return parse_manifest(KNOB_MANIFEST)


@pytest.mark.parametrize("text,expect", [
    ("[Experiment] a\n[Code Changes] Knobs: x=0.3, k=1", {"x": 0.3, "k": 1}),
    ("[Experiment] a\n[Code Changes] Knobs: `x=0.3`", {"x": 0.3}),
    ("[Experiment] a\n[Code Changes] Knobs: x=0.3\nand also edit run.py", None),       # more than knobs
    ("[Experiment] a\n[Code Changes] Knobs: x=9", None),                                 # out of range
    ("[Experiment] a\n[Code Changes] Knobs: y=1", None),                                 # not a knob
    ("[Experiment] a\n[Code Changes] Knobs: k=1.5", None),                               # not whole
    ("[Experiment] a\n[Code Changes] Knobs: x=big", None),                               # not a number
    ("[Experiment] a\n[Code Changes] Knobs: x", None),                                   # no value
    ("[Experiment] set x=0.3\n[Code Changes] Edit run.py", None),                        # code, not knobs
])
def test_knobs_only_detection(text, expect):
    assert knobs_only(text, _m()) == expect
