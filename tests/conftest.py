"""Shared fixtures: real git repos in temporary directories; offline W&B; no network but loopback."""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Tests must never pick up a developer's real keys.
for _k in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
    os.environ.pop(_k, None)

REPO_ROOT = Path(__file__).resolve().parent.parent

# Under CI a test that skips because a system tool is missing is a failed run, not a quiet green
# one: without this, a machine that lost sshd or bwrap would stop testing the ssh runner or the
# sandbox and CI would still pass. The tools are those .ci/run installs; the reasons name them.
SYSTEM_TOOLS = re.compile(r"sshd|openssh|bwrap|bubblewrap|slurm|munge|\bnode\b|\bnpm\b|chromium|tmux"
                          r"|strace|apt-get install", re.IGNORECASE)


def ci_strict() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _fail_missing_tool(report) -> None:
    """Turn a skip for a missing system tool into a failure (under CI only)."""
    if not (ci_strict() and report.skipped):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if SYSTEM_TOOLS.search(reason or ""):
        report.outcome = "failed"
        report.longrepr = f"CI=true: a system tool this test needs is missing, so it would have skipped: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_missing_tool(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    # a module-level pytest.skip(allow_module_level=True) surfaces here, not in runtest
    outcome = yield
    _fail_missing_tool(outcome.get_result())


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


def run_until_settled(cfg_path, timeout=120, with_llm=False):
    """Run the real daemon in-process until nothing is queued (but what a spent budget holds),
    implementing or running: the daemon's own judgement (Daemon.settled), as `--until idle` uses it."""
    import time

    from autoresearchd.app import build_daemon
    from autoresearchd.config import load_config
    from autoresearchd.store.population import read_population
    d = build_daemon(load_config(cfg_path), with_llm=with_llm)
    t0 = time.time()
    timed_out = []

    def until(pop) -> bool:
        if d.settled(pop):
            return True
        if time.time() - t0 > timeout:
            timed_out.append(True)
            return True
        return False

    d.run_forever(install_signals=False, until=until)
    pop = read_population(d.repo, d.research.baseline_ref)
    if timed_out:
        # a run that never settles is a failed test, not a quiet return into asserts that may pass
        raise AssertionError(f"the daemon did not settle within {timeout}s: "
                             f"{[(i.idea_id, i.status) for i in pop.ideas][:20]}")
    return pop


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
