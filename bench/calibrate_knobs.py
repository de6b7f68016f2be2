"""Calibrate bench/sim_knobs.py's response surface from real tinygpt sweeps (issue 30): the template's
four knobs (lr, warmup_steps, weight_decay, n_embd: envs/tinygpt/.autoresearch.toml) swept one at a
time around the baseline, plus an lr x n_embd grid (their interaction), each point at several seeds;
then each knob's bowl fitted in sim_knobs.py's form, and the constants printed.

    python bench/calibrate_knobs.py --out knob_sweeps.json [--seeds 0,1,2] [--steps 200] [--parallel 2] [--resume]
    python bench/calibrate_knobs.py --fit knob_sweeps.json        # fit an existing sweep file again
    python bench/calibrate_knobs.py --quick --out q.json          # a smoke run: lr only, 1 seed, 10 steps

Runs: the template at each knob value through `AUTORESEARCH_KNOB_<NAME>` (train.py's apply_knobs),
TINYGPT_THREADS=1, and evaluate.py's val_loss kept per run (bench/collect_curves.py's runner). The
sweep (SWEEPS) is 5 values per knob and a 3 x 3 lr x n_embd grid: 21 points x 3 seeds = 63 runs of
about 48 s on an idle core (docs/env-tinygpt.md), about 50 CPU-minutes. The sweep is committed as
bench/data/knob_sweeps_tinygpt.json; sim_knobs.py's amplitudes are its fit (docs/policies.md).

The fit, per knob x (in log space for lr, weight_decay and n_embd; warmup as ln(w + 50)): the mean
val_loss over seeds against x, least squares on a + A ((x - x*) / s)^2 with s the scale sim_knobs.py
uses (ln 3 for lr and warmup, ln 10 for weight decay, ln 2 for width), giving the amplitude A and the
optimum x*; and lr's optimum at each width of the lr x n_embd grid (a bowl fitted over lr there),
fitted as lr* ~ width^p (sim_knobs.py
assumes p = -0.5). The seed noise of the points is printed beside them (the baseline's std over seeds).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from collect_curves import VAL, prepare  # noqa: E402

BASE = {"lr": 1e-3, "warmup_steps": 20, "weight_decay": 0.1, "n_embd": 128}
SWEEPS = {"lr": [2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3], "warmup_steps": [0, 10, 20, 40, 60],
          "weight_decay": [0.01, 0.03, 0.1, 0.2, 0.3], "n_embd": [64, 96, 128, 160, 192]}
GRID = {"lr": [5e-4, 1e-3, 2e-3], "n_embd": [64, 128, 192]}
# x(v) and the scale of sim_knobs.py's bowl for each knob
AXES = {"lr": (math.log, math.log(3)), "warmup_steps": (lambda v: math.log(v + 50), math.log(3)),
        "weight_decay": (math.log, math.log(10)), "n_embd": (math.log, math.log(2))}


def points(quick: bool = False) -> list[dict]:
    if quick:                          # three lr values: the fewest a bowl can be fitted to
        return [{**BASE, "lr": v} for v in SWEEPS["lr"][1:4]]
    out = [dict(BASE)]
    for k, vals in SWEEPS.items():
        out += [{**BASE, k: v} for v in vals if v != BASE[k]]
    for lr in GRID["lr"]:
        for w in GRID["n_embd"]:
            p = {**BASE, "lr": lr, "n_embd": w}
            if p not in out:
                out.append(p)
    return out


def run_point(knobs: dict, seed: int, steps: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="knobs-") as d:
        work = Path(d) / "env"
        prepare(None, work)
        env = {**os.environ, "AUTORESEARCH_SEED": str(seed), "TINYGPT_THREADS": "1", "TINYGPT_STEPS": str(steps),
               **{"AUTORESEARCH_KNOB_" + k.upper(): str(v) for k, v in knobs.items()}}
        t0 = time.monotonic()
        tr = subprocess.run([sys.executable, "train.py"], cwd=work, env=env, capture_output=True, text=True,
                            check=False, timeout=3600)
        row = {"knobs": knobs, "seed": seed, "val_loss": None, "wall_s": round(time.monotonic() - t0, 1)}
        if tr.returncode == 0:
            ev = subprocess.run([sys.executable, "evaluate.py"], cwd=work, env=env, capture_output=True,
                                text=True, check=False, timeout=1800)
            m = VAL.search(ev.stdout)
            row["val_loss"] = float(m.group(1)) if m else None
        return row


def fit_bowl(xs: list[float], ys: list[float], scale: float) -> tuple[float, float]:
    """Least squares of y = c0 + c1 x + c2 x^2; returns (amplitude A per scale^2, optimum x*)."""
    n = len(xs)
    sx = [sum(x ** p for x in xs) for p in range(5)]
    sy = [sum(y * x ** p for x, y in zip(xs, ys)) for p in range(3)]
    m = [[sx[i + j] for j in range(3)] for i in range(3)]
    assert n >= 3
    c = _solve(m, sy)
    if c[2] <= 0:
        return 0.0, xs[min(range(n), key=lambda i: ys[i])]     # no bowl: flat or the edge is best
    return c[2] * scale ** 2, -c[1] / (2 * c[2])


def _solve(m: list[list[float]], b: list[float]) -> list[float]:
    a = [row[:] + [v] for row, v in zip(m, b)]
    for i in range(3):
        p = max(range(i, 3), key=lambda r: abs(a[r][i]))
        a[i], a[p] = a[p], a[i]
        for r in range(3):
            if r != i:
                f = a[r][i] / a[i][i]
                a[r] = [x - f * y for x, y in zip(a[r], a[i])]
    return [a[i][3] / a[i][i] for i in range(3)]


def fit(rows: list[dict]) -> dict:
    def mean_at(kn):
        vs = [r["val_loss"] for r in rows if r["knobs"] == kn and r["val_loss"] is not None]
        return statistics.fmean(vs) if vs else None
    base = [r["val_loss"] for r in rows if r["knobs"] == BASE and r["val_loss"] is not None]
    out = {"baseline_mean": statistics.fmean(base) if base else None,
           "seed_sd": statistics.stdev(base) if len(base) > 1 else None, "knobs": {}}
    for k, vals in SWEEPS.items():
        f, scale = AXES[k]
        pts = [(f(v), y) for v in vals if (y := mean_at({**BASE, k: v})) is not None]
        if len(pts) >= 3:
            a, xo = fit_bowl([p[0] for p in pts], [p[1] for p in pts], scale)
            out["knobs"][k] = {"A": a, "x_opt": xo, "points": pts}
    best = {}                          # width -> lr's optimum there, from a bowl fitted over lr
    f, scale = AXES["lr"]
    for w in GRID["n_embd"]:
        lrs = sorted({k["lr"] for k in (r["knobs"] for r in rows) if k == {**BASE, "lr": k["lr"], "n_embd": w}})
        pts = [(f(lr), y) for lr in lrs if (y := mean_at({**BASE, "lr": lr, "n_embd": w})) is not None]
        if len(pts) >= 3:
            a, xo = fit_bowl([p[0] for p in pts], [p[1] for p in pts], scale)
            if a > 0:
                best[w] = math.exp(xo)
    if len(best) >= 2:
        lx = [math.log(w) for w in best]
        ly = [math.log(v) for v in best.values()]
        mx, my = statistics.fmean(lx), statistics.fmean(ly)
        den = sum((x - mx) ** 2 for x in lx)
        out["lr_width_power"] = sum((x - mx) * (y - my) for x, y in zip(lx, ly)) / den if den else None
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="the sweep file to write (JSON)")
    ap.add_argument("--fit", help="fit an existing sweep file and print the constants")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--parallel", type=int, default=1)
    ap.add_argument("--resume", action="store_true", help="keep the runs already in --out and run only the rest")
    ap.add_argument("--quick", action="store_true", help="a smoke run: three lr values, seed 0, 10 steps")
    a = ap.parse_args(argv)
    if a.quick:
        a.seeds, a.steps = "0", 10
    if a.fit:
        print(json.dumps(fit(json.loads(Path(a.fit).read_text())["runs"]), indent=1))
        return 0
    if not a.out:
        ap.error("--out or --fit")
    seeds = [int(s) for s in a.seeds.split(",")]
    work = [(p, s) for p in points(a.quick) for s in seeds]
    rows = []
    if a.resume and Path(a.out).exists():
        # an interrupted sweep goes on where it stopped: the points it kept are not run again
        rows = json.loads(Path(a.out).read_text())["runs"]
        done = {(json.dumps(r["knobs"], sort_keys=True), r["seed"]) for r in rows}
        work = [w for w in work if (json.dumps(w[0], sort_keys=True), w[1]) not in done]
        print(f"resuming: {len(rows)} runs kept, {len(work)} to go", flush=True)
    with concurrent.futures.ThreadPoolExecutor(a.parallel) as ex:
        for row in ex.map(lambda w: run_point(w[0], w[1], a.steps), work):
            rows.append(row)
            print(json.dumps(row), flush=True)
            Path(a.out).write_text(json.dumps({"env": "tinygpt", "steps": a.steps, "runs": rows}, indent=1) + "\n")
    print(json.dumps(fit(rows), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
