"""What a result is compared with, in every view (issue 27, "Results that mislead"): a result measured
against an old baseline is kept apart (never best, never a parent) and named with that baseline; a
delta says whether it is paired by seed or against the baseline's mean, and shows the other where they
differ beyond the noise; with pushed ideas only, every view agrees on the epoch; an undecided result
says the baseline is still running, never `None`. Real git, the real daemon, real views."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from autoresearchd.config import load_config
from autoresearchd.research import open_research
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.notes import Note, Status, Trial, format_note
from autoresearchd.store.livepop import LivePopulation
from autoresearchd.store.population import read_population
from autoresearchd.store.refs import NOTES_REF
from autoresearchd.views.dashboard import Snapshot
from autoresearchd.views.export import records
from autoresearchd.views.observe import ideas_table, show, status
from autoresearchd.views.report import figures, write_report
from autoresearchd.views.curves import series
from autoresearchd.views.summary import leaderboard, summary

from conftest import TOY_EVAL, TOY_MANIFEST, TOY_RUN, branch_idea, git, run_until_settled, write_config

# the walk: a run that ignores its seed (every seed the same value) ...
FIXED_RUN = TOY_RUN.replace('random.seed(int(os.environ.get("AUTORESEARCH_SEED", "0")))', "random.seed(1234)")


def _console_text(fn, cfg, *args, **kw) -> str:
    out = io.StringIO()
    fn(load_config(cfg), Console(file=out, width=300, color_system=None), *args, **kw)
    return out.getvalue()


def _views(cfg, tmp_path) -> dict:
    """Every view's text or payload, for one config."""
    c = load_config(cfg)
    research = open_research(c, create=False)
    pop = read_population(research.repo, research.baseline_ref)
    snap = Snapshot(c, research, pop, "1", secrets=[])
    index = write_report(c, tmp_path / "report")
    return {"summary": summary(c), "status": _console_text(status, cfg), "report": index.read_text(),
            "ideas": _console_text(ideas_table, cfg), "rows": leaderboard(c), "overview": snap.overview(),
            "board": snap.ideas(), "export": records(c), "snap": snap, "pop": pop, "research": research}


