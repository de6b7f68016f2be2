"""Frozen data helpers: read MATH jsonl ({"problem", "answer", ...}) and apply the r1-zero prompt."""

from __future__ import annotations

import json
import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROMPT_FILE = HERE / "prompts" / "r1_zero.prompt"
TRAIN_FILE = "train.jsonl"   # MATH train, 7,500 problems
TEST_FILE = "test.jsonl"     # MATH-500
EVAL_DATA_VAR = "GRPO_EVAL_DATA"   # the folder of test.jsonl, for the scorer only (eval_data)


def data_dir() -> Path:
    d = os.environ.get("GRPO_DATA")
    if not d:
        raise SystemExit("GRPO_DATA is not set: point it at the folder prepare_math.py wrote "
                         "(train.jsonl, test.jsonl); the manifest's [env] data table sets it")
    path = Path(os.path.expanduser(os.path.expandvars(d)))
    if not path.is_absolute():  # run and evaluate start in different folders
        raise SystemExit(f"GRPO_DATA={d!r} must be an absolute path (or start with ~)")
    return path


def test_path() -> Path:
    """MATH-500 with its answers: $GRPO_EVAL_DATA/test.jsonl, the manifest's eval_data, which only the
    scorer's sandbox sees; unset (local debugging, old layouts), $GRPO_DATA/test.jsonl."""
    d = os.environ.get(EVAL_DATA_VAR)
    if not d:
        return data_dir() / TEST_FILE
    path = Path(os.path.expanduser(os.path.expandvars(d)))
    if not path.is_absolute():
        raise SystemExit(f"{EVAL_DATA_VAR}={d!r} must be an absolute path (or start with ~)")
    return path / TEST_FILE


def load_problems(path: Path | str) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if "problem" not in row or "answer" not in row:
                raise ValueError(f"{path}:{n}: each line needs 'problem' and 'answer'")
            rows.append(row)
    return rows


def prompt_template() -> str:
    return PROMPT_FILE.read_text(encoding="utf-8")


def r1_zero_prompt(problem: str, template: str | None = None) -> str:
    return (template or prompt_template()).replace("{question}", problem)
