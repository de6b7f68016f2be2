"""The dashboard's running overview (views/totals.py) against a from-scratch computation on the same
real git repo, after every one of many random note writes: new, amended and removed notes, failures,
leases, new branches with a proposing model, deleted branches and a moved baseline note. The summary's
figures (counts, epoch, best results, spend, compute, running trials, per-model shares) and every
curve must be the same, and so must the leaderboard index (views/board.py): rows, ranks, facets."""

from __future__ import annotations

import random

import pytest

from autoresearchd.config import load_config
from autoresearchd.research import open_research
from autoresearchd.store.ideas import format_message
from autoresearchd.store.notes import Lease, Status, format_leases, format_note
from autoresearchd.store.livepop import LivePopulation
from autoresearchd.store.population import read_population
from autoresearchd.store.refs import IDEA_BRANCHES, IDEAS_PREFIX, NOTES_REF, RUNS_REF, SCREENS_PREFIX
from autoresearchd.views.curves import series
from autoresearchd.views.dashboard import Snapshot
from autoresearchd.views.summary import population_figures
from autoresearchd.views.totals import Totals

from dashserver import ok_note
from popbuilder import BASELINE_VALUES, build_population, write_cfg

BMEAN = sum(BASELINE_VALUES) / 3
MAIN = "refs/heads/main"
DECISIONS = ["improved", "worse", "confirmed", "promoted", "pending", "neutral", "demoted"]


def approx_curve(curve: dict) -> dict:
    return {k: [pytest.approx(v) if isinstance(v, float) else v for v in vals] for k, vals in curve.items()}


def untimed(run: dict) -> dict:
    """A running trial without its ages (they are taken at the call)."""
    return {k: v for k, v in run.items() if k not in ("elapsed_s", "waiting_s")}


def assert_matches(t: Totals, repo, env) -> None:
    full = read_population(repo, MAIN)
    want, got = population_figures(full, env), t.figures()
    for k in ("counts", "total", "epoch"):
        assert got[k] == want[k], k
    assert [untimed(r) for r in got["running"]] == [untimed(r) for r in want["running"]]
    for k in ("usd", "tokens", "gpu_s", "cpu_s"):
        assert got[k] == pytest.approx(want[k]), k
    for k in ("best", "lucky"):
        assert got[k] == want[k], k             # the same idea, in its current version
    assert got["arms"].keys() == want["arms"].keys()
    for m, s in want["arms"].items():
        assert got["arms"][m] == {k: pytest.approx(v) for k, v in s.items()}, m
    s = series(full, env.goal, env.gpus)
    assert t.series()["by_time"] == approx_curve(s["by_time"])
    assert t.series()["by_epoch"] == approx_curve(s["by_epoch"])


def model_branch(repo, rng, k: int) -> str:
    """A daemon-written idea naming its proposing model and its cost, off main."""
    base = repo.rev_parse(MAIN)
    tree = repo.tree_with_files(base, {"train.py": f"# variant {k}\n".encode()})
    idea_id = f"idea-m{k}"
    msg = format_message(f"Model idea {k}", "why", {"Idea-Id": idea_id, "Origin": "explore", "Epoch": 3 + k % 2,
                                                     "Idea-Model": rng.choice(["m-a", "m-b"]),
                                                     "Idea-Cost-USD": round(rng.uniform(0.01, 0.2), 4)})
    c = repo.commit_tree(tree, [base], msg)
    repo.update_ref(f"{IDEA_BRANCHES}explore/{idea_id}", c)
    repo.update_ref(IDEAS_PREFIX + idea_id, c)
    return c


def random_note(rng) -> str:
    d = rng.choice(DECISIONS)
    n = ok_note(BMEAN + rng.uniform(-0.08, 0.05), BMEAN, d,
                values=[BMEAN + rng.uniform(-0.08, 0.05) for _ in range(rng.choice([1, 3]))])
    n.value = sum(n.values) / len(n.values)
    n.finished_at = rng.choice([n.finished_at, 1_700_000_000 + rng.randint(0, 10**6)])   # out of order too
    if rng.random() < 0.2:
        n = n.model_copy(update={"status": Status.FAILED, "value": None, "error": "crashed"})
    return format_note(n)


