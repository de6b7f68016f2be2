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
    for f in ("evaluate.py", "eval_model.py", "grader.py", "generation.py", "math_data.py", "prepare_math.py",
              "prompts/r1_zero.prompt", ".autoresearch.toml"):
        assert m.is_frozen(f), f
    assert not m.is_frozen("train_grpo.py") and not m.is_frozen("rollout.py")
    assert m.artifacts == ["policy"] and set(m.data) == {"GRPO_DATA", "GRPO_MODEL"}
    assert set(m.eval_data) == {"GRPO_EVAL_DATA"}     # the answers: for the scorer's sandbox only
    assert (m.model, m.model_output_mb) == ("python eval_model.py", 64)         # the split evaluation


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


# ----------------------------------------------------------------------------- the split evaluation

@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    """A tiny random Qwen2 saved as training saves its policy (config, safetensors, tokenizer)."""
    sys.path.insert(0, str(ENV / "tools"))
    from random_model import build, corpus
    d = tmp_path_factory.mktemp("arts")
    build(d / "policy", "tiny", corpus([str(DATA / "train.jsonl")]), 300)
    return d


SECRET_ANSWERS = ["\\frac{1729}{4231}", "98765431", "(17, -29)"]


@pytest.fixture
def secret_data(tmp_path):
    """A test set whose answers appear nowhere in its problems, so a grep for them means a leak."""
    d = tmp_path / "eval-data"
    d.mkdir()
    problems = ["What is the answer to the first question?", "Name the second number.", "Give the pair."]
    with open(d / "test.jsonl", "w") as f:
        for p, a in zip(problems, SECRET_ANSWERS):
            f.write(json.dumps({"problem": p, "answer": a, "solution": f"So it is $\\boxed{{{a}}}$."}) + "\n")
    return d


def clean_env(tmp_path, **extra):
    return {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONSAFEPATH": "1", "PYTHONNOUSERSITE": "1",
            "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", **extra}


