"""The fair search benchmark (bench/sim_fair.py, issue 29 section 1): its world's knobs, trial costs and
learning curves, its clock of G slots, and short real searches of each arm through the real policy,
openai provider, daemon job list and judge, against the simulated ideator over local HTTP."""

from __future__ import annotations

import random
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import search_world as W  # noqa: E402
import sim_fair  # noqa: E402
from search_ideator import IdeatorServer  # noqa: E402
from sim_arms import Arm, JudgeKind, LoopKind, Search  # noqa: E402
from sim_clock import Clock  # noqa: E402
from sim_world import TRIAL_GPU_H, Knobs, TimedWorld, applied  # noqa: E402

from autoresearchd.engine import judge  # noqa: E402


def test_every_curve_replays_a_measured_profile_and_ends_at_the_fixed_worlds_effect():
    from sim_world import PROFILES
    w = TimedWorld(3)
    used = set()
    for t, (kind, k) in enumerate(w.shape):
        if w.w.effect[t] == 0.0:
            assert k == -1 and w.effect_at([t], 0.1) == 0.0 and w.effect_at([t], 1.0) == 0.0  # a no-op stays one
            continue
        name, grid, g = PROFILES[k]
        assert kind == name
        used.add(k)
        assert w.effect_at([t], 1.0) == pytest.approx(w.w.effect[t], abs=1e-12)
        for tt, gv in zip(grid, g):     # the measured shape, scaled to this technique's final effect
            assert w.effect_at([t], tt) == pytest.approx(w.w.effect[t] * gv / g[-1], abs=1e-12)
    assert used == set(range(len(PROFILES)))     # every measured profile is drawn in a world this size
    # an idea's curve (interactions included) ends where the fixed world's true effect is
    pair = next(iter(w.w.pairs))
    assert w.effect_at(pair, 1.0) == pytest.approx(w.true_effect(pair), abs=1e-12)
    c = w.curve(pair, random.Random(0), points=8)
    assert len(c["t"]) == len(c["value"]) == 8 and c["t"][-1] == 1.0
    assert c["value"][0] > c["value"][-1]          # the loss falls with training


def test_a_curve_ends_with_the_worlds_seed_noise_and_its_points_carry_the_measured_point_noise():
    """The last point is the trial's value (the metric of record): its noise must be the world's, or
    every stop arm would measure its ideas with more noise than the full-length arm."""
    from sim_world import POINT_NOISE
    w, rng = TimedWorld(3), random.Random(11)
    runs = [w.curve([], rng, points=10)["value"] for _ in range(3000)]
    last = [r[-1] for r in runs]
    mid = [r[4] for r in runs]
    assert statistics.stdev(last) == pytest.approx(W.NOISE_SD, rel=0.06)
    assert statistics.stdev(mid) == pytest.approx(W.NOISE_SD * (1 + POINT_NOISE ** 2) ** 0.5, rel=0.06)


def test_knobs_apply_to_one_search_and_are_restored():
    before = (W.NOISE_SD, W.N_PAIRS, W.PRIOR_SIGNAL, W.DUP_START, W.DUP_PER_CALL, W.DUP_MAX)
    with applied(Knobs(noise_sd=0.02, n_pairs=600, prior_signal=1.0, dup_scale=2.0)):
        assert (W.NOISE_SD, W.N_PAIRS, W.PRIOR_SIGNAL) == (0.02, 600, 1.0)
        assert W.DUP_START == pytest.approx(2 * before[3])
        assert len(W.World.make(5).pairs) == 600
        vals = [W.World.make(5).run([], random.Random(j)) for j in range(400)]
    assert (W.NOISE_SD, W.N_PAIRS, W.PRIOR_SIGNAL, W.DUP_START, W.DUP_PER_CALL, W.DUP_MAX) == before
    sd = (sum((v - W.BASELINE) ** 2 for v in vals) / len(vals)) ** 0.5
    assert 0.017 < sd < 0.023
    assert Knobs().label() == "default world" and Knobs(noise_sd=0.02).label() == "noise_sd=0.02"


