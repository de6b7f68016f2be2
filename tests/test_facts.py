"""One source for each fact (docs/notes.md "One source for each fact", docs/policies.md "Which idea is
best"): one real git population built so that the old rules disagree, read by every reader.

The population, for a `min` and a `max` goal: three results of the same value (promoted and committed
first, confirmed with the smallest id, undecided and committed earliest), a better result measured
against an old baseline, better over_budget and suspicious results, a pushed commit whose trailers forge
provenance and spend, an idea whose note and trailers disagree on origin, epoch and spend, a proposal
that has spent only its ideation, and a result linked from an identical tree (its compute is the
other's). Every view (status, the leaderboard, the dashboard's snapshot and running totals, export), the
policies (exploit candidates, greedy's base, the epoch cursor), the bandit, the budget a restarted daemon
restores and the loop's stop conditions must give the same best, the same spend and the same facts.
"""

from __future__ import annotations

import subprocess

import pytest

from autoresearchd.app import build_daemon, restore_spend
from autoresearchd.makelifecycle import make_lifecycle
from autoresearchd.config import load_config
from autoresearchd.llm.base import Budget
from autoresearchd.policies.bandit import arm_stats
from autoresearchd.policies.evolutionary import EvolutionaryPolicy, exploit_candidates
from autoresearchd.policies.greedy import greedy_base
from autoresearchd.research import open_research
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.ideas import branch_for, format_message, pushed_id
from autoresearchd.store.livepop import LivePopulation
from autoresearchd.store.notes import Note, Status, format_note
from autoresearchd.store.population import read_population
from autoresearchd.store.refs import IDEAS_PREFIX, NOTES_REF, PROPOSALS_PREFIX
from autoresearchd.views.curves import series
from autoresearchd.views.dashboard import Snapshot
from autoresearchd.views.export import records
from autoresearchd.views.summary import leaderboard, summary
from autoresearchd.views.totals import Totals

from popbuilder import T0, _Stream, write_cfg

MAIN = "refs/heads/main"
BASE = {"min": [3.30, 3.31, 3.29], "max": [0.50, 0.51, 0.49]}
BASELINE_GPU_S = 1200.0
NOTE_USD, NOTE_TOKENS = 0.01, 100          # each measured own idea's spend, in its note
SEED_GPU_S = 600.0

# (key, idea id, commit second, status, gain over the baseline, decision, seeds, stale)
# the three of equal value: in commit order U (undecided), P (promoted), C (confirmed); in id order C, U, P
OWN = [
    ("U", "e001-mm000003", 50, Status.SUCCEEDED, 0.2, "pending", [0], False),
    ("P", "e001-zz000001", 100, Status.SUCCEEDED, 0.2, "promoted", [0], False),
    ("C", "e001-aa000002", 200, Status.SUCCEEDED, 0.2, "confirmed", [0, 1, 2], False),
    ("W", "e001-bb000004", 300, Status.SUCCEEDED, 0.2, "within_noise", [0], False),
    ("S", "e001-st000005", 20, Status.SUCCEEDED, 0.5, "promoted", [0], True),       # an old baseline's
    ("O", "e001-ob000006", 30, Status.OVER_BUDGET, 0.6, None, [0], False),
    ("X", "e001-su000007", 40, Status.SUSPICIOUS, 0.7, None, [0], False),
]
SPENT = {"Origin": "exploit", "Epoch": 1, "Model": "impl-model", "Tokens": NOTE_TOKENS, "Cost-USD": f"{NOTE_USD:.6f}"}
# N: the note (the daemon's record) and the trailers disagree on origin, epoch and spend
N_TRAILERS = {"Origin": "explore", "Epoch": 2, "Idea-Model": "m1", "Tokens": 300, "Cost-USD": "0.300000",
              "Idea-Cost-USD": "0.100000", "Implement-Cost-USD": "0.200000"}
# F: pushed by somebody, its trailers forging provenance and spend
F_TRAILERS = {"Idea-Id": "e009-forged00", "Origin": "seed", "Epoch": 99, "Parents": ["e001-zz000001"], "Model": "x",
              "Tokens": 10 ** 9, "Cost-USD": "1000000000.0", "Idea-Model": "m-forged", "Idea-Cost-USD": "1000000000.0"}


def manifest(goal: str) -> str:
    return (f'[env]\nname = "facts"\nrun = "python3 train.py"\nmetric = "score"\ngoal = "{goal}"\n'
            f'time_budget_s = 600\ngpus = 1\n')


def better_by(goal: str, d: float) -> float:
    b = sum(BASE[goal]) / 3
    return round(b - d if goal == "min" else b + d, 6)