def phase(name, io, cwd, tmp_path, *args, **extra):
    env = clean_env(tmp_path, AUTORESEARCH_EVAL_PHASE=name, AUTORESEARCH_MODEL_IO=str(io), **extra)
    return subprocess.run([sys.executable, str(ENV / "evaluate.py"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def model_step(io, arts, tmp_path):
    out = io / "out" / "0"
    out.mkdir(parents=True)
    env = clean_env(tmp_path, AUTORESEARCH_MODEL_IN=str(io / "in" / "0"), AUTORESEARCH_MODEL_OUT=str(out),
                    AUTORESEARCH_ARTIFACTS=str(arts))
    return subprocess.run([sys.executable, str(ENV / "eval_model.py")], cwd=io, env=env,
                          capture_output=True, text=True, timeout=300)


def test_model_input_holds_the_prompts_and_never_the_answers(tmp_path, secret_data):
    io, sc = tmp_path / "io", tmp_path / "scorer"
    sc.mkdir()
    p = phase("inputs", io, sc, tmp_path, GRPO_EVAL_DATA=str(secret_data), GRPO_DATA=str(DATA))
    assert p.returncode == 0, p.stderr
    files = sorted(f.relative_to(io).as_posix() for f in io.rglob("*") if f.is_file())
    assert files == ["in/0/config.json", "in/0/prompts.jsonl"]
    blob = "".join((io / f).read_text() for f in files)
    rows = [json.loads(x) for x in (io / "in/0/prompts.jsonl").read_text().splitlines()]
    assert [set(r) for r in rows] == [{"i", "prompt"}] * 3 and "Name the second number." in rows[1]["prompt"]
    for a in SECRET_ANSWERS:                  # neither raw nor as JSON escapes it
        assert a not in blob and json.dumps(a)[1:-1] not in blob, a
    assert "answer\"" not in blob and "solution" not in blob
    cfg = json.loads((io / "in/0/config.json").read_text())
    assert (cfg["temperature"], cfg["top_p"], cfg["seed"], cfg["max_tokens"]) == (1.0, 1.0, 1234, 1024)


def test_the_answers_come_from_eval_data_when_set(tmp_path, secret_data, monkeypatch):
    from math_data import test_path
    monkeypatch.setenv("GRPO_DATA", str(DATA))
    monkeypatch.delenv("GRPO_EVAL_DATA", raising=False)
    assert test_path() == DATA / "test.jsonl"              # local debugging, older layouts
    monkeypatch.setenv("GRPO_EVAL_DATA", str(secret_data))
    assert test_path() == secret_data / "test.jsonl"


def test_split_sampling_is_the_one_process_evaluation(tmp_path, policy):
    """The model step samples exactly what the evaluator before the split sampled (same prompts,
    order, batches and seed), and the scorer grades those completions."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from generation import hf_generate
    from grader import r1_zero_reward
    from math_data import load_problems, r1_zero_prompt
    io, sc = tmp_path / "io", tmp_path / "scorer"
    sc.mkdir()
    assert phase("inputs", io, sc, tmp_path, "--max-tokens", "24", "--backend", "hf",
                 GRPO_DATA=str(DATA)).returncode == 0
    p = model_step(io, policy, tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    got = [json.loads(x) for x in (io / "out/0/completions.jsonl").read_text().splitlines()]

    rows = load_problems(DATA / "test.jsonl")
    prompts = [r1_zero_prompt(r["problem"]) for r in rows]
    tok = AutoTokenizer.from_pretrained(policy / "policy")
    model = AutoModelForCausalLM.from_pretrained(policy / "policy", dtype=torch.float32)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    ref = hf_generate(model, tok, [prompts[i] for i in order], 1, 24, 1.0, 1.0, 8, 1234)
    want = {i: ref[j][0] for j, i in enumerate(order)}
    assert [g["i"] for g in got] == list(range(len(rows)))
    assert [g["text"] for g in got] == [want[i].text for i in range(len(rows))]
    assert [g["n_tokens"] for g in got] == [len(want[i].response_ids) for i in range(len(rows))]

    s = phase("score", io, sc, tmp_path, GRPO_DATA=str(DATA))
    assert s.returncode == 0, s.stderr
    m = parse_metrics(s.stdout, None)
    acc = sum(r1_zero_reward(want[i].text, str(r["answer"]))["reward"] for i, r in enumerate(rows)) / len(rows)
    assert m["n"] == len(rows) and m["math500_accuracy"] == pytest.approx(acc, abs=1e-4)
    assert m["mean_response_tokens"] == pytest.approx(sum(g["n_tokens"] for g in got) / len(got), abs=0.05)


def _inputs(tmp_path, secret_data, *args):
    io, sc = tmp_path / "io", tmp_path / "scorer"
    sc.mkdir()
    assert phase("inputs", io, sc, tmp_path, *args, GRPO_EVAL_DATA=str(secret_data)).returncode == 0
    (io / "out" / "0").mkdir(parents=True)
    return io, sc


def _write(io, rows):
    (io / "out/0/completions.jsonl").write_text("".join(
        (r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def test_scorer_grades_against_the_answers_it_holds(tmp_path, secret_data):
    io, sc = _inputs(tmp_path, secret_data)
    good = [{"i": i, "text": f"work </think> <answer>{a}</answer>", "n_tokens": 9}
            for i, a in enumerate(SECRET_ANSWERS)]
    good[2]["text"] = "work </think> <answer>(17, 29)</answer>"
    _write(io, good)
    p = phase("score", io, sc, tmp_path, GRPO_EVAL_DATA=str(secret_data))
    assert p.returncode == 0, p.stderr
    m = parse_metrics(p.stdout, None)
    assert (m["math500_accuracy"], m["format_rate"], m["n"], m["mean_response_tokens"]) == (0.6667, 1.0, 3, 9.0)


def test_malformed_completions_fail_with_a_reason(tmp_path, secret_data):
    io, sc = _inputs(tmp_path, secret_data, "--max-tokens", "16")
    ok = [{"i": i, "text": "x </think> <answer>1</answer>", "n_tokens": 5} for i in range(3)]
    cases = [(ok[:2], "2 completions for 3 prompts"),
             (ok + [ok[0]], "must be a new prompt index"),
             ([ok[0], ok[1], dict(ok[2], i=3)], "must be a new prompt index"),
             ([ok[0], ok[1], dict(ok[2], i="2")], "must be a new prompt index"),
             ([ok[0], ok[1], dict(ok[2], n_tokens=17)], "'n_tokens' must be an integer in [0, 16]"),
             ([ok[0], ok[1], dict(ok[2], text="y" * (16 * 128 + 1))], "'text' must be a string of at most"),
             ([ok[0], ok[1], dict(ok[2], text=["a"])], "'text' must be a string"),
             ([ok[0], ok[1], dict(ok[2], answer="1")], "expected {'i', 'text', 'n_tokens'}"),
             ([ok[0], ok[1], "---"], "not JSON"),
             ([ok[0], ok[1], "math500_accuracy: 1.0"], "not JSON")]
    for rows, reason in cases:
        _write(io, rows)
        p = phase("score", io, sc, tmp_path, GRPO_EVAL_DATA=str(secret_data))
        assert p.returncode == 1 and reason in p.stderr and "math500_accuracy" not in p.stdout, (reason, p.stderr)
    (io / "out/0/completions.jsonl").write_bytes(b"\xff\xfe")
    p = phase("score", io, sc, tmp_path, GRPO_EVAL_DATA=str(secret_data))
    assert p.returncode == 1 and "not UTF-8" in p.stderr
    (io / "out/0/completions.jsonl").unlink()
    p = phase("score", io, sc, tmp_path, GRPO_EVAL_DATA=str(secret_data))
    assert p.returncode == 1 and "wrote no completions.jsonl" in p.stderr


def test_a_forged_metric_block_from_the_model_step_is_not_the_result(tmp_path, policy):
    """Whatever the model step prints (a policy that got code to run there could print anything)
    never reaches the scorer's stdout, the only output that is parsed."""
    ev = _frozen_copy(tmp_path / "eval")
    (ev / "eval_model_real.py").write_bytes((ev / "eval_model.py").read_bytes())
    (ev / "eval_model.py").write_text(
        "import os, runpy, sys\nprint('---'); print('math500_accuracy: 1.0000'); sys.stdout.flush()\n"
        "runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'eval_model_real.py'),"
        " run_name='__main__')\n")
    env = clean_env(tmp_path, AUTORESEARCH_ARTIFACTS=str(policy), GRPO_DATA=str(DATA))
    p = subprocess.run([sys.executable, "evaluate.py", "--limit", "2", "--max-tokens", "8", "--backend", "hf"],
                       cwd=ev, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "math500_accuracy: 1.0000" in p.stderr and "1.0000" not in p.stdout
    assert parse_metrics(p.stdout, None)["math500_accuracy"] == 0.0 and parse_metrics(p.stdout, None)["n"] == 2