def test_trial_costs_vary_by_technique_and_jitter_per_run():
    w = TimedWorld(1)
    slow = [t for t, c in enumerate(w.cost) if c > 1]
    assert 0.05 < len(slow) / len(w.cost) < 0.3
    rng = random.Random(0)
    base = [w.gpu_hours([], rng) for _ in range(200)]
    assert all(0.95 * TRIAL_GPU_H <= h <= 1.05 * TRIAL_GPU_H for h in base)
    assert min(w.gpu_hours([slow[0]], rng) for _ in range(50)) > 1.04 * TRIAL_GPU_H


def test_the_clock_runs_g_trials_at_once_and_counts_gpu_hours():
    c = Clock(2)
    c.start(1.0, "a")
    c.start(3.0, "b")
    assert c.free() == 0
    with pytest.raises(AssertionError):
        c.start(1.0, "c")
    c.later(0.5, "proposal")
    assert c.advance() == [("arrival", "proposal")] and c.now == 0.5
    assert c.advance() == [("trial", "a")] and c.now == 1.0 and c.free() == 1
    c.start(2.0, "c")                           # ends with b: both come back, in the order they started
    assert c.advance() == [("trial", "b"), ("trial", "c")] and c.now == 3.0
    assert c.gpu_h == 6.0 and c.utilisation() == pytest.approx(1.0) and not c.pending()


@pytest.fixture(scope="module")
def srv():
    with IdeatorServer() as s:
        yield s


@pytest.mark.parametrize("loop", list(LoopKind))
@pytest.mark.parametrize("kind", list(JudgeKind))
def test_a_short_search_of_every_arm_spends_its_gpu_hours_and_reports_its_regret(srv, loop, kind):
    with applied(Knobs()):
        r = Search(srv, TimedWorld(2), Arm(loop, kind), budget_h=3.0, slots=3, latency_h=5 / 60).go()
        again = Search(srv, TimedWorld(2), Arm(loop, kind), budget_h=3.0, slots=3, latency_h=5 / 60).go()
    assert r == again                                       # deterministic: a world seed is a fixed search
    assert r["gpu_h"] >= 3.0 and r["ideas_run"] >= 10
    assert 0 < r["util"] <= 1 and r["wall_h"] >= r["gpu_h"] / 3
    assert r["regret"] >= 0 and r["best_run"] >= r["true_best"]
    assert not r["no_best"] or r["true_best"] == 0.0
    if kind is JudgeKind.PAPER:
        assert r["confirm_trials"] == 0
        # nothing but new ideas: one trial of one GPU each, so the budget is overshot by at most G trials
        assert r["gpu_h"] < 3.0 + 3 * 2.0 * TRIAL_GPU_H * 1.05


def test_the_barrier_waits_for_its_epoch_and_the_async_loop_keeps_its_slots_busy(srv):
    with applied(Knobs()):
        a = Search(srv, TimedWorld(4), Arm(LoopKind.ASYNC, JudgeKind.PAPER), 6.0, 4, 5 / 60).go()
        b = Search(srv, TimedWorld(4), Arm(LoopKind.BARRIER, JudgeKind.PAPER), 6.0, 4, 5 / 60).go()
    # a proposal round of 5 minutes against 10-minute trials: the barrier idles its slots while the
    # last trials of an epoch finish and while the next epoch is proposed; the asynchronous loop
    # proposes while its trials run (with rounds longer than a trial it is the other way round:
    # docs/policies.md, "The fair search benchmark")
    assert a["util"] > b["util"] > 0.5 and a["wall_h"] < b["wall_h"]


def test_the_before_fix_arm_patches_the_judge_for_its_own_search_only():
    assert judge.noise_estimate is sim_fair._ORIGINAL
    with sim_fair.before_fix(True):
        assert judge.noise_estimate is sim_fair._noise_estimate_before_fix
    assert judge.noise_estimate is sim_fair._ORIGINAL
    r = sim_fair.one(("ours-prefix", 0.7, 2, Knobs(), 3.0, 3, 5 / 60))
    assert r["arm"] == "ours-prefix" and judge.noise_estimate is sim_fair._ORIGINAL


def test_the_cli_never_tunes_on_the_hold_out_seeds():
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "sim_fair.py"), "--tune", "--seeds", "1000-1001"],
                       capture_output=True, text=True, check=False)
    assert p.returncode == 2 and "frozen hold-out" in p.stderr


