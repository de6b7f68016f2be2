"""The one spend rule (store/spend.compute_total: `max_gpu_hours`, `status`, the dashboard) counts every
kind of run the daemon makes exactly once (docs/notes.md "Compute fields"), on a real git repo whose
notes are written as the daemon writes them: each kind gets its own power of two of CPU seconds (and
twice that of GPU seconds), so a total that counts one kind twice, or misses one, shows which.

The kinds: the baseline's seeds; an idea's seeds and confirmation; a tuned commit's trial; a stopped
run; a continued idea's screened run and its full-length seed; a screened-out idea's screened run (its
note's copy of the figures counts 0); the baseline's screened seeds; an old baseline's seeds after the
baseline moved; a measured idea whose refs were deleted. A linked result (an identical tree) cost
nothing. The total equals the sum over every result note git holds, walked with git itself.
"""

from __future__ import annotations

from conftest import branch_idea, git

from autoresearchd.engine.screening import screen_message
from autoresearchd.manifest import parse_manifest
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.ideas import format_message
from autoresearchd.store.lifecycle import Lifecycle, Made
from autoresearchd.store.livepop import LivePopulation
from autoresearchd.store.notes import Note, Status, Trial
from autoresearchd.store.population import read_population
from autoresearchd.store.spend import budget_hours, compute_total
from autoresearchd.views.curves import series
from autoresearchd.views.summary import population_figures
from autoresearchd.views.totals import Totals

MANIFEST = '[env]\nrun = "python3 run.py"\nmetric = "score"\ngoal = "min"\n'


def note(cpu: float, status=Status.SUCCEEDED, seeds: int = 1, **kw) -> Note:
    trials = [Trial(trial_id=f"t{seed}", seed=seed, status=status, value=1.0, cpu_s=cpu / seeds, gpu_s=2 * cpu / seeds)
              for seed in range(seeds)]
    return Note(status=status, metric="score", goal="min", value=1.0 if status == Status.SUCCEEDED else None,
                trials=trials, seeds=list(range(seeds)), cpu_s=cpu, gpu_s=2 * cpu, wall_s=cpu, **kw)


def every_note_cpu(path) -> float:
    """CPU seconds of every result note in git, read with git, leaving out the two kinds that copy
    another run's figures: a linked result and a screened-out idea's note."""
    total = 0.0
    for line in git(path, "notes", "--ref", "autoresearch", "list").splitlines():
        text = git(path, "cat-file", "blob", line.split()[0])
        fields = dict(ln.split(": ", 1) for ln in text.splitlines() if ": " in ln)
        if fields.get("status") == "screened_out" or "linked" in fields:
            continue
        total += float(fields["cpu_s"])
    return total


def screen(repo, lc, of: str, key: str) -> str:
    return lc.screen(key, Made((of,), screen_message(key, of, "steps", 25, 0.25)))


def test_every_kind_of_run_counts_once(make_repo):
    path = make_repo({".autoresearch.toml": MANIFEST, "run.py": "print(1)\n"})
    repo = GitRepo(path)
    lc = Lifecycle(repo)
    live = LivePopulation(repo, "main")
    old_base = git(path, "rev-parse", "main").strip()
    lc.result(old_base, None, note(256, seeds=2))                   # an old baseline's seeds: 256
    ideas = {k: branch_idea(path, f"human/{k}", k, {"run.py": f"print('{k}')\n"}, base=old_base)
             for k in ("confirmed", "stopped", "continued", "out", "linked", "deleted")}
    # a tuned commit, as the tuner writes it (its knobs, its study's trailers, the daemon's mark)
    tree = repo.tree_with_files(old_base, {".autoresearch-knobs.json": b'{"steps": 50}'})
    ideas["tuned"] = lc.tuned("baseline-t0", Made((old_base,), format_message("tune baseline t0", "steps=50", {
        "Idea-Id": "baseline-t0", "Origin": "tune", "Tune-Study": "baseline", "Tune-Trial": 0}), tree),
        "refs/heads/idea/tune/baseline-t0")
    # the baseline moves on (a new commit on main): the old one's note is on a commit no ref shows
    git(path, "commit", "-q", "--allow-empty", "-m", "new baseline")
    base = git(path, "rev-parse", "main").strip()
    pop0 = read_population(repo, "main")
    by = {i.commit: i for i in pop0.ideas}
    assert by[ideas["tuned"]].origin == "tune"
    lc.result(base, None, note(1, seeds=2))                                             # the baseline's seeds: 1
    lc.result(ideas["confirmed"], by[ideas["confirmed"]], note(2, seeds=2, decision="confirmed"))  # + confirmation
    lc.result(ideas["tuned"], by[ideas["tuned"]], note(4))                              # a tuned trial: 4
    lc.result(ideas["stopped"], by[ideas["stopped"]], note(8, status=Status.STOPPED))  # a stopped run: 8
    c = screen(repo, lc, ideas["continued"], by[ideas["continued"]].idea_id)
    lc.screen_result(c, note(16, screened={"value": 1.0, "decision": "continue"}))   # its screen: 16
    lc.result(ideas["continued"], by[ideas["continued"]], note(32))                    # its full length: 32
    o = screen(repo, lc, ideas["out"], by[ideas["out"]].idea_id)
    shot = lc.screen_result(o, note(64, screened={"value": 2.0, "decision": "screened_out"}))  # its screen: 64
    lc.screened_out(ideas["out"], by[ideas["out"]],
                    Note(status=Status.SCREENED_OUT, wall_s=shot.wall_s, cpu_s=shot.cpu_s, gpu_s=shot.gpu_s))
    b = screen(repo, lc, base, f"baseline-{base}")
    lc.screen_result(b, note(128, seeds=2, screened={"values": [1.0, 1.0]}))          # the baseline's screen: 128
    lc.linked(by[ideas["linked"]], note(2).model_copy(update={"linked": ideas["confirmed"]}))   # linked: 0
    lc.result(ideas["deleted"], by[ideas["deleted"]], note(512))                       # measured, then deleted
    # its branch and its archive ref deleted (by hand, or a repo from before archive refs were kept)
    git(path, "branch", "-D", "idea/human/deleted")
    git(path, "update-ref", "-d", f"refs/autoresearch/archive/{ideas['deleted']}")
    want = 1 + 2 + 4 + 8 + 16 + 32 + 64 + 128 + 256 + 512
    assert every_note_cpu(path) == want

    pop = read_population(repo, "main")
    assert set(pop.unlisted) == {old_base, ideas["deleted"]}
    assert compute_total(pop, 0) == want and compute_total(pop, 1) == 2 * want
    assert budget_hours(pop, 0) == want / 3600
    got = live.refresh() or live.pop                  # the daemon's reader: the same, by its changes
    assert compute_total(got, 0) == want
    env = parse_manifest(MANIFEST)
    assert population_figures(pop, env)["cpu_s"] == want
    totals = Totals(pop0, env).advance(got)           # the dashboard's running totals, moved by changes
    assert totals.figures()["cpu_s"] == want == Totals(got, env).figures()["cpu_s"]
    # the curves' compute axis: the baseline's runs, then each finished idea's with its screen (runs of
    # commits no ref shows are in the total, on no idea's point)
    assert series(pop, "min", 0)["by_time"]["gpu_hours"][-1] * 3600 == want - 256 - 512
    assert totals.series()["by_time"]["gpu_hours"] == series(got, "min", 0)["by_time"]["gpu_hours"]
