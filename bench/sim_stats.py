"""Statistics and tables of bench/sim_fair.py: means with t 95% intervals, paired differences between
two arms over the same world seeds, and the markdown tables the docs quote."""

from __future__ import annotations

import statistics

from autoresearchd.engine.judge import t975


def ci95(xs: list[float]) -> tuple[float, float]:
    """Mean and the half-width of a t-based 95% interval."""
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, 0.0
    return m, t975(len(xs) - 1) * statistics.stdev(xs) / len(xs) ** 0.5


def paired(a: list[dict], b: list[dict], key: str) -> tuple[float, float, float]:
    """Mean of a - b over the world seeds both ran, with its 95% interval: (mean, low, high)."""
    bs = {r["seed"]: r[key] for r in b}
    d = [r[key] - bs[r["seed"]] for r in a if r["seed"] in bs]
    if not d:
        return float("nan"), float("nan"), float("nan")
    m, h = ci95(d)
    return m, m - h, m + h


def fmt_ci(xs: list[float], f: str = "{:.4f}") -> str:
    m, h = ci95(xs)
    return f"{f.format(m)} ± {f.format(h)}"


def fmt_paired(t: tuple[float, float, float], f: str = "{:+.4f}") -> str:
    m, lo, hi = t
    return f"{f.format(m)} [{f.format(lo)}, {f.format(hi)}]"


def md(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def arm_table(res: dict[str, list[dict]], ref: str | None = None) -> str:
    """One row per arm: true effect of the reported best, selection regret, searches with no best,
    GPU-hours used, wall-clock hours, slot utilisation, and (with `ref`) the paired difference of
    the true effect against the `ref` arm."""
    head = ["arm", "true effect of reported best", "selection regret", "no best reported", "GPU-h used",
            "wall-clock h", "slot use", "confirm trials"]
    if ref:
        head.append(f"paired diff of true effect vs {ref}")
    rows = []
    for name, runs in res.items():
        row = [name, fmt_ci([r["true_best"] for r in runs]), fmt_ci([r["regret"] for r in runs]),
               f"{sum(r['no_best'] for r in runs)}/{len(runs)}", f"{statistics.fmean(r['gpu_h'] for r in runs):.1f}",
               f"{statistics.fmean(r['wall_h'] for r in runs):.1f}",
               f"{statistics.fmean(r['util'] for r in runs):.0%}",
               f"{statistics.fmean(r['confirm_trials'] for r in runs):.1f}"]
        if ref:
            row.append("—" if name == ref else fmt_paired(paired(runs, res[ref], "true_best")))
        rows.append(row)
    return md(head, rows)


# The paired contrasts the hold-out report prints: (a, b, what a - b isolates)
CONTRASTS = (("ours", "paper", "our default against the paper's rule"),
             ("ours", "paper-async", "the judge, in the asynchronous loop"),
             ("ours-barrier", "paper", "the judge, in the barrier loop"),
             ("ours", "ours-barrier", "the loop, with our judge"),
             ("paper-async", "paper", "the loop, with the paper's judge"),
             ("ours", "ours-prefix", "the confirmation fix of issue 29"),
             ("ours-ahead", "paper", "the refill sized to the slots, against the paper's rule"),
             ("ours-ahead", "ours", "the refill sized to the slots (the slow-proposal fix)"))


def contrast_table(res: dict[str, list[dict]]) -> str:
    """Paired differences (a - b per world seed, mean and 95% interval) of the true effect of the
    reported best, the selection regret and the wall-clock hours, for the contrasts both arms ran."""
    rows = []
    for a, b, what in CONTRASTS:
        if a in res and b in res:
            rows.append([f"{a} − {b}", what] + [fmt_paired(paired(res[a], res[b], k), f)
                                                  for k, f in (("true_best", "{:+.4f}"), ("regret", "{:+.4f}"),
                                                               ("wall_h", "{:+.2f}"))])
    return md(["paired difference", "isolates", "true effect of reported best", "selection regret",
               "wall-clock h"], rows)


def seeds_arg(s: str) -> list[int]:
    """World seeds from the command line: 'a-b' (a range, both ends in) or 'a,b,c'."""
    a, _, b = s.partition("-")
    return list(range(int(a), int(b) + 1)) if b else [int(x) for x in s.split(",")]


def search_args(ap, tuned: str, seeds_default: str = "0-9 to tune, 1000-1039 else") -> None:
    """The options every simulator search script shares (sim_fair, sim_early, sim_hybrid): which world
    seeds, the tuned parameters' file, the GPU-hour budget, the slots, the proposal latency, worker
    processes, and the JSON-lines log (written by a run, read back by --from-log)."""
    ap.add_argument("--tune", action="store_true", help=f"grid-tune {tuned} (tuning seeds)")
    ap.add_argument("--seeds", help=f"world seeds, 'a-b' or 'a,b,c' (default: {seeds_default})")
    ap.add_argument("--tuned", help=f"JSON file of {tuned}: written by --tune, read otherwise")
    ap.add_argument("--budget-h", type=float, default=16.0, help="GPU-hours per search (default 16: ~96 trials)")
    ap.add_argument("--slots", type=int, default=4, help="GPUs running trials at once (default 4)")
    ap.add_argument("--latency-min", type=float, default=5.0,
                    help="wall minutes of one proposal round, LLM and implementation (default 5)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (at most 2 on a shared machine)")
    ap.add_argument("--log", help="append one JSON line per finished search to this file")
    ap.add_argument("--from-log", help="print the tables of a --log file")
