"""`status`, `ideas` and `show` as real subprocesses against real git populations, plus the progress view."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from rich.console import Console

from autoresearchd.store.gitrepo import state_dir
from autoresearchd.store.population import read_population
from autoresearchd.views.progress import render_progress, running_trials

from popbuilder import build_population, write_cfg


def cli(cfg, *args, check=True) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), *args],
                       capture_output=True, text=True, timeout=120, env=dict(os.environ, COLUMNS="200"))
    if check:
        assert p.returncode == 0, p.stdout + p.stderr
    return p


@pytest.fixture(scope="module")
def pop300(tmp_path_factory):
    d = tmp_path_factory.mktemp("pop300")
    repo = build_population(d / "research", 300, seed=1)
    return write_cfg(d, repo.path), repo, read_population(repo, "refs/heads/main")


def test_status_without_daemon_reports_confirmed_best_and_spend(pop300):
    cfg, repo, pop = pop300
    out = cli(cfg, "status").stdout
    assert "daemon not running" in out and "slots:" not in out
    s = json.loads(cli(cfg, "status", "--json").stdout)
    assert s["daemon"]["alive"] is False and s["total"] == 300
    counts = {}
    for i in pop.ideas:
        counts[i.status.value] = counts.get(i.status.value, 0) + 1
    assert s["counts"] == counts
    for k in ("queued", "implementing", "running", "succeeded", "failed", "implement_failed", "duplicate"):
        assert s["counts"].get(k, 0) >= 1, k
    assert s["epoch"] == 9
    best, lucky = s["best"], s["best_unconfirmed"]
    assert best["title"] == "Best confirmed idea" and best["decision"] == "confirmed" and best["seeds"] == 3
    assert best["std"] > 0 and best["branch"].startswith("idea/")
    assert lucky["title"] == "Lucky single run" and lucky["decision"] == "pending" and lucky["seeds"] == 1
    assert "best confirmed" in out and "Best confirmed idea" in out and "± " in out
    assert "best unconfirmed" in out and "Lucky single run" in out
    usd = s["spend"]["usd"]
    assert usd > 0 and s["spend"]["gpu_hours"] > 0 and s["spend"]["tokens"] > 0
    assert s["cost_per_improvement"]["usd"] == pytest.approx(usd / abs(best["delta"]))
    assert "cost per unit of improvement" in out


def test_status_with_a_live_heartbeat(pop300):
    cfg, repo, _ = pop300
    sd = state_dir(repo)
    state = {"pid": os.getpid(), "started": time.time() - 3700, "heartbeat": time.time(),
             "slots": [{"slot": "a/0", "state": "busy", "trial": "x"}, {"slot": "a/1", "state": "free", "trial": None},
                       {"slot": "b/0", "state": "unreachable", "trial": None}],
             "implementing": [], "proposing": False, "stop_reason": "max_ideas reached (300)",
             "llm": "replay", "budget": {"usd": 1.5, "calls": 3, "tokens": 100, "max_usd": 10.0}}
    (sd / "daemon.json").write_text(json.dumps(state))
    try:
        out = cli(cfg, "status").stdout
        assert "daemon running" in out and "up 1h01m" in out
        assert "slots: 1 busy, 1 free, 1 unreachable" in out
        assert "of $10.00" in out and "not proposing: max_ideas reached" in out
        s = json.loads(cli(cfg, "status", "--json").stdout)
        assert s["slot_counts"] == {"busy": 1, "free": 1, "unreachable": 1} and s["daemon"]["uptime_s"] > 3600
        state["pid"] = 2 ** 22 + 12345      # a pid that does not exist: a stale file means not running
        (sd / "daemon.json").write_text(json.dumps(state))
        assert "daemon not running" in cli(cfg, "status").stdout
    finally:
        (sd / "daemon.json").unlink()


def test_heartbeat_freshness_follows_the_configured_tick(pop300):
    """A heartbeat 100 s old is stale for the default 2 s tick (fresh means within max(60 s, ten
    ticks)) but fresh for a daemon configured with tick_s = 20: status reads the configured tick."""
    from autoresearchd.config import load_config
    from autoresearchd.views.summary import summary
    cfg_path, repo, pop = pop300
    sd = state_dir(repo)
    (sd / "daemon.json").write_text(json.dumps({"pid": os.getpid(), "started": time.time() - 300,
                                                "heartbeat": time.time() - 100}))
    try:
        cfg = load_config(cfg_path)
        assert cfg.daemon.tick_s == 2.0
        assert summary(cfg, pop=pop, research=_research(cfg))["daemon"]["fresh"] is False
        cfg.daemon.tick_s = 20.0
        assert summary(cfg, pop=pop, research=_research(cfg))["daemon"]["fresh"] is True
    finally:
        (sd / "daemon.json").unlink()


def _research(cfg):
    from autoresearchd.research import open_research
    return open_research(cfg, create=False)


def test_ideas_ranked_and_filtered(pop300):
    cfg, _, pop = pop300
    rows = json.loads(cli(cfg, "ideas", "--json").stdout)
    assert len(rows) == 300
    vals = [r["value"] for r in rows if r["value"] is not None]
    assert vals == sorted(vals) and rows[0]["title"] == "Lucky single run"     # goal = min
    assert all(r["value"] is None for r in rows[len(vals):])
    multi = next(r for r in rows if r["seeds"] > 1)
    assert multi["std"] is not None and len(multi["values"]) == multi["seeds"]
    failed = json.loads(cli(cfg, "ideas", "--json", "--status", "implement_failed").stdout)
    assert failed and all(r["status"] == "implement_failed" for r in failed)
    humans = json.loads(cli(cfg, "ideas", "--json", "--origin", "human").stdout)
    assert humans and all(r["origin"] == "human" for r in humans)
    e3 = json.loads(cli(cfg, "ideas", "--json", "--epoch", "3").stdout)
    assert e3 and all(r["epoch"] == 3 for r in e3)
    assert len(e3) == sum(1 for i in pop.ideas if i.epoch == 3)
    table = cli(cfg, "ideas", "--limit", "5").stdout
    assert "Lucky single run" in table and "± " in table and "5 idea(s)" in table
    assert "Δ baseline" in table and "parents" in table
    bad = cli(cfg, "ideas", "--status", "nonsense", check=False)
    assert bad.returncode == 2 and "valid:" in bad.stdout


def test_ideas_at_80_columns_in_a_terminal_keeps_titles_and_ranks(pop300):
    """At 80 columns all ten columns left the title (and `#`) zero width: the narrow set keeps them."""
    import io

    from autoresearchd.config import load_config
    from autoresearchd.views.observe import ideas_table
    cfg, _, _ = pop300
    buf = io.StringIO()
    assert ideas_table(load_config(cfg), Console(file=buf, width=80, force_terminal=True, color_system=None),
                       limit=5) == 0
    out = buf.getvalue()
    rows = json.loads(cli(cfg, "ideas", "--json", "--limit", "5").stdout)
    assert all(len(ln) <= 80 for ln in out.splitlines()), out
    assert "Lucky single run" in out and "Δ baseline" in out and "status" in out, out
    for k, r in enumerate(rows, 1):
        assert f" {k} " in out and r["idea"] in out and r["title"].split()[0] in out, out


def test_show_text_diffstat_note_attempts_and_log(pop300):
    cfg, _, pop = pop300
    best = next(i for i in pop.ideas if i.title == "Best confirmed idea")
    out = cli(cfg, "show", best.idea_id).stdout
    assert "Best confirmed idea" in out and "Hypothesis" in out
    assert "train.py | 2 +-" in out and "decision: confirmed" in out
    assert "implementer attempts (2)" in out and "patch does not apply" in out
    assert "seed 2: succeeded" in out and "log " in out and "(tail; --log for all)" not in out
    full = cli(cfg, "show", best.branch.removeprefix("refs/heads/"), "--diff").stdout
    assert "+lr = 0.001" in full and "diff --git a/train.py b/train.py" in full
    rec = next(i for i in pop.ideas if i.status.value == "implement_failed")
    out = cli(cfg, "show", rec.idea_id).stdout
    assert "never became runnable" in out and "implement_failed" in out and "attempt 1" in out
    miss = cli(cfg, "show", "no-such-idea", check=False)
    assert miss.returncode == 2 and "no idea matches" in miss.stdout


def test_ideas_json_with_1000_ideas(tmp_path):
    repo = build_population(tmp_path / "research", 1000, seed=2, per_epoch=100)
    cfg = write_cfg(tmp_path, repo.path)
    t0 = time.time()
    rows = json.loads(cli(cfg, "ideas", "--json").stdout)
    took = time.time() - t0
    pop = read_population(repo, "refs/heads/main")
    assert len(rows) == 1000 and len({r["idea"] for r in rows}) == 1000
    assert {r["idea"] for r in rows} == {i.idea_id for i in pop.ideas}
    by_id = {i.idea_id: i for i in pop.ideas}
    for r in rows:
        i = by_id[r["idea"]]
        assert r["status"] == i.status.value and r["value"] == i.value and r["epoch"] == i.epoch
    assert max(r["epoch"] for r in rows) == 9
    assert took < 60, took   # generous: shared 2-core machine; bench/population.py has the real figure
    lines = cli(cfg, "ideas").stdout.splitlines()   # > 300 rows: plain columns, one line per idea
    assert lines[0].split()[:3] == ["#", "idea", "title"] and lines[-1] == "1000 idea(s)"
    assert len(lines) == 1003 and rows[0]["idea"] in lines[1] and lines[-2].startswith("Δ: paired")


def test_render_progress_shows_epoch_and_running_trials(pop300):
    _, _, pop = pop300
    trials = running_trials(pop)
    assert len(trials) == 1 and 100 < trials[0]["elapsed_s"] < 10_000
    state = {"slots": [{"slot": "gpu-a/0", "state": "busy"}, {"slot": "gpu-a/1", "state": "free"}],
             "budget": {"usd": 0.25, "tokens": 1234, "max_usd": 5.0}, "proposing": True}
    console = Console(width=160, record=True, file=open(os.devnull, "w"))
    console.print(render_progress(state, pop, time_budget_s=600, ideas_per_epoch=30))
    text = console.export_text()
    assert "epoch 9:" in text and "implemented of 30" in text and "slots 1/2 busy" in text
    assert "$0.2500 of $5.00" in text and f"{trials[0]['idea']} s0" in text and "/ 10:00" in text
    console.print(render_progress(None, pop))   # no state, no budget: still renders


def _pop_with(tmp_path, trials: list[tuple[str, float, float | None]], extra_ideas=()):
    """A population whose baseline has running leases (trial title, started, began)."""
    from autoresearchd.store.gitrepo import GitRepo
    from autoresearchd.store.ledger import Ledger
    from autoresearchd.store.notes import Lease
    from conftest import git
    d = tmp_path / "r"
    d.mkdir()
    git(d, "init", "-q", "-b", "main")
    (d / ".autoresearch.toml").write_text('[env]\nrun = "true"\nmetric = "loss"\n')
    git(d, "add", "-A")
    git(d, "commit", "-qm", "baseline")
    repo = GitRepo(d)
    base = repo.rev_parse("refs/heads/main")
    Ledger(repo).write_leases(base, [Lease(trial_id=f"baseline-{base[:8]}-s{k}", seed=k, runner="local",
                                           host="local", slot=str(k), started=st, began=b)
                                     for k, (_, st, b) in enumerate(trials)])
    return d, read_population(repo, "refs/heads/main")


def test_progress_at_80_columns_counts_running_trials_from_their_start(tmp_path):
    now = time.time()
    # seed 0 has run 4:10 of its 5:00 budget, after waiting 20 minutes on the host for its slot;
    # seed 1 is placed and still waits for its slot
    _, pop = _pop_with(tmp_path, [("a", now - 1450, now - 250), ("b", now - 30, None)])
    console = Console(width=80, record=True, file=open(os.devnull, "w"))
    console.print(render_progress({"slots": [{"state": "busy"}]}, pop, time_budget_s=300, now=now))
    text = console.export_text()
    lines = text.splitlines()
    assert all(len(ln) <= 80 for ln in lines), text
    assert "running 1 (+1 waiting for a slot)" in text, text     # not "running 0" while trials run
    row = next(ln for ln in lines if "baseline s0" in ln)
    assert "4:10 / 5:00" in row, text                             # from its start, against the run budget
    assert "24:" not in text and "25:00" not in text              # not from queueing, not another budget
    assert "waiting 0:30" in next(ln for ln in lines if "baseline s1" in ln)
    assert "run budget 5:00" in text


def test_status_counts_trials_waiting_for_a_slot_apart(tmp_path):
    """One slot, seed 0 running and the next trial pre-staged behind it: `status` said "trials
    running: 2"; it says what the progress view says."""
    now = time.time()
    d, _ = _pop_with(tmp_path, [("a", now - 300, now - 250), ("b", now - 30, None)])
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[research]\nrepo = "{d}"\n[llm]\nprovider = "none"\n')
    out = " ".join(cli(cfg, "status").stdout.split())
    assert "trials running: 1 (+1 waiting for a slot)" in out, out


def test_progress_keeps_numbers_when_titles_are_long(pop300):
    _, _, pop = pop300
    idea = next(i for i in pop.ideas if i.leases)
    idea.title = "[bold]Markup[/bold] is shown as typed, in a very long title " * 4
    console = Console(width=80, record=True, file=open(os.devnull, "w"))
    console.print(render_progress(None, pop, time_budget_s=600, now=time.time()))
    text = console.export_text()
    row = next((ln for ln in text.splitlines() if idea.idea_id in ln), text)
    assert len(row) <= 80 and "/ 10:00" in row and "…" in row and "[bold]" in row, text


def test_progress_counts_duplicates_apart_from_not_implementable(pop300):
    from autoresearchd.store.notes import Status
    from autoresearchd.views.progress import epoch_counts
    _, _, pop = pop300
    c = epoch_counts(pop)
    here = [i for i in pop.ideas if i.epoch == c["epoch"] and i.origin != "human" and not i.branch]
    assert c["duplicates"] == sum(1 for i in here if i.status == Status.DUPLICATE)
    assert c["failed_to_implement"] == sum(1 for i in here if i.status in (Status.IMPLEMENT_FAILED,
                                                                            Status.REJECTED))
