"""The hybrid search measured in the fair simulator (issue 30): LLM ideas only, the knob tuner only
(Optuna's TPE on the environment's knobs, on the baseline) and the hybrid (both, the trials split by
the product's tune/split.py), at equal GPU-hours, paired on the frozen hold-out seeds, each arm's one
parameter tuned alike on the tuning seeds. The knobs' response surface is bench/sim_knobs.py's
(calibrated on tinygpt's sweeps: bench/sim_knobs.py); every arm is our default search otherwise (our judge, the asynchronous loop).

    python bench/sim_hybrid.py --tune [--seeds 0-9] --tuned hybrid.json
    python bench/sim_hybrid.py [--seeds 1000-1019] --tuned bench/sim_hybrid_tuned.json
    python bench/sim_hybrid.py --quick

Tuned: the tuner's `startup_trials` (random trials before TPE models the surface) and the hybrid's
`floor` (the least share each side gets); LLM only takes ours' exploit_start (bench/sim_fair_tuned.json),
which every arm uses. Reported: the true effect of the reported best (ideas' effects plus the knobs'
gain), selection regret, the knobs' best gain, tuned trials, tuning's mean share, and the paired
differences hybrid - LLM only and hybrid - tuner only.

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
from sim_early import EXPLOIT_START, TUNING  # noqa: E402
from sim_fair import run_all_with, search_seeds  # noqa: E402
from sim_knobs import GRID, TuneMode  # noqa: E402
from sim_stats import ci95, fmt_ci, fmt_paired, md, paired, search_args  # noqa: E402
from sim_world import Knobs, TimedWorld, applied  # noqa: E402

CONTRASTS = (("hybrid", "llm"), ("hybrid", "tuner"), ("tuner", "llm"))


def one(srv, job: tuple) -> dict:
    """One search: (mode, its parameter, world seed, budget GPU-h, slots, latency h, knob scale)."""
    mode, param, seed, budget_h, slots, latency_h, scale = job
    arm = Arm(LoopKind.ASYNC, JudgeKind.OURS, (("exploit_start", EXPLOIT_START),), tune=(TuneMode(mode), param, scale))
    with applied(Knobs()):
        r = Search(srv, TimedWorld(seed), arm, budget_h, slots, latency_h).go()
    r.pop("trajectory", None)
    return {"mode": mode, "param": param, "seed": seed, "knob_scale": scale, **r}


def tables(res: list[dict]) -> str:
    by = {}
    for r in res:
        by.setdefault(r["mode"], []).append(r)
    rows = []
    for mode, runs in by.items():
        p = runs[0]["param"]
        name = mode if p is None else f"{mode} ({GRID[TuneMode(mode)][0]} = {p:g})"
        rows.append([name, fmt_ci([r["true_best"] for r in runs]), fmt_ci([r["regret"] for r in runs]),
                     f"{sum(r['no_best'] for r in runs)}/{len(runs)}", fmt_ci([r["knob_gain_best"] for r in runs]),
                     f"{statistics.fmean(r['tuned'] for r in runs):.1f}",
                     f"{statistics.fmean(r['ideas_run'] for r in runs):.1f}",
                     f"{statistics.fmean(r['tune_share'] for r in runs):.0%}",
                     f"{statistics.fmean(r['gpu_h'] for r in runs):.1f}",
                     f"{statistics.fmean(r['wall_h'] for r in runs):.1f}"])
    t1 = md(["arm", "true effect of reported best", "selection regret", "no best reported",
             "best knob gain of a tuned commit", "tuned trials", "ideas measured", "tuning's mean share",
             "GPU-h used", "wall-clock h"], rows)
    rows = [[f"{a} − {b}"] + [fmt_paired(paired(by[a], by[b], k)) for k in ("true_best", "regret")]
            for a, b in CONTRASTS if a in by and b in by]
    return t1 + "\n\n" + md(["paired difference", "true effect of reported best", "selection regret"], rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run: one tuning seed, 3 GPU-h, 3 slots")
    search_args(ap, "the tuner's and the hybrid's parameter")
    ap.add_argument("--knob-scale", type=float, default=1.0,
                    help="scale the knob surface's amplitudes (sensitivity: how much the knobs matter)")
    a = ap.parse_args(argv)
    if a.from_log:
        print(tables([json.loads(line) for line in open(a.from_log) if line.strip()]))
        return 0
    seeds = search_seeds(ap, a, TUNING)
    base = (a.budget_h, a.slots, a.latency_min / 60, a.knob_scale)
    log = open(a.log, "a") if a.log else None
    t0 = time.monotonic()
    print(f"seeds {seeds[0]}..{seeds[-1]} ({len(seeds)}), {a.budget_h:g} GPU-h, {a.slots} slots, "
          f"{a.latency_min:g} min per proposal round, knob amplitudes x{a.knob_scale:g}")
    if a.tune:
        modes = list(GRID)
        work = [(m.value, p, s, *base) for s in seeds for m in modes for p in GRID[m][1]]
        res = run_all_with(one, work, a.jobs, log)
        chosen, rows = {}, []
        for m in modes:
            name, grid = GRID[m]
            xs = {p: [r["true_best"] for r in res if r["mode"] == m.value and r["param"] == p] for p in grid}
            chosen[m.value] = max(grid, key=lambda p: ci95(xs[p])[0])
            rows.append([m.value] + [f"{name} = {p:g}: {fmt_ci(xs[p])}" for p in grid] + [str(chosen[m.value])])
        print(md(["arm (true effect of reported best)", "grid 1", "grid 2", "grid 3", "chosen"], rows))
        if a.tuned:
            Path(a.tuned).write_text(json.dumps(chosen, indent=1) + "\n")
    else:
        tuned = json.loads(Path(a.tuned).read_text()) if a.tuned else {}
        params = [(TuneMode.LLM.value, None)] + [(m.value, tuned.get(m.value, GRID[m][1][1])) for m in GRID]
        print("parameter per arm:", dict(params))
        res = run_all_with(one, [(m, p, s, *base) for s in seeds for m, p in params], a.jobs, log)
        print(tables(res))
    print(f"{time.monotonic() - t0:.0f} s wall, {a.jobs} process(es)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
