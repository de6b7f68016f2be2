"""The replay provider: recorded ideas served in file order, resumable by known titles, recorded
diffs (and revisions) served to the implementer, tolerant reading of paper-shaped and exported
trajectories."""

from __future__ import annotations

import json

import pytest

from autoresearchd import llm
from autoresearchd.config import LLMCfg
from autoresearchd.llm import BudgetExhausted, LLMError, ReplayExhausted
from autoresearchd.llm.replay import ReplayProvider, format_idea, title_of, to_record

DIFF = "--- a/train.py\n+++ b/train.py\n@@ -1 +1 @@\n-lr = 1e-3\n+lr = 2e-3\n"
ASK = [{"role": "user", "content": "go"}]

RECORDS = [
    {"title": "Warmup then cosine", "idea": "Use a 200 step linear warmup before cosine decay.",
     "code_diff": DIFF, "revisions": ["REV-1 diff", "REV-2 diff"], "epoch": 0, "result": 3.21},
    {"idea": "[Experiment] Label smoothing 0.1\nSmooth the targets.\n[Code Changes] In train.py, "
             "pass label_smoothing=0.1 to cross_entropy.", "code_diff": "```diff\nFENCED\n```", "epoch": 0},
    {"text": "Bigger batch\nDouble the batch size and scale lr.", "diff": DIFF, "epoch": 1},
]


def write(tmp_path, records, name="ideas.jsonl") -> str:
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(p)


def provider(tmp_path, records=RECORDS, **kw) -> ReplayProvider:
    return ReplayProvider(LLMCfg(provider="replay", replay_file=write(tmp_path, records), **kw))


def propose(p, n, **meta):
    return p.complete(ASK, purpose="propose", meta={"n": n, **meta})


def implement(p, idea, attempt=1, purpose="implement"):
    return p.complete(ASK, purpose=purpose, meta={"idea": idea, "attempt": attempt}).text


def blocks(text: str) -> list[str]:
    return [b for b in text.split("\n\n") if b.strip()]


def test_registry_and_missing_path_is_clear(tmp_path):
    assert llm.get("replay") is ReplayProvider
    with pytest.raises(LLMError, match="llm.replay_file"):
        ReplayProvider(LLMCfg(provider="replay"))
    with pytest.raises(LLMError, match="cannot be read"):
        ReplayProvider(LLMCfg(provider="replay"), path=tmp_path / "nope.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n{}\n")
    with pytest.raises(LLMError, match="no recorded ideas"):
        ReplayProvider(LLMCfg(provider="replay"), path=tmp_path / "empty.jsonl")


def test_path_argument_when_config_has_none(tmp_path):
    p = ReplayProvider(LLMCfg(provider="replay"), budget=None, path=write(tmp_path, RECORDS))
    assert len(p.records) == 3 and p.model == "replay:ideas.jsonl"


def test_propose_serves_n_in_file_order_then_exhausts(tmp_path):
    p = provider(tmp_path)
    c = propose(p, 2)
    first, second = blocks(c.text)
    assert first == ("[Experiment] Warmup then cosine\nUse a 200 step linear warmup before cosine decay.\n"
                     "[Code Changes] Edit train.py as described above.\n[End]")
    # an idea that already has its sections is kept as written, with [End] added
    assert second.startswith("[Experiment] Label smoothing 0.1\nSmooth the targets.\n[Code Changes] In train.py")
    assert second.endswith("label_smoothing=0.1 to cross_entropy.\n[End]")
    assert c.cost_usd == 0.0 and c.model == "replay:ideas.jsonl"
    assert c.output_tokens == len(c.text) // 4 and c.input_tokens == len("go") // 4
    # asking for more than is left serves what is left
    (last,) = blocks(propose(p, 5).text)
    assert last.startswith("[Experiment] Bigger batch\nDouble the batch size")
    with pytest.raises(ReplayExhausted, match="all 3 recorded ideas were served"):
        propose(p, 1)
    assert isinstance(ReplayExhausted("x"), BudgetExhausted)


def test_known_titles_resume_after_restart(tmp_path):
    p = provider(tmp_path)
    (b,) = blocks(propose(p, 1, known_titles=["warmup THEN cosine", "Label smoothing 0.1"]).text)
    assert b.startswith("[Experiment] Bigger batch")
    restarted = provider(tmp_path)
    (b,) = blocks(propose(restarted, 1, skip_titles=["Warmup then cosine"]).text)
    assert b.startswith("[Experiment] Label smoothing 0.1")
    with pytest.raises(ReplayExhausted):
        propose(provider(tmp_path), 2, known_titles=[r.title for r in p.records])