def test_the_cli_prints_a_sweep_with_paired_differences_against_the_paper(tmp_path):
    tuned = tmp_path / "tuned.json"
    tuned.write_text('{"ours": 0.7, "paper": 0.9}')
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "sim_fair.py"), "--sweep", "noise", "--seeds", "1000",
                        "--arms", "ours,paper", "--budget-h", "2", "--tuned", str(tuned)],
                       capture_output=True, text=True, check=False, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "exploit_start per arm: {'ours': 0.7, 'paper': 0.9}" in p.stdout
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in p.stdout.splitlines()
            if ln.startswith(("| noise_sd=", "| default world"))]
    assert [r[0] for r in rows] == ["noise_sd=0.0039"] * 2 + ["default world"] * 2 + ["noise_sd=0.02"] * 2
    assert [r[1] for r in rows] == ["ours", "paper"] * 3
    assert all(r[5] == "—" for r in rows[1::2]) and all(re.match(r"[-+]\d\.\d{4} \[", r[5]) for r in rows[0::2])


def test_the_earlier_simulator_takes_a_seed_noise_and_counts_searches_with_no_best():
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "search_sim.py"), "--seeds", "1", "--budget", "20",
                        "--jobs", "1", "--noise-sd", "0.02", "--variants", "evolutionary (ours)"],
                       capture_output=True, text=True, check=False, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert re.search(r"^searches that reported no best: evolutionary \(ours\) [01]/1$", p.stdout, re.M)


# -- early stopping (issue 29, section 3), the slow-proposal fix, the knob tuner (issue 30) ------------

import json  # noqa: E402

import sim_early  # noqa: E402
import sim_hybrid  # noqa: E402
from sim_knobs import BASE_KNOBS, KNOBS, Surface, TuneMode  # noqa: E402
from sim_stop import BAND_T_MIN, Rule, Stopper, band_sd  # noqa: E402

from autoresearchd.tune.tuner import rebuild  # noqa: E402


def test_a_stopped_trial_frees_its_slot_at_once_is_refunded_and_never_ends():
    c = Clock(1)
    h = c.start(1.0, "a")
    c.later(0.25, ("a", 1), kind="check")
    assert c.advance() == [("check", ("a", 1))] and c.free() == 0
    c.stop(h, 0.75)
    assert c.free() == 1 and c.gpu_h == pytest.approx(0.25) and c.busy_h == pytest.approx(0.25)
    c.start(0.5, "b")
    assert c.advance() == [("trial", "b")] and c.now == 0.75 and not c.pending()   # "a"'s end never comes


def test_the_band_rule_stops_only_above_the_baselines_band_and_never_before_t_min():
    s = Stopper(Rule.BAND, 2.0, 10)
    base = [[3.0 + d] * 9 for d in (-0.01, 0.0, 0.01)]
    for n, curve in enumerate(base):
        s.begin(f"b{n}", baseline=True)
        for j, v in enumerate(curve, 1):
            assert not s.check(f"b{n}", j, v, stoppable=False)
    sd = band_sd(base)
    assert sd == pytest.approx(0.01)
    margin = 2.0 * sd * (1 + 1 / 3) ** 0.5
    s.begin("i", baseline=False)
    j0 = round(BAND_T_MIN * 10)
    assert not s.check("i", j0 - 1, 3.0 + 10 * margin, stoppable=True)     # too early, however bad
    assert not s.check("i", j0, 3.0 + 0.9 * margin, stoppable=True)        # inside the band
    assert not s.check("i", j0, 3.0 + 10 * margin, stoppable=False)        # a confirmation: never
    assert s.check("i", j0, 3.0 + 1.1 * margin, stoppable=True)


