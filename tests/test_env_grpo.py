"""The grpo environment on a CPU: grader, r1-zero format reward, data preparation, and one GRPO step
of a tiny random Qwen2 followed by the frozen evaluation from a directory of frozen files only."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autoresearchd.manifest import parse_manifest
from autoresearchd.runners.metrics import parse_metrics

ENV = Path(__file__).resolve().parent.parent / "envs" / "grpo"
DATA = Path(__file__).resolve().parent / "data" / "grpo"
sys.path.insert(0, str(ENV))

from grader import is_equivalent, r1_zero_reward  # noqa: E402


def _rows(name):
    return [json.loads(x) for x in (DATA / name).read_text().splitlines() if x.strip()]


def manifest():
    return parse_manifest((ENV / ".autoresearch.toml").read_text())


def test_gold_answers_grade_as_correct_against_themselves_and_boxed():
    for row in _rows("train.jsonl") + _rows("test.jsonl"):
        gold = row["answer"]
        assert is_equivalent(gold, gold), gold
        plain = f"I add them. </think> <answer>{gold}</answer>"
        boxed = f"Some work. </think> <answer>So the answer is $\\boxed{{{gold}}}$.</answer>"
        assert r1_zero_reward(plain, gold)["reward"] == 1.0, gold
        assert r1_zero_reward(boxed, gold)["reward"] == 1.0, gold


@pytest.mark.parametrize("answer,gold,ok", [
    ("0.5", "\\frac{1}{2}", True), ("\\sqrt{8}", "2\\sqrt{2}", True), ("\\dfrac{3}{4}", "\\frac{3}{4}", True),
    ("(3, 2)", "(3,2)", True), ("12", "11", False), ("(2,3)", "(3,2)", False), ("\\frac{5}{7}", "\\frac{5}{6}", False),
    ("", "6", False), (None, "6", False)])
def test_grader_equivalence(answer, gold, ok):
    assert is_equivalent(answer, gold) is ok


def test_r1_zero_format_reward():
    good = "x </think> <answer>7</answer>"
    assert r1_zero_reward(good, "7") == {"format_reward": 1.0, "answer_reward": 1.0, "reward": 1.0}
    assert r1_zero_reward("x </think> <answer>8</answer>", "7") == {
        "format_reward": 1.0, "answer_reward": 0.0, "reward": 0.0}
    for bad in ("x </think><answer>7</answer>", "x </think> <answer>7", "the answer is \\boxed{7}"):
        assert r1_zero_reward(bad, "7")["format_reward"] == 0.0
        assert r1_zero_reward(bad, "7")["reward"] == 0.0
    assert r1_zero_reward("x </think> <answer>\\boxed{7</answer>", "7")["reward"] == 0.0  # broken box


def test_group_advantages_and_clipped_loss():
    import torch
    from train_grpo import Config, group_advantages, policy_loss
    adv = group_advantages(torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 1]), 4, True, 1e-6)
    assert adv[:4].sum().abs() < 1e-5 and adv[0] > 0 > adv[1]
    assert torch.all(adv[4:] == 0)                        # a group with equal rewards teaches nothing
    logp = torch.zeros(2, 3)
    old = torch.full((2, 3), -1.0)                        # ratio e = 2.7, far past the clip
    mask = torch.tensor([[1.0, 1, 0], [1, 1, 1]])
    loss, clip = policy_loss(Config(), logp, old, torch.tensor([[1.0], [1.0]]), mask)
    assert loss.item() == pytest.approx(-1.2) and clip.item() == 1.0


def test_manifest_freezes_the_evaluation_side():
    m = manifest()
    assert m.metric == "math500_accuracy" and m.goal == "max" and m.gpus == 1
    for f in ("evaluate.py", "grader.py", "generation.py", "math_data.py", "prepare_math.py",
              "prompts/r1_zero.prompt", ".autoresearch.toml"):
        assert m.is_frozen(f), f
    assert not m.is_frozen("train_grpo.py") and not m.is_frozen("rollout.py")
    assert m.artifacts == ["policy"] and set(m.data) == {"GRPO_DATA", "GRPO_MODEL"}


def test_prepare_math_writes_jsonl_from_local_files(tmp_path):
    out = tmp_path / "math"
    p = subprocess.run([sys.executable, str(ENV / "prepare_math.py"), "--from-dir", str(DATA / "raw"),
                        "--out", str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    train = [json.loads(x) for x in (out / "train.jsonl").read_text().splitlines()]
    test = [json.loads(x) for x in (out / "test.jsonl").read_text().splitlines()]
    assert len(train) == 4 and len(test) == 3
    assert train[1]["answer"] == "\\frac{3}{4}" and train[0]["subject"] == "Algebra"  # from the box
    assert {"problem", "answer", "solution", "subject", "level", "unique_id"} <= set(test[0])


def _frozen_copy(dst: Path) -> Path:
    """What the trial wrapper's eval/ holds: the frozen files only, nothing from training."""
    m = manifest()
    for f in ENV.rglob("*"):
        rel = f.relative_to(ENV).as_posix()
        if f.is_file() and "__pycache__" not in rel and m.is_frozen(rel):
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dst / rel)
    return dst


