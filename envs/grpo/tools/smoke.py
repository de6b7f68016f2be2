"""CPU smoke check of the training code (the manifest's `check`): a tiny random Qwen2 model, a few
built-in problems, one GRPO step with the transformers rollout, then the frozen evaluation of the
saved policy on two problems. Needs no download and no GPU; takes about half a minute."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tools"))
from random_model import build, corpus  # noqa: E402

PROBLEMS = [("What is $2+3$?", "5"), ("Simplify $\\frac{2}{4}$.", "\\frac{1}{2}"),
            ("What is $3 \\cdot 3$?", "9"), ("What is $10-7$?", "3")]


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="grpo-smoke-") as tmp:
        t = Path(tmp)
        data = t / "data"
        data.mkdir()
        for split in ("train", "test"):
            with open(data / f"{split}.jsonl", "w") as f:
                for p, a in PROBLEMS:
                    f.write(json.dumps({"problem": p, "answer": a}) + "\n")
        build(t / "model", "tiny", corpus([str(data / "train.jsonl")]), 300)
        env = dict(os.environ, GRPO_DATA=str(data), GRPO_MODEL=str(t / "model"), AUTORESEARCH_SEED="0")
        for k in ("AUTORESEARCH_TIME_BUDGET_S", "AUTORESEARCH_EVAL_PHASE", "AUTORESEARCH_MODEL_IO"):
            env.pop(k, None)                   # evaluate.py runs all its steps here (local mode)
        subprocess.run([sys.executable, "train_grpo.py", "--grpo-steps", "1", "--group-size", "4",
                        "--prompts-per-step", "2", "--micro-batch", "4", "--grad-accum", "2",
                        "--max-tokens", "16", "--out", str(t / "policy"), "--backend", "hf"],
                       env=env, check=True)
        out = subprocess.run([sys.executable, str(HERE / "evaluate.py"), "--policy", str(t / "policy"),
                              "--limit", "2", "--max-tokens", "16", "--backend", "hf"],
                             env=env, check=True, capture_output=True, text=True).stdout
        print(out)
        if "math500_accuracy:" not in out:
            print("smoke: evaluate.py printed no math500_accuracy", file=sys.stderr)
            return 1
    print("smoke: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
