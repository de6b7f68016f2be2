"""Learning curves and early stopping (issue 29, sections 2-3; docs/policies.md "Early stopping").

Real daemons on real runners (local, ssh on loopback) with a toy env whose run writes progress lines
while it sleeps through its steps: a bad idea's curve far above the baseline's band is stopped (note
`stopped` with its evidence, its process gone, its slot used by the next idea), a good one is not, a
curve that claims a great value never beats the evaluation, and a hostile progress file (huge, NaN,
going back in t, not JSON, a link, a FIFO) is bounded and ignored safely."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from autoresearchd.config import RunnerCfg
from autoresearchd.engine.stopping import band, pruned
from autoresearchd.manifest import EnvManifest
from autoresearchd.runners import progress
from autoresearchd.runners.local import LocalRunner
from autoresearchd.store.notes import Status

from conftest import TOY_EVAL, TOY_MANIFEST, branch_idea, run_until_settled
from fixtures_reliability import write_cfg
from fixtures_sshd import ssh_fleet  # noqa: F401  (skips without sshd)

# A run of STEPS steps that reports `score` = level + (1 - t) after each, with a little seed noise,
# and writes `level` (plus noise) for the evaluator. `{marker}` gets a line when the run ends by itself.
CURVE_RUN = """import json, os, random, time
random.seed(int(os.environ.get("AUTORESEARCH_SEED", "0")))
LEVEL, CLAIM, STEPS, SLEEP = {level}, {claim}, {steps}, {sleep}
noise = random.random() * 0.01
if {marker!r}:
    open({marker!r}, "a").write("start " + os.environ["AUTORESEARCH_TRIAL"] + " " + str(time.time()) + "\\n")
with open(os.environ["AUTORESEARCH_PROGRESS"], "a") as p:
    for s in range(1, STEPS + 1):
        time.sleep(SLEEP)
        t = s / STEPS
        v = (CLAIM if CLAIM is not None else LEVEL) + (1 - t) + noise
        p.write(json.dumps({{"step": s, "t": t, "score": v}}) + "\\n")
        p.flush()
with open("out.txt", "w") as f:
    f.write(str(LEVEL + noise))
if {marker!r}:
    open({marker!r}, "a").write("end " + os.environ["AUTORESEARCH_TRIAL"] + "\\n")