def test_one_grpo_step_then_frozen_evaluation(tmp_path):
    sys.path.insert(0, str(ENV / "tools"))
    from random_model import build, corpus
    model = build(tmp_path / "model", "tiny", corpus([str(DATA / "train.jsonl")]), 300)
    code = tmp_path / "code"
    shutil.copytree(ENV, code, ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, GRPO_DATA=str(DATA), GRPO_MODEL=str(model), AUTORESEARCH_SEED="1",
               AUTORESEARCH_RESULT=str(tmp_path / "run_result.json"), AUTORESEARCH_TIME_BUDGET_S="600")
    run = subprocess.run([sys.executable, "train_grpo.py", "--grpo-steps", "1", "--group-size", "4",
                          "--prompts-per-step", "2", "--micro-batch", "4", "--grad-accum", "2",
                          "--max-tokens", "16", "--save-margin-s", "1"],
                         cwd=code, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "rollout backend: hf" in run.stdout and "step 0 reward" in run.stdout
    policy = code / "policy"
    assert (policy / "config.json").is_file() and list(policy.glob("*.safetensors"))
    assert (policy / "tokenizer.json").is_file()

    # Training code that lies: a metrics file and block claiming a perfect score.
    (tmp_path / "run_result.json").write_text(json.dumps({"math500_accuracy": 0.99}))
    arts = tmp_path / "artifacts"
    shutil.copytree(policy, arts / "policy")
    (arts / "policy" / "metrics.json").write_text(json.dumps({"math500_accuracy": 0.99}))

    ev = _frozen_copy(tmp_path / "eval")
    assert not (ev / "train_grpo.py").exists()
    clean = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONSAFEPATH": "1",
             "PYTHONNOUSERSITE": "1", "AUTORESEARCH_ARTIFACTS": str(arts), "GRPO_DATA": str(DATA),
             "HF_HUB_OFFLINE": "1", "AUTORESEARCH_RESULT": str(tmp_path / "eval_result.json")}
    out = subprocess.run([sys.executable, "evaluate.py", "--limit", "3", "--max-tokens", "16"],
                         cwd=ev, env=clean, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    metrics = parse_metrics(out.stdout, None)
    assert metrics["n"] == 3 and 0.0 <= metrics["math500_accuracy"] <= 1.0
    assert metrics["math500_accuracy"] != 0.99 and "format_rate" in metrics


def test_evaluate_refuses_pickled_or_custom_code_policies(tmp_path):
    pol = tmp_path / "policy"
    pol.mkdir()
    (pol / "config.json").write_text(json.dumps({"model_type": "qwen2", "auto_map": {"AutoModel": "x.Y"}}))
    env = dict(os.environ, GRPO_DATA=str(DATA))
    p = subprocess.run([sys.executable, str(ENV / "evaluate.py"), "--policy", str(pol)],
                       env=env, capture_output=True, text=True)
    assert p.returncode != 0 and "auto_map" in p.stderr
    (pol / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    (pol / "pytorch_model.bin").write_bytes(b"x")
    p = subprocess.run([sys.executable, str(ENV / "evaluate.py"), "--policy", str(pol)],
                       env=env, capture_output=True, text=True)
    assert p.returncode != 0 and "safetensors" in p.stderr
