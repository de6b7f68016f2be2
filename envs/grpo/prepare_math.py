"""Frozen data preparation: write MATH train (7,500 problems) and MATH-500 as jsonl into $GRPO_DATA.

Each line: {"problem", "answer", "solution", "subject", "level", "unique_id"}. Run once on a host
with internet access and the `datasets` package:
    GRPO_DATA=/data/grpo GRPO_EVAL_DATA=/data/grpo-test python prepare_math.py
(test.jsonl, with the answers, goes to $GRPO_EVAL_DATA: the manifest's eval_data, seen only by the
scorer; without it, next to train.jsonl as before.)
Sources: MATH-500 is `HuggingFaceH4/MATH-500` (split test); training problems are the original
MATH training split, `EleutherAI/hendrycks_math` (seven subject configs, split train), whose gold
answer is the last \\boxed{} of the worked solution. MATH-500 is drawn from MATH's test split, so
the two never overlap (checked below anyway). `--from-dir DIR` instead converts jsonl files already
on disk (DIR/train.jsonl, DIR/test.jsonl, either format), for hosts without internet.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # works under PYTHONSAFEPATH=1
from grader import last_boxed

TEST_REPO = "HuggingFaceH4/MATH-500"
TRAIN_REPO = "EleutherAI/hendrycks_math"
SUBJECTS = {"algebra": "Algebra", "counting_and_probability": "Counting & Probability",
            "geometry": "Geometry", "intermediate_algebra": "Intermediate Algebra",
            "number_theory": "Number Theory", "prealgebra": "Prealgebra", "precalculus": "Precalculus"}
EXPECTED = {"train": 7500, "test": 500}


def normalize_row(row: dict, split: str, index: int) -> dict:
    """One output row from a MATH-style row; the answer comes from the solution's last box if absent."""
    answer = row.get("answer")
    if answer in (None, ""):
        answer = last_boxed(row.get("solution", "") or "")
    if not row.get("problem") or answer in (None, ""):
        raise ValueError(f"{split} row {index}: needs a problem and an answer (or a boxed solution)")
    subject = row.get("subject") or SUBJECTS.get(row.get("type", ""), row.get("type", ""))
    return {"problem": row["problem"], "answer": str(answer).strip(), "solution": row.get("solution", ""),
            "subject": subject, "level": row.get("level", ""),
            "unique_id": row.get("unique_id") or f"{split}/{index}.json"}


def write_jsonl(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.replace(tmp, path)   # never leave a half-written file under the final name


def from_hub() -> dict[str, list[dict]]:
    from datasets import load_dataset
    test = [dict(r) for r in load_dataset(TEST_REPO, split="test")]
    train = []
    for cfg, subject in SUBJECTS.items():
        for r in load_dataset(TRAIN_REPO, cfg, split="train"):
            train.append({**dict(r), "subject": subject})
    return {"train": train, "test": test}


def from_dir(d: Path) -> dict[str, list[dict]]:
    out = {}
    for split in ("train", "test"):
        with open(d / f"{split}.jsonl", encoding="utf-8") as f:
            out[split] = [json.loads(line) for line in f if line.strip()]
    return out


def prepare(raw: dict[str, list[dict]], out_dir: Path, strict: bool, eval_dir: Path | None = None) -> dict[str, int]:
    rows = {s: [normalize_row(r, s, i) for i, r in enumerate(raw[s])] for s in ("train", "test")}
    test_problems = {r["problem"].strip() for r in rows["test"]}
    overlap = sum(r["problem"].strip() in test_problems for r in rows["train"])
    if overlap:
        raise SystemExit(f"{overlap} training problems also appear in the test set; refusing to write")
    for s, n in EXPECTED.items():
        if len(rows[s]) != n:
            msg = f"{s}: {len(rows[s])} problems, expected {n}"
            if strict:
                raise SystemExit(msg)
            print("warning:", msg, file=sys.stderr)
    for s, d in (("train", out_dir), ("test", eval_dir or out_dir)):
        d.mkdir(parents=True, exist_ok=True)
        write_jsonl(rows[s], d / f"{s}.jsonl")
    return {s: len(v) for s, v in rows.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="write MATH train / MATH-500 jsonl into $GRPO_DATA")
    ap.add_argument("--out", default=os.environ.get("GRPO_DATA"), help="default: $GRPO_DATA")
    ap.add_argument("--eval-out", default=os.environ.get("GRPO_EVAL_DATA"),
                    help="where test.jsonl goes (default: $GRPO_EVAL_DATA, else --out): only the scorer "
                         "sees it, so neither training nor the model step can read the answers")
    ap.add_argument("--from-dir", default=None, help="convert DIR/{train,test}.jsonl instead of the hub")
    a = ap.parse_args(argv)
    if not a.out:
        raise SystemExit("set GRPO_DATA (or --out) to the folder that should receive the jsonl files")
    raw = from_dir(Path(a.from_dir)) if a.from_dir else from_hub()
    ev = Path(os.path.expanduser(a.eval_out)) if a.eval_out else None
    counts = prepare(raw, Path(os.path.expanduser(a.out)), strict=not a.from_dir, eval_dir=ev)
    print(f"wrote {counts['train']} train problems to {a.out} and {counts['test']} test problems "
          f"to {a.eval_out or a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
