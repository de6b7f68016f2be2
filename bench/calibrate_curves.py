"""Fit bench/sim_world.py's learning-curve family to real curves (issue 29): the file
bench/collect_curves.py writes (tinygpt, ideas x seeds, plus the unchanged template) in, the curve
constants out, as JSON that sim_world.py reads (bench/data/curve_fit.json).

    python bench/calibrate_curves.py curves.json [more.json ...] [--out bench/data/curve_fit.json]

What is fitted, from the progress protocol's points (the curve the daemon's stopping rule sees: the
mean training loss of every 10 steps), never from the metric of record except where said:
- **The baseline's curve** L(t) = L(1) + c (t^-alpha - 1), least squares over the mean of the
  baseline's seeds; c is scaled into the world's loss units (search_world.BASELINE / the baseline's
  mean val_loss). The residual is printed: the family is a power law, a real curve need not be one.
- **Seed noise**: the std of the baseline's val_loss over its seeds (the metric of record).
- **Point noise**: how far one run's curve point strays from its own seed-mean curve after its own
  offset is taken out (points at t >= 0.3, where the curve is flat enough), as a share of the seed
  noise; sim_world.py draws each point's noise at that share.
- **Shapes**: each idea's effect curve e(t) = baseline(t) - idea(t), the means over the seeds both ran.
  An idea whose final effect (val_loss, the metric of record, paired by seed) is within a 95% t
  interval of zero is `null` and counts in no share. Of the rest: `reverse` when the early effect (the mean of e over
  t in [0.1, 0.3]) has the opposite sign of the final one and is beyond the points' noise; `early`
  otherwise tau of final (1 - exp(-t/tau)) / (1 - exp(-1/tau)) is fitted to e(t) (least squares, a
  log grid over [0.01, 10]): `early` when tau <= EARLY_TAU (0.5), else `late` (the family tends to a
  straight line as tau grows). The tau range kept is the early ideas' 10th to 90th percentile.
- **Profiles**: every non-null idea's effect curve as a share of its own final effect, g(t) = e(t) /
  e(1), on the runs' grid, and the baseline's mean curve above its end (in world units). These are
  what bench/sim_world.py replays: a technique of the world takes one real idea's profile, scaled to
  its own final effect, so shapes the family above cannot draw (an effect that overshoots, far ahead
  early and less so at the end: OVERSHOOT) are kept as measured.
The script prints every idea's row (final effect, its standard error, e at 0.25 and 0.5 as shares of
the final, the shape) so the classification can be read and argued with.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import search_world as W  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "data" / "curve_fit.json"
FLAT_T = 0.3            # point noise is read from t >= this (before it the curve falls steeply)
# an effect whose fitted tau is above this accrues nearly in proportion to training (1 - exp(-t/tau)
# tends to a straight line as tau grows: at tau = 0.5, e(0.5) is 0.69 of the final, against 0.5 for
# a straight line and 0.92 at tau = 0.2); the simulator's `early` shapes have tau <= 0.3
EARLY_TAU = 0.5
# an effect that is this many times its final size somewhere before t = 0.5 overshoots (a higher
# learning rate: far ahead early, less so at the end); the curve family has no such shape, the
# replayed profiles do
OVERSHOOT = 1.5
# two-sided 95% Student t quantiles by degrees of freedom: with 3 paired seeds a final effect must be
# 4.3 standard errors from zero to count as one
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}


def env_of(paths: list[str]) -> str | None:
    """The env the files' runs come from (their "env" field). Files of different envs are refused: an
    idea is paired with the baseline at the same seed, and the world units are scaled by the
    baseline's val_loss, so makemore's runs against tinygpt's baseline would be a fit of nothing."""
    envs = {json.loads(Path(p).read_text()).get("env") for p in paths}
    if len(envs) > 1:
        raise SystemExit(f"curves of different envs {sorted(map(str, envs))}: fit each env on its own")
    return envs.pop() if envs else None


def load(paths: list[str]) -> dict[str, dict[int, dict]]:
    """idea -> seed -> run, the runs that finished with a curve and a val_loss (later files win)."""
    env_of(paths)
    out: dict[str, dict[int, dict]] = defaultdict(dict)
    for p in paths:
        for r in json.loads(Path(p).read_text())["runs"]:
            pr = r.get("progress") or {}
            if r.get("status") == "ok" and r.get("val_loss") is not None and pr.get("t"):
                out[r["idea"]][r["seed"]] = r
    return out


