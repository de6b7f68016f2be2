"""Screening at low fidelity in the fair simulator (bench/sim_screen.py, issue 29 section 3): a real short
search (the real policy, openai provider, daemon job list with the product's Screener, judge, against the
simulated ideator over local HTTP) charges each screen its calibrated share of a full run, cuts exactly
what engine/screening.decide says, and never reports a cut idea as its best; the short runs replay the
measured tinygpt ratios; the CLI never tunes screening on the hold-out seeds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import sim_screen  # noqa: E402
import sim_world  # noqa: E402
from search_ideator import IdeatorServer  # noqa: E402
from sim_arms import Arm, JudgeKind, LoopKind, Search  # noqa: E402
from sim_stop import Rule  # noqa: E402
from sim_world import Knobs, TimedWorld, applied  # noqa: E402

from autoresearchd.engine.screening import decide  # noqa: E402
from autoresearchd.vocab import Status  # noqa: E402


@pytest.fixture(scope="module")
def srv():
    with IdeatorServer() as s:
        yield s


def test_the_screens_cost_is_the_measured_wall_ratio_not_the_step_share():
    assert sim_screen.STEPS_FRACTION == 0.25
    assert sim_screen.COST_FRACTION == sim_screen.FIT["cost_fraction"] and 0.25 < sim_screen.COST_FRACTION < 0.35


def test_a_short_run_replays_the_real_ideas_short_to_full_ratio():
    tw = TimedWorld(5)
    short = sim_screen.ShortRuns(tw)
    profiles = sim_world.CURVE_FIT["profiles"]
    scale = sum(abs(e) for e in tw.w.effect if e) / sum(1 for e in tw.w.effect if e)
    nulls = {round(x * scale, 12) for x in sim_screen.NULL_SHARES}
    for k, (_, p) in enumerate(tw.shape):
        if p >= 0:      # a technique with a real idea's profile: its final effect x that idea's ratio
            assert short.effect[k] == pytest.approx(tw.w.effect[k] * sim_screen.RATIO[profiles[p]["idea"]])
        else:           # a no-op: one real null idea's short effect, scaled to this world's effects
            assert tw.w.effect[k] == 0 and round(short.effect[k], 12) in nulls
    assert sim_screen.ShortRuns(TimedWorld(5)).effect == short.effect         # fixed with the world seed


@pytest.mark.parametrize("rule", [Rule.NONE, Rule.ASHA])
def test_screening_charges_f_per_short_run_cuts_by_decide_and_never_reports_a_cut_idea(srv, rule):
    arm = Arm(LoopKind.ASYNC, JudgeKind.OURS, stop=(rule, None), screen=(0.0, 0.5))
    with applied(Knobs()):
        s = Search(srv, TimedWorld(2), arm, 4.0, 3, 5 / 60)
        r = s.go()
    d = s.screening
    # every screen, the baseline's three seeds included, costs f of its own idea's full-length run
    assert len(d.charged) == r["screens_run"] >= 3 + len(r["screened"])
    assert all(h == pytest.approx(sim_screen.COST_FRACTION * full) for h, full in d.charged)
    assert r["screen_h"] == pytest.approx(sum(h for h, _ in d.charged)) and r["gpu_h"] >= 4.0
    # each decision is engine/screening.decide's on what the product's Screener read, both ways taken
    ruled = [x for x in d.decisions if x["value"] is not None]
    assert {x["decision"] for x in ruled} == {"continue", "screened_out"}
    for x in ruled:
        ev = decide(x["value"], x["peers"], x["base"], d.cfg, "min")
        assert (ev is not None) == (x["decision"] == "screened_out"), x
    cut = [i for i in s.ideas if i.note is not None and i.note.status == Status.SCREENED_OUT]
    assert len(cut) == len(r["screen_outs"]) == sum(x["decision"] == "screened_out" for x in d.decisions)
    # a cut idea never ran full length: no value, no trial, never a parent's score, never the best
    assert all(i.value is None and not i.note.trials and not i.leases for i in cut)
    pick = s.reported()
    assert pick is None or pick not in cut
    assert r["trajectory"][-1][1] == pytest.approx(r["true_best"])
    # the ideas that ran full length are the ones the rule let continue
    went_on = {x["key"] for x in d.decisions if x["decision"] == "continue"}
    assert {i.idea_id for i in s.ideas if i.note is not None and i.note.trials} <= went_on


def test_the_cli_never_tunes_screening_on_the_hold_out_seeds():
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "sim_early.py"), "--screen", "--tune",
                        "--seeds", "1000-1001"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "hold-out" in p.stderr


def test_the_committed_short_run_fit_is_what_the_script_makes_from_the_committed_runs():
    import json

    import calibrate_screens
    from screen_replay import FULL, SHORT
    fit = calibrate_screens.fit([str(p) for p in FULL], [str(p) for p in SHORT],
                                json.loads(calibrate_screens.CURVE_FIT.read_text()))
    assert json.loads(json.dumps(fit)) == sim_screen.FIT
    assert fit["n_ratio"] == len(sim_screen.RATIO) == 18 and fit["n_null"] == len(sim_screen.NULL_SHARES) == 11
