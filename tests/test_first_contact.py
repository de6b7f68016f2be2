"""A new user's first contact: the baseline note comes at seed 0 and is amended by later seeds, a
timed-out baseline is said plainly (not silently re-run), and ideas measured against a partial
baseline are judged once it is complete. Real git, real subprocesses, the local runner."""

from autoresearchd.store.notes import Status, parse_note

from conftest import TOY_MANIFEST, branch_idea, git, run_until_settled, write_config

# seed 0 finishes at once, later seeds a few seconds after: the baseline note must exist in between
SLOW_LATER_SEEDS = """import os, random, time
seed = int(os.environ.get("AUTORESEARCH_SEED", "0"))
if seed:
    time.sleep(3)
random.seed(seed)
with open("out.txt", "w") as f:
    f.write(str(1.0 + random.random() * 0.01))
"""


def _note_texts(repo, commit: str) -> list[str]:
    """Every version of the result note on `commit`, oldest first (the notes ref is a commit chain)."""
    out = []
    for c in git(repo, "rev-list", "--reverse", "refs/notes/autoresearch").split():
        for line in git(repo, "ls-tree", "-r", c).splitlines():
            meta, path = line.split("\t")
            if path.replace("/", "") == commit:
                text = git(repo, "cat-file", "blob", meta.split()[2])
                if not out or out[-1] != text:
                    out.append(text)
    return out


def _note_history(repo, commit: str) -> list:
    out = []
    for text in _note_texts(repo, commit):
        n = parse_note(text)
        if not out or out[-1].seeds != n.seeds:
            out.append(n)
    return out


def test_baseline_note_at_seed_0_then_amended(toy_env, tmp_path):
    (toy_env / "run.py").write_text(SLOW_LATER_SEEDS)
    git(toy_env, "commit", "-qam", "slow later seeds")
    pop = run_until_settled(write_config(tmp_path, toy_env))
    base = pop.baseline_commit
    history = _note_history(toy_env, base)
    assert [n.seeds for n in history] == [[0], [0, 1]], [n.seeds for n in history]
    first, final = history
    assert first.status == Status.SUCCEEDED and first.value is not None and first.seeds_planned == 2
    # the first version says more seeds are coming, in its summary line too
    first_text = _note_texts(toy_env, base)[0]
    assert "(1 of 2 seeds so far)" in first_text.splitlines()[0]
    assert final.values and len(final.values) == 2 and final.std is not None
    assert "so far" not in git(toy_env, "notes", "--ref", "autoresearch", "show", base).splitlines()[0]


def test_status_shows_seed_0_before_the_other_seeds(toy_env, tmp_path):
    from io import StringIO

    from rich.console import Console

    from autoresearchd.app import build_daemon
    from autoresearchd.config import load_config
    from autoresearchd.views.observe import status
    from autoresearchd.views.progress import render_progress
    (toy_env / "run.py").write_text(SLOW_LATER_SEEDS.replace("time.sleep(3)", "time.sleep(60)"))
    git(toy_env, "commit", "-qam", "very slow later seeds")
    cfg = load_config(write_config(tmp_path, toy_env))
    d = build_daemon(cfg, with_llm=False)
    seen = {}

    def baseline_noted(pop):
        if pop.baseline_note is not None:
            seen["pop"] = pop
            return True
        return False
    run_until_settled(daemon=d, timeout=90, until=baseline_noted)
    pop = seen["pop"]
    assert pop.baseline_note.seeds == [0] and pop.baseline_note.seeds_planned == 2
    out = StringIO()
    status(cfg, Console(file=out, width=200))
    line = next(ln for ln in out.getvalue().splitlines() if ln.startswith("baseline"))
    assert f"{pop.baseline_note.value:.4f} from 1 of 2 seeds" in line, line
    view = StringIO()
    Console(file=view, width=200).print(render_progress({}, pop))
    assert f"baseline score {pop.baseline_note.value:.4f} (1 of 2 seeds)" in view.getvalue()
    # the seed-1 trial is still running detached; this test does not wait a minute for it
    for lz in pop.baseline_leases:
        if lz.state == "running":
            d.runner.cancel(lz.handle)


def test_timed_out_baseline_is_said_plainly_not_retried(make_repo, tmp_path):
    repo = make_repo({".autoresearch.toml": TOY_MANIFEST.replace("time_budget_s = 30", "time_budget_s = 2"),
                      "run.py": "import time\ntime.sleep(30)\n",
                      "evaluate.py": "print('---')\nprint('score: 1')\n"}, "research")
    pop = run_until_settled(write_config(tmp_path, repo), timeout=90)
    n = pop.baseline_note
    assert n is not None and n.status == Status.TIMED_OUT
    # two slots ran both seeds at once; neither was run a second time (no "-r1" retry)
    assert all("-r" not in t.trial_id and t.status == Status.TIMED_OUT for t in n.trials), n.trials
    assert "time_budget_s (2 s)" in n.error and "Not retried" in n.error
    assert not git(repo, "notes", "--ref", "autoresearch-runs", "list").strip()   # no lease left to re-run


