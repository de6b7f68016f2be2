"""Screening on the real daemon (engine/screener.py), on the local, ssh and Slurm runners: a tiny env
whose run reads the fidelity knob `steps` from AUTORESEARCH_KNOB_STEPS and writes a metric (no torch).
A bad idea is screened out with the evidence in its note and never runs full length; a good one goes on
to its full-length note; the screened value never becomes the metric of record nor the best; and a
restarted daemon rebuilds everything from git (it runs nothing again)."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from conftest import TOY_EVAL, branch_idea, git, knob_manifest, run_until_settled
from fixtures_reliability import write_cfg
from fixtures_sshd import ssh_fleet  # noqa: F401  (fixture, started only for the ssh case)
from fixtures_slurm import slurm_cluster  # noqa: F401  (fixture, started only for the slurm case)

from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.ledger import Ledger
from autoresearchd.store.refs import SCREENS_PREFIX
from autoresearchd.vocab import Status

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from screening_reads import STEPS  # noqa: E402  (the fidelity knob's declaration, shared with the bench)

# value = quality + 1 / steps (+ a seed's noise): shorter runs read worse, the quality decides the rank
RUN = """import os
Q = 1.0
steps = int(os.environ.get("AUTORESEARCH_KNOB_STEPS", "100"))
seed = int(os.environ.get("AUTORESEARCH_SEED", "0"))
with open({log!r}, "a") as f:
    f.write(f"{{Q}} {{steps}} {{seed}}\\n")
with open("out.txt", "w") as f:
    f.write(str(Q + 1.0 / steps + seed * 0.001))
