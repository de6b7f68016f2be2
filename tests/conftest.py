"""Shared fixtures: real git repos in temporary directories; offline W&B; no network but loopback."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
# Under CI a test that would skip because a system tool is missing fails the run instead: every such
# skip goes through tests/needs.py (need, needs), whose hooks these are; tests/test_ci_strict.py keeps
# every other skip out of the suite.
from needs import pytest_configure, pytest_runtest_setup  # noqa: F401  (hooks)

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The local runner's default work root (defaults.local_trial_root) follows XDG_CACHE_HOME: every test's
# research repo is new, so each left its own folder in the developer's ~/.cache (2,252 after a few runs).
# One folder per process, removed when it exits; daemons and CLIs the tests start inherit it.
_CACHE = tempfile.mkdtemp(prefix="ard-test-cache-")
os.environ["XDG_CACHE_HOME"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, True)
# Tests must never pick up a developer's real keys.
for _k in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
    os.environ.pop(_k, None)

REPO_ROOT = Path(__file__).resolve().parent.parent


SLURM_TOGETHER = "slurm"     # the nodeid word that keeps a test on the Slurm worker (below)
# Modules whose module-scoped fixture runs real trials for minutes and whose tests only read what it
# made: one unit each, so the fixture runs once per parameter, not once on each worker that draws one
# of their tests. CI ran test_tamper_model's fixture four times (83-121 s each) where two would do.
MODULE_TOGETHER = ("tests/test_tamper_model.py", "tests/test_split_protocol.py")


def pytest_xdist_make_scheduler(config, log):
    """The suite runs on pytest-xdist workers (pyproject's addopts). The test Slurm cluster has fixed
    ports (tests/fixtures_slurm.py: one per machine), so every test whose id says "slurm" is one unit
    of work, run by one worker, first (xdist orders units by size). xdist's own `xdist_group` mark
    cannot do this here: it renames node ids in a way pytest 9.2's nodes no longer read. The modules
    of MODULE_TOGETHER are a unit each too; every other test is a unit of its own (the even spread
    xdist's `load` gives). Each worker starts its own sshd fleet on free ports."""
    from xdist.scheduler import LoadScopeScheduling     # only called under xdist, which is a dev extra

    class Together(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if SLURM_TOGETHER in nodeid:
                return SLURM_TOGETHER
            module = nodeid.split("::", 1)[0]
            return module if module in MODULE_TOGETHER else nodeid
    return Together(config, log)


def pytest_collection_modifyitems(config, items) -> None:
    """A test that starts or shares the Slurm cluster must say "slurm" in its id, or the scheduler
    above would run it beside another worker's cluster: those asking for `slurm_cluster`, and the
    cases parametrized on the Slurm runner."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if ("slurm_cluster" in getattr(item, "fixturenames", ()) or "slurm" in params.values()) \
                and SLURM_TOGETHER not in item.nodeid:
            raise pytest.UsageError(f"{item.nodeid} uses the test Slurm cluster: put 'slurm' in its name")


STOP_GRACE_S = 30           # run_until_settled, run_for: how long a stopped daemon may take to stop


def git(cwd, *args, input=None, check=True) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    p = subprocess.run(["git", *args], cwd=cwd, input=input, capture_output=True, text=True, env=env)
    if check and p.returncode != 0:
        raise AssertionError(f"git {args} failed: {p.stderr}")
    return p.stdout


@pytest.fixture
def make_repo(tmp_path):
    """make_repo(files) -> path of a fresh git repo on `main` with one commit of `files`."""
    def _make(files: dict[str, str], name: str = "repo") -> Path:
        d = tmp_path / name
        d.mkdir()
        git(d, "init", "-q", "-b", "main")
        for rel, text in files.items():
            p = d / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        git(d, "add", "-A")
        git(d, "commit", "-q", "-m", "baseline")
        return d
    return _make


TOY_MANIFEST = """[env]
name = "toy"
run = "python3 run.py"
evaluate = "python3 evaluate.py"
metric = "score"
goal = "min"
time_budget_s = 30
eval_budget_s = 30
frozen = ["evaluate.py"]
artifacts = ["out.txt"]
context = "A toy environment: run.py writes a number, evaluate.py reads it back."
"""

KNOB_X = """
[[env.knobs]]
name = "x"
low = -2.0
high = 2.0
baseline = 1.5
"""


def knob_manifest(knobs: str) -> str:
    """The toy manifest with `[[env.knobs]]` tables, without a compute cap: its runs take a few
    milliseconds, so their CPU seconds are all noise."""
    return TOY_MANIFEST.replace('name = "toy"', 'name = "knobby"') + "compute_cap = 0\n" + knobs


TOY_RUN = """import os, random
random.seed(int(os.environ.get("AUTORESEARCH_SEED", "0")))
x = 1.0
with open("out.txt", "w") as f:
    f.write(str(x + random.random() * 0.01))
print("---")
print("score: 123.0")  # run's own claim is ignored: evaluate is the metric of record
"""

TOY_EVAL = """import os
v = float(open(os.path.join(os.environ["AUTORESEARCH_ARTIFACTS"], "out.txt")).read())
print("---")
print(f"score: {v}")
"""


@pytest.fixture
def toy_env(make_repo):
    """A research repo for a tiny env with a frozen evaluate step (no torch needed)."""
    return make_repo({".autoresearch.toml": TOY_MANIFEST, "run.py": TOY_RUN, "evaluate.py": TOY_EVAL}, "research")


def write_config(path: Path, research: Path, extra: str = "") -> Path:
    cfg = path / ".autoresearch.toml"
    # sandbox = "none": these daemon tests count runs in files outside the trial (docs/security.md);
    # the sandbox itself is tested by test_sandbox, test_tamper and the runner contract
    cfg.write_text(f'[research]\nrepo = "{research}"\n[runner]\nsandbox = "none"\nkind = "local"\nslots = 2\n'
                   f'[daemon]\ntick_s = 0.3\n[policy]\nbaseline_seeds = 2\n[llm]\nprovider = "none"\n{extra}')
    return cfg


def branch_idea(repo: Path, name: str, message: str, edits: dict[str, str], base: str = "main") -> str:
    """Create idea/<name> off base with the given file contents, without touching the checkout."""
    wt = repo.parent / f"wt-{name.replace('/', '-')}"
    git(repo, "worktree", "add", "-q", "-b", f"idea/{name}", str(wt), base)
    for rel, text in edits.items():
        (wt / rel).write_text(text)
    git(wt, "commit", "-qam", message)
    sha = git(wt, "rev-parse", "HEAD").strip()
    git(repo, "worktree", "remove", "--force", str(wt))
    return sha


def run_until_settled(cfg_path=None, timeout=120, with_llm=False, *, daemon=None, until=None):
    """Run the real daemon in-process until nothing is queued (but what a spent budget holds),
    implementing or running: the daemon's own judgement (Daemon.settled), as `--until idle` uses it.
    `until(pop)` waits for something else instead; `daemon` is one the test built (and instrumented)
    instead of cfg_path's. Returns the population read after the daemon stopped.

    The daemon runs on a thread of its own and this one keeps the deadline: a run that has not settled
    after `timeout` seconds fails the test then, whatever holds it (a trial, a busy proposer or
    implementer, a stuck pass). The loop consults `until` only between passes and while no worker is
    busy, so a deadline kept there would wait on them (up to pytest-timeout's 600 s), and one folded
    into `until` (`... or time.time() - t0 > N`) returned quietly into asserts that may pass."""
    from autoresearchd.app import build_daemon
    from autoresearchd.config import load_config
    from autoresearchd.store.population import read_population
    d = daemon if daemon is not None else build_daemon(load_config(cfg_path), with_llm=with_llm)
    t, raised = _daemon_thread(d, until or d.settled)
    t.join(timeout)
    if t.is_alive():
        st = d.last_state
        busy = f"proposing: {bool(st.get('proposing'))}, implementing: {st.get('implementing') or []}"
        stuck = _stop(d, t)
        pop = read_population(d.repo, d.research.baseline_ref)
        what = "settle" if until is None else f"reach {getattr(until, '__name__', 'its until')}"
        # a run that never settles is a failed test, not a quiet return into asserts that may pass
        raise AssertionError(f"the daemon did not {what} within {timeout}s ({busy}): "
                             f"{[(i.idea_id, i.status.value) for i in pop.ideas][:20]}{stuck}")
    if raised:
        raise raised[0]
    return read_population(d.repo, d.research.baseline_ref)


def run_for(daemon, seconds: float):
    """Run a built daemon for a fixed time, then stop it: for a test that counts what the daemon does
    meanwhile (an idle daemon's passes), not one that waits for a state. Fails if the daemon raised,
    or did not stop within STOP_GRACE_S of the stop. Returns the population read after."""
    from autoresearchd.store.population import read_population
    t, raised = _daemon_thread(daemon, None)
    t.join(seconds)
    if t.is_alive():
        stuck = _stop(daemon, t)
        if stuck:
            raise AssertionError(f"the daemon, run for {seconds}s, did not stop{stuck}")
    if raised:
        raise raised[0]
    return read_population(daemon.repo, daemon.research.baseline_ref)


def _daemon_thread(d, until):
    """d.run_forever on a thread of its own (started); what it raised, to raise on the test's thread."""
    import threading
    raised: list[BaseException] = []

    def run() -> None:
        try:
            d.run_forever(install_signals=False, until=until)
        except BaseException as e:      # noqa: BLE001 - raised again on the test's thread
            raised.append(e)

    t = threading.Thread(target=run, name="daemon-under-test", daemon=True)
    t.start()
    return t, raised


def _stop(d, t) -> str:
    """Stop the daemon on thread t; "" once it stopped, else where it is stuck (for the failure)."""
    import sys
    import traceback
    d.stop()                        # ends the loop after the pass in progress
    t.join(STOP_GRACE_S)
    return "" if not t.is_alive() else (
        f"; it did not stop within {STOP_GRACE_S}s of the deadline, at:\n"
        + "".join(traceback.format_stack(sys._current_frames()[t.ident])))


def wait_file(p: Path, timeout: float = 30.0) -> str:
    """The stripped text of a file once it exists and is non-empty (a trial's stamp or pid file)."""
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if p.exists() and p.read_text().strip():
            return p.read_text().strip()
        time.sleep(0.05)
    raise AssertionError(f"{p} never appeared")


def sleeper() -> str:
    """A `sleep` argument no other process has: the run's PIDs are its sandbox's (a PID namespace),
    so the host finds its processes by command line (sleeper_pids)."""
    return f"1000.{uuid.uuid4().int % 10**9:09d}"


def sleeper_pids(arg: str) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and (p / "cmdline").read_bytes().split(b"\0")[:2] == [b"sleep", arg.encode()]:
                out.append(int(p.name))
        except OSError:
            continue
    return out
