"""The fair simulator's `product` stopping rules (bench/sim_stop.py, issue 29 section 1: drive the
daemon's own code) make the product's decision: on constructed curves, fed through the sim's Stopper
as bench/sim_arms.py feeds it (begin, check at each checkpoint, end; finished trials' curves read back
through their notes in a real Population), the first checkpoint each rule stops at is the first where
daemon/engine/stopping.py's `Stopper.judge` says stop, given by hand the baseline seeds' curves as
references and the finished curves as peers, from `min_t` on."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from sim_stop import GRID, PRODUCT_RULES, Rule, Stopper, product_stopper  # noqa: E402

from autoresearchd.store.ideas import Idea  # noqa: E402
from autoresearchd.store.notes import Note, Status, Trial  # noqa: E402
from autoresearchd.store.population import Population  # noqa: E402

POINTS = 10
K = 1.0
TS = [j / POINTS for j in range(1, POINTS + 1)]


def base(t: float) -> float:
    """The baseline's loss curve (falls with training, as sim_world's)."""
    return 3.0 + 0.5 * (t ** -0.5 - 1)


SEEDS = [[base(t) + d for t in TS] for d in (-0.01, 0.0, 0.01)]      # the baseline's 3 seeds
PEERS = [[base(t) + 0.4 for t in TS] for _ in range(3)]              # 3 finished ideas, all far worse
CASES = {            # name: (the running idea's curve, checkpoints 1..9)
    "far above the band": [base(t) + 0.5 for t in TS[:-1]],
    "below the band": [base(t) - 0.05 for t in TS[:-1]],
    "inside the margin": [base(t) + 0.02 for t in TS[:-1]],
    "losing before min_t only": [base(t) + (0.5 if t < 0.25 else -0.05) for t in TS[:-1]],
    "losing from t = 0.6": [base(t) + (0.5 if t >= 0.6 - 1e-9 else 0.0) for t in TS[:-1]],
    "above the band, better than the peers": [base(t) + 0.1 for t in TS[:-1]],
}
# the first checkpoint each rule stops at (None: never): what the product's judge says, checked below
EXPECTED = {
    "far above the band": {"band": 3, "median": 3},
    "below the band": {"band": None, "median": None},
    "inside the margin": {"band": None, "median": None},
    "losing before min_t only": {"band": None, "median": None},
    # MedianPruner compares the best value a trial reported so far (Optuna's), and this curve's t = 0.5
    # value is below the peers' median at t = 0.6: the band alone stops it
    "losing from t = 0.6": {"band": 6, "median": None},
    # the band alone stops it; MedianPruner over the peers (worse than it) does not agree
    "above the band, better than the peers": {"band": 3, "median": None},
}


def sim_search(rule: Rule, seeds: list[list[float]], planned: int):
    """A sim Stopper and the Population it reads, the baseline's seeds and the peers run through it
    as sim_arms runs trials: their curves reported point by point, their notes holding `blob(key)`."""
    holder: dict = {}
    s = Stopper(rule, K, POINTS, pop=lambda: holder["pop"])

    def run(key: str, curve: list[float], baseline: bool) -> Trial:
        s.begin(key, baseline=baseline)
        for j, v in enumerate(curve[:-1], 1):
            assert not s.check(key, j, v, stoppable=False)        # a baseline seed, a finished peer: never
        s.end(key, curve[-1])
        return Trial(trial_id=key, seed=0, value=curve[-1], status=Status.SUCCEEDED, curve=s.blob(key))

    bnote = Note(status=Status.SUCCEEDED, trials=[run(f"b{n}", c, True) for n, c in enumerate(seeds)],
                 seeds_planned=planned, finished_at=1.0)
    ideas = [Idea(idea_id=f"p{n}", commit=f"{n:040x}", title="peer", text="peer", committed_at=n,
                  note=Note(status=Status.SUCCEEDED, trials=[run(f"p{n}", c, False)], finished_at=2.0 + n))
             for n, c in enumerate(PEERS)]
    holder["pop"] = Population(ideas, "b" * 40, bnote)
    return s


def sim_first_stop(s: Stopper, key: str, curve: list[float]) -> int | None:
    s.begin(key, baseline=False)
    return next((j for j, v in enumerate(curve, 1) if s.check(key, j, v, stoppable=True)), None)


def product_first_stop(rule: Rule, curve: list[float], refs, peers, planned: int) -> int | None:
    """The product's decision, fed by hand: Stopper.judge at each checkpoint its gate (due) lets through."""
    p = product_stopper(PRODUCT_RULES[rule], K, None)
    pts = list(zip(TS, curve))
    return next((j for j in range(1, len(curve) + 1)
                 if p.due(j / POINTS) and p.judge(pts[:j], refs, peers, planned) is not None), None)


