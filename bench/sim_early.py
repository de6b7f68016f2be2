"""Early stopping measured in the fair simulator (issue 29, section 3): our default search (our judge,
the asynchronous loop) with each stopping rule of bench/sim_stop.py against the same search running
every idea to full length, at equal GPU-hours, paired on the frozen hold-out seeds; each rule's one
parameter tuned alike on the tuning seeds.

    python bench/sim_early.py --tune [--seeds 0-9] --tuned early.json      # choose each rule's parameter
    python bench/sim_early.py [--seeds 1000-1019] --tuned bench/sim_early_tuned.json   # the hold-out table
    python bench/sim_early.py --quick                                       # a smoke run (one seed, 3 GPU-h)
    python bench/sim_early.py --screen --tune --seeds 0-9 --tuned bench/sim_early_tuned.json  # screening's knobs
    python bench/sim_early.py --screen --rules asha --tuned bench/sim_early_tuned.json   # its hold-out table

--screen measures screening at low fidelity (bench/sim_screen.py: the product's Screener, its margin and
keep tuned on the grid SCREEN_GRID) against full length, alone and with each of --rules' stopping rules
on top; its table adds screen-outs, false screen-outs (ideas cut whose true effect beats the baseline)
and lost bests (cut ideas better than the reported best when they were cut).

--tune merges the chosen values into the --tuned file (a rule tuned later keeps the others'). The rule
`product` (and product-median, product-asha: --rules) is the daemon's own Stopper.judge (bench/sim_stop.py).

Measured per rule, against full length (`none`, which draws the same curves and never stops):
- **GPU-hours to reach the full-length search's best true effect**: per seed, the GPU-hours used
  (trials' time actually run) until the rule's reported best reaches the true effect that the
  full-length search reports at the end of its budget, over the GPU-hours the full-length search took
  to first report it. Given as the median of the per-seed ratios and the ratio of the means, a seed
  the rule never reaches within the budget counted at the whole budget (so that ratio is a lower
  bound), with the share of seeds reached.
- **Best true effect at equal GPU-hours**: the reported best's true effect at the budget, and its
  paired difference against full length.
- **False stops**: stopped ideas whose true effect beats the baseline (what running them to full
  length would show, without noise), as a share of the stops and of such ideas started; and **lost
  bests**: stopped ideas better than the search's reported best at the moment they were stopped.

HOLD-OUT SEEDS 1000-1039 ARE FROZEN: nothing is tuned on them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sim_arms import Arm, JudgeKind, LoopKind, Search  # noqa: E402
from sim_fair import run_all_with, search_seeds  # noqa: E402
from sim_stats import ci95, fmt_ci, fmt_paired, md, paired, search_args  # noqa: E402
from sim_stop import GRID, Rule  # noqa: E402
from sim_world import Knobs, TimedWorld, applied  # noqa: E402

from autoresearchd import defaults  # noqa: E402

TUNING = range(0, 10)        # a subset of sim_fair's tuning seeds 0-19, for time
EXPLOIT_START = 0.7          # ours' exploit_start, tuned in bench/sim_fair_tuned.json


# screening's knobs (bench/sim_screen.py), tuned on the tuning seeds like each rule's parameter
SCREEN_GRID = {"margin": (0.0, 3.0), "keep": (0.25, 0.5)}


def one(srv, job: tuple) -> dict:
    """One search: (rule, its parameter, world seed, budget GPU-h, slots, latency h[, screening's
    (margin, keep)])."""
    rule, param, seed, budget_h, slots, latency_h, *screen = job
    screen = tuple(screen[0]) if screen and screen[0] else ()
    arm = Arm(LoopKind.ASYNC, JudgeKind.OURS, (("exploit_start", EXPLOIT_START),), stop=(Rule(rule), param),
              screen=screen)
    with applied(Knobs()):
        r = Search(srv, TimedWorld(seed), arm, budget_h, slots, latency_h).go()
    return {"rule": rule, "param": param, "seed": seed, "budget_h": budget_h, "screen": list(screen) or None, **r}


def reach_h(traj: list, target: float) -> float | None:
    """The GPU-hours used when the reported best first reached `target` (None: never)."""
    return next((h for h, e in traj if e >= target - 1e-12), None)


def reach(runs: list[dict], ref: dict) -> list[str]:
    """GPU-h to reach full length's best: the median ratio, the ratio of means and the seeds reached."""
    ratios, num, den, reached, n = [], 0.0, 0.0, 0, 0
    for r in runs:
        f = ref.get(r["seed"])
        if f is None or f["true_best"] <= 0:
            continue                  # full length found nothing: no target to reach
        n += 1
        fh = reach_h(f["trajectory"], f["true_best"])
        rh = reach_h(r["trajectory"], f["true_best"])
        reached += rh is not None
        rh = r["budget_h"] if rh is None else rh
        ratios.append(rh / fh)
        num, den = num + rh, den + fh
    return [f"{statistics.median(ratios):.2f}x" if ratios else "—", f"{num / den:.2f}x" if den else "—",
            f"{reached}/{n}"]