@pytest.mark.parametrize("rule", [Rule.ASHA, Rule.ASHA_LATE, Rule.MEDIAN])
def test_optunas_pruners_stop_the_clearly_worst_trial_and_keep_the_best(rule):
    s = Stopper(rule, None, 10)
    for n in range(8):                       # completed peers, losses 3.0 .. 3.07 at every checkpoint
        s.begin(f"p{n}", baseline=False)
        for j in range(1, 10):
            s.check(f"p{n}", j, 3.0 + 0.01 * n, stoppable=False)
        s.end(f"p{n}", 3.0 + 0.01 * n)
    stopped = {}
    for key, v in (("good", 2.9), ("bad", 3.5)):
        s.begin(key, baseline=False)
        stopped[key] = next((j for j in range(1, 10) if s.check(key, j, v, stoppable=True)), None)
        if stopped[key] is None:
            s.end(key, v)
    assert stopped["good"] is None and stopped["bad"] is not None
    first = {Rule.ASHA: 1, Rule.ASHA_LATE: 3, Rule.MEDIAN: 3}[rule]     # the first rung; the warm-up (3) over
    assert stopped["bad"] == first


@pytest.mark.parametrize("rule", [Rule.NONE, Rule.ASHA])
def test_a_search_with_a_rule_charges_a_stopped_idea_only_up_to_its_stop(srv, rule):
    with applied(Knobs()):
        s = Search(srv, TimedWorld(2), Arm(LoopKind.ASYNC, JudgeKind.OURS, stop=(rule, None)), 3.0, 3, 5 / 60)
        r = s.go()
    assert r["gpu_h"] >= 3.0
    stopped = [i for i in s.ideas if i.note is not None and "stopped early" in (i.note.error or "")]
    assert len(stopped) == len(r["stops"])
    assert all(i.note.status == "failed" and i.value is None for i in stopped)     # never a parent, never a best
    hs = [h for h, _ in r["trajectory"]]
    assert hs == sorted(hs) and all(0 <= h <= r["gpu_h"] + 1e-9 for h in hs)
    assert r["trajectory"][-1][1] == pytest.approx(r["true_best"])
    if rule is Rule.NONE:
        assert r["stops"] == [] and r["saved_h"] == 0
        return
    assert r["stops"] and r["saved_h"] > 0
    assert all(0 < x["t"] < 1 and x["saved_h"] > 0 for x in r["stops"])
    assert len(r["first_runs"]) >= r["ideas_run"] - r["confirm_trials"]


def test_the_refill_sized_to_the_slots_keeps_them_busy_with_slow_proposal_rounds(srv):
    with applied(Knobs()):
        runs = {ahead: Search(srv, TimedWorld(4), Arm(LoopKind.ASYNC, JudgeKind.OURS, ahead=ahead), 4.0, 4, 0.5).go()
                for ahead in (False, True)}
    # 30-minute rounds, 10-minute trials on 4 slots: one round of `free + queue_buffer - ready` ideas
    # leaves the slots idle while the next is written; a round sized to what they use while it is
    # written does not
    assert runs[True]["util"] > runs[False]["util"] and runs[True]["wall_h"] < runs[False]["wall_h"]


def test_the_knob_surface_gains_nothing_at_the_baselines_knobs_and_its_optimum_moves_with_width_and_code():
    s = Surface(3, 300)
    shifted = next(t for t, f in enumerate(s.shift) if f != 1.0)
    for techs in ((), (shifted,), (0, 1, 2)):
        assert s.gain(BASE_KNOBS, techs) == 0.0
    def best_lr(width, techs=()):
        grid = [3e-4 * 1.05 ** n for n in range(100)]
        return max(grid, key=lambda lr: s.gain({**BASE_KNOBS, "lr": lr, "width": width}, techs))
    assert best_lr(512) < best_lr(128)                         # lr interacts with width
    assert best_lr(256, (shifted,)) != pytest.approx(best_lr(256), rel=0.04)   # an idea's code moves it
    assert s.gain({**BASE_KNOBS, "lr": best_lr(256)}, ()) > 0
    assert [k.name for k in KNOBS] == ["lr", "warmup", "weight_decay", "width"]


def test_the_tuned_commits_are_the_products_study_and_tuner_only_spends_the_budget_on_them(srv):
    with applied(Knobs()):
        s = Search(srv, TimedWorld(2), Arm(LoopKind.ASYNC, JudgeKind.OURS, tune=(TuneMode.TUNER, 5)), 3.0, 3, 5 / 60)
        r = s.go()
    assert r["tuned"] == r["ideas_run"] > 0 and r["tune_share"] == 1.0
    assert all(i.origin == "tune" for i in s.ideas)
    st = rebuild(s.pop(), s.tuning.manifest, "baseline", "tpe", 2)           # the product rebuilds the study
    assert len(st.trials) == r["tuned"]
    assert {t.params["width"] for t in st.trials} <= set(range(128, 513, 32))