"""


def curve_run(level: float, steps: int = 12, sleep: float = 0.15, claim: float | None = None,
              marker: str = "") -> str:
    return CURVE_RUN.format(level=level, claim=claim, steps=steps, sleep=sleep, marker=marker)


@pytest.fixture
def curve_env(make_repo):
    return make_repo({".autoresearch.toml": TOY_MANIFEST, "run.py": curve_run(1.0), "evaluate.py": TOY_EVAL},
                     "research")


STOPPING = "[stopping]\nenabled = true\nmin_t = 0.2\n"


def cfg_for(tmp_path, repo, runner='kind = "local"\nslots = 1', stopping=STOPPING, seeds=2):
    return write_cfg(tmp_path / "cfg", repo, runner=runner,
                     rest=f"[daemon]\ntick_s = 0.3\n[policy]\nbaseline_seeds = {seeds}\nconfirm_seeds = 0\n{stopping}")


def check_stopped(pop, bad: str, marker: Path, full_s: float):
    note = pop.by_commit[bad].note
    assert note.status == Status.STOPPED and note.value is None and note.decision is None
    # never measured, so never best and never in a policy's pool of parents (population.succeeded)
    assert pop.by_commit[bad] not in pop.succeeded() and pop.by_commit[bad].status == Status.STOPPED
    ev = note.stopped
    assert 0.2 <= ev["t"] < 1 and ev["value"] > ev["band_mean"] + ev["margin"] > ev["band_mean"]
    assert ev["margin"] > 0 and ev["k"] == 3.0 and ev["band_seeds"] == 2 and ev["reference"]
    assert all(0 < t <= ev["t"] for t, _, _ in ev["reference"])
    # compute saved: the baseline's mean CPU seconds per trial x (1 - t)
    per = sum(t.cpu_s for t in pop.baseline_note.trials) / len(pop.baseline_note.trials)
    assert ev["saved_unit"] == "cpu" and ev["saved_s"] == pytest.approx(per * (1 - ev["t"]), abs=1e-3)
    (tr,) = note.trials
    assert tr.status == Status.STOPPED and tr.curve == ev["curve"] and tr.wall_s < full_s
    # the process was killed: it never reached its end
    assert not marker.exists() or f"end {tr.trial_id}" not in marker.read_text()
    return note


def note_time(pop, commit):
    return pop.by_commit[commit].note.finished_at


def test_local_runner_stops_a_losing_idea_and_frees_its_slot(curve_env, tmp_path):
    marker = tmp_path / "ended.txt"
    cfg = cfg_for(tmp_path, curve_env)
    run_until_settled(cfg, timeout=120)          # the baseline's two seeds: the reference band
    # the bad idea would run 40 x 0.3 = 12 s; the good one about 2 s
    bad = branch_idea(curve_env, "a/bad", "Worse", {"run.py": curve_run(3.0, steps=40, sleep=0.3, marker=str(marker))})
    good = branch_idea(curve_env, "b/good", "Better", {"run.py": curve_run(0.5, marker=str(marker))})
    t0 = time.time()
    pop = run_until_settled(cfg, timeout=240)
    base = pop.baseline_note
    assert base.status == Status.SUCCEEDED and all(t.curve for t in base.trials)
    note = check_stopped(pop, bad, marker, full_s=12)
    g = pop.by_commit[good].note
    assert g.status == Status.SUCCEEDED and g.decision in ("promoted", "improved") and g.trials[0].curve
    assert f"end {g.trials[0].trial_id}" in marker.read_text()
    # the slot was freed at once: the good idea, staged behind the bad one on the single slot, started
    # within seconds of the stop (or ran before it)
    started = {w[1]: float(w[2]) for w in map(str.split, marker.read_text().splitlines()) if w[0] == "start"}
    assert started[g.trials[0].trial_id] < note_time(pop, bad) + 6
    # the stored curve: the run's points, in order, what `show` plots
    from autoresearchd.store.gitrepo import GitRepo
    repo = GitRepo(curve_env)
    pts = progress.loads(repo.read_blob(note.trials[0].curve))
    assert pts[-1][0] == note.stopped["t"] and all(a[0] < b[0] for a, b in zip(pts, pts[1:]))
    assert len(progress.loads(repo.read_blob(g.trials[0].curve))) == 12
    # one slot: the good idea ran after the bad one was stopped, long before the bad one would have ended
    assert time.time() - t0 < 240 and note.trials[0].wall_s < 12
    check_views(cfg, pop, bad, note)


def check_views(cfg, pop, bad, note):
    """`status` shows the compute saved, `show` the curve against the band, the dashboard's idea page
    the same as data."""
    import subprocess
    import sys

    from autoresearchd.research import open_research
    from autoresearchd.config import load_config
    from autoresearchd.views.dashboard import Snapshot

    def cli(*args):
        p = subprocess.run([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), *args],
                           capture_output=True, text=True, timeout=120, env=dict(os.environ, COLUMNS="200"))
        assert p.returncode == 0, p.stdout + p.stderr
        return p.stdout
    st = cli("status")
    assert "1 idea(s) stopped by their learning curves" in st and "CPU-hours saved" in st, st
    js = json.loads(cli("status", "--json"))
    assert js["spend"]["stopped"] == 1 and js["spend"]["saved_hours"] == pytest.approx(note.stopped["saved_s"] / 3600)
    shown = cli("show", bad)
    assert "learning curve (score" in shown and "baseline 1." in shown and f"stopped at t={note.stopped['t']:g}" in shown
    c = load_config(cfg)
    research = open_research(c)
    snap = Snapshot(c, research, pop, "test", secrets=[])
    groups = {g["reason"]: g for g in snap.failures()["groups"]}
    assert [i["id"] for i in groups["stopped"]["ideas"]] == [pop.by_commit[bad].idea_id]
    page = snap.idea(bad)
    cv = page["curve"]
    assert len(cv["t"]) == len(cv["mean"]) == len(cv["idea"][0]) and cv["stopped_t"] == note.stopped["t"]
    assert all(v is None or v > m + note.stopped["margin"] for v, m in zip(cv["idea"][0], cv["mean"]) if m)
    assert page["note"]["stopped"]["rule"] == "band"


def test_untrusted_curve_never_promotes(curve_env, tmp_path):
    """A run whose curve claims a great value (far below the band) but whose evaluation is bad is
    judged by the evaluation: worse, not stopped, not promoted."""
    liar = branch_idea(curve_env, "c/liar", "Claims", {"run.py": curve_run(3.0, claim=-5.0)})
    pop = run_until_settled(cfg_for(tmp_path, curve_env), timeout=180)
    note = pop.by_commit[liar].note
    assert note.status == Status.SUCCEEDED and note.value > 2.9 and note.decision == "worse"
    assert not note.stopped and note.trials[0].curve


def test_stopping_off_by_default(curve_env, tmp_path):
    bad = branch_idea(curve_env, "a/bad", "Worse", {"run.py": curve_run(3.0, steps=12)})
    pop = run_until_settled(cfg_for(tmp_path, curve_env, stopping=""), timeout=180)
    note = pop.by_commit[bad].note
    assert note.status == Status.SUCCEEDED and note.decision == "worse" and not note.stopped


# -- hostile progress files: the real reader on the host (LocalShell), bounded and tolerant ------------
def hostile_dirs(tmp_path: Path) -> dict[str, Path]:
    root = tmp_path / "trials"
    secret = tmp_path / "secret.txt"
    secret.write_text('{"t": 0.5, "score": 42}\n')
    cases = {
        "huge": b'{"t": 0.1, "score": 1.0}\n' + b"x" * (20 * 1024 * 1024) + b'\n{"t": 0.9, "score": 2.0}\n',
        "nan": b'{"t": 0.1, "score": NaN}\n{"t": 0.2, "score": Infinity}\n{"t": 0.3, "score": 1e999}\n'
               b'{"t": NaN, "score": 1}\n{"t": 0.4, "score": 1.5}\n',
        "backwards": b'{"t": 0.5, "score": 1}\n{"t": 0.3, "score": 9}\n{"t": 0.5, "score": 9}\n{"t": 0.6, "score": 2}\n',
        "garbage": b'\x00\xff not json\n[1, 2]\n"str"\n{"t": "0.5", "score": 1}\n{"t": 2, "score": 1}\n'
                   b'{"t": 0, "score": 1}\n{"t": true, "score": 1}\n' + b"9" * 5000 + b'\n{"t": 0.7, "score": 3}\n',
        "deep": b"[" * 100000 + b"\n" + b'{"t": 0.5, "score": ' + b"1" * 4000 + b'}\n{"t": 0.8, "score": 4}\n',
    }
    dirs = {}
    for name, data in cases.items():
        d = root / name / "code"
        d.mkdir(parents=True)
        (d / progress.defaults.PROGRESS_FILE).write_bytes(data)
        dirs[name] = d.parent
    (root / "link" / "code").mkdir(parents=True)
    os.symlink(secret, root / "link" / "code" / progress.defaults.PROGRESS_FILE)
    dirs["link"] = root / "link"
    (root / "fifo" / "code").mkdir(parents=True)
    os.mkfifo(root / "fifo" / "code" / progress.defaults.PROGRESS_FILE)
    dirs["fifo"] = root / "fifo"
    (root / "none" / "code").mkdir(parents=True)
    dirs["none"] = root / "none"
    return dirs


def test_hostile_progress_files_are_bounded_and_ignored(tmp_path):
    dirs = hostile_dirs(tmp_path)
    m = EnvManifest.model_validate({"name": "toy", "run": "true", "metric": "score", "goal": "min"})
    runner = LocalRunner(RunnerCfg(sandbox="none"), m, tmp_path / "trials")
    names = list(dirs)
    # what crosses the wire is bounded: at most PROGRESS_MAX_BYTES of each file, base64-encoded
    sh = runner.shell_for("local")
    t0 = time.monotonic()
    rc, out, _ = sh.run(progress.reader_script([str(dirs[n]) for n in names]), timeout=30)
    assert rc == 0 and time.monotonic() - t0 < 10          # the FIFO did not block the reader
    raw = dict(zip(names, progress.decode_lines(out, len(names))))
    assert all(len(v) <= progress.defaults.PROGRESS_MAX_BYTES + 1 for v in raw.values())
    assert raw["link"] == b"" and raw["fifo"] == b"" and raw["none"] == b""
    curves = dict(zip(names, runner.progress_many([{"host": "local", "dir": str(dirs[n])} for n in names])))
    assert curves["huge"] == [(0.1, 1.0), (0.9, 2.0)]       # its first and last halves
    assert curves["nan"] == [(0.4, 1.5)]
    assert curves["backwards"] == [(0.5, 1.0), (0.6, 2.0)]
    assert curves["garbage"] == [(0.7, 3.0)]
    assert curves["deep"] == [(0.8, 4.0)]
    assert curves["link"] == [] and curves["fifo"] == [] and curves["none"] == []


def test_parse_caps_points_and_keeps_the_last():
    data = b"".join(json.dumps({"t": (i + 1) / 1000, "score": float(i)}).encode() + b"\n" for i in range(1000))
    pts = progress.parse(data, "score")
    assert len(pts) == progress.defaults.PROGRESS_MAX_POINTS and pts[0] == (0.001, 0.0) and pts[-1] == (1.0, 999.0)


# -- the rule itself, on curves -----------------------------------------------------------------------
def line(level, n=20):
    return [((k + 1) / n, level + (1 - (k + 1) / n)) for k in range(n)]


def test_band_and_optuna_pruners_on_curves():
    refs = [line(1.0), line(1.02)]
    mean, sd, n = band(refs, 0.5, 0.05)
    assert n == 2 and mean == pytest.approx(1.51) and sd > 0
    peers = refs + [line(0.8), line(0.9), line(1.1), line(1.2)]
    for rule in ("median", "asha", "hyperband"):
        # 16 of 20 steps: Hyperband's later bracket has its first rung at step 4 x 3 = 12
        assert pruned(rule, "min", peers, line(3.0)[:16], 20, 4), rule        # far worse than every peer
        assert not pruned(rule, "min", peers, line(0.5)[:16], 20, 4), rule    # better than every peer
    assert not pruned("median", "max", peers, line(3.0)[:10], 20, 4)         # the goal decides what is worse


# -- the same on the ssh runner (real sshd on loopback) -------------------------------------------------
def test_ssh_runner_stops_a_losing_idea(curve_env, tmp_path, monkeypatch, ssh_fleet):  # noqa: F811
    import shutil
    import tempfile

    from fixtures_hosts import host_toml
    monkeypatch.setenv("AUTORESEARCHD_SSH_CONFIG", os.devnull)
    shared = Path(tempfile.mkdtemp(prefix="ard-stop-"))      # the fleet's login user writes the marker here
    shared.chmod(0o777)
    try:
        marker = shared / "ended.txt"
        cfg = cfg_for(tmp_path, curve_env, runner='kind = "ssh"\n' + host_toml(ssh_fleet, 0))
        run_until_settled(cfg, timeout=120)
        bad = branch_idea(curve_env, "a/bad", "Worse", {"run.py": curve_run(3.0, steps=40, sleep=0.3, marker=str(marker))})
        pop = run_until_settled(cfg, timeout=180)
        assert all(t.curve for t in pop.baseline_note.trials)
        check_stopped(pop, bad, marker, full_s=12)
        assert not any(lz for i in pop.ideas for lz in i.leases)       # the lease is gone: the slot is free
    finally:
        shutil.rmtree(shared, ignore_errors=True)


# -- every runner (local, ssh, Slurm: tests/test_runner_contract.py's factories, default sandbox) -------
from test_runner_contract import code, make_runner, manifest, wait_done  # noqa: E402,F401  (fixtures)
from fixtures_slurm import slurm_cluster  # noqa: E402,F401  (fixture, started only for the slurm case)

PROGRESS_RUN = ("for i in 1 2 3 4 5 6 7 8; do printf '{\"t\": 0.%s, \"step\": %s, \"score\": %s}\\n' $i $i $((10 - i)) "
                ">> \"$AUTORESEARCH_PROGRESS\"; [ $i = 4 ] && echo 'not json' >> \"$AUTORESEARCH_PROGRESS\"; "
                "sleep 0.5; done; echo ---; echo 'score: 1'")


def test_every_runner_streams_the_curve_while_it_runs(make_runner, code):
    m = manifest(PROGRESS_RUN)
    r = make_runner(m)
    from autoresearchd.runners.base import PollState, TrialSpec
    spec = TrialSpec(trial_id="t-curve", commit="0" * 40, seed=0, manifest=m, code_tar=code({"a.txt": "x\n"})[0])
    h = r.submit(spec, r.slots()[0])
    seen: list = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        st = r.poll_many([h])[0]
        pts = r.progress_many([h])[0]
        if st == PollState.DONE:
            break
        if pts and st == PollState.RUNNING:
            seen.append(pts)
        time.sleep(0.2)
    assert seen, "no curve point was read while the run ran"
    assert any(len(p) < 8 for p in seen) and seen[0][0] == (0.1, 9.0)     # read while it ran, in part
    assert wait_done(r, h) == PollState.DONE
    out = r.fetch(h)
    assert out.error is None and out.metrics == {"score": 1.0}
    assert out.curve == [(k / 10, 10.0 - k) for k in range(1, 9)]        # the junk line skipped
    r.cleanup(h)


# -- the dashboard's idea page draws the curve against the band (headless Chromium) ----------------------
def test_dashboard_idea_page_plots_the_curve(tmp_path):
    from dashserver import Server, add_idea, chromium
    from popbuilder import TRAIN, build_population
    from popbuilder import write_cfg as pop_cfg

    from autoresearchd.store.notes import Note, Trial, format_note, parse_note
    from autoresearchd.store.refs import NOTES_REF
    repo = build_population(tmp_path / "research", 3, seed=1, with_failures=False)
    base = repo.rev_parse("refs/heads/main")
    bnote = parse_note(repo.note_read(NOTES_REF, base))
    for k, t in enumerate(bnote.trials):      # the baseline's seeds get curves (3.0 + noise at the end)
        t.curve = repo.hash_blob(progress.dumps([(j / 20, 3.0 + (1 - j / 20) + 0.01 * k) for j in range(1, 21)]))
    repo.note_write(NOTES_REF, base, format_note(bnote))
    mine = [(j / 20, 5.0 + (1 - j / 20)) for j in range(1, 9)]
    sha = repo.hash_blob(progress.dumps(mine))
    note = Note(status=Status.STOPPED, metric="val_loss", goal="min", error="stopped at t=0.4: ...",
                trials=[Trial(trial_id="t-stop", seed=0, status=Status.STOPPED, curve=sha)],
                stopped={"rule": "band", "t": 0.4, "value": 5.6, "band_mean": 3.61, "band_std": 0.01,
                         "margin": 0.108, "k": 3.0, "curve": sha, "saved_s": 100.0, "saved_unit": "gpu"})
    commit = add_idea(repo, "A losing idea", "It loses.", {"train.py": TRAIN.replace("lr = 0.001", "lr = 0.9").encode()},
                      note=note)
    drv = chromium()
    srv = Server(pop_cfg(tmp_path, repo.path))
    try:
        drv.get_log("browser")
        drv.get(srv.url + "/#/idea/" + commit)
        from selenium.webdriver.support.ui import WebDriverWait
        WebDriverWait(drv, 30, poll_frequency=0.1).until(
            lambda d: d.execute_script("return document.querySelector('#learning-curve canvas') !== null"),
            message="the learning-curve chart")
        text = drv.find_element("css selector", "#main").text
        assert "learning curve" in text.lower() and "stopped at t = 0.40" in text
        legend = drv.execute_script("return [...document.querySelectorAll('#learning-curve .u-legend th')]"
                                    ".map(e => e.textContent)")
        assert any("baseline mean" in x for x in legend) and any("idea seed 0" in x for x in legend)
        # the overview: the compute saved (a GPU env: GPU-hours), 100 s = 0.03 h
        drv.get(srv.url + "/#/")
        WebDriverWait(drv, 30, poll_frequency=0.1).until(
            lambda d: d.execute_script("return document.querySelector('#saved-hours') !== null"), message="saved")
        assert drv.find_element("id", "saved-hours").text == "0.03 (1 stopped early, estimated)"
        errors = [e for e in drv.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        srv.stop()
        drv.quit()


# -- a real daemon on the Slurm runner (tests/fixtures_slurm.py's single-node cluster) --------------------
def test_slurm_runner_stops_a_losing_idea(curve_env, tmp_path, monkeypatch, slurm_cluster):  # noqa: F811
    monkeypatch.setenv("SLURM_CONF", slurm_cluster.env["SLURM_CONF"])
    marker = tmp_path / "ended.txt"
    runner = f'kind = "slurm"\n[runner.slurm]\nwork_root = "{tmp_path}/slurm-trials"\nmax_jobs = 1'
    cfg = cfg_for(tmp_path, curve_env, runner=runner)
    run_until_settled(cfg, timeout=180)
    bad = branch_idea(curve_env, "a/bad", "Worse", {"run.py": curve_run(3.0, steps=40, sleep=0.3, marker=str(marker))})
    pop = run_until_settled(cfg, timeout=180)
    check_stopped(pop, bad, marker, full_s=12)
    assert not any(lz for i in pop.ideas for lz in i.leases)
    slurm_cluster.wait_idle(30)                 # scancel ended the job: the cluster has nothing left


# A run whose curve (its training loss) is far above the band to its very end, t = 1, and whose final
# step (a held-out evaluation, a last checkpoint) then takes a while: at t = 1 nothing is left to save,
# so the metric of record, not the curve, decides. Here the evaluation is good (a regulariser: worse
# training loss, better held-out score).
LATE_CURVE_RUN = """import json, os, time
with open(os.environ["AUTORESEARCH_PROGRESS"], "a") as p:
    p.write("".join(json.dumps({"step": s, "t": s / 10, "score": 4.0 - s / 10}) + "\\n" for s in range(1, 11)))
