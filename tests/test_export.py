"""`export` as a real subprocess (JSONL and Parquet), and the round trip: an export read back by the
replay provider serves the same ideas and diffs, and a served diff rebuilds the idea's exact tree."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from autoresearchd.config import LLMCfg
from autoresearchd.llm.replay import ReplayProvider
from autoresearchd.store.population import read_population

from popbuilder import build_population, write_cfg

PAPER_KEYS = {"idea", "code_diff", "epoch", "result"}
EXTRA_KEYS = {"idea_id", "title", "origin", "parents", "status", "decision", "seeds", "values", "baseline",
              "delta", "error", "cost", "gpu_s", "branch", "commit"}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    d = tmp_path_factory.mktemp("exp")
    repo = build_population(d / "research", 120, seed=4)
    cfg = write_cfg(d, repo.path)
    out = d / "traj.jsonl"
    p = subprocess.run([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), "export", "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "exported 120 ideas" in p.stdout
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    return cfg, repo, read_population(repo, "refs/heads/main"), out, recs


def test_jsonl_records_have_the_paper_shape_and_provenance(exported):
    _, repo, pop, _, recs = exported
    assert len(recs) == 120
    by_id = {i.idea_id: i for i in pop.ideas}
    for r in recs:
        assert PAPER_KEYS | EXTRA_KEYS <= set(r), set(r) ^ (PAPER_KEYS | EXTRA_KEYS)
        i = by_id[r["idea_id"]]
        assert r["result"] == i.value and r["epoch"] == i.epoch and r["status"] == i.status.value
        assert r["idea"].startswith(i.title) and (i.text in r["idea"])
        assert r["commit"] == i.commit and set(r["cost"]) == {"tokens", "usd"}
        if i.branch:
            assert r["code_diff"] == repo.diff(i.base_commit, i.commit) and r["branch"].startswith("idea/")
        if i.note and len(i.note.values) > 1:
            assert r["values"] == i.note.values and r["std"] is not None
    failed = [r for r in recs if r["status"] == "implement_failed"]
    assert failed and all(r["code_diff"] and r["result"] is None and r["branch"] is None for r in failed)
    assert all(r["revisions"] for r in failed)   # the transcript's later attempts


def test_parquet_export(exported, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    cfg, _, _, _, recs = exported
    out = tmp_path / "traj.parquet"
    p = subprocess.run([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), "export", "--out", str(out),
                        "--format", "parquet"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    t = pq.read_table(out)
    assert t.num_rows == len(recs) and PAPER_KEYS | EXTRA_KEYS <= set(t.column_names)
    assert t.column("idea_id").to_pylist() == [r["idea_id"] for r in recs]
    assert t.column("result").to_pylist() == [r["result"] for r in recs]


def _unfence(text: str) -> str:
    return text.split("```diff\n", 1)[1].rsplit("```", 1)[0] if "```diff\n" in text else text


def test_round_trip_through_the_replay_provider(exported):
    _, repo, pop, out, recs = exported
    prov = ReplayProvider(LLMCfg(provider="replay"), path=out)
    assert len(prov.records) == len(recs)
    ask = [{"role": "user", "content": "go"}]
    served = prov.complete(ask, purpose="propose", meta={"n": len(recs)}).text
    titles = [b.split("\n", 1)[0].removeprefix("[Experiment] ") for b in served.split("\n\n[Experiment] ")]
    titles[0] = titles[0].removeprefix("[Experiment] ")
    assert titles == [r["title"] for r in recs]
    by_id = {i.idea_id: i for i in pop.ideas}
    implemented = [r for r in recs if r["branch"]][:15]
    for r in implemented:
        answer = prov.complete(ask, purpose="implement", meta={"idea": r["title"], "attempt": 1}).text
        diff = _unfence(answer)
        assert diff.strip() == r["code_diff"].strip()
        i = by_id[r["idea_id"]]
        assert repo.apply_to_tree(i.base_commit, diff.encode()) == i.tree   # the same code, rebuilt
    failed = next(r for r in recs if r.get("revisions"))
    second = prov.complete(ask, purpose="revise", meta={"idea": failed["title"], "attempt": 2}).text
    assert failed["revisions"][0] in second


def test_unknown_format_is_refused(exported, tmp_path):
    from autoresearchd.config import load_config
    from autoresearchd.views.export import export
    cfg, *_ = exported
    with pytest.raises(ValueError, match="valid: jsonl, parquet"):
        export(load_config(cfg), tmp_path / "x.csv", fmt="csv")