def as_pts(c: list[float]) -> list[tuple[float, float]]:
    return list(zip(TS, c))


@pytest.mark.parametrize("rule", [Rule.PRODUCT, Rule.PRODUCT_MEDIAN])
@pytest.mark.parametrize("case", list(CASES))
def test_the_sims_product_rule_stops_where_the_products_judge_does(rule, case):
    s = sim_search(rule, SEEDS, planned=3)
    refs = [as_pts(c) for c in SEEDS]
    peers = refs + [as_pts(c) for c in PEERS]        # Stopper._peers: the baseline's note first, then ideas'
    got = sim_first_stop(s, "idea", CASES[case])
    assert got == product_first_stop(rule, CASES[case], refs, peers, planned=3)
    assert got == EXPECTED[case][PRODUCT_RULES[rule]]


def test_the_product_judge_would_stop_before_min_t_but_the_sim_feeds_it_only_from_min_t():
    curve = CASES["losing before min_t only"]
    p = product_stopper("band", K, None)
    assert p.judge(as_pts(curve)[:2], [as_pts(c) for c in SEEDS], [], 3) is not None     # t = 0.2 < min_t
    assert not p.due(0.2)                       # ... which the product's gate never lets it judge
    assert sim_first_stop(sim_search(Rule.PRODUCT, SEEDS, 3), "idea", curve) is None


@pytest.mark.parametrize("planned, stops", [(3, None), (1, 3)])
def test_one_finished_baseline_seed_stops_nothing_unless_the_baseline_plans_one(planned, stops):
    # the product's judge needs min(STOPPING_MIN_REF_SEEDS, the seeds the baseline's note plans) seeds
    s = sim_search(Rule.PRODUCT, SEEDS[:1], planned)
    curve = CASES["far above the band"]
    got = sim_first_stop(s, "idea", curve)
    assert got == product_first_stop(Rule.PRODUCT, curve, [as_pts(SEEDS[0])], [], planned) == stops


def test_every_product_rule_is_tuned_on_the_margin_like_the_others():
    for r in PRODUCT_RULES:
        name, grid = GRID[r]
        assert name == "k" and len(grid) == 3 and 3.0 in grid       # the product's default among them
    assert {r.value for r in PRODUCT_RULES} == {"product", "product-median", "product-asha"}


@pytest.fixture(scope="module")
def srv():
    from search_ideator import IdeatorServer
    with IdeatorServer() as s:
        yield s


def test_a_search_with_the_product_rule_reads_its_trials_curves_through_their_notes(srv):
    from sim_arms import Arm, JudgeKind, LoopKind, Search
    from sim_world import Knobs, TimedWorld, applied

    with applied(Knobs()):      # a small margin, so that a short search stops something
        s = Search(srv, TimedWorld(2), Arm(LoopKind.ASYNC, JudgeKind.OURS, stop=(Rule.PRODUCT, 0.25)), 3.0, 3, 5 / 60)
        r = s.go()
    assert r["stops"] and all(0.25 <= x["t"] < 1 for x in r["stops"])      # never before the product's min_t
    pop = s.pop()
    assert pop.baseline_note.finished_at is not None
    for tr in pop.baseline_note.trials:         # the references: every baseline seed's whole curve
        pts = s.stopper.curves[tr.curve]
        assert [t for t, _ in pts] == TS and pts[-1][1] == tr.value
    stopped = [i for i in s.ideas if i.note is not None and "stopped early" in (i.note.error or "")]
    assert len(stopped) == len(r["stops"])
    for i in stopped:                            # a stopped trial's curve ends where it was stopped
        (tr,) = i.note.trials
        assert tr.curve and s.stopper.curves[tr.curve][-1][0] in {x["t"] for x in r["stops"]}
    # the peers the product reads: every finished note's trials, the stopped ones' included
    peers = s.stopper.product._peers(pop)
    assert len(peers) == sum(len(n.trials) for n in [pop.baseline_note] + [i.note for i in s.ideas if i.note]
                             if n.status in ("succeeded", "failed", "timed_out"))


def test_tuning_a_product_rule_merges_its_margin_into_the_tuned_file(tmp_path):
    import json
    import subprocess

    tuned = tmp_path / "tuned.json"
    tuned.write_text(json.dumps({"band": 3.0, "asha": 4}))
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "sim_early.py"), "--tune", "--rules", "product",
                        "--seeds", "1", "--budget-h", "2", "--slots", "2", "--tuned", str(tuned)],
                       capture_output=True, text=True, check=False, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "| product |" in p.stdout
    got = json.loads(tuned.read_text())
    assert got["band"] == 3.0 and got["asha"] == 4 and got["product"] in GRID[Rule.PRODUCT][1]   # the others kept
