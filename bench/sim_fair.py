"""A fair search benchmark (issue 29, section 1): the daemon's loop against the paper's on G slots with a
GPU-hour budget, every arm's exploit_start tuned alike on tuning seeds, reported on frozen hold-out
seeds as paired differences with 95% intervals and selection regret; sweeps of the world's knobs.

    python bench/sim_fair.py --tune   [--seeds 0-19] [--grid 0.5,0.7,0.9] --tuned tuned.json
    python bench/sim_fair.py          [--seeds 1000-1039] --tuned tuned.json      # the hold-out table
    python bench/sim_fair.py --sweep noise|pairs|prior|dups [--seeds 1000-1019] --tuned tuned.json
    python bench/sim_fair.py --quick       # a smoke run: one seed, 3 GPU-h, 3 slots, ours and the paper's

Arms (`--arms`, comma-separated keys of ARMS): the judge (ours: engine.judge with confirmation
seeds; the paper's: best single run) crossed with the loop (asynchronous: the daemon's; barrier: the
paper's), and `ours-prefix`, the default before the confirmation fix of issue 29 (the judge's noise
estimate as it was, patched in for that arm only; it takes the default's exploit_start, untuned),
and `ours-ahead`, the default with its proposal rounds sized to what the slots use while a round is
written (the slow-proposal fix; the default's exploit_start, untuned).
bench/sim_fair_tuned.json holds the values `--tune` chose on seeds 0-19 (docs/policies.md). The world, the clock and the arms are
bench/sim_world.py, bench/sim_clock.py and bench/sim_arms.py.

HOLD-OUT SEEDS 1000-1039 ARE FROZEN: nothing is tuned on them; every default and every arm's
exploit_start is chosen on seeds 0-19.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_ideator import IdeatorServer  # noqa: E402
from sim_arms import Arm, JudgeKind, LoopKind, Search  # noqa: E402
from sim_stats import (arm_table, ci95, contrast_table, fmt_ci, fmt_paired, md, paired, search_args,  # noqa: E402
                       seeds_arg)
from sim_world import CALIBRATED_NOISE_SD, Knobs, TimedWorld, applied  # noqa: E402

from autoresearchd.engine import judge  # noqa: E402

TUNING = range(0, 20)
HOLDOUT = range(1000, 1040)
# exploit_start values giving distinct exploit batches at 30 ideas, batch 5: 15, 20 and 25 of epoch 1
# (0.6 and 0.8 round down to the same batches as 0.5 and 0.7); 0.3 (5 of 30) was left out for time
GRID = (0.5, 0.7, 0.9)
ARMS = {
    "ours": Arm(LoopKind.ASYNC, JudgeKind.OURS),
    "paper": Arm(LoopKind.BARRIER, JudgeKind.PAPER),
    "ours-barrier": Arm(LoopKind.BARRIER, JudgeKind.OURS),
    "paper-async": Arm(LoopKind.ASYNC, JudgeKind.PAPER),
    "ours-prefix": Arm(LoopKind.ASYNC, JudgeKind.OURS),
    "ours-ahead": Arm(LoopKind.ASYNC, JudgeKind.OURS, ahead=True),
}
PREFIX = {"ours-prefix"}
SWEEPS = {"noise": ("noise_sd", (CALIBRATED_NOISE_SD, 0.01, 0.02)), "pairs": ("n_pairs", (60, 600, 3000)),
          "prior": ("prior_signal", (0.25, 0.5, 1.0)), "dups": ("dup_scale", (0.5, 1.0, 2.0))}


def _noise_estimate_before_fix(pop, idea, fresh, policy_cfg):
    """engine.judge.noise_estimate before issue 29's fix: a confirmation judged on the baseline's
    seeds and its own fresh seeds only."""
    if policy_cfg.noise_pool:
        return _ORIGINAL(pop, idea, fresh, policy_cfg)
    b = pop.baseline_note
    return b.std, judge.pooled_std(fresh, b.values) if fresh else None, None


_ORIGINAL = judge.noise_estimate


@contextlib.contextmanager
def before_fix(on: bool):
    if on:
        judge.noise_estimate = _noise_estimate_before_fix
    try:
        yield
    finally:
        judge.noise_estimate = _ORIGINAL


_SRV = None


def server():
    """This process's simulated ideator server (one per worker process)."""
    global _SRV
    if _SRV is None:
        _SRV = IdeatorServer().__enter__()
    return _SRV


