"""The model runner of the split evaluation: completions of the saved policy. FROZEN, but it loads
the idea's artifact, so it is treated as untrusted while it runs.

One input group at a time, in its own fresh process and sandbox (the trial wrapper's `model` step;
`python evaluate.py` runs it as a plain subprocess when debugging by hand):

    in   $AUTORESEARCH_MODEL_IN/prompts.jsonl  {"i": row, "prompt": text} per line: prompts only,
                                                never the answers
         $AUTORESEARCH_MODEL_IN/config.json    the sampling settings the scorer chose (max_tokens,
                                                temperature, top_p, seed, backend, batch_size, ...)
         $AUTORESEARCH_ARTIFACTS/policy         what training saved (config, safetensors, tokenizer),
                                                loaded with trust_remote_code=False, safetensors only
    out  $AUTORESEARCH_MODEL_OUT/completions.jsonl  {"i": row, "text": completion, "n_tokens": k}
                                                per prompt, k <= max_tokens

Nothing this process prints is parsed: the scorer (evaluate.py) validates the completions and grades
them against the answers that only it holds.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch

# The trial wrapper runs with PYTHONSAFEPATH=1; import the frozen sibling explicitly.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from generation import hf_generate, pick_backend, vllm_engine, vllm_generate  # noqa: E402

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


def generate(policy: Path, prompts: list[str], cfg: dict) -> list:
    """One completion per prompt, with the paper's sampling settings and the fixed seed."""
    backend = pick_backend(cfg["backend"])
    print(f"eval_model: {len(prompts)} prompts, policy {policy}, backend {backend}", file=sys.stderr)
    mt, temp, top_p, seed = cfg["max_tokens"], cfg["temperature"], cfg["top_p"], cfg["seed"]
    if backend == "vllm":
        llm = vllm_engine(str(policy), cfg["gpu_memory_utilization"], 2048 + mt, seed)
        return [o[0] for o in vllm_generate(llm, prompts, 1, mt, temp, top_p, seed)]
    from transformers import AutoModelForCausalLM, AutoTokenizer
    cuda = torch.cuda.is_available()
    tok = AutoTokenizer.from_pretrained(policy, trust_remote_code=False)
    model = AutoModelForCausalLM.from_pretrained(
        policy, trust_remote_code=False, use_safetensors=True,
        dtype=torch.bfloat16 if cuda else torch.float32).to("cuda" if cuda else "cpu")
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # similar lengths batch well
    got = hf_generate(model, tok, [prompts[i] for i in order], 1, mt, temp, top_p,
                      cfg.get("batch_size") or (128 if cuda else 8), seed)
    outs = [None] * len(prompts)
    for j, i in enumerate(order):
        outs[i] = got[j][0]
    return outs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--policy", default=None, help="local debugging: default $AUTORESEARCH_ARTIFACTS/policy")
    args = ap.parse_args(argv)
    env = os.environ
    for k in ("AUTORESEARCH_MODEL_IN", "AUTORESEARCH_MODEL_OUT"):
        if not env.get(k):
            raise SystemExit(f"${k} is not set: this is the model step of the split evaluation; "
                             "run `python evaluate.py` to evaluate by hand")
    inp, out = Path(env["AUTORESEARCH_MODEL_IN"]), Path(env["AUTORESEARCH_MODEL_OUT"])
    # the sandbox leaves nothing writable but the output (and a private /tmp): vLLM's, triton's and
    # inductor's caches go to a fresh temporary folder, never to $HOME
    cache = tempfile.mkdtemp(prefix="grpo-model-cache-")
    atexit.register(shutil.rmtree, cache, True)
    for k in ("VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "XDG_CACHE_HOME"):
        os.environ.setdefault(k, os.path.join(cache, k.lower()))
    policy = Path(args.policy or Path(env.get("AUTORESEARCH_ARTIFACTS", ".")) / POLICY_DIR)
    check_policy(policy)
    cfg = json.loads((inp / "config.json").read_text())
    rows = [json.loads(x) for x in (inp / "prompts.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    outs = generate(policy, [r["prompt"] for r in rows], cfg)
    with open(out / "completions.jsonl", "w", encoding="utf-8") as f:
        for r, o in zip(rows, outs):
            f.write(json.dumps({"i": r["i"], "text": o.text, "n_tokens": len(o.response_ids)}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