def test_ideas_are_judged_against_the_complete_baseline(toy_env, tmp_path):
    """An idea whose note lands between baseline seeds gets its decision when the last seed is in;
    with one baseline seed configured, the baseline is complete at seed 0."""
    from autoresearchd.config import load_config
    from autoresearchd.engine.parts import build_engine
    from autoresearchd.engine.judge import fill_baseline
    from autoresearchd.research import open_research
    from autoresearchd.store.ledger import Ledger
    from autoresearchd.store.notes import Note, Trial
    from autoresearchd.store.population import read_population
    lower = branch_idea(toy_env, "a/lower", "Lower x", {"run.py": (toy_env / "run.py").read_text()
                        .replace("x = 1.0", "x = 0.5")})
    cfg = load_config(write_config(tmp_path, toy_env))
    research = open_research(cfg)
    ledger = Ledger(research.repo)
    base = research.baseline_commit

    def trial(seed, v):
        return Trial(trial_id=f"t{seed}", seed=seed, status=Status.SUCCEEDED, value=v)
    ledger.write_note(base, Note(status=Status.SUCCEEDED, value=1.0, values=[1.0], seeds=[0], std=0.0,
                                 seeds_planned=2, trials=[trial(0, 1.0)]))
    pop = read_population(research.repo, research.baseline_ref)
    idea = pop.by_commit[lower]
    n = Note(status=Status.SUCCEEDED, value=0.5, values=[0.5], seeds=[0], trials=[trial(0, 0.5)])
    fill_baseline(n, idea, pop, research.manifest, cfg.policy)
    assert n.baseline == 1.0 and n.delta == -0.5 and n.decision is None     # measured, not yet judged
    ledger.write_note(lower, n)
    ledger.write_note(base, Note(status=Status.SUCCEEDED, value=1.01, values=[1.0, 1.02], seeds=[0, 1],
                                 std=0.014, seeds_planned=2, trials=[trial(0, 1.0), trial(1, 1.02)]))
    from autoresearchd.store.lifecycle import Lifecycle
    disp = build_engine(cfg, research, None, Lifecycle(research.repo)).collector
    assert disp.backfill(read_population(research.repo, research.baseline_ref))
    judged = read_population(research.repo, research.baseline_ref).by_commit[lower].note
    assert judged.decision == "promoted" and judged.baseline == 1.01
    # one configured seed: complete at once, judged at once
    cfg.policy.baseline_seeds = 1
    ledger.write_note(base, Note(status=Status.SUCCEEDED, value=1.0, values=[1.0], seeds=[0], std=0.0,
                                 seeds_planned=1, trials=[trial(0, 1.0)]))
    pop = read_population(research.repo, research.baseline_ref)
    n = Note(status=Status.SUCCEEDED, value=0.5, values=[0.5], seeds=[0], trials=[trial(0, 0.5)])
    fill_baseline(n, pop.by_commit[lower], pop, research.manifest, cfg.policy)
    assert n.decision == "promoted"