def rule_rows(res: list[dict]) -> list[list[str]]:
    res = [r for r in res if not r.get("screen")]
    ref = {r["seed"]: r for r in res if r["rule"] == Rule.NONE.value}
    rows = []
    for rule in dict.fromkeys(r["rule"] for r in res):
        runs = [r for r in res if r["rule"] == rule]
        stops = [s for r in runs for s in r["stops"]]
        false = sum(s["true"] > 0 for s in stops)
        winners = sum(x > 0 for r in runs for x in r["first_runs"])
        lost = sum(s["true"] > s["best_then"] for s in stops)
        param = runs[0]["param"]
        rows.append([
            rule if param is None else f"{rule} ({GRID[Rule(rule)][0]} = {param:g})",
            fmt_ci([r["true_best"] for r in runs]),
            "—" if rule == Rule.NONE.value else fmt_paired(paired(runs, list(ref.values()), "true_best")),
            *reach(runs, ref),
            f"{statistics.fmean(len(r['stops']) for r in runs):.1f}",
            f"{statistics.fmean(r['saved_h'] for r in runs):.1f}",
            f"{false}/{len(stops)} ({false / len(stops):.0%})" if stops else "0/0",
            f"{false}/{winners} ({false / winners:.0%})" if winners else "0/0",
            f"{lost}/{len(stops)}" if stops else "0/0"])
    return rows


HEAD = ["rule", "true effect of reported best", "minus full length (paired, 95%)",
        "GPU-h to reach full length's best (median ratio)", "(ratio of means)", "seeds reached",
        "stops per search", "GPU-h saved per search", "false stops / stops", "false stops / winners started",
        "lost bests / stops"]

SCREEN_HEAD = ["arm", "true effect of reported best", "minus full length (paired, 95%)",
               "GPU-h to reach full length's best (median ratio)", "(ratio of means)", "seeds reached",
               "screen-outs per search", "GPU-h on screens per search", "false screen-outs / screen-outs",
               "false screen-outs / winners screened", "lost bests / screen-outs", "stops per search"]


def arm_label(r: dict) -> str:
    rule, param = r["rule"], r["param"]
    stop = rule if param is None else f"{rule} ({GRID[Rule(rule)][0]} = {param:g})"
    if not r.get("screen"):
        return "full length" if rule == Rule.NONE.value else stop
    m, k = r["screen"]
    return f"screening (margin {m:g}, keep {k:g})" + ("" if rule == Rule.NONE.value else f" + {stop}")


def screen_rows(res: list[dict]) -> list[list[str]]:
    """One row per arm of a --screen run, against full length (`none`, no screening)."""
    ref = {r["seed"]: r for r in res if r["rule"] == Rule.NONE.value and not r.get("screen")}
    rows = []
    for label in dict.fromkeys(arm_label(r) for r in res):
        runs = [r for r in res if arm_label(r) == label]
        outs = [o for r in runs for o in r.get("screen_outs", [])]
        ruled = [o for o in outs if o["rule"] != "failed"]        # cut by the rule, not a crashed screen
        false = sum(o["true"] > 0 for o in ruled)
        winners = sum(x > 0 for r in runs for x in r.get("screened", []))
        lost = sum(o["true"] > o["best_then"] for o in ruled)
        screened = runs[0].get("screen")
        rows.append([label, fmt_ci([r["true_best"] for r in runs]),
                     fmt_paired(paired(runs, list(ref.values()), "true_best")) if screened else "—",
                     *reach(runs, ref),
                     f"{statistics.fmean(len(r.get('screen_outs', [])) for r in runs):.1f}",
                     f"{statistics.fmean(r.get('screen_h', 0.0) for r in runs):.1f}",
                     f"{false}/{len(ruled)} ({false / len(ruled):.0%})" if ruled else "0/0",
                     f"{false}/{winners} ({false / winners:.0%})" if winners else "0/0",
                     f"{lost}/{len(ruled)}" if ruled else "0/0",
                     f"{statistics.fmean(len(r['stops']) for r in runs):.1f}"])
    return rows