def one(job: tuple) -> dict:
    """One search: (arm key, exploit_start, world seed, knobs, budget GPU-h, slots, latency h)."""
    key, es, seed, knobs, budget_h, slots, latency_h = job
    arm = ARMS[key]
    arm = Arm(arm.loop, arm.judge, arm.overrides + (("exploit_start", es),), ahead=arm.ahead)
    with applied(knobs), before_fix(key in PREFIX):
        r = Search(server(), TimedWorld(seed, knobs), arm, budget_h, slots, latency_h).go()
    return {"arm": key, "exploit_start": es, "seed": seed, "knobs": knobs.label(), **r}


def _call(arg: tuple) -> dict:
    fn, job = arg
    return one(job) if fn is None else fn(server(), job)


def run_all(work: list[tuple], jobs: int, log=None) -> list[dict]:
    return run_all_with(None, work, jobs, log)


def run_all_with(fn, work: list[tuple], jobs: int, log=None) -> list[dict]:
    """Every job through `fn(server, job)` (None: this module's `one(job)`), in `jobs` processes."""
    pool = None
    if jobs > 1:
        import multiprocessing
        pool = multiprocessing.get_context("fork").Pool(jobs)
    out = []
    work = [(fn, w) for w in work]
    try:
        for r in (pool.imap(_call, work, chunksize=1) if pool else map(_call, work)):
            out.append(r)
            if log is not None:
                log.write(json.dumps(r) + "\n")
                log.flush()
    finally:
        if pool:
            pool.terminate()
    return out


def search_seeds(ap, a, tuning) -> list[int]:
    """The world seeds a search script runs (sim_early, sim_hybrid): --seeds, else the tuning seeds to
    tune and the hold-out to measure; --quick is one seed at 3 GPU-h on 3 slots. Tuning on a hold-out
    seed is refused."""
    if a.quick:
        a.seeds, a.budget_h, a.slots = "1", 3.0, 3
    seeds = seeds_arg(a.seeds) if a.seeds else list(tuning if a.tune else HOLDOUT)
    if a.tune and set(seeds) & set(HOLDOUT):
        ap.error("seeds 1000-1039 are the frozen hold-out: never tune on them")
    return seeds


def tune(a, base: dict) -> dict:
    keys = a.arms.split(",")
    grid = [float(x) for x in a.grid.split(",")]
    work = [(k, es, s, Knobs(), *base.values()) for s in a.seeds for k in keys for es in grid]
    res = run_all(work, a.jobs, a.log)
    rows, chosen = [], {}
    for k in keys:
        cells, means = [k], {}
        for es in grid:
            xs = [r["true_best"] for r in res if r["arm"] == k and r["exploit_start"] == es]
            means[es] = ci95(xs)[0]
            cells.append(fmt_ci(xs))
        chosen[k] = max(grid, key=lambda es: means[es])
        rows.append(cells + [str(chosen[k])])
    print(md(["arm (true effect of reported best)"] + [f"exploit_start {es}" for es in grid] + ["chosen"], rows))
    return chosen


def compare(a, base: dict, tuned: dict, knobs: Knobs) -> list[dict]:
    keys = a.arms.split(",")
    work = [(k, tuned.get(k, 0.7), s, knobs, *base.values()) for s in a.seeds for k in keys]
    return run_all(work, a.jobs, a.log)