def test_init_then_start_inside_runs_that_repo_and_pushed_branches(tmp_path, monkeypatch, capsys):
    """`init DIR` says DIR is the research repo; `cd DIR && start` must use DIR, not a second repo
    under DIR/.autoresearch/research, so a branch pushed to DIR gets run. Before the first note,
    `git log --notes` prints no "notes ref ... is invalid" warning; after, the README's command
    shows the ideas' results."""
    import subprocess

    from autoresearchd.app import build_daemon
    from autoresearchd.cli import main
    from autoresearchd.config import load_config
    from autoresearchd.engine.plan import settled
    from autoresearchd.validate import require_valid
    from conftest import TOY_EVAL, TOY_RUN
    template = tmp_path / "toy-template"
    template.mkdir()
    for name, text in {".autoresearch.toml": TOY_MANIFEST + "\n[policy]\nbaseline_seeds = 1\n"
                       "[llm]\nprovider = \"none\"\n[daemon]\ntick_s = 0.3\n",
                       "run.py": TOY_RUN, "evaluate.py": TOY_EVAL}.items():
        (template / name).write_text(text)
    d = tmp_path / "research"
    monkeypatch.chdir(tmp_path)
    assert main(["init", "--env", str(template), str(d)]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert f"created research repo {d}" in said and f"cd {d} && autoresearchd start" in said
    p = subprocess.run(["git", "log", "--oneline", "--notes"], cwd=d, capture_output=True, text=True)
    assert p.returncode == 0 and "invalid" not in p.stderr and not p.stderr.strip(), p.stderr
    cl = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(d), str(cl))
    (cl / "run.py").write_text(TOY_RUN.replace("x = 1.0", "x = 0.5"))
    git(cl, "commit", "-qam", "Halve x")
    git(cl, "push", "-q", "origin", "HEAD:refs/heads/idea/me/half")
    pushed = git(cl, "rev-parse", "HEAD").strip()

    monkeypatch.chdir(d)
    capsys.readouterr()
    # `start` validates DIR itself (not the default research.repo/research.env) before running it
    assert main(["doctor"]) == 0, capsys.readouterr().out
    assert f"from research repo {d}" in " ".join(capsys.readouterr().out.split())
    require_valid(load_config())
    daemon = build_daemon(load_config(), with_llm=False)
    assert daemon.repo.path.resolve() == d.resolve() and "[env] manifest" in daemon.research.why
    pop = run_until_settled(daemon=daemon, until=settled)
    assert pop.by_commit[pushed].note.status == Status.SUCCEEDED
    assert not (d / ".autoresearch").exists()
    shown = git(d, "log", "--oneline", "--notes", "--branches")
    assert "Halve x" in shown and "succeeded score=0.5" in shown, shown
    # the README's clone recipe, verbatim, run in the clone that pushed: it shows the result
    from conftest import REPO_ROOT
    recipe = [ln.split(" #")[0] for ln in (REPO_ROOT / "README.md").read_text().splitlines()
              if ln.startswith(("git config notes.displayRef", "git fetch origin"))]
    assert len(recipe) == 2, recipe
    p = subprocess.run(["bash", "-c", " && ".join(recipe)], cwd=cl, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "Halve x" in p.stdout and "succeeded score=0.5" in p.stdout, p.stdout + p.stderr


def test_report_without_matplotlib_says_what_to_install(toy_env, tmp_path):
    """The README's install (the tinygpt extra) brings matplotlib; without it `report` says in one
    line what to install (exit 2) instead of a ModuleNotFoundError traceback."""
    import subprocess
    import sys
    import tomllib

    from conftest import REPO_ROOT
    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(d.startswith("matplotlib") for d in extras["tinygpt"])
    cfg = write_config(tmp_path, toy_env)
    block = ("import sys\nclass B:\n def find_spec(self, name, path=None, target=None):\n"
             "  if name.split('.')[0] == 'matplotlib': raise ImportError('blocked: ' + name)\n"
             "sys.meta_path.insert(0, B())\nfrom autoresearchd.cli import main\n"
             f"sys.exit(main(['--config', {str(cfg)!r}, 'report', '--out', {str(tmp_path / 'r')!r}]))\n")
    p = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip() == ("autoresearchd: report needs matplotlib: pip install 'autoresearchd[report]' "
                                "(or pip install matplotlib)"), p.stderr


def test_one_slot_runs_baseline_seed_0_first(toy_env, tmp_path):
    """With one slot (the demo's), seed 1 is not pre-staged on it before seed 0 has its result: the
    two raced for the slot lock, and seed 1 winning doubled the wait for the first note."""
    from autoresearchd.app import build_daemon
    from autoresearchd.config import load_config
    from autoresearchd.engine.plan import settled
    from autoresearchd.store.population import read_population
    cfg = load_config(write_config(tmp_path, toy_env))
    cfg.runner.slots = 1
    d = build_daemon(cfg, with_llm=False)
    try:
        d.tick()
        assert [lz.seed for lz in read_population(d.repo, d.research.baseline_ref).baseline_leases] == [0]
        run_until_settled(daemon=d, until=settled)
    finally:
        d.runner.close()
    assert [n.seeds for n in _note_history(toy_env, d.research.baseline_commit)] == [[0], [0, 1]]
    assert read_population(d.repo, d.research.baseline_ref).baseline_note.seeds == [0, 1]


def test_status_says_stopping_after_a_graceful_stop(toy_env, tmp_path, capsys):
    """A graceful stop waits for the implementations in flight (minutes under load) while the
    heartbeat has stopped: `status` must say "stopping", not "daemon running" as if nothing happened."""
    import signal

    from autoresearchd.app import build_daemon
    from autoresearchd.cli import main
    from autoresearchd.config import load_config
    from autoresearchd.store.population import read_population
    cfg = write_config(tmp_path, toy_env)
    daemon = build_daemon(load_config(cfg), with_llm=False)
    daemon._write_state(read_population(daemon.repo, daemon.research.baseline_ref))
    assert main(["--config", str(cfg), "status"]) == 0
    assert "daemon running" in capsys.readouterr().out
    daemon._on_signal(signal.SIGTERM, None)                 # what `autoresearchd stop` sends
    assert main(["--config", str(cfg), "status"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "daemon stopping" in out and "daemon running" not in out and "stop --now" in out, out
    daemon.runner.close()