def test_running_totals_equal_a_from_scratch_overview(tmp_path):
    rng = random.Random(19)
    repo = build_population(tmp_path / "research", 150, seed=5)
    cfg = load_config(write_cfg(tmp_path, repo.path))
    research = open_research(cfg, create=False)
    env = research.manifest
    live = LivePopulation(repo, MAIN)
    t = Totals(live.refresh(), env)
    assert_matches(t, repo, env)
    snap = Snapshot(cfg, research, live.pop, "0", secrets=[])
    snap.overview()
    models = [model_branch(repo, rng, k) for k in range(4)]
    kinds = ["note", "note", "note", "amend", "remove", "lease", "branch", "delete", "screen", "screen"]
    for step in range(40):
        ideas = [i for i in live.pop.ideas if i.branch]
        kind = {10: "unbest", 15: "unlucky", 25: "baseline"}.get(step) or rng.choice(kinds)
        if kind == "note":
            target = rng.choice(models + [i.commit for i in ideas if i.note is None] or [ideas[0].commit])
            repo.note_write(NOTES_REF, target, random_note(rng))
        elif kind == "amend":
            repo.note_write(NOTES_REF, rng.choice([i for i in ideas if i.note]).commit, random_note(rng))
        elif kind == "remove":
            repo.note_remove(NOTES_REF, rng.choice([i for i in ideas if i.note]).commit)
        elif kind == "lease":
            lz = Lease(trial_id=f"t-{step}", seed=0, runner="local", host="gpu-b", slot=str(step % 3),
                       started=1_700_000_000.0, began=1_700_000_010.0)
            repo.note_write(RUNS_REF, rng.choice([i for i in ideas if i.note is None] or ideas).commit,
                            format_leases([lz]))
        elif kind == "unbest":              # the best confirmed result is demoted: the next best takes over
            repo.note_write(NOTES_REF, t.figures()["best"].commit, format_note(ok_note(BMEAN + 0.1, BMEAN, "demoted")))
        elif kind == "unlucky":             # the best unconfirmed run's note is withdrawn
            repo.note_remove(NOTES_REF, t.figures()["lucky"].commit)
        elif kind == "branch":
            models.append(model_branch(repo, rng, 10 + step))
        elif kind == "screen":
            # an idea's screened run, made or made again (its ref moves to a new screen commit with its own
            # compute), on an idea that may already have its full-length note: its point on the compute
            # axis moves though the idea itself did not change
            i = rng.choice([i for i in ideas if i.idea_id] or ideas)
            tree = repo.tree_with_files(i.commit, {"knobs.json": f"{step}".encode()})
            c = repo.commit_tree(tree, [i.commit], f"screen {i.idea_id}\n\nScreen-Of: {i.commit}\n"
                                                   "Screen-Knob: steps\nScreen-Fraction: 0.25\n")
            repo.update_ref(SCREENS_PREFIX + i.idea_id, c)
            note = ok_note(BMEAN, BMEAN, "pending").model_copy(
                update={"value": None, "decision": None, "gpu_s": 1000.0 * (1 + step), "cpu_s": 10.0 * step,
                        "screened": {"value": BMEAN + 0.05, "decision": "continue"}})
            repo.note_write(NOTES_REF, c, format_note(note))
        elif kind == "delete":
            repo.delete_ref(rng.choice([i for i in ideas if i.commit not in models]).branch)
        else:                   # the baseline's note moves: every delta and gain is measured from it
            repo.note_write(NOTES_REF, repo.rev_parse(MAIN), format_note(
                ok_note(BMEAN - 0.01, BMEAN - 0.01, "baseline", values=[v - 0.01 for v in BASELINE_VALUES])))
        pop = live.refresh(scan=True)
        assert pop is not None, kind
        before = t.series()
        t2 = t.advance(pop)
        assert t.series() == before                 # the previous totals (a served snapshot's) are untouched
        t = t2
        assert_matches(t, repo, env)
        snap = Snapshot(cfg, research, pop, str(step + 1), secrets=[], prev=snap)
        fresh = Snapshot(cfg, research, pop, str(step + 1), secrets=[])
        a, b = snap.overview(), fresh.overview()
        for k in ("counts", "total", "epoch", "best", "best_unconfirmed", "failures", "models", "baseline"):
            assert a[k] == b[k], (step, kind, k)
        assert a["curves"]["by_epoch"] == approx_curve(b["curves"]["by_epoch"])
        assert a["curves"]["by_time"] == approx_curve(b["curves"]["by_time"])
        # the leaderboard index moved on too: the same rows, ranks, filter counts and failure groups
        assert snap.ideas(limit=1000) == fresh.ideas(limit=1000)
        assert snap.ideas(status="succeeded", sort="delta", desc=True) == \
            fresh.ideas(status="succeeded", sort="delta", desc=True)
        assert snap.failures() == fresh.failures()
    assert t.figures()["arms"].keys() == {"m-a", "m-b"}