time.sleep(3)
with open("out.txt", "w") as f:
    f.write("0.5")
"""


def test_a_curve_that_reached_its_end_is_not_stopped(curve_env, tmp_path):
    cfg = cfg_for(tmp_path, curve_env)
    run_until_settled(cfg, timeout=120)          # the baseline's two seeds: the reference band
    late = branch_idea(curve_env, "d/late", "Regularise", {"run.py": LATE_CURVE_RUN})
    pop = run_until_settled(cfg, timeout=180)
    note = pop.by_commit[late].note
    assert note.status == Status.SUCCEEDED and not note.stopped, (note.status, note.stopped)
    assert note.value == pytest.approx(0.5) and note.decision in ("promoted", "improved")


def test_a_stopped_idea_s_gpu_time_counts_in_the_spend(make_repo, tmp_path):
    """A stopped trial held its GPU until it was cancelled: its note carries its compute like any note
    (docs/notes.md "Compute fields": wall_s and gpu_s the sums over trials, wall x GPUs where no GPU
    seconds were measured), so `status`'s GPU-hours and `daemon.max_gpu_hours` count it. A GPU env on
    the local runner; without nvidia-smi a trial's GPU seconds are its wall time x GPUs."""
    from autoresearchd.store.spend import budget_hours, compute_s
    repo = make_repo({".autoresearch.toml": TOY_MANIFEST + "gpus = 1\n", "run.py": curve_run(1.0),
                      "evaluate.py": TOY_EVAL}, "research")
    cfg = cfg_for(tmp_path, repo, runner='kind = "local"\ngpus = [0]')
    run_until_settled(cfg, timeout=120)
    bad = branch_idea(repo, "a/bad", "Worse", {"run.py": curve_run(3.0, steps=40, sleep=0.3)})
    pop = run_until_settled(cfg, timeout=180)
    note = pop.by_commit[bad].note
    assert note.status == Status.STOPPED and note.stopped["saved_unit"] == "gpu"
    (tr,) = note.trials
    assert tr.wall_s > 1 and note.wall_s == pytest.approx(tr.wall_s)
    assert note.gpu_s == pytest.approx(tr.wall_s) and compute_s(note, 1) == pytest.approx(tr.wall_s)
    others = sum(compute_s(i.note, 1) for i in pop.ideas if i.note is not None and i.commit != bad)
    assert budget_hours(pop, 1) == pytest.approx((others + compute_s(pop.baseline_note, 1) + tr.wall_s) / 3600)