def test_a_result_measured_on_an_old_baseline_is_kept_apart_in_every_view(make_repo, tmp_path):
    repo = make_repo({".autoresearch.toml": TOY_MANIFEST, "run.py": FIXED_RUN, "evaluate.py": TOY_EVAL}, "research")
    branch_idea(repo, "alice/lower", "Lower x a little", {"run.py": FIXED_RUN.replace("x = 1.0", "x = 0.99")})
    cfg = write_config(tmp_path, repo)               # baseline_seeds = 2
    pop = run_until_settled(cfg, timeout=120)
    old_base = pop.baseline_commit
    alice = next(i for i in pop.ideas if "alice" in (i.branch or ""))
    # measured against the seed-ignoring baseline: a gain, not promoted (noise unknown), so "best unconfirmed"
    assert alice.note.decision == "improved" and alice.note.baseline_commit == old_base
    assert abs(alice.note.delta_mean - (alice.note.value - alice.note.baseline)) < 1e-9
    assert summary(load_config(cfg))["best_unconfirmed"]["idea"] == alice.idea_id
    old_value = alice.note.baseline
    # a live dashboard open across the move (it moves on by the ideas that changed: alice does not)
    c0 = load_config(cfg)
    research0 = open_research(c0, create=False)
    live = LivePopulation(research0.repo, research0.baseline_ref)
    snap0 = Snapshot(c0, research0, live.refresh(), "0", secrets=[])
    assert not next(r for r in snap0.ideas()["rows"] if r["idea"] == alice.idea_id)["stale"]

    # ... then the baseline is fixed (it honours its seed now): the baseline moves and is measured afresh
    (repo / "run.py").write_text(TOY_RUN)
    git(repo, "commit", "-qam", "seed every RNG from AUTORESEARCH_SEED")
    pop = run_until_settled(cfg, timeout=120)
    assert pop.baseline_commit != old_base and len(pop.baseline_note.values) == 2
    alice = pop.by_id[alice.idea_id]
    assert pop.baseline_value > alice.value           # it would look like a gain on the new baseline
    assert pop.stale(alice) and alice.note.baseline_commit == old_base and alice.note.baseline == old_value

    tag = f"vs old baseline {old_value:.4f}@{old_base[:7]}"
    v = _views(cfg, tmp_path)
    s = v["summary"]
    # never "best" against the new baseline, confirmed or not; listed apart, with the baseline it had
    assert s["best"] is None and s["best_unconfirmed"] is None
    assert s["stale"]["count"] == 1 and s["stale"]["top"][0]["idea"] == alice.idea_id
    assert tag in s["stale"]["top"][0]["delta_text"]
    assert "best unconfirmed" not in v["status"] and "measured against an old baseline" in v["status"]
    assert tag in v["status"]
    assert "best unconfirmed" not in v["report"] and tag in v["report"]
    assert f"old {old_value:.4f}@{old_base[:7]}" in v["ideas"]
    row = next(r for r in v["rows"] if r["idea"] == alice.idea_id)
    assert row["stale"] and row["baseline_commit"] == old_base and tag in row["delta_text"]
    # the dashboard: the overview apart, the row, the idea page; the best-so-far curves hold no stale value
    o = v["overview"]
    assert o["best_unconfirmed"] is None and o["stale"]["count"] == 1 and tag in o["stale"]["top"][0]["delta_text"]
    assert all(x is None for x in o["curves"]["by_time"]["raw"] + o["curves"]["by_epoch"]["raw"])
    brow = next(r for r in v["board"]["rows"] if r["idea"] == alice.idea_id)
    assert brow["stale"] and tag in brow["delta_text"]
    page = v["snap"].idea(alice.idea_id)
    assert page["note"]["stale"] and tag in page["note"]["delta_text"]
    rec = next(r for r in v["export"] if r["idea_id"] == alice.idea_id)
    assert rec["stale"] and rec["baseline_commit"] == old_base and tag in rec["delta_text"]
    shown = _console_text(show, cfg, alice.idea_id)
    assert tag in shown and "measured against an old baseline" in shown
    # the policies' parents compare like with like: nothing to build on but the new baseline
    from autoresearchd.policies.evolutionary import exploit_candidates
    from autoresearchd.policies.greedy import greedy_base
    m = v["research"].manifest
    assert exploit_candidates(v["pop"], m) == ([], []) and greedy_base(v["pop"], m) is None
    # the live dashboard, moved on across the baseline's move, rebuilds its rows: none keeps "current"
    pop1 = live.refresh()
    assert any(i is snap0.pop.by_id[alice.idea_id] for i in pop1.ideas)      # alice's object did not change
    snap1 = Snapshot(c0, research0, pop1, "1", secrets=[], prev=snap0)
    row1 = next(r for r in snap1.ideas()["rows"] if r["idea"] == alice.idea_id)
    assert row1["stale"] and tag in row1["delta_text"]


# -- notes written straight into a real research repo ---------------------------------------------
def _repo_with_notes(make_repo, cfg_dir, baseline: Note | None, ideas: list[tuple[str, Note | None]],
                     name: str = "research"):
    """A research repo whose baseline and pushed idea branches carry the given notes; (config, commits)."""
    cfg_dir.mkdir(parents=True, exist_ok=True)
    repo = make_repo({".autoresearch.toml": TOY_MANIFEST, "run.py": TOY_RUN, "evaluate.py": TOY_EVAL}, name)
    g = GitRepo(repo)
    if baseline is not None:
        g.note_write(NOTES_REF, g.rev_parse("refs/heads/main"), format_note(baseline))
    commits = []
    for k, (name, note) in enumerate(ideas):
        sha = branch_idea(repo, name, f"Idea {name}", {"run.py": TOY_RUN.replace("x = 1.0", f"x = 1.0{k}")})
        if note is not None:
            g.note_write(NOTES_REF, sha, format_note(note))
        commits.append(sha)
    return write_config(cfg_dir, repo), commits


