"""bench/calibrate_curves.py, the fit of the simulator's learning-curve family to real curves
(issue 29): curves drawn from known shapes, in bench/collect_curves.py's format, must come back as
those shapes, that baseline curve and that noise; and sim_world.py draws from the committed fit."""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import calibrate_curves as C  # noqa: E402
import search_world as W  # noqa: E402
import sim_world  # noqa: E402

GRID = [k / 20 for k in range(1, 21)]
SEED_SD, POINT_SD = 0.004, 0.012
SHAPES = {  # idea -> effect(t), final effect 0.1 (far beyond the noise) or 0 (null)
    "early-fast": lambda t: 0.1 * (1 - math.exp(-t / 0.05)) / (1 - math.exp(-1 / 0.05)),
    "early-slow": lambda t: 0.1 * (1 - math.exp(-t / 0.2)) / (1 - math.exp(-1 / 0.2)),
    "late": lambda t: 0.1 * t,
    "late-hurts": lambda t: -0.1 * t,
    "reverse": lambda t: -0.2 * (1 - math.exp(-t / 0.05)) + 0.3 * t,
    "nothing": lambda t: 0.0,
}


def _runs(rng: random.Random) -> list[dict]:
    runs = []
    for idea, eff in [("baseline", lambda t: 0.0)] + list(SHAPES.items()):
        for seed in range(3):
            off = rng.gauss(0, SEED_SD)
            vals = [3.2 + 0.4 * (t ** -0.7 - 1) - eff(t) + off + rng.gauss(0, POINT_SD) for t in GRID]
            runs.append({"idea": idea, "seed": seed, "status": "ok", "t": [], "value": [],
                         "progress": {"t": GRID, "value": vals}, "val_loss": 3.15 - eff(1.0) + off})
    return runs


@pytest.mark.parametrize("seed", range(5))
def test_known_shapes_come_back(tmp_path, seed):
    f = tmp_path / "curves.json"
    f.write_text(json.dumps({"env": "synthetic", "runs": _runs(random.Random(seed))}))
    res = C.fit(C.load([str(f)]))
    shape = {r["idea"]: r["shape"] for r in res["ideas"]}
    assert shape == {"early-fast": "early", "early-slow": "early", "late": "late", "late-hurts": "late",
                     "reverse": "reverse", "nothing": "null"}
    assert res["shapes"] == pytest.approx({"early": 0.4, "late": 0.4, "reverse": 0.2})
    assert res["base_curve"]["alpha"] == pytest.approx(0.7, abs=0.1)
    assert res["base_curve"]["c_raw"] == pytest.approx(0.4, rel=0.15)
    assert 0.025 <= res["tau"][0] <= 0.1 and 0.13 <= res["tau"][1] <= 0.3
    assert res["point_sd"] == pytest.approx(POINT_SD, rel=0.25)


def test_a_fit_without_baseline_seeds_is_refused(tmp_path):
    runs = [r for r in _runs(random.Random(1)) if r["idea"] != "baseline" or r["seed"] == 0]
    f = tmp_path / "curves.json"
    f.write_text(json.dumps({"runs": runs}))
    with pytest.raises(SystemExit, match="baseline at two seeds"):
        C.fit(C.load([str(f)]))


def test_profiles_are_the_measured_effect_shapes(tmp_path):
    f = tmp_path / "curves.json"
    f.write_text(json.dumps({"runs": _runs(random.Random(3))}))
    res = C.fit(C.load([str(f)]))
    prof = {p["idea"]: dict(zip(p["t"], p["g"])) for p in res["profiles"]}
    assert "nothing" not in prof                       # a null idea has no shape to replay
    assert prof["late"][0.5] == pytest.approx(0.5, abs=0.25)     # a point of a 3-seed mean: noisy
    assert prof["early-fast"][0.25] == pytest.approx(1.0, abs=0.25)
    assert prof["reverse"][0.1] < 0                    # the wrong way first
    dl = res["base_profile"]["dl"]
    assert dl[-1] == 0 and dl[0] > dl[len(dl) // 2] > 0  # the baseline's loss above its end, falling
