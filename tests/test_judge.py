"""engine/judge.py and goal.py, directly: the promotion statistics on hand-computed cases, and the
symmetry that makes one `better()` enough (a max goal is a min goal on negated values)."""

from __future__ import annotations

import math

import pytest

from autoresearchd.engine.judge import aggregate, decide, pooled_std, t975
from autoresearchd.goal import best, better, gain, goal_word, sign
from autoresearchd.store.notes import Status, Trial

# a baseline of 1.0 with std 0.01 over k = 3 seeds: one run must beat it by
# max(2, t975(2) = 4.303) * 0.01 * sqrt(1 + 1/3) = 0.0497 to count as more than noise
BASE, STD, K, MULT = 1.0, 0.01, 3, 2.0
SINGLE = max(MULT, t975(K - 1)) * STD * math.sqrt(1 + 1 / K)


def d(value, goal="min", best_=None, confirm=True, **kw):
    return decide(value, goal, BASE, STD, best_, MULT, confirm, k=K, **kw)


def test_single_run_margin_is_the_t_quantile_times_the_baseline_spread():
    assert SINGLE == pytest.approx(0.04969, abs=1e-5)
    assert d(BASE - SINGLE * 1.1) == "promoted"            # clearly better, first of its kind
    assert d(BASE - SINGLE * 0.5) == "pending"             # better by less than the margin: confirm it
    assert d(BASE - SINGLE * 0.5, confirm=False) == "promoted"   # no confirmation configured
    assert d(BASE + SINGLE * 0.5) == "within_noise"
    assert d(BASE + SINGLE * 1.1) == "worse"


def test_an_idea_behind_the_best_so_far_is_improved_not_promoted():
    assert d(0.90, best_=0.85) == "improved"
    # a "best" that is no better than the baseline is no reference: the baseline is
    assert d(0.90, best_=1.02) == "promoted"


def test_confirmation_uses_the_pooled_spread_of_fresh_seeds():
    # n = 3 fresh seeds against k = 3: margin = max(2, t975(4)) * 0.01 * sqrt(2/3) = 0.0227
    assert d(0.97, confirmed=True, n=3, std=0.01) == "confirmed"
    assert d(0.99, confirmed=True, n=3, std=0.01) == "demoted"
    assert d(0.97, confirmed=True, n=3, std=0.05) == "demoted"      # the fresh seeds are noisier


def test_unknown_noise_never_promotes():
    assert d(0.5, noise_known=False) == "improved"
    assert d(1.5, noise_known=False) == "worse"
    assert d(1.0, noise_known=False) == "within_noise"
    assert decide(0.5, "min", None, None, None, MULT, True) is None     # no baseline yet: no decision


@pytest.mark.parametrize("value,best_,kw", [(0.9, None, {}), (0.97, None, {}), (1.02, None, {}), (1.1, None, {}),
                                            (0.9, 0.85, {}), (0.97, None, {"confirmed": True, "n": 3, "std": 0.01}),
                                            (0.7, None, {"noise_known": False})])
def test_max_goal_mirrors_min_goal(value, best_, kw):
    mirrored = decide(-value, "max", -BASE, STD, None if best_ is None else -best_, MULT, True, k=K, **kw)
    assert mirrored == d(value, best_=best_, **kw)


def test_goal_helpers_agree_with_each_other():
    assert sign("min") == 1 and sign("max") == -1
    assert better(1.0, 2.0, "min") and better(2.0, 1.0, "max")
    assert not better(1.0, 1.0, "min") and not better(1.0, 1.0, "max")
    assert not better(float("nan"), 1.0, "min") and not better(float("nan"), 1.0, "max")
    assert gain(0.9, 1.0, "min") == pytest.approx(0.1) and gain(1.1, 1.0, "max") == pytest.approx(0.1)
    assert gain(1.1, 1.0, "min") == pytest.approx(-0.1)
    assert best([3.0, 1.0, 2.0], "min") == 1.0 and best([3.0, 1.0, 2.0], "max") == 3.0
    assert best([("a", 1.0), ("b", 1.0)], "min", key=lambda x: x[1])[0] == "a"      # first of equals
    assert goal_word("min") == "lower" and goal_word("max") == "higher"


def test_pooled_std_and_degrees_of_freedom():
    assert pooled_std([1.0, 3.0], [2.0, 4.0]) == pytest.approx(math.sqrt(2))
    assert pooled_std([1.0], [2.0, 4.0]) == pytest.approx(math.sqrt(2))
    assert pooled_std([1.0], [2.0]) is None
    assert t975(1) == 12.706 and t975(1000) == 1.96


def trial(seed, status=Status.SUCCEEDED, value=None, **kw):
    return Trial(trial_id=f"t-s{seed}", seed=seed, status=status, value=value, **kw)


def test_aggregate_means_successes_and_one_suspicious_seed_taints_all():
    a = aggregate([trial(1, value=2.0, wall_s=10, gpus=1), trial(0, value=1.0, wall_s=10, gpus=1)])
    assert a["status"] == Status.SUCCEEDED and a["value"] == 1.5 and a["values"] == [1.0, 2.0]
    assert a["std"] == pytest.approx(math.sqrt(0.5)) and a["gpu_s"] == 20 and a["cpu_s"] is None
    s = aggregate([trial(0, value=1.0), trial(1, Status.SUSPICIOUS, value=0.1, error="tampered")])
    assert s["status"] == Status.SUSPICIOUS and s["error"] == "tampered" and s["values"] == [1.0, 0.1]
    f = aggregate([trial(1, Status.TIMED_OUT, error="late"), trial(0, Status.FAILED, error="boom")])
    assert f["status"] == Status.FAILED and f["value"] is None and f["error"] == "boom"


def test_identical_seeds_are_compared_at_the_notes_precision():
    """Seed 0 read back from its note is rounded to 12 significant digits; seed 1, fresh, is not."""
    from autoresearchd.engine.judge import identical_seeds
    fresh = 1.0 + 0.9664535356213 / 100
    assert identical_seeds([float(f"{fresh:.12g}"), fresh])
    assert not identical_seeds([1.0096645353, 1.0096645354]) and not identical_seeds([fresh])


def test_a_notes_compute_fields_are_totals_over_every_seed_of_one_scope():
    """wall_s, cpu_s and gpu_s of a note are each the sum over its trials (issue 27 item 4: the
    baseline's wall_s was seed 0's while its cpu_s summed every seed's wall time)."""
    a = aggregate([trial(0, value=1.0, wall_s=10.0, cpu_s=15.0, gpu_s=0.0),
                   trial(1, value=1.1, wall_s=12.0, cpu_s=18.0, gpu_s=0.0),
                   trial(2, Status.FAILED, wall_s=1.0, cpu_s=0.5, gpu_s=0.0, limit="memory")])
    assert (a["wall_s"], a["cpu_s"], a["gpu_s"]) == (23.0, 33.5, 0.0)
    assert a["limit"] == "memory"
    # a GPU trial: its measured busy seconds, not wall x GPUs; an older trial without them: wall x GPUs
    g = aggregate([trial(0, value=1.0, wall_s=100.0, cpu_s=90.0, gpu_s=40.0, gpus=2),
                   trial(1, value=1.0, wall_s=100.0, gpus=2)])
    assert g["gpu_s"] == 240.0 and g["cpu_s"] == 90.0 and g["wall_s"] == 200.0