def _baseline(values: list[float], planned: int, std: float | None = None) -> Note:
    mean = sum(values) / len(values)
    return Note(status=Status.SUCCEEDED, idea_id="baseline", metric="score", goal="min", value=mean,
                std=std if std is not None else 0.0, values=values, seeds=list(range(len(values))),
                seeds_planned=planned, finished_at=1.0,
                trials=[Trial(trial_id=f"b-s{k}", seed=k, status=Status.SUCCEEDED, value=x) for k, x in enumerate(values)])


def _idea(value: float, baseline: float, delta: float, decision: str | None, bstd: float = 0.01,
          finished: float = 2.0, values: list[float] | None = None) -> Note:
    values = values or [value]
    return Note(status=Status.SUCCEEDED, idea_id=None, metric="score", goal="min", value=value, values=values,
                seeds=list(range(len(values))), std=0.001 if len(values) > 1 else 0.0, baseline=baseline,
                baseline_std=bstd, delta=delta, decision=decision, cpu_s=36.0 * len(values), finished_at=finished,
                trials=[Trial(trial_id=f"t-s{k}", seed=k, status=Status.SUCCEEDED, value=x, wall_s=36.0)
                        for k, x in enumerate(values)])


def test_a_paired_delta_is_labelled_and_shows_the_mean_delta_where_they_differ(make_repo, tmp_path):
    # the note: baseline 2.608921, delta +0.025738 (paired by seed), value - baseline = +0.0075
    base = _baseline([2.583183, 2.62, 2.62358], 3, std=0.01)
    wide = _idea(2.616421, base.value, 0.025738, "improved")
    near = _idea(2.62, base.value, 2.62 - base.value + 0.004, "within_noise")   # they differ by 0.004 < noise
    cfg, (c_wide, c_near) = _repo_with_notes(make_repo, tmp_path, base, [("h/wide", wide), ("h/near", near)])
    both = "+0.0257 vs baseline, paired by seed (+0.0075 vs baseline mean)"
    v = _views(cfg, tmp_path)
    assert both in v["status"]                                   # best unconfirmed
    assert both in v["report"]
    assert "+0.0257 paired (+0.0075 mean)" in v["ideas"] and "Δ: paired = paired by seed" in v["ideas"]
    assert "+0.0257 paired (+0.0075 mean)" in v["report"]        # the report's table
    shown = _console_text(show, cfg, "h-" + c_wide[:10])
    assert f"delta: {both}" in shown and "(+0.0257 vs baseline, paired by seed (+0.0075" in shown   # note line too
    row = next(r for r in v["rows"] if r["commit"] == c_wide)
    assert row["delta_kind"] == "paired by seed" and row["deltas_differ"] and abs(row["delta_mean"] - 0.0075) < 1e-6
    # within the noise (the baseline's seed std, 0.01): labelled, the mean not repeated
    near_row = next(r for r in v["rows"] if r["commit"] == c_near)
    assert near_row["delta_text"] == f"{near.delta:+.4f} vs baseline, paired by seed" and not near_row["deltas_differ"]
    assert v["snap"].idea("h-" + c_wide[:10])["note"]["delta_text"] == both


def test_with_pushed_ideas_only_every_view_agrees_on_the_epoch(make_repo, tmp_path):
    base = _baseline([1.004, 1.006], 2, std=0.0014)
    ideas = [("h/one", _idea(0.999, base.value, 0.999 - base.value, "worse")), ("h/two", None)]
    cfg, _ = _repo_with_notes(make_repo, tmp_path, base, ideas)
    v = _views(cfg, tmp_path)
    assert v["summary"]["epoch"] == 0 and "epoch: 0" in v["status"]
    assert "last epoch 0" in v["report"]
    assert {r["epoch"] for r in v["rows"]} == {0}
    assert v["overview"]["epoch"] == 0 and v["overview"]["curves"]["by_epoch"]["epoch"] == [0]
    assert v["snap"].totals.figures()["epoch"] == 0

    # no idea at all: no epoch, said in words (never -1 or "-")
    cfg2, _ = _repo_with_notes(make_repo, tmp_path / "empty", base, [], name="research-empty")
    v2 = _views(cfg2, tmp_path / "empty")
    assert v2["summary"]["epoch"] is None and v2["overview"]["epoch"] is None
    assert "epoch: none yet" in v2["status"] and "no epochs yet" in v2["report"]
    assert v2["overview"]["curves"]["by_epoch"]["epoch"] == []


