"""bench/screen_replay.py: the product's screening rule replayed over short and full runs counts a winner
it screens out as a false screen-out, a loser it screens out as saved compute, and nothing at all when
screening is off. The runs are written here in bench/collect_curves.py's format (no training)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import screen_replay  # noqa: E402

T = [0.2, 0.4, 0.6, 0.8, 1.0]
# idea -> (full-length val_loss, short-run val_loss) at seed 0; each seed adds a little noise
IDEAS = {"baseline": (3.15, 3.52), "good early": (3.00, 3.40), "good late": (3.00, 3.75),
         "bad": (3.35, 3.80), "null": (3.15, 3.52)}
NOISE = [0.0, 0.004, -0.004]


def write(path: Path, steps: int, short: bool) -> Path:
    rows = []
    for idea, (full, low) in IDEAS.items():
        for seed, e in enumerate(NOISE):
            v = (low if short else full) + e
            curve = [v + 1.5 * (1 - t) for t in T]
            rows.append({"idea": idea, "seed": seed, "status": "ok", "val_loss": v, "wall_s": 10.0 if short else 40.0,
                         "t": T, "value": curve, "progress": {"t": T, "value": curve}})
    path.write_text(json.dumps({"env": "tinygpt", "steps": steps, "seeds": [0, 1, 2], "runs": rows}))
    return path


def data(tmp_path):
    return screen_replay.load([write(tmp_path / "full.json", 200, False)], [write(tmp_path / "short.json", 50, True)])


def test_the_ground_truth_is_the_paired_full_length_test(tmp_path):
    d = data(tmp_path)
    assert d["fraction"] == 0.25
    assert {i["idea"] for i in d["ideas"] if i["wins"]} == {"good early", "good late"}


def test_a_winner_that_starts_slow_is_a_false_screen_out_and_a_loser_saves_compute(tmp_path):
    d = data(tmp_path)
    rows = screen_replay.run(d, list(range(20)), margin=3.0, keep=1.0)       # the margin rule alone
    assert sum(r["winners"] > 0 for r in rows) > 10      # a bootstrap of 4 ideas may draw no winner
    # "good late" (short run far behind the baseline's) is screened out whenever it is drawn; "good
    # early" never is: the false share is the late winner's share of the winners drawn
    late = [r for r in rows if r["lost"]]
    assert late and all(0 < r["false"] <= 1 for r in late)
    # 4 ideas drawn: the baseline's 2 screens and each idea's (10 s) on top of the full runs (40 s) of those
    # that continue, over 4 full runs
    for r in rows:
        assert r["cost"] == pytest.approx((2 * 10 + 4 * 10 + 4 * 40 * (1 - r["out"])) / 160)
    assert any(r["out"] > 0 for r in rows)
    assert any(r["regret"] == 0 for r in rows)


def test_off_screens_nothing_and_costs_the_full_runs(tmp_path):
    d = data(tmp_path)
    for r in screen_replay.run(d, list(range(5)), margin=float("inf"), keep=1.0):
        assert r["out"] == 0 and r["false"] == 0 and r["regret"] == 0
        assert r["cost"] == r["cost_steps"] == 1       # no screen runs: every idea at full length once
