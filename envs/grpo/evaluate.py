"""Frozen evaluation: MATH-500 accuracy of the saved policy, the metric of record.

Runs from the frozen harness in a clean environment (see the manifest). It reads only the policy
directory that training saved ($AUTORESEARCH_ARTIFACTS/policy: config, safetensors, tokenizer),
loads it with trust_remote_code=False and safetensors only, so no code from the trial runs, and
never reads any number the training logged. Prints a metrics block: `---` then `key: value`.
Sampling follows the paper's evaluation: temperature 1.0, top-p 1.0, at most 1024 new tokens, stop
after "</answer>", r1-zero format required; the sampling seed is fixed so evaluations compare.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

# The trial wrapper runs evaluation with PYTHONSAFEPATH=1; import the frozen siblings explicitly.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from generation import hf_generate, pick_backend, vllm_engine, vllm_generate
from grader import r1_zero_reward
from math_data import TEST_FILE, data_dir, load_problems, r1_zero_prompt

EVAL_SEED = 1234
POLICY_DIR = "policy"


def check_policy(path: Path) -> None:
    """Refuse anything that could run code on load, with a message the trial's author can act on."""
    cfg = path / "config.json"
    if not cfg.is_file():
        raise SystemExit(f"no saved policy at {path}: training must save_pretrained() into "
                         f"./{POLICY_DIR} (config.json, *.safetensors, tokenizer files)")
    if "auto_map" in json.loads(cfg.read_text()):
        raise SystemExit(f"{cfg} declares auto_map (custom model code); the evaluation loads "
                         "only built-in architectures")
    if not any(path.glob("*.safetensors")):
        raise SystemExit(f"{path} holds no *.safetensors; save with safe_serialization=True "
                         "(pickled weights are refused)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--policy", default=None, help="default: $AUTORESEARCH_ARTIFACTS/policy")
    ap.add_argument("--data", default=None, help="default: $GRPO_DATA/test.jsonl")
    ap.add_argument("--limit", type=int, default=None, help="first N problems only (smoke tests)")
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--backend", default="auto", help="auto | vllm | hf")
    ap.add_argument("--batch-size", type=int, default=None, help="hf backend: sequences per batch")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    args = ap.parse_args(argv)

    t0 = time.time()
    arts = os.environ.get("AUTORESEARCH_ARTIFACTS", "")
    policy = Path(args.policy or (Path(arts) / POLICY_DIR if arts else POLICY_DIR))
    check_policy(policy)
    rows = load_problems(args.data or data_dir() / TEST_FILE)[: args.limit]
    prompts = [r1_zero_prompt(r["problem"]) for r in rows]
    backend = pick_backend(args.backend)
    print(f"evaluate: {len(rows)} problems, policy {policy}, backend {backend}", flush=True)

    if backend == "vllm":
        llm = vllm_engine(str(policy), args.gpu_memory_utilization, 2048 + args.max_tokens, EVAL_SEED)
        outs = vllm_generate(llm, prompts, 1, args.max_tokens, 1.0, 1.0, EVAL_SEED)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        cuda = torch.cuda.is_available()
        tok = AutoTokenizer.from_pretrained(policy, trust_remote_code=False)
        model = AutoModelForCausalLM.from_pretrained(
            policy, trust_remote_code=False, use_safetensors=True,
            dtype=torch.bfloat16 if cuda else torch.float32).to("cuda" if cuda else "cpu")
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # similar lengths batch well
        got = hf_generate(model, tok, [prompts[i] for i in order], 1, args.max_tokens, 1.0, 1.0,
                          args.batch_size or (128 if cuda else 8), EVAL_SEED)
        outs = [None] * len(prompts)
        for j, i in enumerate(order):
            outs[i] = got[j]

    scores = [r1_zero_reward(o[0].text, str(r["answer"])) for o, r in zip(outs, rows)]
    n = len(scores)
    acc = sum(s["reward"] for s in scores) / max(n, 1)
    fmt = sum(s["format_reward"] for s in scores) / max(n, 1)
    mean_len = sum(len(o[0].response_ids) for o in outs) / max(n, 1)
    print("---")
    print(f"math500_accuracy: {acc:.4f}")
    print(f"format_rate: {fmt:.4f}")
    print(f"n: {n}")
    print(f"mean_response_tokens: {mean_len:.1f}")
    print(f"eval_seconds: {time.time() - t0:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
