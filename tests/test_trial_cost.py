"""What the trial wrapper (runners/trial.sh, runners/limits.sh) costs a short trial: the processes it
starts, counted exactly, and that its cheaper paths keep what the costlier ones recorded.

A no-op trial's whole overhead is the wrapper's processes (each fork and exec ~1-4 ms; the wrapper
once started ~390 for a sandboxed no-op trial, docs/benchmarks.md "Sandbox overhead per trial"). The
count is strace's (-f -c): every fork, clone and vfork of the wrapper's tree, its sandboxes' and the
no-op steps' included, whatever the load. (A fresh PID namespace would count without strace, but a
sandbox inside one cannot mount its /proc on a host whose /proc is partly masked, as in a container.)
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from needs import needs

from autoresearchd.config import RunnerCfg
from autoresearchd.manifest import EnvManifest
from autoresearchd.runners import sandbox as sandboxes
from autoresearchd.runners.base import TrialSpec
from autoresearchd.runners.local import LocalRunner
from fixtures_slurm import tar_of     # the runner tests' shared in-memory tar

BWRAP = sandboxes.get("bwrap")
needs_bwrap = needs("bwrap", BWRAP.available())
needs_strace = needs("strace", None if shutil.which("strace") else "not installed (apt-get install strace)")
NOOP = "echo ---; echo score: 1"
# Processes a no-op trial may start, its two sandboxes and steps included. This tree starts 19
# sandboxed, 17 bare (root, cgroups v2 + v1: the most groups limits.sh makes); 20 and 18 before the
# watchdog waited by `read -t` instead of `sleep` (issue 29's idle rerun), 33 and 31 before the
# fourth pass (docs/benchmarks.md "The wrapper, a fourth pass"), ~390 sandboxed before the first
# (a `$(printf %q)` per word of the ~130-word bwrap command line, twice) and ~130 bare.
MAX_PROCESSES = 24


def stage(tmp_path: Path, kind: str, run: str = NOOP, frozen: list[str] | None = None,
          code: dict[str, str] | None = None) -> Path:
    """A trial directory placed by the local runner's real submit, its wrapper not started."""
    frozen = ["evaluate.sh"] if frozen is None else frozen
    m = EnvManifest(run=run, evaluate=NOOP, metric="score", time_budget_s=60, eval_budget_s=60, frozen=frozen)
    r = LocalRunner(RunnerCfg(kind="local", slots=1, sandbox=kind, prestage=1), m, tmp_path / kind)
    r.LAUNCH = "{ echo 1; }"        # place only: the test starts trial.sh itself, in a namespace of its own
    spec = TrialSpec(trial_id="t1", commit="0" * 40, seed=0, manifest=m,
                     code_tar=tar_of(code if code is not None else {"train.sh": "true\n", "evaluate.sh": "true\n"}),
                     eval_tar=tar_of({"evaluate.sh": "true\n"}), frozen_paths=frozen)
    return Path(r.submit(spec, r.slots()[0])["dir"])


def processes_of(tdir: Path) -> int:
    """Run trial.sh under strace -f; the processes its tree started (fork, vfork, clone, clone3 calls)."""
    out = tdir.parent / "strace.txt"
    p = subprocess.run(["strace", "-f", "-c", "-o", str(out), "-e", "trace=fork,vfork,clone,clone3",
                        "bash", str(tdir / "trial.sh")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    total = [ln.split() for ln in out.read_text().splitlines() if ln.rstrip().endswith("total")]
    return int(total[-1][3]) if total else 0


@needs_bwrap
@needs_strace
@pytest.mark.parametrize("kind", ["bwrap", "none"])
def test_a_noop_trial_starts_few_processes(tmp_path, kind):
    tdir = stage(tmp_path, kind)
    n = processes_of(tdir)
    assert (tdir / "done").exists(), (tdir / "wrapper.log").read_text()
    assert "score: 1" in (tdir / "eval.head").read_text(), (tdir / "eval.head").read_text()
    assert (tdir / "run.rc").read_text().strip() == "0"
    # the stamps the daemon parses (EPOCHREALTIME now, `date +%s.%N` before): plain decimal seconds
    for f in ("started", "done", "run.time", "eval.time"):
        assert all(float(x) > 1e9 for x in (tdir / f).read_text().split()), f
    assert n <= MAX_PROCESSES, f"a no-op {kind} trial started {n} processes (at most {MAX_PROCESSES})"


@needs_bwrap
@needs_strace
def test_frozen_checksums_are_file_by_file_where_one_sha256sum_fails(tmp_path):
    """One sha256sum hashes every frozen file in the usual case; where a frozen path is absent or is
    no readable file it fails, and the per-file lines (naming absent paths, what is not a regular file,
    never opened, and unreadable ones) are kept: a run that deletes one frozen file and creates another
    is still named line by line."""
    run = "rm kept.py && echo new > later.py && echo ---; echo score: 1"
    tdir = stage(tmp_path, "bwrap", run=run, frozen=["kept.py", "later.py", "adir", "evaluate.sh"],
                 code={"kept.py": "x = 1\n", "evaluate.sh": "true\n", "adir/f.txt": "y\n"})
    processes_of(tdir)
    before = (tdir / "frozen.before").read_text().splitlines()
    after = (tdir / "frozen.after").read_text().splitlines()
    assert before[1:] == ["absent  later.py", "not a regular file  adir", before[3]] and before[3].endswith("  evaluate.sh")
    assert before[0].endswith("  kept.py") and after[0] == "absent  kept.py" and after[1].endswith("  later.py")
    tamper = (tdir / "tamper.txt").read_text()
    assert "> absent  kept.py" in tamper and "< absent  later.py" in tamper, tamper
    # all present: the one-process path writes what sha256sum writes file by file
    tdir2 = stage(tmp_path / "b", "bwrap", frozen=["evaluate.sh", "train.sh"])
    processes_of(tdir2)
    per_file = subprocess.run(["bash", "-c", "cd code && sha256sum -- evaluate.sh; sha256sum -- train.sh"],
                              cwd=tdir2, capture_output=True, text=True, check=True).stdout
    assert (tdir2 / "frozen.before").read_text() == per_file
    assert not (tdir2 / "tamper.txt").exists()