"""


@pytest.fixture
def env(make_repo, tmp_path):
    # the log of runs lies where the ssh fixture's login user can write too (pytest's tmp is root's alone)
    shared = Path(tempfile.mkdtemp(prefix="screening-runs-"))
    shared.chmod(0o777)
    log = shared / "runs.log"
    log.touch()
    log.chmod(0o666)
    run = RUN.format(log=str(log))
    repo = make_repo({".autoresearch.toml": knob_manifest(STEPS), "run.py": run, "evaluate.py": TOY_EVAL}, "research")
    good = branch_idea(repo, "human/good", "better quality", {"run.py": run.replace("Q = 1.0", "Q = 0.9")})
    bad = branch_idea(repo, "human/bad", "worse quality", {"run.py": run.replace("Q = 1.0", "Q = 1.5")})
    yield repo, log, good, bad
    shutil.rmtree(shared, ignore_errors=True)


def runs(log) -> list[tuple[float, int, int]]:
    return [(float(q), int(s), int(seed)) for q, s, seed in (ln.split() for ln in log.read_text().splitlines())]


def cfg_for(tmp_path, repo, runner: str):
    rest = ("[daemon]\ntick_s = 0.3\n[policy]\nbaseline_seeds = 2\nconfirm_seeds = 0\n"
            "[screening]\nenabled = true\nkeep = 0.5\nmargin = 3.0\n")
    return write_cfg(tmp_path / "cfg", repo, runner=runner, rest=rest)


def check(repo, log, good, bad, pop, host: str):
    by = {i.commit: i for i in pop.ideas}
    ran = runs(log)
    # the bad idea ran once, short; the good one short, then full length; the baseline both ways, 2 seeds
    assert sorted(r for r in ran if r[0] == 1.5) == [(1.5, 25, 0)], ran
    assert sorted(r for r in ran if r[0] == 0.9) == [(0.9, 25, 0), (0.9, 100, 0)], ran
    assert sorted(r for r in ran if r[0] == 1.0) == [(1.0, 25, 0), (1.0, 25, 1), (1.0, 100, 0), (1.0, 100, 1)], ran
    b = by[bad].note
    assert b.status == Status.SCREENED_OUT and b.value is None and b.decision is None, (b.status, b.error)
    ev = b.screened
    assert ev["value"] == pytest.approx(1.54) and ev["rule"] in ("margin", "both")
    assert ev["baseline_mean"] == pytest.approx(1.0405) and ev["baseline_seeds"] == 2
    assert ev["fraction"] == 0.25 and ev["knob"] == "steps" and ev["saved_unit"] == "cpu"
    assert "cutoff" in ev and ev["margin"] > 0
    base = git(repo, "rev-parse", SCREENS_PREFIX + "baseline-" + pop.baseline_commit).strip()
    assert ev["baseline_screen"] == base
    cpu = [t.cpu_s for t in Ledger(GitRepo(repo)).note(base).trials if t.cpu_s is not None]
    shot = Ledger(GitRepo(repo)).note(ev["screen"])
    assert (b.cpu_s, b.wall_s) == (shot.cpu_s, shot.wall_s)      # its screened run's compute is counted
    if cpu:            # (1 - fraction) x the baseline's mean CPU seconds per trial
        assert ev["saved_s"] == pytest.approx(0.75 * sum(cpu) / len(cpu), abs=1e-3)
    g = by[good].note
    assert g.status == Status.SUCCEEDED and g.value == pytest.approx(0.91)      # full length, never 0.94
    assert {t.host for t in g.trials} == {host}
    assert pop.baseline_value == pytest.approx(1.0105)
    assert pop.best("min").commit == good
    # no screened value is anyone's metric of record, and no screen is an idea
    screens = pop.screens
    assert {s.of for s in screens.values()} == {good, bad, pop.baseline_commit}
    assert not {s.commit for s in screens.values()} & set(by)
    of = {s.of: s for s in screens.values()}
    assert of[good].value == pytest.approx(0.94) and of[good].note.screened["decision"] == "continue"
    assert of[bad].value == pytest.approx(1.54) and of[bad].note.screened["decision"] == "screened_out"
    assert of[pop.baseline_commit].note.screened["values"] == pytest.approx([1.04, 1.041])
    for s in screens.values():
        assert s.note.value is None and s.note.decision is None
        assert git(repo, "diff", "--name-only", s.of, s.commit).split() == [".autoresearch-knobs.json"]


def check_status(cfg, pop, bad):
    """`status` (text and --json) counts the screen-out and the compute it saved, as it counts early
    stops (issue 29: `status` and the dashboard show the GPU-hours saved). It showed neither."""
    import json
    import subprocess

    def cli(*args):
        p = subprocess.run([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), *args],
                           capture_output=True, text=True, timeout=120, env=dict(os.environ, COLUMNS="200"))
        assert p.returncode == 0, p.stdout + p.stderr
        return p.stdout
    saved = pop.by_commit[bad].note.screened["saved_s"]
    js = json.loads(cli("status", "--json"))["spend"]
    assert js["screened_out"] == 1 and js["stopped"] == 0
    assert js["saved_hours"] == pytest.approx(saved / 3600) and saved > 0
    st = cli("status")
    assert "1 screened out short" in st and f"about {saved / 3600:.2f} CPU-hours saved" in st, st


def screen_and_restart(tmp_path, env, runner: str, host: str):
    repo, log, good, bad = env
    cfg = cfg_for(tmp_path, repo, runner)
    pop = run_until_settled(cfg, timeout=240)
    check(repo, log, good, bad, pop, host)
    check_status(cfg, pop, bad)
    before = log.read_text()
    pop = run_until_settled(cfg_for(tmp_path, repo, runner), timeout=120)      # a restart: nothing runs again
    assert log.read_text() == before
    check(repo, log, good, bad, pop, host)
    assert not any(lz for i in pop.ideas for lz in i.leases)


def test_local_runner_screens(env, tmp_path):
    screen_and_restart(tmp_path, env, 'kind = "local"\nslots = 2', "local")


def test_ssh_runner_screens(env, tmp_path, monkeypatch, ssh_fleet):  # noqa: F811
    from fixtures_hosts import host_toml
    monkeypatch.setenv("AUTORESEARCHD_SSH_CONFIG", os.devnull)
    screen_and_restart(tmp_path, env, 'kind = "ssh"\n' + host_toml(ssh_fleet, 0), ssh_fleet.hosts[0].name)


def test_slurm_runner_screens(env, tmp_path, monkeypatch, slurm_cluster):  # noqa: F811
    monkeypatch.setenv("SLURM_CONF", slurm_cluster.env["SLURM_CONF"])
    work = tmp_path / f"slurm-trials-{uuid.uuid4().hex[:6]}"
    screen_and_restart(tmp_path, env, f'kind = "slurm"\n[runner.slurm]\nwork_root = "{work}"\nmax_jobs = 2', "slurm")
    slurm_cluster.wait_idle(30)


# -- spend: every run counted once (docs/notes.md "Compute fields") -------------------------------------
def every_note(repo) -> dict[str, str]:
    """commit -> note text, for every result note git holds (refs/notes/autoresearch), read with git."""
    out = {}
    for line in git(repo, "notes", "--ref", "autoresearch", "list").splitlines():
        blob, commit = line.split()
        out[commit] = git(repo, "cat-file", "blob", blob)
    return out


def field(text: str, key: str) -> str | None:
    return next((ln.split(": ", 1)[1] for ln in text.splitlines() if ln.startswith(key + ": ")), None)


def test_spend_counts_every_run_once_with_screening(env, tmp_path):
    """With screening on, the one spend rule (compute_total: budget, status, dashboard) equals the CPU
    seconds of every result note in git, each counted once: the baseline's seeds and screened seeds, the
    ideas' screens, the continued idea's full-length seed and a confirmation (an idea better by less than
    the single-run margin, with no better one before it, is confirmed on a fresh seed). A screened-out
    idea's note copies its screen's figures (its own page shows them): not counted again. Before the fix
    the screens of the continued idea and of the baseline were never counted."""
    from autoresearchd.store.spend import budget_hours, compute_total
    from autoresearchd.views.summary import population_figures
    from autoresearchd.views.totals import Totals
    repo, log, good, bad = env
    # in the good idea's place, one better by 0.005: within the single-run margin (the baseline's 2 seeds
    # differ by 0.001), and no better idea before it, so it is confirmed on a fresh seed
    git(repo, "branch", "-D", "idea/human/good")
    close = branch_idea(repo, "human/close", "a little better",
                        {"run.py": (repo / "run.py").read_text().replace("Q = 1.0", "Q = 0.995")})
    cfg = cfg_for(tmp_path, repo, 'kind = "local"\nslots = 2')
    cfg.write_text(cfg.read_text().replace("confirm_seeds = 0", "confirm_seeds = 1"))
    pop = run_until_settled(cfg, timeout=240)
    ran = runs(log)
    # every kind of run took place: the baseline's seeds and screened seeds, both ideas' screens, the
    # continued idea's full-length seed and its confirmation
    assert sum(1 for r in ran if r[0] == 1.0) == 4 and sum(1 for r in ran if r[0] == 1.5) == 1, ran
    assert sorted(r[1:] for r in ran if r[0] == 0.995) == [(25, 0), (100, 0), (100, 1)], ran
    assert {i.commit: i for i in pop.ideas}[close].note.decision in ("confirmed", "demoted")
    notes = every_note(repo)
    assert len(notes) == 1 + 2 + 3, sorted(notes)       # the baseline, 2 ideas, 3 screens, and no other
    out = [c for c, t in notes.items() if field(t, "status") == "screened_out"]
    assert out == [bad]
    shot = pop.screens["baseline-" + pop.baseline_commit]
    assert shot.note is not None and len(shot.note.trials) == 2
    screen_of_bad = next(s for s in pop.screens.values() if s.of == bad)
    # the copy is exactly its screen's figures: counting both would count the screened run twice
    assert float(field(notes[bad], "cpu_s")) == float(field(notes[screen_of_bad.commit], "cpu_s"))
    want = sum(float(field(t, "cpu_s")) for c, t in notes.items() if c not in out)
    assert all(float(field(t, "cpu_s")) > 0 for t in notes.values()), notes      # the local runner measures
    assert compute_total(pop, 0) == pytest.approx(want)
    assert budget_hours(pop, 0) == pytest.approx(want / 3600)
    # `status` and the dashboard read the same rule (the dashboard's running totals, by changes, too)
    from autoresearchd.manifest import parse_manifest
    m = parse_manifest((repo / ".autoresearch.toml").read_text())
    assert population_figures(pop, m)["cpu_s"] == pytest.approx(want)
    assert Totals(pop, m).figures()["cpu_s"] == pytest.approx(want)


def test_the_screener_reads_no_git_of_its_own(env, tmp_path, monkeypatch):
    """The screener's three reads a tick (the harvest's units, the step, the plan) come from the
    population it is given (Population.screens): no git process. Before, each listed the screens/ refs,
    the notes and the lease notes itself."""
    import subprocess

    from autoresearchd.app import build_daemon
    from autoresearchd.config import load_config
    from autoresearchd.engine.plan import plan_jobs
    from autoresearchd.store.population import read_population
    repo, log, good, bad = env
    cfg = cfg_for(tmp_path, repo, 'kind = "local"\nslots = 2')
    run_until_settled(cfg, timeout=240)
    d = build_daemon(load_config(cfg), with_llm=False)
    pop = read_population(d.repo, d.research.baseline_ref)
    assert len(pop.screens) == 3
    spawned = []
    real = subprocess.Popen.__init__
    monkeypatch.setattr(subprocess.Popen, "__init__",
                        lambda self, args, *a, **kw: (spawned.append(args), real(self, args, *a, **kw))[1])
    assert list(d.screener.units(pop)) == []                # settled: no screen has a lease
    assert d.screener.step(pop) is False                    # every screen made and decided: nothing to write
    assert d.screener.jobs(pop, plan_jobs(pop, d.cfg.policy, False)) == []
    monkeypatch.undo()
    assert spawned == []


# a run that burns 0.5 s of CPU at the short fidelity only: the baseline's full-length seeds cost next to
# nothing, its screened seeds the most, so only counting the screens can spend the budget
BURN_SHORT = RUN.replace("with open(\"out.txt\"", """if steps < 100:
    import time
    t = time.process_time()
    while time.process_time() - t < 0.5:
        pass
