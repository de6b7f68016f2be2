"""`autoresearchd report`: an HTML page (index.html) and PNG figures of a search, read from git.

Figures (the paper's): best-so-far metric against epoch and against cumulative compute (GPU-hours,
or CPU-hours for a CPU env), the confirmed best next to the raw best; every idea's metric per epoch
coloured by origin, with the baseline and its ±std band; the execution rate per epoch; cumulative
LLM USD and compute, each on its own axis, and each per unit of confirmed improvement. The page
adds the summary (best confirmed with its spread, cost per unit of improvement) and the top-k table
with branches and the `git show` command for each commit.

Plots use matplotlib's object API on an Agg canvas (no pyplot, no global backend switch), so a
report can be written from inside the daemon's process too.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import TYPE_CHECKING

from autoresearchd import defaults
from autoresearchd.views.curves import series
from autoresearchd.views.safe import html_text
from autoresearchd.views.summary import compute_unit, leaderboard, load, summary
from autoresearchd.views.versus import DELTA_LEGEND, delta_short
from autoresearchd.vocab import BEST_DECISIONS, Origin

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ORIGIN_COLORS = {Origin.SEED: "#7f7f7f", Origin.EXPLOIT: "#d62728", Origin.EXPLORE: "#1f77b4", Origin.HUMAN: "#2ca02c",
                 Origin.GREEDY: "#ff7f0e", Origin.BEST_OF_N: "#9467bd"}


def _figure(**kw) -> Figure:
    from matplotlib.figure import Figure     # lazy: the [report] extra; the CLI starts without it
    return Figure(**kw)


def _save(fig: Figure, path: Path) -> str:
    from matplotlib.backends.backend_agg import FigureCanvasAgg    # lazy: the [report] extra
    FigureCanvasAgg(fig)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path.name


def _baseline(ax, pop, label=True) -> None:
    b, s = pop.baseline_value, pop.baseline_std or 0.0
    if b is None:
        return
    ax.axhline(b, color="black", lw=1, ls="--", label="baseline" if label else None)
    if s:
        ax.axhspan(b - s, b + s, color="black", alpha=0.08, label="baseline ± std" if label else None)


def _epochs(ax) -> None:
    """Epochs (and idea counts) are whole numbers: no 0.5 ticks. min_n_ticks=1: with one epoch the
    axis spans less than 1, where the default (2 ticks) falls back to -0.045, -0.030, ..."""
    from matplotlib.ticker import MaxNLocator     # lazy: the [report] extra
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    lo, hi = ax.get_xlim()          # called after plotting: the data's limits
    if hi - lo < 1:                 # one epoch, jittered: the view may hold no whole number at all
        c = round((lo + hi) / 2)
        ax.set_xlim(c - 0.5, c + 0.5)


def _from_zero(ax, values: list, what: str) -> None:
    """Spend axes start at 0; an all-zero series gets a plain 0..1 axis and says why it is flat
    (matplotlib would centre a constant 0 in -0.04..0.04)."""
    top = max([v for v in values if v is not None] or [0.0])
    if top <= 0:
        ax.set_ylim(0, 1)
        ax.text(0.5, 0.5, f"no {what} recorded", ha="center", va="center", transform=ax.transAxes, color="#666")
    else:
        ax.set_ylim(0, top * 1.08)


def _step(ax, xs, ys, **kw) -> None:
    pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
    if pts:
        # a curve whose first value is its last point (a result confirmed last) is one point: a step
        # line through one point draws nothing, so it gets a marker
        ax.step([p[0] for p in pts], [p[1] for p in pts], where="post", marker="o" if len(pts) == 1 else None,
                **kw)


def plot_best(pop, s: dict, metric: str, gpus: int = 1) -> Figure:
    fig = _figure(figsize=(11, 4.2))
    ax1, ax2 = fig.subplots(1, 2)
    e = s["by_epoch"]
    ax1.plot(e["epoch"], e["raw"], "o-", color="#aaaaaa", label="best (any, incl. unconfirmed)")
    ax1.plot(e["epoch"], e["confirmed"], "o-", color="#d62728", label="best confirmed")
    ax1.set_xlabel("epoch")
    _epochs(ax1)
    t = s["by_time"]
    _step(ax2, t["gpu_hours"], t["raw"], color="#aaaaaa", label="best (any, incl. unconfirmed)")
    _step(ax2, t["gpu_hours"], t["confirmed"], color="#d62728", label="best confirmed")
    ax2.set_xlabel(f"cumulative {compute_unit(gpus)}")
    for ax in (ax1, ax2):
        _baseline(ax, pop)
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        _legend(ax, fontsize=8)
    ax1.set_title("best so far by epoch")
    ax2.set_title("best so far by compute")
    return fig


def _legend(ax, **kw) -> None:
    # an empty search has nothing labelled yet: matplotlib would warn on stderr for an empty legend
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kw)


def plot_scatter(pop, metric: str) -> Figure:
    fig = _figure(figsize=(11, 4.5))
    ax = fig.subplots()
    rng = random.Random(0)  # fixed jitter: the same population draws the same picture
    by_origin: dict[str, tuple[list, list]] = {}
    x = {i.idea_id: i.epoch + rng.uniform(-0.3, 0.3) for i in pop.succeeded()}
    for i in pop.succeeded():
        xs, ys = by_origin.setdefault(i.origin, ([], []))
        xs.append(x[i.idea_id])
        ys.append(i.value)
    for origin, (xs, ys) in sorted(by_origin.items()):
        ax.scatter(xs, ys, s=10, alpha=0.6, color=ORIGIN_COLORS.get(origin, "#17becf"), label=origin)
    conf = [i for i in pop.succeeded() if i.confirmed]
    if conf:
        ax.scatter([x[i.idea_id] for i in conf], [i.value for i in conf], s=60, facecolors="none",
                   edgecolors="black", lw=1, label="promoted / confirmed")
    _baseline(ax, pop)
    ax.set_xlabel("epoch")
    _epochs(ax)
    ax.set_ylabel(metric)
    ax.set_title("every executed idea, by origin")
    ax.grid(alpha=0.3)
    _legend(ax, fontsize=8, ncol=4)
    return fig


def plot_execution(s: dict) -> Figure:
    fig = _figure(figsize=(7, 3.6))
    ax = fig.subplots()
    e = s["by_epoch"]
    rates = [r if r is not None else 0 for r in e["rate"]]
    bars = ax.bar(e["epoch"], rates, color="#1f77b4")
    for bar, ex, at in zip(bars, e["executed"], e["attempted"]):
        ax.annotate(f"{ex}/{at}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                    va="bottom", fontsize=7)
    ax.set_ylim(0, 1.1)
    ax.set_xlabel("epoch")
    _epochs(ax)
    ax.set_ylabel("fraction that produced a metric")
    ax.set_title("execution rate per epoch")
    ax.grid(alpha=0.3, axis="y")
    return fig


def plot_cost(pop, s: dict, metric: str, gpus: int = 1) -> Figure:
    """Four panels, one unit each (no twin axes, whose two scales suggest a relation that is not
    there): cumulative LLM USD and compute, then each per unit of confirmed improvement."""
    fig = _figure(figsize=(11, 6.4))
    (a_usd, a_cpu), (u_usd, u_cpu) = fig.subplots(2, 2, sharex=True)
    t = s["by_time"]
    unit = compute_unit(gpus)
    a_usd.plot(t["n"], t["usd"], color="#2ca02c", marker="o", ms=3)     # one point is no line
    a_usd.set_ylabel("USD")
    a_usd.set_title("cumulative LLM spend")
    _from_zero(a_usd, t["usd"], "LLM spend")
    a_cpu.plot(t["n"], t["gpu_hours"], color="#9467bd", marker="o", ms=3)
    a_cpu.set_ylabel(unit)
    a_cpu.set_title(f"cumulative compute ({unit})")
    _from_zero(a_cpu, t["gpu_hours"], "compute")
    # cost per unit of improvement: spend so far / |confirmed best - baseline|, once there is one
    b = pop.baseline_value
    pts = [(n, usd, gh, abs(c - b)) for n, usd, gh, c in zip(t["n"], t["usd"], t["gpu_hours"], t["confirmed"])
           if b is not None and c is not None and c != b]
    for ax, k, what, color in ((u_usd, 1, "USD", "#2ca02c"), (u_cpu, 2, unit, "#9467bd")):
        ax.set_title(f"{what} per 1.0 {metric} of confirmed improvement", fontsize=10)
        ax.set_ylabel(f"{what} per unit")
        ax.set_xlabel("ideas finished")
        if pts:
            ys = [p[k] / p[3] for p in pts]
            ax.plot([p[0] for p in pts], ys, color=color)
            _from_zero(ax, ys, what)
        else:
            ax.set_ylim(0, 1)
            ax.text(0.5, 0.5, "no confirmed improvement yet", ha="center", va="center", transform=ax.transAxes,
                    color="#666")
    for ax in (a_usd, a_cpu, u_usd, u_cpu):
        ax.grid(alpha=0.3)
        _epochs(ax)
    return fig


def figures(pop, s: dict, m) -> dict[str, Figure]:
    """Every figure of the report by file name (drawn, not saved: tests inspect their axes)."""
    return {"best_so_far.png": plot_best(pop, s, m.metric, m.gpus), "ideas_by_epoch.png": plot_scatter(pop, m.metric),
            "execution_rate.png": plot_execution(s), "cost.png": plot_cost(pop, s, m.metric, m.gpus)}


def _num(v, nd=4) -> str:
    return "" if v is None else f"{v:.{nd}f}"


def _html(cfg, research, summ: dict, rows: list[dict], images: list[str], s: dict) -> str:
    e = html_text        # escaped, and control/bidi characters shown (views/safe.py)
    m = summ["metric"]
    b = summ["baseline"]

    def result(r):
        if not r:
            return "none yet"
        spread = f" ± {r['std']:.4f} over {r['seeds']} seeds" if r["seeds"] > 1 and r["std"] is not None \
            else f" ({r['seeds']} seed)"
        delta = f", {e(r['delta_text'])}" if r["delta_text"] else ""
        return (f"<b>{e(m)} = {r['value']:.4f}</b>{spread}{delta} "
                f"[{e(r['decision_text'])}] — {e(r['title'])} (<code>{e(r['idea'])}</code>, "
                f"<code>{e(r['branch'])}</code>)")
    sp, cpi = summ["spend"], summ["cost_per_improvement"]
    counts = ", ".join(f"{e(k)} {v}" for k, v in sorted(summ["counts"].items()))
    lines = [
        "<!doctype html><html><head><meta charset='utf-8'><title>autoresearchd report</title>",
        "<style>body{font-family:sans-serif;max-width:1150px;margin:2em auto}table{border-collapse:collapse;"
        "font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:left}code{font-size:12px}"
        ".unconf{color:#a60}</style></head><body>",
        f"<h1>autoresearchd report: {e(research.manifest.name)}</h1>",
        f"<p>research repo <code>{e(str(research.repo.path))}</code>, baseline "
        f"<code>{e(research.baseline_ref)}</code>; generated {e(time.strftime('%Y-%m-%d %H:%M:%S'))}</p>",
        "<ul>",
        f"<li>goal: {e(summ['goal'])} {e(m)}; ideas: {summ['total']} ({counts}); "
        + (f"last epoch {summ['epoch']}" if summ["epoch"] is not None else "no epochs yet") + "</li>",
        "<li>baseline: " + (f"{b['value']:.4f} ± {b['std'] or 0:.4f} over {b['seeds']} seeds"
                             if b["value"] is not None else "not measured yet")
        + (f" ({e(b['running'])})" if b.get("running") else "") + "</li>",
        f"<li>best confirmed: {result(summ['best'])}</li>",
    ]
    if summ["best_unconfirmed"]:
        lines.append(f"<li class='unconf'>best unconfirmed (a single measurement, not a result yet): "
                     f"{result(summ['best_unconfirmed'])}</li>")
    st = summ["stale"]
    if st["count"]:
        lines.append(f"<li class='unconf'>measured against an old baseline ({st['count']}, kept apart: never "
                     "best, never a parent): " + "; ".join(result(r) for r in st["top"]) + "</li>")
    lines += [
        f"<li>spend: ${sp['usd']:.2f} LLM, {sp['tokens']:,} tokens, " +
        (f"{sp['gpu_hours']:.2f} GPU-hours" if summ["gpus"] else f"{sp['cpu_hours']:.2f} CPU-hours") + "</li>",
        "<li>cost per unit of improvement over the baseline: " +
        (f"${cpi['usd']:.2f}" + (f" and {cpi['gpu_hours']:.2f} GPU-hours" if summ["gpus"] else "") +
         f" per 1.0 {e(m)}" if cpi["usd"] is not None else "n/a (no confirmed improvement yet)") + "</li>",
        "</ul>",
    ]
    for img in images:
        lines.append(f"<p><img src='{e(img)}' alt='{e(img)}' style='max-width:100%'></p>")
    lines.append(f"<h2>top {len(rows)}</h2><table><tr><th>#</th><th>idea</th><th>title</th><th>{e(m)}</th>"
                 "<th>Δ baseline</th><th>decision</th><th>origin</th><th>epoch</th><th>branch</th>"
                 "<th>commit</th></tr>")
    for k, r in enumerate(rows, 1):
        metric = _num(r["value"]) + (f" ± {r['std']:.4f} ({r['seeds']})" if r["seeds"] > 1 and r["std"] is not None
                                     else "")
        cls = "" if r["decision"] in BEST_DECISIONS else " class='unconf'"
        lines.append(f"<tr{cls}><td>{k}</td><td><code>{e(r['idea'])}</code></td><td>{e(r['title'])}</td>"
                     f"<td>{metric}</td><td>{e(delta_short(r))}</td><td>{e(r['decision_text'])}</td>"
                     f"<td>{e(r['origin'])}</td><td>{r['epoch']}</td><td><code>{e(r['branch'])}</code></td>"
                     f"<td><code>git show {e((r['commit'] or '')[:12])}</code></td></tr>")
    lines.append(f"</table><p>{e(DELTA_LEGEND)}</p>")
    e_ = s["by_epoch"]
    lines.append("<h2>per epoch</h2><table><tr><th>epoch</th><th>executed / attempted</th>"
                 "<th>best confirmed</th><th>best (any)</th></tr>")
    for ep, ex, at, c, r in zip(e_["epoch"], e_["executed"], e_["attempted"], e_["confirmed"], e_["raw"]):
        lines.append(f"<tr><td>{ep}</td><td>{ex} / {at}</td><td>{_num(c)}</td><td>{_num(r)}</td></tr>")
    lines.append("</table><p>Execution rate: ideas that produced a metric over ideas that were attempted "
                 "(implement_failed, rejected, failed, timed_out, lost, suspicious and over_budget count as not executed; "
                 "duplicates "
                 "and cancelled ideas were never attempted).</p></body></html>")
    return "\n".join(lines) + "\n"


def write_report(cfg, out_dir: Path) -> Path:
    """Write index.html and the figures into out_dir; return the path of index.html."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    research, pop = load(cfg)
    m = research.manifest
    summ = summary(cfg, research, pop)
    s = series(pop, m.goal, m.gpus)
    images = [_save(fig, out / name) for name, fig in figures(pop, s, m).items()]
    rows = [r for r in leaderboard(cfg, research=research, pop=pop) if r["value"] is not None][:defaults.REPORT_TOP_K]
    index = out / "index.html"
    index.write_text(_html(cfg, research, summ, rows, images, s))
    return index
