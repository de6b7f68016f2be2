"""Screening at low fidelity, replayed over real short and full-length runs (issue 29: "no winner lost
silently"): what the product's rule (engine/screening.decide) would have screened out of tinygpt's
ideas, how many of the ideas that beat the baseline at full length it would have lost, and the compute
it would have saved.

    python bench/screen_replay.py [--full A.json B.json] [--short A.json B.json] [--seeds 1000-1039]
        [--tune] [--tuned bench/screen_replay_tuned.json]

Data, both written by bench/collect_curves.py: `--full`, every idea and the baseline at 200 steps and 3
seeds (bench/data/curves_tinygpt_a/_b.json); `--short`, the same ideas and baseline at `--steps 50`
(bench/data/screens_tinygpt_a/_b.json): a real short run, its schedule compressed to its length, as
the fidelity knob gives it, not the full run's curve read at t = 0.25.

Ground truth: an idea *wins* when bench/calibrate_curves.py's paired test over its 3 full-length seeds
calls its final effect beyond noise and better than the baseline (the 8 winners docs/policies.md
quotes). Nothing in a world sees it; it only scores.

A world (one seed): the ideas drawn with replacement from the measured ones (a bootstrap, so the
intervals cover which ideas a search happens to get), in a random arrival order; each idea's screen is
one of its short runs at a random seed, the baseline's screened reference two of its short seeds (the
product screens the baseline on its baseline seeds, 2 by default). Ideas are decided in arrival order
against the screened values of those before them and their own (engine/screening.decide, the
product's function, with a ScreeningCfg). Per world and setting:
- `false`: winners screened out / winners drawn (the issue's goal: <= 5%);
- `cost`: compute of the screening arm over running every idea at full length once: every screen (and
  the baseline's two) plus the full run of each idea that continues, from each run's measured wall
  seconds (one thread each; collected on a shared machine, so noisy: `cost_steps` counts steps instead);
- `regret`: the best true full-length effect among the drawn ideas minus the best among those that
  continue (0 when the best idea survives); `out`: the share screened out.
`--tune` grid-searches margin x keep on world seeds 0-9 and keeps the cheapest setting whose mean
false-screen-out share is <= 5% (none: the one with the fewest); the hold-out seeds (1000-1039 by
default) report it, the product's default (margin 3, keep 0.5) and screening off, with 95% intervals.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import calibrate_curves  # noqa: E402
from sim_stats import fmt_ci, fmt_paired, md, paired, seeds_arg  # noqa: E402

from autoresearchd import defaults  # noqa: E402
from autoresearchd.config import ScreeningCfg  # noqa: E402
from autoresearchd.engine.screening import decide  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "data"
FULL = [DATA / "curves_tinygpt_a.json", DATA / "curves_tinygpt_b.json"]
SHORT = [DATA / "screens_tinygpt_a.json", DATA / "screens_tinygpt_b.json"]
MARGINS = [0.0, 0.5, 1.0, 2.0, 3.0, 5.0, float("inf")]
KEEPS = [0.25, 0.5, 0.75, 1.0]
BASE_SEEDS = 2          # the baseline's screened seeds (policy.baseline_seeds' default)
GOAL_FALSE = 0.05


def runs(paths) -> dict[str, dict[int, dict]]:
    """idea -> seed -> run, finished runs with a val_loss (any file that exists; later files win)."""
    out: dict[str, dict[int, dict]] = {}
    for p in paths:
        if not Path(p).exists():
            continue
        for r in json.loads(Path(p).read_text())["runs"]:
            if r.get("status") == "ok" and r.get("val_loss") is not None:
                out.setdefault(r["idea"], {})[r["seed"]] = r
    return out


def steps_of(paths) -> int:
    return next(json.loads(Path(p).read_text())["steps"] for p in paths if Path(p).exists())


def load(full_paths, short_paths) -> dict:
    """The measured ideas: each with its true final effect, whether it wins, and its short and full runs."""
    full, short = runs(full_paths), runs(short_paths)
    fit = calibrate_curves.fit(calibrate_curves.load([str(p) for p in full_paths if Path(p).exists()]))
    truth = {r["idea"]: r for r in fit["ideas"]}
    ideas = [{"idea": k, "final": truth[k]["final"], "wins": truth[k]["shape"] != "null" and truth[k]["final"] > 0,
              "short": short[k], "full": full[k]}
             for k in sorted(truth) if k in short and k in full]
    return {"ideas": ideas, "base_short": short.get("baseline", {}), "base_full": full.get("baseline", {}),
            "fraction": steps_of(short_paths) / steps_of(full_paths),
            "missing": sorted(k for k in truth if k not in short)}


def world(data: dict, seed: int, margin: float, keep: float, min_peers: int = defaults.SCREENING_MIN_PEERS) -> dict:
    """One world's draw, decided by the product's rule at (margin, keep)."""
    rng = random.Random(seed)
    ideas = [rng.choice(data["ideas"]) for _ in data["ideas"]]           # bootstrap, in arrival order
    if margin == float("inf") and keep >= 1:
        # nothing could be screened out: screening is off, no screen runs, every idea runs full length
        return {"seed": seed, "winners": sum(i["wins"] for i in ideas), "false": 0.0, "lost": 0, "out": 0.0,
                "cost": 1.0, "cost_steps": 1.0, "regret": 0.0}
    bseeds = rng.sample(sorted(data["base_short"]), min(BASE_SEEDS, len(data["base_short"])))
    base = [data["base_short"][s] for s in bseeds]
    cfg = ScreeningCfg(enabled=True, margin=min(margin, 1e9), keep=keep, min_peers=min_peers)
    peers, out, cost, full_cost, steps, full_steps = [], [], 0.0, 0.0, 0.0, 0.0
    cost += sum(r["wall_s"] for r in base)
    steps += data["fraction"] * len(base)
    for i in ideas:
        s = rng.choice(sorted(set(i["short"]) & set(i["full"])))
        v = i["short"][s]["val_loss"]
        peers.append(v)
        gone = decide(v, list(peers), [r["val_loss"] for r in base], cfg, "min") is not None
        out.append(gone)
        cost += i["short"][s]["wall_s"] + (0 if gone else i["full"][s]["wall_s"])
        steps += data["fraction"] + (0 if gone else 1)
        full_cost += i["full"][s]["wall_s"]
        full_steps += 1
    winners = [g for i, g in zip(ideas, out) if i["wins"]]
    kept = [i["final"] for i, g in zip(ideas, out) if not g]
    return {"seed": seed, "winners": len(winners), "false": (sum(winners) / len(winners)) if winners else 0.0,
            "lost": sum(winners), "out": sum(out) / len(out), "cost": cost / full_cost,
            "cost_steps": steps / full_steps,
            "regret": max(i["final"] for i in ideas) - (max(kept) if kept else 0.0)}


def run(data: dict, seeds: list[int], margin: float, keep: float) -> list[dict]:
    return [world(data, s, margin, keep) for s in seeds]


def mean(rows: list[dict], key: str) -> float:
    return statistics.fmean(r[key] for r in rows)


def tune(data: dict, seeds: list[int]) -> dict:
    """The cheapest (margin, keep) whose mean false-screen-out share is within the goal, on `seeds`."""
    grid = [(m, k, run(data, seeds, m, k)) for m in MARGINS for k in KEEPS]
    for m, k, rows in grid:
        print(f"  margin {m:>4} keep {k:4.2f}: false {mean(rows, 'false'):.3f} cost {mean(rows, 'cost'):.3f} "
              f"out {mean(rows, 'out'):.3f} regret {mean(rows, 'regret'):.4f}")
    ok = [(mean(r, "cost"), m, k) for m, k, r in grid if mean(r, "false") <= GOAL_FALSE and (m, k) != (float("inf"), 1.0)]
    if ok:
        _, m, k = min(ok)
    else:
        _, _, m, k = min((mean(r, "false"), mean(r, "cost"), m, k) for m, k, r in grid)
    return {"margin": m, "keep": k, "tuned_on": f"{seeds[0]}-{seeds[-1]}"}


def fmt(rows: list[dict], key: str, f: str = "{:.3f}") -> str:
    return fmt_ci([r[key] for r in rows], f)


def table(data: dict, seeds: list[int], settings: list[tuple[str, float, float]]) -> str:
    out = []
    for name, m, k in settings:
        rows = run(data, seeds, m, k)
        out.append([name, f"{m:g}", f"{k:g}", fmt(rows, "false"), f"{sum(r['lost'] for r in rows)} of "
                    f"{sum(r['winners'] for r in rows)}", fmt(rows, "cost"), fmt(rows, "cost_steps"),
                    fmt(rows, "out"), fmt(rows, "regret", "{:.4f}")])
    return md(["setting", "margin", "keep", "false screen-outs (share of winners)", "winners lost",
               "compute vs full length (wall)", "(steps)", "screened out", "regret"], out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", nargs="+", default=[str(p) for p in FULL])
    ap.add_argument("--short", nargs="+", default=[str(p) for p in SHORT])
    ap.add_argument("--seeds", default="1000-1039", help="hold-out world seeds (default 1000-1039)")
    ap.add_argument("--tune", action="store_true", help="tune margin x keep on world seeds 0-9 first")
    ap.add_argument("--tuned", default=str(ROOT / "bench" / "screen_replay_tuned.json"))
    a = ap.parse_args(argv)
    data = load(a.full, a.short)
    if len(data["ideas"]) < 2 or len(data["base_short"]) < BASE_SEEDS:
        raise SystemExit("need short and full runs of the baseline and of ideas (bench/collect_curves.py)")
    wins = [i["idea"] for i in data["ideas"] if i["wins"]]
    print(f"{len(data['ideas'])} ideas with short ({data['fraction']:g} of full length) and full runs, "
          f"{len(wins)} winners at full length; no short runs yet: {len(data['missing'])}")
    if a.tune:
        t = tune(data, list(range(10)))
        Path(a.tuned).write_text(json.dumps(t, indent=1) + "\n")
    t = json.loads(Path(a.tuned).read_text()) if Path(a.tuned).exists() else None
    settings = [("off (every idea full length)", float("inf"), 1.0),
                ("product default", defaults.SCREENING_MARGIN, defaults.SCREENING_KEEP)]
    if t:
        settings.append((f"tuned on seeds {t['tuned_on']}", t["margin"], t["keep"]))
    settings += [("margin only", defaults.SCREENING_MARGIN, 1.0), ("quantile only", float("inf"), defaults.SCREENING_KEEP)]
    seeds = seeds_arg(a.seeds)
    print(table(data, seeds, settings))
    if t:
        tuned = run(data, seeds, t["margin"], t["keep"])
        default = run(data, seeds, defaults.SCREENING_MARGIN, defaults.SCREENING_KEEP)
        for key in ("cost", "cost_steps", "false", "regret"):
            print(f"tuned - product default, {key}, paired over {len(seeds)} worlds: "
                  f"{fmt_paired(paired(tuned, default, key), '{:+.4f}')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