def _table(out: str, first: str) -> list[list[str]]:
    lines = out.splitlines()
    i = next(n for n, ln in enumerate(lines) if ln.startswith(f"| {first} |"))
    rows = []
    for ln in lines[i + 2:]:
        if not ln.startswith("|"):
            break
        rows.append([c.strip() for c in ln.strip("|").split("|")])
    return rows


def test_sim_early_quick_prints_every_rule_against_full_length():
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "sim_early.py"), "--quick"],
                       capture_output=True, text=True, check=False, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = _table(p.stdout, "rule")
    assert [r[0].split(" ")[0] for r in rows] == ["none", "band", "asha", "median", "product"]
    assert all(len(r) == len(sim_early.HEAD) for r in rows)
    none = rows[0]
    assert none[2] == "—" and none[3] == none[4] == "1.00x" and none[6] == "0.0" and none[8] == "0/0"
    for r in rows[1:]:
        assert re.match(r"[-+]\d\.\d{4} \[", r[2]) and re.match(r"\d+\.\d\dx$", r[3])
        stopped, of = map(int, r[8].split(" ")[0].split("/"))
        assert 0 <= stopped <= of and float(r[6]) == of        # one search: stops per search = all stops


def test_sim_hybrid_quick_prints_the_three_arms_and_their_paired_differences(tmp_path):
    log = tmp_path / "h.jsonl"
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "sim_hybrid.py"), "--quick", "--log", str(log)],
                       capture_output=True, text=True, check=False, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = _table(p.stdout, "arm")
    assert [r[0].split(" ")[0] for r in rows] == ["llm", "tuner", "hybrid"]
    llm, tuner, hybrid = rows
    assert llm[5] == "0.0" and llm[7] == "0%" and tuner[7] == "100%" and float(hybrid[5]) > 0
    diffs = _table(p.stdout, "paired difference")
    assert [d[0] for d in diffs] == ["hybrid − llm", "hybrid − tuner", "tuner − llm"]
    res = [json.loads(line) for line in log.read_text().splitlines()]
    assert {r["mode"] for r in res} == {"llm", "tuner", "hybrid"} and all(r["gpu_h"] >= 3.0 for r in res)
    assert sim_hybrid.tables(res) in p.stdout


def test_sim_fair_quick_prints_its_arms_and_contrast():
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "sim_fair.py"), "--quick"],
                       capture_output=True, text=True, check=False, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = _table(p.stdout, "arm")
    assert [r[0] for r in rows] == ["ours", "paper"] and rows[1][-1] == "—"
    assert all(float(r[4]) >= 3.0 for r in rows)                  # each spent its GPU-hours
    assert [r[0] for r in _table(p.stdout, "paired difference")] == ["ours − paper"]


def test_the_knob_calibration_fit_recovers_a_known_bowl_and_lr_against_width():
    import math

    import calibrate_knobs as C
    rows = []
    for k in C.points():
        lr_opt = 2e-3 * (k["n_embd"] / 128) ** -0.5
        y = (3.0 + 0.03 * (math.log(k["lr"] / lr_opt) / math.log(3)) ** 2
             + 0.01 * math.log10(k["weight_decay"] / 0.05) ** 2)
        rows += [{"knobs": k, "seed": s, "val_loss": y + 1e-4 * s} for s in range(3)]
    f = C.fit(rows)
    assert f["knobs"]["lr"]["A"] == pytest.approx(0.03, rel=1e-6)
    assert math.exp(f["knobs"]["lr"]["x_opt"]) == pytest.approx(2e-3, rel=1e-6)
    assert f["knobs"]["weight_decay"]["A"] == pytest.approx(0.01, rel=1e-6)
    assert f["knobs"]["warmup_steps"]["A"] == 0.0                 # flat: no bowl
    assert f["seed_sd"] == pytest.approx(1e-4, rel=1e-6)
    assert f["lr_width_power"] == pytest.approx(-0.5, abs=1e-6)     # lr* ~ width^-0.5, as made
    assert len(C.points(quick=True)) == 3