def test_a_result_confirmed_last_draws_a_confirmed_curve(make_repo, tmp_path):
    base = _baseline([1.004, 1.006], 2, std=0.0014)
    lucky = _idea(0.990, base.value, 0.990 - base.value, "improved", finished=2.0)
    conf = _idea(0.995, base.value, 0.995 - base.value, "confirmed", finished=3.0, values=[0.995, 0.994, 0.996])
    cfg, _ = _repo_with_notes(make_repo, tmp_path, base, [("h/lucky", lucky), ("h/conf", conf)])
    v = _views(cfg, tmp_path)
    t = v["overview"]["curves"]["by_time"]
    # the confirmed result arrived last: its curve is that one point (the payload has it) ...
    assert [x for x in t["confirmed"] if x is not None] == [0.995] and t["confirmed"][-1] == 0.995
    # ... which a line alone does not draw: the report marks it
    c = v["research"]
    fig = figures(v["pop"], series(v["pop"], "min", 0), c.manifest)["best_so_far.png"]
    line = next(ln for ln in fig.axes[1].get_lines() if ln.get_label() == "best confirmed")
    assert list(line.get_ydata()) == [0.995] and line.get_marker() not in (None, "None", "")


def test_an_undecided_result_says_the_baseline_is_running_and_no_none_reaches_a_view(make_repo, tmp_path):
    base = _baseline([2.6133], 3)                      # seed 0 of 3 is in
    early = _idea(2.5328, 2.6133, -0.0805, None)       # judged once every baseline seed is in
    cfg, (c_early,) = _repo_with_notes(make_repo, tmp_path, base, [("h/early", early)])
    v = _views(cfg, tmp_path)
    s = v["summary"]
    assert s["baseline"]["running"] == "baseline running, 1/3 seeds"
    assert s["best_unconfirmed"]["decision_text"] == "undecided: baseline running, 1/3 seeds"
    assert "[undecided: baseline running, 1/3 seeds]" in v["status"]
    assert "undecided: baseline running, 1/3 seeds" in v["report"] and "baseline running, 1/3 seeds" in v["ideas"]
    assert "undecided: baseline running" in _console_text(show, cfg, "h-" + c_early[:10])
    assert v["overview"]["best_unconfirmed"]["decision_text"].startswith("undecided: baseline running")
    for name in ("status", "report", "ideas"):
        for bad in ("None", "nan", "NaN"):
            assert bad not in v[name], (name, bad, v[name])
    payload = json.dumps([v["overview"]["best_unconfirmed"], v["board"]["rows"], v["export"]])
    assert "NaN" not in payload


