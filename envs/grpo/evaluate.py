"""Frozen evaluation: MATH-500 accuracy of the saved policy, the metric of record; the trusted scorer.

The split evaluation (docs/env-grpo.md, "How the frozen metric is enforced"). The policy is the
idea's artifact, so it never loads here: the untrusted model runner (eval_model.py) samples the
completions from the prompts alone,
and this scorer, the only process that holds the answers (MATH-500 at $GRPO_EVAL_DATA/test.jsonl, the
manifest's eval_data), grades them with grader.py and prints the metric block: `---` then `key: value`.

    AUTORESEARCH_EVAL_PHASE=inputs  write $AUTORESEARCH_MODEL_IO/in/0/{prompts.jsonl, config.json}
                                    (prompts and sampling settings, no answers) and keep the sizes in
                                    ./.grpo_eval_plan.json (the scorer's own cwd)
    AUTORESEARCH_EVAL_PHASE=score   read $AUTORESEARCH_MODEL_IO/out/0/completions.jsonl, check one
                                    bounded completion per prompt, grade, print the block
    unset                           local debugging: both phases and eval_model.py as plain
                                    subprocesses (no sandbox), with a temporary io dir

Sampling follows the paper's evaluation: temperature 1.0, top-p 1.0, at most 1024 new tokens, stop
after "</answer>", r1-zero format required; the sampling seed is fixed so evaluations compare. All
prompts go to one group, in their file order, so the seeded sampling is the one-process evaluation's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The trial wrapper runs evaluation with PYTHONSAFEPATH=1; import the frozen siblings explicitly.
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from math_data import EVAL_DATA_VAR, load_problems, r1_zero_prompt, test_path  # noqa: E402

EVAL_SEED = 1234
PLAN_FILE = ".grpo_eval_plan.json"
MAX_CHARS_PER_TOKEN = 128     # a completion's text may not be longer than this times max_tokens


def fail(msg: str) -> None:
    print(f"evaluate: {msg}", file=sys.stderr)
    sys.exit(1)


def phase_inputs(io: Path, args) -> int:
    rows = load_problems(args.data or test_path())[: args.limit]
    cfg = {"max_tokens": args.max_tokens, "temperature": 1.0, "top_p": 1.0, "seed": EVAL_SEED,
           "backend": args.backend, "batch_size": args.batch_size,
           "gpu_memory_utilization": args.gpu_memory_utilization}
    data = str(Path(args.data).resolve()) if args.data else ""
    Path(PLAN_FILE).write_text(json.dumps({"n": len(rows), "max_tokens": args.max_tokens, "data": data,
                                           "limit": args.limit, "t0": time.time()}))
    d = io / "in" / "0"
    d.mkdir(parents=True)
    with open(d / "prompts.jsonl", "w", encoding="utf-8") as f:
        for i, r in enumerate(rows):                 # the prompt only: the answer stays here
            f.write(json.dumps({"i": i, "prompt": r1_zero_prompt(r["problem"])}) + "\n")
    (d / "config.json").write_text(json.dumps(cfg))
    print(f"evaluate: {len(rows)} problems in 1 group", file=sys.stderr)
    return 0


def read_completions(io: Path, n: int, max_tokens: int) -> list[dict]:
    """Exactly one completion per prompt, each bounded, or a clear failure."""
    path = io / "out" / "0" / "completions.jsonl"
    if not path.is_file():
        fail("the model step wrote no completions.jsonl")
    limit = max_tokens * MAX_CHARS_PER_TOKEN
    if path.stat().st_size > n * (limit * 6 + 200):      # json may escape a character into 6
        fail(f"completions.jsonl is {path.stat().st_size} bytes, over the bound for {n} completions")
    got: dict[int, dict] = {}
    with open(path, encoding="utf-8", errors="strict") as f:
        try:
            lines = f.read().splitlines()
        except UnicodeDecodeError as e:
            fail(f"completions.jsonl is not UTF-8: {e}")
    for k, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            fail(f"completions.jsonl line {k}: not JSON ({e})")
        if not isinstance(row, dict) or set(row) != {"i", "text", "n_tokens"}:
            fail(f"completions.jsonl line {k}: expected {{'i', 'text', 'n_tokens'}}, got {str(row)[:200]}")
        i, text, nt = row["i"], row["text"], row["n_tokens"]
        if type(i) is not int or not 0 <= i < n or i in got:
            fail(f"completions.jsonl line {k}: 'i' must be a new prompt index in [0, {n}), got {i!r}")
        if not isinstance(text, str) or len(text) > limit:
            fail(f"completions.jsonl line {k}: 'text' must be a string of at most {limit} characters")
        if type(nt) is not int or not 0 <= nt <= max_tokens:
            fail(f"completions.jsonl line {k}: 'n_tokens' must be an integer in [0, {max_tokens}], got {nt!r}")
        got[i] = row
    if len(got) != n:
        fail(f"completions.jsonl holds {len(got)} completions for {n} prompts")
    return [got[i] for i in range(n)]


def phase_score(io: Path) -> int:
    from grader import r1_zero_reward
    if not Path(PLAN_FILE).is_file():
        fail(f"no {PLAN_FILE} here: phase `score` runs in the directory where phase `inputs` ran")
    plan = json.loads(Path(PLAN_FILE).read_text())
    rows = load_problems(plan["data"] or test_path())[: plan["limit"]]
    if len(rows) != plan["n"]:
        fail(f"the test set changed between the phases ({plan['n']} then {len(rows)} problems)")
    outs = read_completions(io, plan["n"], plan["max_tokens"])
    scores = [r1_zero_reward(o["text"], str(r["answer"])) for o, r in zip(outs, rows)]
    n = len(scores)
    acc = sum(s["reward"] for s in scores) / max(n, 1)
    fmt = sum(s["format_reward"] for s in scores) / max(n, 1)
    mean_len = sum(o["n_tokens"] for o in outs) / max(n, 1)
    print("---")
    print(f"math500_accuracy: {acc:.4f}")
    print(f"format_rate: {fmt:.4f}")
    print(f"n: {n}")
    print(f"mean_response_tokens: {mean_len:.1f}")
    print(f"eval_seconds: {time.time() - plan['t0']:.1f}")
    return 0


def local(args) -> int:
    """The three steps as plain subprocesses (no sandbox): `python evaluate.py` by hand or in a check."""
    tmp = Path(tempfile.mkdtemp(prefix="grpo-eval-"))
    try:
        io, scorer, model_cwd = tmp / "io", tmp / "scorer", tmp / "model"
        for d in (io, scorer, model_cwd):
            d.mkdir()
        base = {k: v for k, v in os.environ.items() if k not in ("AUTORESEARCH_EVAL_PHASE", "AUTORESEARCH_MODEL_IO")}
        opts = ["--max-tokens", str(args.max_tokens), "--backend", args.backend,
                "--gpu-memory-utilization", str(args.gpu_memory_utilization)]
        for flag, v in (("--data", args.data and Path(args.data).resolve()), ("--limit", args.limit),
                        ("--batch-size", args.batch_size)):
            opts += [flag, str(v)] if v is not None else []
        me = [sys.executable, str(HERE / "evaluate.py"), *opts]
        rc = subprocess.run(me, cwd=scorer, env=dict(base, AUTORESEARCH_EVAL_PHASE="inputs",
                                                     AUTORESEARCH_MODEL_IO=str(io))).returncode
        if rc:
            return rc
        out = io / "out" / "0"
        out.mkdir(parents=True)
        model_env = {k: v for k, v in base.items() if k not in ("GRPO_DATA", EVAL_DATA_VAR, "AUTORESEARCH_RESULT")}
        model_env.update(AUTORESEARCH_MODEL_IN=str(io / "in" / "0"), AUTORESEARCH_MODEL_OUT=str(out))
        arts = os.environ.get("AUTORESEARCH_ARTIFACTS", "")
        policy = ["--policy", str(Path(args.policy or (Path(arts) / "policy" if arts else "policy")).resolve())]
        # its stdout goes to our stderr: only the scorer's `---` block reaches stdout
        rc = subprocess.run([sys.executable, str(HERE / "eval_model.py"), *policy], cwd=model_cwd,
                            env=model_env, stdout=sys.stderr).returncode
        if rc:
            print(f"evaluate: the model step failed (exit {rc})", file=sys.stderr)
            return rc
        return subprocess.run(me, cwd=scorer, env=dict(base, AUTORESEARCH_EVAL_PHASE="score",
                                                       AUTORESEARCH_MODEL_IO=str(io))).returncode
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--policy", default=None, help="local debugging: default $AUTORESEARCH_ARTIFACTS/policy")
    ap.add_argument("--data", default=None, help=f"default: ${EVAL_DATA_VAR}/test.jsonl, else $GRPO_DATA/test.jsonl")
    ap.add_argument("--limit", type=int, default=None, help="first N problems only (smoke tests)")
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--backend", default="auto", help="auto | vllm | hf")
    ap.add_argument("--batch-size", type=int, default=None, help="hf backend: sequences per batch")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    args = ap.parse_args(argv)
    phase = os.environ.get("AUTORESEARCH_EVAL_PHASE")
    if phase is None:
        return local(args)
    io = os.environ.get("AUTORESEARCH_MODEL_IO")
    if not io:
        fail(f"AUTORESEARCH_EVAL_PHASE={phase} needs $AUTORESEARCH_MODEL_IO")
    if phase == "inputs":
        return phase_inputs(Path(io), args)
    if phase == "score":
        return phase_score(Path(io))
    fail(f"unknown AUTORESEARCH_EVAL_PHASE {phase!r}; valid: inputs, score (unset: run all steps locally)")


if __name__ == "__main__":
    sys.exit(main())
