"""Fit the short-run (screened) side of bench/sim_screen.py to tinygpt's real short runs (issue 29): the
full-length runs (bench/data/curves_tinygpt_a/_b.json, 200 steps) and the short ones
(bench/data/screens_tinygpt_a/_b.json, `--steps 50`: the schedule compressed to the run's length, as
the fidelity knob gives it) in, the constants the simulator's screening arm draws from out, as JSON
(bench/data/screen_fit.json).

    python bench/calibrate_screens.py [--full A.json B.json] [--short A.json B.json] [--out bench/data/screen_fit.json]

What is fitted (every effect paired by seed against the baseline at the same length, val_loss, the
metric of record):
- **cost**: a short run's wall seconds over the same idea's full-length run at the same seed; the
  median of those per-run ratios is the share of a full run's GPU-hours a screen is charged
  (`cost_fraction`). The runs were timed on a shared machine, so the ratio of the means is printed too
  (load moved it both ways); the step share (50 / 200) is `steps_fraction`.
- **level**: the baseline's short val_loss over its full-length one (the screened baseline sits this
  much higher: the product's least spread is 1% of it).
- **noise**: the seed std of a short run (pooled over every idea's and the baseline's seeds, around
  each one's own mean) over the same pooled std at full length (`short_noise`, a multiple of the seed
  noise, as bench/calibrate_curves.py gives the point noise).
- **per idea**: the short effect and the full effect (means over the seeds). An idea with a profile in
  bench/data/curve_fit.json (non-null, its curve's sign the final's) gets `ratio` = short / full: the
  simulator scales a technique's own final effect by the ratio of the real idea whose profile it
  replays, so an idea late at full length is also weak when short. A null idea (full effect within
  noise) keeps its short effect as a share of the mean |final effect| of the profiled ideas
  (`null_share`): a no-op technique's short-run effect in the simulator, scaled to that world's
  effect size.
- a straight-line fit short = a x full + b over every idea, with its residual std and correlation,
  printed and kept for the docs (the simulator replays the ideas, not the line).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from screen_replay import FULL, SHORT, runs, steps_of  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "data" / "screen_fit.json"
CURVE_FIT = ROOT / "bench" / "data" / "curve_fit.json"


def pooled_sd(data: dict[str, dict[int, dict]]) -> float:
    """The seed std pooled over every idea with two seeds or more, around each idea's own mean."""
    ss = df = 0.0
    for by_seed in data.values():
        xs = [r["val_loss"] for r in by_seed.values()]
        if len(xs) > 1:
            mu = statistics.fmean(xs)
            ss += sum((x - mu) ** 2 for x in xs)
            df += len(xs) - 1
    return math.sqrt(ss / df)


def effect(idea: dict[int, dict], base: dict[int, dict]) -> float | None:
    d = [base[s]["val_loss"] - idea[s]["val_loss"] for s in sorted(set(idea) & set(base))]
    return statistics.fmean(d) if d else None


def fit(full_paths, short_paths, curve_fit: dict) -> dict:
    full, short = runs(full_paths), runs(short_paths)
    if "baseline" not in full or "baseline" not in short:
        raise SystemExit("need the baseline's short and full runs (bench/collect_curves.py)")
    ratios = [short[k][s]["wall_s"] / full[k][s]["wall_s"] for k in short if k in full
              for s in short[k] if s in full[k] and full[k][s].get("wall_s") and short[k][s].get("wall_s")]
    sw = sum(short[k][s]["wall_s"] for k in short if k in full for s in short[k] if s in full[k])
    fw = sum(full[k][s]["wall_s"] for k in short if k in full for s in short[k] if s in full[k])
    bs, bf = short["baseline"], full["baseline"]
    level = statistics.fmean(r["val_loss"] for r in bs.values()) / statistics.fmean(r["val_loss"] for r in bf.values())
    shapes = {r["idea"]: r["shape"] for r in curve_fit["ideas"]}
    profiled = {p["idea"] for p in curve_fit["profiles"]}
    rows = []
    for k in sorted(set(short) & set(full) - {"baseline"}):
        se, fe = effect(short[k], bs), effect(full[k], bf)
        if se is None or fe is None:
            continue
        rows.append({"idea": k, "short": round(se, 5), "full": round(fe, 5), "shape": shapes.get(k),
                     "ratio": round(se / fe, 4) if k in profiled else None})
    scale = statistics.fmean(abs(r["full"]) for r in rows if r["ratio"] is not None)
    for r in rows:
        r["null_share"] = round(r["short"] / scale, 4) if r["shape"] == "null" else None
    xs, ys = [r["full"] for r in rows], [r["short"] for r in rows]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    a = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    b = my - a * mx
    resid = math.sqrt(sum((y - a * x - b) ** 2 for x, y in zip(xs, ys)) / (len(xs) - 2))
    corr = statistics.correlation(xs, ys)
    short_sd, full_sd = pooled_sd(short), pooled_sd(full)
    return {"source": "bench/calibrate_screens.py over bench/collect_curves.py's tinygpt runs (200 and 50 steps)",
            "steps_fraction": steps_of(short_paths) / steps_of(full_paths),
            "cost_fraction": round(statistics.median(ratios), 4), "cost_ratio_of_means": round(sw / fw, 4),
            "cost_runs": len(ratios), "level": round(level, 5),
            "short_sd": round(short_sd, 6), "full_sd": round(full_sd, 6), "short_noise": round(short_sd / full_sd, 3),
            "effect_scale": round(scale, 5),
            "line": {"slope": round(a, 4), "intercept": round(b, 5), "resid_sd": round(resid, 5), "corr": round(corr, 3)},
            "n_ideas": len(rows), "n_ratio": sum(r["ratio"] is not None for r in rows),
            "n_null": sum(r["null_share"] is not None for r in rows), "ideas": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", nargs="+", default=[str(p) for p in FULL])
    ap.add_argument("--short", nargs="+", default=[str(p) for p in SHORT])
    ap.add_argument("--curve-fit", default=str(CURVE_FIT), help="the curve fit whose profiles the simulator replays")
    ap.add_argument("--out", default=None, help=f"write the fit here (sim_screen.py reads {OUT.relative_to(ROOT)})")
    a = ap.parse_args(argv)
    res = fit(a.full, a.short, json.loads(Path(a.curve_fit).read_text()))
    print(f"{'idea':44s} {'short':>8s} {'full':>8s} {'ratio':>7s} {'null':>7s}  shape")
    for r in res["ideas"]:
        ratio = "" if r["ratio"] is None else f"{r['ratio']:7.2f}"
        null = "" if r["null_share"] is None else f"{r['null_share']:7.2f}"
        print(f"{r['idea'][:44]:44s} {r['short']:8.4f} {r['full']:8.4f} {ratio:>7s} {null:>7s}  {r['shape']}")
    print(json.dumps({k: v for k, v in res.items() if k != "ideas"}, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
