"""`report` as a real subprocess: index.html plus decodable, non-trivial PNG figures; the curves
behind them (best-so-far confirmed vs raw, execution rate) are right for a known population."""

from __future__ import annotations

import subprocess
import sys

import pytest
from matplotlib import image as mpimg

from autoresearchd.config import load_config
from autoresearchd.store.population import read_population
from autoresearchd.views.report import series, write_report

from popbuilder import build_population, write_cfg

FIGURES = ("best_so_far.png", "ideas_by_epoch.png", "execution_rate.png", "cost.png")


@pytest.fixture(scope="module")
def pop(tmp_path_factory):
    d = tmp_path_factory.mktemp("rep")
    repo = build_population(d / "research", 200, seed=3)
    return write_cfg(d, repo.path), repo, d


def test_report_cli_writes_html_and_pngs(pop):
    cfg, repo, d = pop
    out = d / "report"
    p = subprocess.run([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), "report", "--out", str(out)],
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    index = out / "index.html"
    assert str(index) in p.stdout.replace("\n", "")
    html = index.read_text()
    for name in FIGURES:
        f = out / name
        assert f.stat().st_size > 10_000, name
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        img = mpimg.imread(f)
        assert img.ndim == 3 and img.shape[0] >= 300 and img.shape[1] >= 600, (name, img.shape)
        assert img.std() > 0.01, f"{name} is blank"
        assert f"src='{name}'" in html
    assert "best confirmed" in html and "Best confirmed idea" in html
    assert "best unconfirmed" in html and "Lucky single run" in html
    assert "git show " in html and "idea/e" in html and "cost per unit of improvement" in html
    assert "<script" not in html


def test_series_confirmed_vs_raw_and_execution_rate(pop):
    _, repo, _ = pop
    p = read_population(repo, "refs/heads/main")
    s = series(p, "min")
    e = s["by_epoch"]
    assert e["epoch"] == list(range(10))
    # raw best is never worse than confirmed best, and both only improve
    for raw, conf in zip(e["raw"], e["confirmed"]):
        assert conf is None or raw <= conf
    assert all(a >= b for a, b in zip(e["raw"], e["raw"][1:]))
    assert e["raw"][-1] == pytest.approx(p.baseline_value - 0.35)          # the lucky single run
    best = next(i for i in p.ideas if i.title == "Best confirmed idea")
    assert e["confirmed"][-1] == pytest.approx(best.value)
    for ep, ex, at, rate in zip(e["epoch"], e["executed"], e["attempted"], e["rate"]):
        here = [i for i in p.ideas if i.epoch == ep and i.note is not None and i.status.value not in ("duplicate",)]
        assert at == len(here) and ex == sum(1 for i in here if i.value is not None)
        assert rate == pytest.approx(ex / at)
    t = s["by_time"]
    assert t["n"][-1] == sum(1 for i in p.ideas if i.note is not None)
    assert all(a <= b for a, b in zip(t["gpu_hours"], t["gpu_hours"][1:]))


def test_report_of_an_empty_search(tmp_path):
    repo = build_population(tmp_path / "research", 0)
    index = write_report(load_config(write_cfg(tmp_path, repo.path)), tmp_path / "r")
    assert index.is_file() and "none yet" in index.read_text()
    assert all((tmp_path / "r" / f).stat().st_size > 1000 for f in FIGURES)


def test_report_before_the_first_note_prints_no_warnings(toy_env, tmp_path):
    """`report` run while the baseline is still training: nothing is labelled yet, and matplotlib's
    "No artists with labels found" warnings must not reach the user's terminal."""
    import warnings

    from conftest import write_config
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        index = write_report(load_config(write_config(tmp_path, toy_env)), tmp_path / "r")
    assert index.is_file()
    assert not [str(w.message) for w in caught if "legend" in str(w.message)]


def test_figures_of_the_first_minutes_have_whole_number_ticks(tmp_path):
    """One epoch and one finished idea (what a new user's first `report` shows): the epoch and
    idea-count axes span less than 1, where integer ticks fell back to -0.045, 0.945, ...; and the
    cumulative compute, a single point, is drawn (a line through one point is invisible)."""
    from autoresearchd.views.report import figures
    repo = build_population(tmp_path / "research", 1, seed=2, with_failures=False)
    p = read_population(repo, "refs/heads/main")
    from autoresearchd.research import open_research
    m = open_research(load_config(write_cfg(tmp_path, repo.path)), create=False).manifest
    s = series(p, m.goal, m.gpus)
    assert len(set(s["by_epoch"]["epoch"])) == 1
    figs = figures(p, s, m)
    for name, fig in figs.items():
        for ax in fig.axes:
            if "compute" in ax.get_xlabel() or "hours" in ax.get_xlabel():
                continue                                  # a continuous axis
            fig.canvas.draw()
            lo, hi = ax.get_xlim()
            ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
            assert ticks and all(float(t).is_integer() for t in ticks), (name, ax.get_title(), ticks)
    compute = next(ax for ax in figs["cost.png"].axes if ax.get_title().startswith("cumulative compute"))
    assert all(ln.get_marker() not in (None, "None", "") for ln in compute.get_lines())


def test_figures_of_a_small_cpu_search_with_no_spend(tmp_path):
    """Whole-number epoch ticks, CPU-hours (not GPU-hours) for a gpus = 0 env, a zero spend drawn
    from 0 (not -0.04..0.04), and no twin axes in the cost figure."""
    from autoresearchd.views.report import _save, figures
    repo = build_population(tmp_path / "research", 12, seed=5, per_epoch=5)
    research_cfg = load_config(write_cfg(tmp_path, repo.path))
    p = read_population(repo, "refs/heads/main")
    from autoresearchd.research import open_research
    m = open_research(research_cfg, create=False).manifest.model_copy(update={"gpus": 0})
    s = series(p, m.goal, m.gpus)
    s["by_time"]["usd"] = [0.0] * len(s["by_time"]["usd"])          # a replay run: nothing spent
    figs = figures(p, s, m)
    for name in ("best_so_far.png", "ideas_by_epoch.png", "execution_rate.png"):
        ax = figs[name].axes[0]
        lo, hi = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
        assert ticks and all(float(t).is_integer() for t in ticks), (name, ticks)
    labels = " ".join(ax.get_xlabel() + " " + ax.get_ylabel() + " " + ax.get_title()
                      for f in figs.values() for ax in f.axes)
    assert "GPU" not in labels and "CPU-hours" in labels, labels
    cost = figs["cost.png"]
    assert len(cost.axes) == 4 and all(len(ax.get_shared_x_axes().get_siblings(ax)) == 4 for ax in cost.axes)
    usd = cost.axes[0]
    assert usd.get_ylim() == (0, 1) and any("no LLM spend" in t.get_text() for t in usd.texts)
    assert all(ax.get_ylim()[0] == 0 for ax in cost.axes)
    for name, fig in figs.items():                      # they render
        _save(fig, tmp_path / name)
        assert (tmp_path / name).stat().st_size > 5000