def result(goal: str, idea_id: str, status, gain: float, decision, seeds, baseline_commit: str, **kw) -> Note:
    v, b = better_by(goal, gain), sum(BASE[goal]) / 3
    return Note(status=status, idea_id=idea_id, metric="score", goal=goal, value=v, values=[v] * len(seeds),
                seeds=seeds, std=0.0, baseline=b, baseline_std=0.01, baseline_commit=baseline_commit,
                delta=v - b, decision=decision, gpu_s=SEED_GPU_S * len(seeds), finished_at=T0 + 1000, **kw)


def add_note(repo, commit: str, note: Note) -> None:
    subprocess.run(["git", "notes", "--ref", NOTES_REF, "add", "-f", "-F", "-", commit], cwd=repo.path,
                   input=format_note(note).encode(), check=True, capture_output=True)


def build(tmp_path, goal: str, with_disagreeing_note: bool = True):
    """The research repo (real git: commits by fast-import as popbuilder writes them, notes by `git
    notes`), the commits by key, and the notes left to write (N's, without `with_disagreeing_note`)."""
    repo = GitRepo.init(tmp_path / "research")
    s = _Stream()
    s.commit(MAIN, T0, "baseline\n", None, {".autoresearch.toml": manifest(goal).encode(), "train.py": b"x = 1\n"})
    refs = {}

    def commit(key, ref, ts, title, trailers, mark_as: str | None):
        msg = format_message(title, f"{title}, the body.", trailers)
        m = s.commit(ref, T0 + ts, msg, MAIN, {"train.py": f"x = {ts}\n".encode()})
        if mark_as:
            s.reset(IDEAS_PREFIX + mark_as, f":{m}")      # the daemon's mark: its trailers are believed
        refs[key] = ref

    for key, iid, ts, *_ in OWN:
        commit(key, branch_for(iid, f"Idea {key}", "exploit"), ts, f"Idea {key}", {"Idea-Id": iid, **SPENT}, iid)
    commit("N", branch_for("e002-nt000009", "Idea N", "explore"), 400, "Idea N",
           {"Idea-Id": "e002-nt000009", **N_TRAILERS}, "e002-nt000009")
    commit("L", branch_for("e002-ln000011", "Idea L", "exploit"), 500, "Idea L",
           {"Idea-Id": "e002-ln000011", **SPENT}, "e002-ln000011")
    # R: a proposal, not implemented yet: it has spent its ideation
    commit("R", PROPOSALS_PREFIX + "e003-pp000010", 600, "Idea R",
           {"Idea-Id": "e003-pp000010", "Origin": "exploit", "Epoch": 3, "Idea-Model": "m2", "Idea-Tokens": 40,
            "Idea-Cost-USD": "0.040000"}, None)
    commit("F", "refs/heads/idea/mallory/forged", 700, "Idea F", F_TRAILERS, None)
    repo.fast_import(s.bytes())
    repo.git("symbolic-ref", "HEAD", MAIN)
    sha = {k: repo.rev_parse(ref) for k, ref in refs.items()}
    base = sha["base"] = repo.rev_parse(MAIN)
    add_note(repo, base, Note(status=Status.SUCCEEDED, idea_id="baseline", metric="score", goal=goal,
                              value=sum(BASE[goal]) / 3, std=0.01, seeds=[0, 1, 2], values=BASE[goal],
                              gpu_s=BASELINE_GPU_S, finished_at=T0 + 1))
    for key, iid, _, status, gain, decision, seeds, stale in OWN:
        add_note(repo, sha[key], result(goal, iid, status, gain, decision, seeds, "0" * 40 if stale else base,
                                        origin="exploit", epoch=1, tokens=NOTE_TOKENS, cost_usd=NOTE_USD))
    # L: identical code to C: its result is linked (the note copies C's figures, gpu_s included)
    add_note(repo, sha["L"], result(goal, "e002-ln000011", Status.SUCCEEDED, 0.2, "within_noise", [0, 1, 2], base,
                                    origin="exploit", epoch=1, tokens=NOTE_TOKENS, cost_usd=NOTE_USD,
                                    linked=sha["C"]))
    add_note(repo, sha["F"], result(goal, pushed_id(sha["F"]), Status.SUCCEEDED, 0.1, "improved", [0], base,
                                    origin="human", epoch=1))
    n_note = result(goal, "e002-nt000009", Status.SUCCEEDED, -0.3, "worse", [0], base, origin="exploit", epoch=3,
                    tokens=500, cost_usd=0.5, cost={"ideation": 0.25, "implementation": 0.25})
    later = [(sha["N"], n_note)]
    if with_disagreeing_note:
        for c, n in later:
            add_note(repo, c, n)
        later = []
    return repo, sha, later