with open("out.txt\"""")


def test_a_budget_the_baseline_screens_spend_holds_new_ideas_and_their_screens(make_repo, tmp_path):
    """max_gpu_hours = 0.00017 (0.61 s of CPU): the baseline's full-length seeds (a few hundredths of a
    second each) leave it unspent, its two screened seeds (0.5 s each) spend it. The new ideas are then
    held, their screens too: they never run. Before the fix the screens were not counted, the budget
    never read spent, and both ideas' screens ran."""
    from autoresearchd.store.spend import budget_hours
    shared = Path(tempfile.mkdtemp(prefix="screening-runs-"))
    log = shared / "runs.log"
    log.touch()
    run = BURN_SHORT.format(log=str(log))
    assert "process_time" in run
    repo = make_repo({".autoresearch.toml": knob_manifest(STEPS), "run.py": run, "evaluate.py": TOY_EVAL}, "research")
    ideas = [branch_idea(repo, f"human/i{k}", f"idea {k}", {"run.py": run.replace("Q = 1.0", f"Q = 0.{k + 5}")})
             for k in range(2)]
    # one slot, nothing pre-staged behind the running trial: the baseline's second screened seed starts
    # only when its first is in, so the budget is read spent (the screen's note, written once both
    # seeds are in) before any idea could take the slot (a trial staged while the last one that spends
    # the budget runs is in flight, as any idea's would be: what runs when the budget is reached runs)
    cfg = cfg_for(tmp_path, repo, 'kind = "local"\nslots = 1\nprestage = 1')
    cfg.write_text(cfg.read_text().replace("[daemon]\n", "[daemon]\nmax_gpu_hours = 0.00017\n"))
    try:
        pop = run_until_settled(cfg, timeout=240)
        ran = runs(log)
    finally:
        shutil.rmtree(shared, ignore_errors=True)
    assert sorted(r for r in ran if r[0] == 1.0) == [(1.0, 25, 0), (1.0, 25, 1), (1.0, 100, 0), (1.0, 100, 1)], ran
    base = pop.screens["baseline-" + pop.baseline_commit].note
    assert base is not None and sum(t.cpu_s for t in base.trials) >= 1.0
    assert pop.baseline_note.cpu_s < 0.61 <= budget_hours(pop, 0) * 3600
    # the ideas: held like a first seed (no note, no lease), and so are their screens (made, never run)
    assert [r for r in ran if r[0] != 1.0] == [], ran
    by = {i.commit: i for i in pop.ideas}
    for c in ideas:
        i = by[c]
        assert i.status == Status.QUEUED and i.note is None and not i.leases, (i.idea_id, i.status)
        s = pop.screens.get(i.idea_id)
        assert s is None or (s.note is None and not s.leases), s