def on_grid(runs: list[dict]) -> tuple[list[float], list[list[float]]]:
    """The t grid every run shares (the runs' common points) and each run's values on it."""
    common = set.intersection(*(set(round(t, 6) for t in r["progress"]["t"]) for r in runs))
    grid = sorted(common)
    vals = []
    for r in runs:
        m = {round(t, 6): v for t, v in zip(r["progress"]["t"], r["progress"]["value"])}
        vals.append([m[t] for t in grid])
    return grid, vals


def mean_curve(vals: list[list[float]]) -> list[float]:
    return [statistics.fmean(col) for col in zip(*vals)]


def fit_power(grid: list[float], ys: list[float]) -> tuple[float, float, float]:
    """(c, alpha, rms) of y(t) = y(1) + c (t^-alpha - 1), c by least squares at each alpha of a grid."""
    y1 = ys[-1]
    best = (0.0, 1.0, math.inf)
    for k in range(1, 400):
        alpha = k / 100
        xs = [t ** -alpha - 1 for t in grid]
        sxx = sum(x * x for x in xs)
        c = sum(x * (y - y1) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
        rms = math.sqrt(statistics.fmean((y1 + c * x - y) ** 2 for x, y in zip(xs, ys)))
        if rms < best[2]:
            best = (c, alpha, rms)
    return best


def fit_tau(grid: list[float], eff: list[float], final: float) -> float:
    """tau of e(t) = final (1 - exp(-t/tau)) / (1 - exp(-1/tau)), least squares over a log grid from
    0.01 to 10 (at 10 the shape is a straight line to within 5%)."""
    best = (10.0, math.inf)
    for k in range(0, 121):
        tau = 0.01 * 1000 ** (k / 120)
        norm = 1 - math.exp(-1 / tau)
        err = sum((final * (1 - math.exp(-t / tau)) / norm - e) ** 2 for t, e in zip(grid, eff))
        if err < best[1]:
            best = (tau, err)
    return best[0]


def at(grid: list[float], ys: list[float], t: float) -> float:
    """ys at t, linear between the grid's points."""
    for (t0, y0), (t1, y1) in zip(zip(grid, ys), zip(grid[1:], ys[1:])):
        if t0 <= t <= t1:
            return y0 + (y1 - y0) * (t - t0) / (t1 - t0)
    return ys[0] if t < grid[0] else ys[-1]


# the script that writes each env's curves (named in the fit's "source")
COLLECTORS = {"tinygpt": "bench/collect_curves.py", "makemore": "bench/makemore_curves.py"}


def fit(data: dict[str, dict[int, dict]], env: str = "tinygpt") -> dict:
    base = data.get("baseline")
    if not base or len(base) < 2:
        raise SystemExit("need the baseline at two seeds or more (bench/collect_curves.py runs it)")
    bval = [r["val_loss"] for r in base.values()]
    seed_sd = statistics.stdev(bval)
    scale = W.BASELINE / statistics.fmean(bval)
    grid, bvals = on_grid(list(base.values()))
    bmean = mean_curve(bvals)
    c, alpha, rms = fit_power(grid, bmean)

    # point noise: every run of every idea (and the baseline) against its idea's seed-mean curve
    dev = []
    for runs in data.values():
        if len(runs) < 2:
            continue
        g, vals = on_grid(list(runs.values()))
        m = mean_curve(vals)
        n = len(vals)
        for v in vals:
            flat = [(x - y) for t, x, y in zip(g, v, m) if t >= FLAT_T]
            off = statistics.fmean(flat)
            # a deviation from a mean of n runs has (n-1)/n of a point's variance: scaled back
            dev += [(d - off) * math.sqrt(n / (n - 1)) for d in flat]
    point_sd = math.sqrt(statistics.fmean(d * d for d in dev))

    rows, taus, profiles = [], [], []
    for idea, runs in sorted(data.items()):
        if idea == "baseline":
            continue
        seeds = sorted(set(runs) & set(base))
        if len(seeds) < 2:
            continue
        g, ivals = on_grid([runs[s] for s in seeds] + [base[s] for s in seeds])
        n = len(seeds)
        eff = [b - i for i, b in zip(mean_curve(ivals[:n]), mean_curve(ivals[n:]))]
        diffs = [base[s]["val_loss"] - runs[s]["val_loss"] for s in seeds]
        final = statistics.fmean(diffs)
        se = statistics.stdev(diffs) / math.sqrt(n) if n > 1 else math.inf
        se = max(se, seed_sd * math.sqrt(2 / n) / 2)      # 2 or 3 paired seeds can agree by luck
        cfinal = statistics.fmean(eff[-2:])
        early = statistics.fmean(e for t, e in zip(g, eff) if 0.1 <= t <= 0.3)
        r25 = at(g, eff, 0.25) / cfinal if cfinal else math.nan
        r50 = at(g, eff, 0.5) / cfinal if cfinal else math.nan
        if abs(final) <= T95.get(n - 1, 2.0) * se:
            shape = "null"
        elif early * final < 0 and abs(early) > 2 * point_sd / math.sqrt(n):
            shape = "reverse"
        else:
            tau = fit_tau(g, eff, cfinal) if cfinal * final > 0 else math.inf
            shape = "early" if tau <= EARLY_TAU else "late"
            if shape == "early":
                taus.append(tau)
        peak = max((abs(e) for t, e in zip(g, eff) if t <= 0.5), default=0.0)
        rows.append({"idea": idea, "seeds": n, "final": round(final, 5), "se": round(se, 5),
                     "curve_final": round(cfinal, 5), "early": round(early, 5), "r25": round(r25, 3),
                     "r50": round(r50, 3), "shape": shape,
                     "overshoot": bool(cfinal and peak > OVERSHOOT * abs(cfinal))})
        # (an end point far from the last two points' mean would scale the profile by noise)
        if shape != "null" and cfinal * final > 0 and 0.5 <= eff[-1] / cfinal <= 2:
            # the idea's effect curve as a share of its own final effect: what the simulator replays
            profiles.append({"idea": idea, "shape": shape, "t": [round(t, 6) for t in g],
                             "g": [round(e / cfinal, 4) for e in eff]})
    counted = [r for r in rows if r["shape"] != "null"]
    shares = {k: (sum(r["shape"] == k for r in counted) / len(counted) if counted else None)
              for k in ("early", "late", "reverse")}
    taus.sort()
    tau = ([taus[int(0.1 * (len(taus) - 1))], taus[int(math.ceil(0.9 * (len(taus) - 1)))]] if taus else None)
    return {
        "source": f"bench/calibrate_curves.py over {COLLECTORS.get(env, 'the')}'s {env} runs", "env": env,
        "n_ideas": len(rows), "n_null": len(rows) - len(counted), "baseline_seeds": len(bval),
        "seed_sd": round(seed_sd, 6), "point_sd": round(point_sd, 6),
        "point_noise": round(point_sd / seed_sd, 3) if seed_sd else None,
        "base_curve": {"c": round(c * scale, 5), "alpha": round(alpha, 3), "rms": round(rms, 5),
                       "c_raw": round(c, 5), "scale": round(scale, 5)},
        "shapes": shares, "tau": [round(t, 4) for t in tau] if tau else None,
        "taus": [round(t, 4) for t in taus], "ideas": rows, "profiles": profiles,
        # the baseline's own curve above its end, in the world's loss units, on its grid
        "base_profile": {"t": [round(t, 6) for t in grid],
                         "dl": [round((v - bmean[-1]) * scale, 5) for v in bmean]},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("curves", nargs="+", help="files bench/collect_curves.py wrote")
    ap.add_argument("--out", default=None, help=f"write the fit here (sim_world.py reads {OUT.relative_to(ROOT)})")
    a = ap.parse_args(argv)
    res = fit(load(a.curves), env_of(a.curves) or "tinygpt")
    print(f"{'idea':44s} {'final':>8s} {'se':>7s} {'e(.25)':>7s} {'e(.5)':>7s}  shape")
    for r in res["ideas"]:
        print(f"{r['idea'][:44]:44s} {r['final']:8.4f} {r['se']:7.4f} {r['r25']:7.2f} {r['r50']:7.2f}  {r['shape']}")
    summary = {k: v for k, v in res.items() if k not in ("ideas", "taus", "profiles", "base_profile")}
    summary["profiles"] = len(res["profiles"])
    summary["overshoot"] = sum(r["overshoot"] for r in res["ideas"] if r["shape"] != "null")
    print(json.dumps(summary, indent=1))
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