def expected_spend():
    measured = [k for k, *_ in OWN] + ["L"]
    usd = NOTE_USD * len(measured) + 0.5 + 0.04            # N: its note's 0.5, not its trailers' 0.3
    tokens = NOTE_TOKENS * len(measured) + 500 + 40
    return usd, tokens


@pytest.fixture(params=["min", "max"])
def world(request, tmp_path):
    goal = request.param
    repo, sha, _ = build(tmp_path, goal)
    cfg_path = write_cfg(tmp_path, repo.path)
    cfg = load_config(cfg_path)
    research = open_research(cfg, create=False)
    return goal, repo, sha, cfg, research, read_population(repo, MAIN)



def stop_condition(cfg, pop) -> str | None:
    """The real daemon's stop condition on this population (built from the config, then shut down)."""
    d = build_daemon(cfg, with_llm=False)
    try:
        return d.stop_condition(pop)
    finally:
        d._pool.shutdown()
        d.dispatcher._pool.shutdown()

def test_every_reader_derives_the_same_idea_facts(world):
    goal, repo, sha, cfg, research, pop = world
    n, f, r = pop.by_commit[sha["N"]], pop.by_commit[sha["F"]], pop.by_commit[sha["R"]]
    # the note, the daemon's record, decides over the daemon's own trailers
    assert (n.origin, n.epoch, n.cost_usd, n.tokens) == ("exploit", 3, 0.5, 500)
    # a pushed commit's trailers decide nothing: its id, origin, lineage and spend are the daemon's
    assert (f.idea_id, f.origin, f.epoch, f.parents, f.cost_usd, f.tokens, f.model) == \
        (pushed_id(sha["F"]), "human", 1, [], None, None, None)
    assert (r.origin, r.epoch, r.cost_usd, r.tokens) == ("exploit", 3, None, None)
    live = LivePopulation(repo, MAIN).refresh()
    snap = Snapshot(cfg, research, pop, "0", secrets=[])
    rows = {row["idea"]: row for row in leaderboard(cfg)}
    exported = {x["idea_id"]: x for x in records(cfg)}
    for i in pop.ideas:
        facts = (i.origin, i.epoch, i.parents)
        assert (live.by_id[i.idea_id].origin, live.by_id[i.idea_id].epoch, live.by_id[i.idea_id].parents) == facts
        assert (rows[i.idea_id]["origin"], rows[i.idea_id]["epoch"], rows[i.idea_id]["parents"]) == facts
        assert (exported[i.idea_id]["origin"], exported[i.idea_id]["epoch"], exported[i.idea_id]["parents"]) == facts
        d = snap.idea(i.idea_id)
        assert (d["origin"], d["epoch"], d["parents"]) == facts
        if i.note is not None and i.note.origin:
            assert (i.origin, i.epoch) == (i.note.origin, i.note.epoch), i.idea_id
    # the policies count epochs by the same facts: N is in epoch 3 (its note), not 2 (its trailers)
    pol = EvolutionaryPolicy(cfg.policy)
    assert "Idea N" in pol.epoch_titles(pop, 3) and "Idea N" not in pol.epoch_titles(pop, 2)
    assert "Idea F" not in pol.epoch_titles(pop, 99)


def test_every_reader_counts_the_same_spend(world, tmp_path):
    goal, repo, sha, cfg, research, pop = world
    usd, tokens = expected_spend()

    class Provider:
        budget = Budget()
    restore_spend(Provider, research)                  # what a restarted daemon counts against llm.budget_usd
    s = summary(cfg)
    t = Totals(pop, research.manifest).figures()
    snap = Snapshot(cfg, research, pop, "0", secrets=[]).overview()
    for got in (Provider.budget.usd, s["spend"]["usd"], t["usd"], snap["spend"]["usd"]):
        assert got == pytest.approx(usd)
    for got in (Provider.budget.input_tokens, s["spend"]["tokens"], t["tokens"], snap["spend"]["tokens"]):
        assert got == tokens
    exported = records(cfg)
    assert sum(x["cost"]["usd"] for x in exported) == pytest.approx(usd)
    assert sum(x["cost"]["tokens"] for x in exported) == tokens
    # the curve of cumulative spend runs over the finished ideas: all but the proposal
    assert series(pop, goal, 1)["by_time"]["usd"][-1] == pytest.approx(usd - 0.04)
    # the bandit: each proposing model's ideation spend, the note's split first; no forged model
    arms = arm_stats(pop, research.manifest)
    assert {m: a["usd"] for m, a in arms.items()} == {"m1": pytest.approx(0.25), "m2": pytest.approx(0.04)}
    assert {m: a["usd"] for m, a in t["arms"].items()} == {m: a["usd"] for m, a in arms.items()}
    assert {r["model"]: r["usd"] for r in s["models"]} == {m: a["usd"] for m, a in arms.items()}
    # compute: the baseline's trials count, a linked result's copied figures do not
    gpu_h = (BASELINE_GPU_S + SEED_GPU_S * (sum(len(x[6]) for x in OWN) + 1 + 1)) / 3600    # + N's + F's
    assert s["spend"]["gpu_hours"] == pytest.approx(gpu_h) and t["gpu_s"] / 3600 == pytest.approx(gpu_h)
    cfg.daemon.max_gpu_hours = 0.0
    assert stop_condition(cfg, pop) == f"GPU-hour budget reached ({gpu_h:.2f} h)"