def by_arm(res: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in res:
        out.setdefault(r["arm"], []).append(r)
    return out


def sweep_table(title: str, res: list[dict]) -> str:
    """One row per (world, arm): true effect, selection regret, searches with no best, and the paired
    differences against the paper's rule and (for ours) against ours before the confirmation fix."""
    rows = []
    for label in dict.fromkeys(r["knobs"] for r in res):
        arms = by_arm([r for r in res if r["knobs"] == label])
        ref, pre = arms.get("paper"), arms.get("ours-prefix")
        for k, runs in arms.items():
            rows.append([label, k, fmt_ci([r["true_best"] for r in runs]), fmt_ci([r["regret"] for r in runs]),
                         f"{sum(r['no_best'] for r in runs)}/{len(runs)}",
                         "—" if ref is None or k == "paper" else fmt_paired(paired(runs, ref, "true_best")),
                         fmt_paired(paired(runs, pre, "true_best")) if k == "ours" and pre else "—"])
    return md([title, "arm", "true effect of reported best", "selection regret", "no best reported",
               "minus paper (paired, 95%)", "minus ours-prefix (paired, 95%)"], rows)


def sweep(a, base: dict, tuned: dict) -> None:
    field, values = SWEEPS[a.sweep]
    res = [r for v in values for r in compare(a, base, tuned, Knobs(**{field: v}))]
    print(sweep_table(a.sweep, res))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run: seed 1, 3 GPU-h, 3 slots, ours,paper")
    search_args(ap, "each arm's exploit_start", "0-19 to tune, 1000-1039 else")
    ap.add_argument("--sweep", choices=sorted(SWEEPS), help="the hold-out comparison at each value of a knob")
    ap.add_argument("--arms", default="ours,paper,ours-barrier,paper-async,ours-prefix")
    ap.add_argument("--grid", default=",".join(map(str, GRID)))
    a = ap.parse_args(argv)
    if a.from_log:
        rows = [json.loads(line) for line in open(a.from_log) if line.strip()]
        if len({r["knobs"] for r in rows}) > 1:          # a sweep's log
            print(sweep_table("world", rows))
            return 0
        res = by_arm(rows)
        print(f"{len(next(iter(res.values())))} world seeds (from {a.from_log})")
        print(arm_table(res, ref="paper") + "\n\n" + contrast_table(res))
        return 0
    if a.quick:
        a.seeds, a.budget_h, a.slots, a.arms = "1", 3.0, 3, "ours,paper"
    a.seeds = seeds_arg(a.seeds) if a.seeds else list(TUNING if a.tune else HOLDOUT)
    if not a.tune and set(a.seeds) & set(TUNING) and a.tuned:
        print("note: reporting on tuning seeds", file=sys.stderr)
    if a.tune and set(a.seeds) & set(HOLDOUT):
        ap.error("seeds 1000-1039 are the frozen hold-out: never tune on them")
    a.log = open(a.log, "a") if a.log else None
    base = {"budget_h": a.budget_h, "slots": a.slots, "latency_h": a.latency_min / 60}
    t0 = time.monotonic()
    print(f"seeds {a.seeds[0]}..{a.seeds[-1]} ({len(a.seeds)}), {a.budget_h:g} GPU-h, {a.slots} slots, "
          f"{a.latency_min:g} min per proposal round")
    if a.tune:
        chosen = tune(a, base)
        if a.tuned:
            Path(a.tuned).write_text(json.dumps(chosen, indent=1) + "\n")
    else:
        tuned = json.loads(Path(a.tuned).read_text()) if a.tuned else {}
        print("exploit_start per arm:", {k: tuned.get(k, 0.7) for k in a.arms.split(",")})
        if a.sweep:
            sweep(a, base, tuned)
        else:
            res = by_arm(compare(a, base, tuned, Knobs()))
            print(arm_table(res, ref="paper") + "\n\n" + contrast_table(res))
    print(f"{time.monotonic() - t0:.0f} s wall, {a.jobs} process(es)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