def test_the_dashboard_draws_a_confirmed_point_and_fits_the_epoch_axis(make_repo, tmp_path):
    """In the browser: the "best so far by CPU-hours" chart draws the confirmed curve when its only point
    is the last result (a result confirmed last), and the by-epoch chart's axis fits its one epoch
    (pushed ideas only), or the chart says there are no epochs yet."""
    from dashserver import Server, chromium
    drv = chromium()                                 # skips without selenium or chromium
    base = _baseline([1.004, 1.006], 2, std=0.0014)
    lucky = _idea(0.990, base.value, 0.990 - base.value, "improved", finished=2.0)
    conf = _idea(0.995, base.value, 0.995 - base.value, "confirmed", finished=3.0, values=[0.995, 0.994, 0.996])
    cfg, _ = _repo_with_notes(make_repo, tmp_path / "one", base, [("h/lucky", lucky), ("h/conf", conf)])
    empty, _ = _repo_with_notes(make_repo, tmp_path / "none", base, [], name="research-none")
    from selenium.webdriver.support.ui import WebDriverWait
    red = """const c = document.querySelectorAll('.chart canvas')[arguments[0]];
             const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0;
             for (let k = 0; k < d.length; k += 4)
               if (Math.abs(d[k] - 209) < 30 && Math.abs(d[k + 1] - 73) < 30 && Math.abs(d[k + 2] - 91) < 30) n++;
             return n;"""
    try:
        srv = Server(cfg)
        try:
            drv.get(srv.url + "/#/")
            WebDriverWait(drv, 20, 0.05).until(lambda d: len(d.find_elements("css selector", ".chart canvas")) >= 2)
            assert drv.execute_script("return charts.map(c => [c.scales.x.min, c.scales.x.max])")[0] == [-0.5, 0.5]
            assert drv.execute_script(red, 1) > 0, "no confirmed curve on the CPU-hours chart"
            assert drv.execute_script(red, 0) > 0, "no confirmed curve on the by-epoch chart"
            errors = [e for e in drv.get_log("browser") if e["level"] == "SEVERE"]    # before the server stops
            assert not errors, errors
        finally:
            srv.stop()
        srv = Server(empty)
        try:
            drv.get(srv.url + "/#/")
            WebDriverWait(drv, 20, 0.05).until(lambda d: "no epochs yet" in d.find_element("css selector", "main").text)
            errors = [e for e in drv.get_log("browser") if e["level"] == "SEVERE" and "/api/events" not in e["message"]]
            assert not errors, errors       # (the first server's event stream, cut when it stopped, aside)
        finally:
            srv.stop()
    finally:
        drv.quit()


def test_confirmation_seeds_that_ran_across_a_baseline_move_are_judged_where_the_result_was_measured(
        make_repo, tmp_path):
    """A pending result's confirmation seeds were running when the baseline moved: harvested, they are
    judged against the baseline the result was measured on (it stays apart), not the new one."""
    from autoresearchd.app import build_daemon
    from autoresearchd.store.notes import Lease, format_leases
    from autoresearchd.store.refs import RUNS_REF
    old = _baseline([1.00, 1.01], 2, std=0.00707)
    pending = _idea(0.99, old.value, 0.99 - old.value, "pending")
    cfg, (c_idea,) = _repo_with_notes(make_repo, tmp_path, old, [("h/pending", pending)])
    repo = Path(load_config(cfg).research.repo)
    g = GitRepo(repo)
    base_a = g.rev_parse("refs/heads/main")
    n = pending.model_copy(deep=True)
    n.baseline_commit = base_a                        # as the judge writes it
    g.note_write(NOTES_REF, c_idea, format_note(n))
    (repo / "run.py").write_text(TOY_RUN.replace("x = 1.0", "x = 0.98"))
    git(repo, "commit", "-qam", "a better baseline")
    base_b = g.rev_parse("refs/heads/main")
    g.note_write(NOTES_REF, base_b, format_note(_baseline([0.98, 0.99], 2, std=0.00707)))
    k = load_config(cfg).policy.confirm_seeds
    done = [Lease(trial_id=f"t-s{s}", seed=s, runner="local", host="local", slot="0", purpose="confirm", state="done",
                  result=Trial(trial_id=f"t-s{s}", seed=s, status=Status.SUCCEEDED, value=0.99 + 0.001 * s, wall_s=1.0))
            for s in range(1, k + 1)]
    g.note_write(RUNS_REF, c_idea, format_leases(done))
    d = build_daemon(load_config(cfg))
    d.collector.harvest(read_population(d.repo, d.research.baseline_ref))
    pop = read_population(d.repo, d.research.baseline_ref)
    idea = pop.by_commit[c_idea]
    assert len(idea.note.values) == k + 1 and idea.note.decision in ("confirmed", "demoted")
    assert idea.note.baseline_commit == base_a and idea.note.baseline == old.value, idea.note
    assert pop.stale(idea) and pop.best("min") is None