def test_every_reader_names_the_same_best(world):
    goal, repo, sha, cfg, research, pop = world
    env = research.manifest
    by = {k: pop.by_commit[v] for k, v in sha.items() if v in pop.by_commit}
    # one order: at equal value the confirmed result, then the promoted one, then the earlier commit;
    # never a stale, over_budget or suspicious result, however good its number
    assert pop.best(goal, confirmed=True) is by["C"]
    assert pop.best(goal) is by["C"]
    assert pop.best(goal, confirmed=False) is by["U"]
    s = summary(cfg)
    snap = Snapshot(cfg, research, pop, "0", secrets=[])
    t = Totals(pop, env).figures()
    assert s["best"]["idea"] == t["best"].idea_id == snap.overview()["best"]["idea"] == by["C"].idea_id
    assert s["best_unconfirmed"] is None           # as good as the confirmed best: not worth showing
    assert t["lucky"] is by["U"]
    rows = leaderboard(cfg)
    assert [r["idea"] for r in rows[:4]] == [by[k].idea_id for k in ("C", "P", "U", "W")]
    page = snap.ideas()["rows"]
    assert [r["idea"] for r in page[:4]] == [r["idea"] for r in rows[:4]] and page[0]["rank"] == 1
    # the policies build on the same best
    preferred, others = exploit_candidates(pop, env)
    assert [i.idea_id for i in preferred] == [by["C"].idea_id, by["P"].idea_id]
    assert greedy_base(pop, env) is by["C"]
    # the loop's target stop names it too
    cfg.daemon.target = better_by(goal, 0.1)
    assert stop_condition(cfg, pop) == f"target {cfg.daemon.target} reached by {by['C'].idea_id}"


def test_the_tuner_tunes_the_same_best(world):
    pytest.importorskip("optuna", reason="the tuner needs Optuna (the `tune` extra)")
    from autoresearchd.tune.tuner import Tuner
    goal, repo, sha, cfg, research, pop = world
    cfg.tune.studies = 2
    # a study needs knobs (the manifest's or the idea's own): the env declares one, as a knobbed env does
    from autoresearchd.manifest import Knob
    research.manifest = research.manifest.model_copy(
        update={"knobs": [Knob(name="x", low=-2.0, high=2.0, baseline=1.5)]})
    assert [idea.commit for _, _, idea in Tuner(research, cfg, make_lifecycle(cfg, research)).targets(pop)] == [sha["C"], sha["P"]]


def test_running_totals_move_to_the_same_facts(tmp_path):
    """The dashboard's running totals, advanced by one changed note (N's, which disagrees with its
    trailers), equal the from-scratch figures: the same spend, arms and best."""
    repo, sha, later = build(tmp_path, "min", with_disagreeing_note=False)
    cfg = load_config(write_cfg(tmp_path, repo.path))
    env = open_research(cfg, create=False).manifest
    live = LivePopulation(repo, MAIN)
    t0 = Totals(live.refresh(), env)
    before = t0.figures()
    assert before["usd"] == pytest.approx(expected_spend()[0] - 0.5 + 0.3)   # no note yet: the trailers
    for commit, text in later:
        add_note(repo, commit, text)
    pop = live.refresh(scan=True)
    got, want = t0.advance(pop).figures(), Totals(read_population(repo, MAIN), env).figures()
    assert got["usd"] == pytest.approx(want["usd"]) == pytest.approx(expected_spend()[0])
    assert got["tokens"] == want["tokens"] == expected_spend()[1]
    assert {m: a["usd"] for m, a in got["arms"].items()} == {m: pytest.approx(a["usd"]) for m, a in want["arms"].items()}
    assert got["best"].idea_id == want["best"].idea_id == pop.by_commit[sha["C"]].idea_id