def screen_main(a, seeds: list[int], base: tuple, rules: list[str], log) -> None:
    """--screen: tune margin x keep on the tuning seeds, or the hold-out table: full length, screening
    with the tuned knobs, and screening with each rule of --rules (its tuned parameter) on top."""
    tuned = json.loads(Path(a.tuned).read_text()) if a.tuned and Path(a.tuned).exists() else {}
    if a.tune:
        cells = [(m, k) for m in SCREEN_GRID["margin"] for k in SCREEN_GRID["keep"]]
        res = run_all_with(one, [(Rule.NONE.value, None, s, *base, c) for s in seeds for c in cells], a.jobs, log)
        means = {c: ci95([x["true_best"] for x in res if tuple(x["screen"]) == c])[0] for c in cells}
        m, k = max(cells, key=lambda c: means[c])
        print(md(["screening (true effect of reported best)"] + [f"keep {k:g}" for k in SCREEN_GRID["keep"]],
                 [[f"margin {m:g}"] + [fmt_ci([x["true_best"] for x in res if tuple(x["screen"]) == (m, k)])
                                       for k in SCREEN_GRID["keep"]] for m in SCREEN_GRID["margin"]]))
        print(f"chosen: margin {m:g}, keep {k:g}")
        if a.tuned:
            Path(a.tuned).write_text(json.dumps({**tuned, "screen": {"margin": m, "keep": k}}, indent=1) + "\n")
        return
    sc = tuned.get("screen") or {"margin": defaults.SCREENING_MARGIN, "keep": defaults.SCREENING_KEEP}
    sc = (sc["margin"], sc["keep"])
    arms = [(Rule.NONE.value, None, None), (Rule.NONE.value, None, sc)]
    arms += [(r, tuned.get(r, GRID[Rule(r)][1][1]), sc) for r in rules if r != Rule.NONE.value]
    print("arms (rule, parameter, screening's margin and keep):", arms)
    res = run_all_with(one, [(r, p, s, *base, c) for s in seeds for r, p, c in arms], a.jobs, log)
    print(md(SCREEN_HEAD, screen_rows(res)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run: one tuning seed, 3 GPU-h, 3 slots")
    search_args(ap, "each rule's parameter")
    ap.add_argument("--rules", default=None,
                    help="of " + ", ".join(r.value for r in GRID) + " (default: band,asha,median,product; "
                    "with --screen: asha, the rule on top of screening)")
    ap.add_argument("--screen", action="store_true",
                    help="screening at low fidelity (bench/sim_screen.py): tune its margin and keep, or its table")
    a = ap.parse_args(argv)
    rules = (a.rules or ("asha" if a.screen else "band,asha,median,product")).split(",")
    if a.from_log:
        res = [json.loads(line) for line in open(a.from_log) if line.strip()]
        if any(r.get("screen") for r in res):
            print(md(SCREEN_HEAD, screen_rows(res)))
        else:
            print(md(HEAD, rule_rows(res)))
        return 0
    seeds = search_seeds(ap, a, TUNING)
    base = (a.budget_h, a.slots, a.latency_min / 60)
    log = open(a.log, "a") if a.log else None
    t0 = time.monotonic()
    print(f"seeds {seeds[0]}..{seeds[-1]} ({len(seeds)}), {a.budget_h:g} GPU-h, {a.slots} slots, "
          f"{a.latency_min:g} min per proposal round")
    if a.screen:
        screen_main(a, seeds, base, rules, log)
    elif a.tune:
        work = [(r, p, s, *base) for s in seeds for r in rules for p in GRID[Rule(r)][1]]
        res = run_all_with(one, work, a.jobs, log)
        chosen, rows = {}, []
        for r in rules:
            name, grid = GRID[Rule(r)]
            means = {p: ci95([x["true_best"] for x in res if x["rule"] == r and x["param"] == p])[0] for p in grid}
            chosen[r] = max(grid, key=lambda p: means[p])
            rows.append([r] + [fmt_ci([x["true_best"] for x in res if x["rule"] == r and x["param"] == p])
                               for p in grid] + [f"{name} = {chosen[r]:g}"])
        print(md(["rule (true effect of reported best)", "grid value 1", "grid value 2", "grid value 3", "chosen"],
                 rows))
        if a.tuned:       # merged into what the file holds: a rule tuned later keeps the others' values
            old = json.loads(Path(a.tuned).read_text()) if Path(a.tuned).exists() else {}
            Path(a.tuned).write_text(json.dumps({**old, **chosen}, indent=1) + "\n")
    else:
        tuned = json.loads(Path(a.tuned).read_text()) if a.tuned else {}
        params = {r: tuned.get(r, GRID[Rule(r)][1][1]) for r in rules}
        print("parameter per rule:", params)
        work = [(r, p, s, *base) for s in seeds for r, p in [(Rule.NONE.value, None), *params.items()]]
        res = run_all_with(one, work, a.jobs, log)
        print(md(HEAD, rule_rows(res)))
    print(f"{time.monotonic() - t0:.0f} s wall, {a.jobs} process(es)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
