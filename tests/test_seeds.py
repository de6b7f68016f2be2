"""The seed contract: a run that ignores $AUTORESEARCH_SEED gives identical baseline seeds. The daemon
says so (the word "identical" and what to do) in the baseline note, the log and `status`, treats the
noise as unknown and promotes nothing; `deterministic = true` in [env] declares it on purpose and
runs one baseline seed."""

from __future__ import annotations

import io
import logging

from rich.console import Console

from autoresearchd.config import load_config
from autoresearchd.views.observe import status

from conftest import TOY_EVAL, TOY_MANIFEST, branch_idea, run_until_settled, write_config

# the seed is hard-coded, as in many training scripts: every seed gives the same value
FIXED_RUN = """import random
random.seed(1234)
x = 1.0
with open("out.txt", "w") as f:
    f.write(str(x + random.random() * 0.01))
"""


def _repo(make_repo, manifest: str):
    repo = make_repo({".autoresearch.toml": manifest, "run.py": FIXED_RUN, "evaluate.py": TOY_EVAL}, "research")
    branch_idea(repo, "alice/lower", "Lower x a little", {"run.py": FIXED_RUN.replace("x = 1.0", "x = 0.999")})
    return repo


def _status_text(cfg) -> str:
    out = io.StringIO()
    status(load_config(cfg), Console(file=out, width=400, color_system=None))
    return out.getvalue()


def test_identical_baseline_seeds_warn_and_block_promotion(make_repo, tmp_path, caplog):
    repo = _repo(make_repo, TOY_MANIFEST)
    cfg = write_config(tmp_path, repo)               # baseline_seeds = 2
    caplog.set_level(logging.WARNING, logger="autoresearchd")
    pop = run_until_settled(cfg, timeout=120)
    base = pop.baseline_note
    assert base is not None and len(base.values) == 2 and len(set(base.values)) == 1
    flag = next(f for f in base.flags if "identical" in f)
    assert "AUTORESEARCH_SEED" in flag and "deterministic = true" in flag          # says what to do
    assert any("identical" in r.getMessage() and "AUTORESEARCH_SEED" in r.getMessage()
               for r in caplog.records), "no identical-seeds warning in the log"
    idea = next(i for i in pop.ideas if i.idea_id and "lower" in (i.branch or ""))
    # better than the baseline, but with zero measured variance nothing is promoted
    assert idea.note.value < base.value
    assert idea.note.decision == "improved", idea.note.decision
    assert any(f.startswith("noise_unknown") for f in idea.note.flags)
    text = _status_text(cfg)
    assert "identical" in text and "AUTORESEARCH_SEED" in text
    assert "best confirmed: none yet" in text


def test_deterministic_manifest_runs_one_seed_and_promotes(make_repo, tmp_path, caplog):
    repo = _repo(make_repo, TOY_MANIFEST.replace('metric = "score"', 'metric = "score"\ndeterministic = true'))
    cfg = write_config(tmp_path, repo, "")          # the config asks for 2 baseline seeds; the manifest wins
    caplog.set_level(logging.WARNING, logger="autoresearchd")
    pop = run_until_settled(cfg, timeout=120)
    base = pop.baseline_note
    assert base is not None and base.seeds == [0] and not base.flags
    assert not any("identical" in r.getMessage() for r in caplog.records)
    idea = next(i for i in pop.ideas if "lower" in (i.branch or ""))
    assert idea.note.decision == "promoted", idea.note
    assert "identical" not in _status_text(cfg)