def test_implement_serves_diff_and_revisions_by_attempt(tmp_path):
    p = provider(tmp_path)
    assert implement(p, "Warmup then cosine") == f"```diff\n{DIFF.rstrip()}\n```"
    assert implement(p, "Warmup then cosine", 2, "revise") == "```diff\nREV-1 diff\n```"
    assert implement(p, "Warmup then cosine", 3, "revise") == "```diff\nREV-2 diff\n```"
    assert implement(p, "Warmup then cosine", 7, "revise") == "```diff\nREV-2 diff\n```"  # the last one
    assert implement(p, "Label smoothing 0.1", 2) == "```diff\nFENCED\n```"  # no revisions: the last
    assert "```diff" in implement(p, "Bigger batch")


def test_implement_matching_is_exact_then_normalised_then_substring(tmp_path):
    p = provider(tmp_path)
    assert implement(p, "  warmup-then   COSINE ") == implement(p, "Warmup then cosine")
    full = format_idea(p.records[1])  # the whole idea text, as a policy would pass it
    assert implement(p, full) == "```diff\nFENCED\n```"
    assert implement(p, "Idea: try the bigger batch trick") == implement(p, "Bigger batch")


def test_unknown_idea_gets_a_reply_without_a_diff(tmp_path):
    text = implement(provider(tmp_path), "Rotary embeddings everywhere")
    assert text.strip() and "```" not in text and "+++" not in text


def test_other_purposes_and_budget(tmp_path):
    p = provider(tmp_path, max_calls=2)
    assert "no recorded response" in p.complete(ASK, purpose="summarise").text
    propose(p, 1)
    with pytest.raises(BudgetExhausted, match="2/2"):
        propose(p, 1)


def test_paper_shaped_trajectory_file(tmp_path):
    """The published trajectory shape: idea, code_diff, epoch, result; no titles; a JSON array."""
    paper = [
        {"idea": "[Experiment]\nGradient clipping at 0.5\n[Description]\nClip the global norm.\n"
                 "[Code Changes]\nSet grad_clip=0.5 in train.py.", "code_diff": DIFF, "epoch": 0,
         "result": {"accuracy": 0.52}},
        {"idea": "## Entropy bonus\nAdd an entropy term to the GRPO loss.", "code_diff": "bonus diff",
         "epoch": 1, "result": None},
    ]
    (tmp_path / "traj.json").write_text(json.dumps(paper, indent=2))
    p = ReplayProvider(LLMCfg(provider="replay"), path=tmp_path / "traj.json")
    assert [r.title for r in p.records] == ["Gradient clipping at 0.5", "Entropy bonus"]
    one, two = blocks(propose(p, 2).text)
    assert one.startswith("[Experiment]\nGradient clipping at 0.5") and one.endswith("[End]")
    assert two == ("[Experiment] Entropy bonus\nAdd an entropy term to the GRPO loss.\n"
                   "[Code Changes] As described above.\n[End]")
    assert implement(p, "Gradient clipping at 0.5") == f"```diff\n{DIFF.rstrip()}\n```"
    assert p.records[0].result == {"accuracy": 0.52}


def test_tolerant_reader_for_exports(tmp_path):
    """Key aliases, nested idea objects, list-valued diffs, a truncated last line, repeats."""
    lines = [
        json.dumps({"idea": {"title": "Nested", "text": "Nested idea text"}, "patch": "P1"}),
        json.dumps({"title": "Attempts list", "idea": "x", "code_diff": ["A1", "A2"]}),
        json.dumps({"title": "Nested", "idea": {"text": "Nested idea text"}}),  # same idea again
        "",
        '{"title": "cut short by a cra',
    ]
    (tmp_path / "export.jsonl").write_text("\n".join(lines))
    p = ReplayProvider(LLMCfg(provider="replay"), path=tmp_path / "export.jsonl")
    assert [r.title for r in p.records] == ["Nested", "Attempts list"]
    assert implement(p, "Nested") == "```diff\nP1\n```"
    assert implement(p, "Attempts list", 2) == "```diff\nA2\n```"
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text(json.dumps({"trajectory": [{"idea": "Only one", "code_diff": DIFF}]}))
    assert [r.title for r in ReplayProvider(LLMCfg(provider="replay"), path=wrapped).records] == ["Only one"]


def test_title_helpers():
    assert title_of("\n**[Experiment] Muon optimizer**\nbody") == "Muon optimizer"
    assert title_of("plain first line\nsecond") == "plain first line"
    assert to_record({"result": 1}) is None
    rec = to_record({"title": "T", "idea": "T\nbody", "code_diff": None})
    assert format_idea(rec) == "[Experiment] T\nbody\n[Code Changes] As described above.\n[End]"