def test_the_curve_cache_holds_only_the_peers_and_the_band(tmp_path, monkeypatch):
    """The stopper caches curve blobs it reads; it keeps the newest STOPPING_MAX_PEERS peers' and the
    baseline's only, so a daemon's memory does not grow with every trial it ever measured (a real
    population in git, every measured note with a curve blob)."""
    from autoresearchd import defaults
    from autoresearchd.config import StoppingCfg
    from autoresearchd.engine.stopping import Stopper
    from autoresearchd.store.lifecycle import Lifecycle
    from autoresearchd.store.population import read_population
    from autoresearchd.research import load_manifest
    from popbuilder import build_population
    monkeypatch.setattr(defaults, "STOPPING_MAX_PEERS", 10)
    repo = build_population(tmp_path / "research", 60)
    lc = Lifecycle(repo)
    pop = read_population(repo, "refs/heads/main")
    with lc.batch():
        for k, (commit, note) in enumerate([(pop.baseline_commit, pop.baseline_note)] +
                                           [(i.commit, i.note) for i in pop.ideas if i.note is not None]):
            n = note.model_copy(deep=True)
            for j, tr in enumerate(n.trials):
                tr.curve = lc.store_log(f"c{k}-{j}.curve", progress.dumps(line(3.0 + k / 100 + j / 1000)))
            lc.ledger.write_note(commit, n)
    pop = read_population(repo, "refs/heads/main")
    measured = [i for i in pop.ideas if i.note is not None and not pop.stale(i) and i.note.trials]
    assert len(measured) > 20
    stopper = Stopper(StoppingCfg(enabled=True), load_manifest(repo, "refs/heads/main"), None, lc)
    peers = stopper._peers(pop)
    assert len(peers) == 10
    band_seeds = len(pop.baseline_note.trials)
    assert len(stopper._blobs) <= 10 + band_seeds, len(stopper._blobs)
