"""tinygpt's evaluation time: the previous one-process evaluator against the split evaluation (issue 26).

Trains one artifact (TINYGPT_STEPS, default 20: the evaluation's cost does not depend on training),
then times, alternating old and new, `--reps` times each:
  process  `python evaluate.py` of the previous evaluator (tests/data/tinygpt_evaluate_v1.py, git main
           before issue 26) against the new one by hand (the three steps: scorer inputs, the model
           runner twice as subprocesses, scorer score);
  trial    a whole trial through trial.sh on the local runner with bwrap, `run = true` and the
           artifact in code/: the old evaluator as a one-step `evaluate` against the split evaluation
           (three sandboxes more); the figure is the wrapper's own `done - started`.
Prints the median wall times, the ratio new/old (the goal is at most 2), both val_loss values, and
for the process mode the CPU seconds (user + sys) of the process tree, which a loaded machine
inflates far less than wall time.

    .venv/bin/python bench/eval_split.py [--reps 3] [--steps 20] [--modes process,trial]
"""

from __future__ import annotations

import argparse
import io
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV = ROOT / "envs" / "tinygpt"
OLD = ROOT / "tests" / "data" / "tinygpt_evaluate_v1.py"
sys.path.insert(0, str(ROOT / "tests"))

from autoresearchd.config import RunnerCfg  # noqa: E402
from autoresearchd.manifest import parse_manifest  # noqa: E402
from autoresearchd.runners.base import PollState, TrialSpec  # noqa: E402
from autoresearchd.runners.local import LocalRunner  # noqa: E402
from autoresearchd.runners.metrics import parse_block  # noqa: E402


def tar_of(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in files.items():
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode = len(data), 0o644
            t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


CPU: dict[str, list[float]] = {"old": [], "new": []}     # process mode: CPU seconds of the whole tree


def timed(cmd: list[str], cwd: Path, env: dict, which: str) -> tuple[float, float]:
    r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    dt, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU[which].append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
    if p.returncode != 0:
        raise SystemExit(f"{cmd} failed: {p.stderr[-2000:]}")
    return dt, parse_block(p.stdout)["val_loss"]


def trial(runner: LocalRunner, m, eval_files: dict[str, bytes], model: bytes, work: Path) -> tuple[float, float]:
    spec = TrialSpec(trial_id=f"b-{time.monotonic_ns()}", commit="0" * 40, seed=0, manifest=m,
                     code_tar=tar_of({"out/model.pt": model}), eval_tar=tar_of(eval_files),
                     frozen_paths=list(m.frozen))
    runner.manifest = m
    h = runner.submit(spec, runner.slots()[0])
    while runner.poll(h) != PollState.DONE:
        time.sleep(0.2)
    out = runner.fetch(h)
    if out.error:
        raise SystemExit(f"trial failed: {out.error}\n{out.log.decode(errors='replace')[-2000:]}")
    d = Path(h["dir"])
    took = float((d / "done").read_text()) - float((d / "started").read_text())
    runner.cleanup(h)
    return took, out.metrics["val_loss"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--modes", default="process,trial")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="eval-split-"))
    try:
        code = tmp / "code"
        shutil.copytree(ENV, code, ignore=shutil.ignore_patterns("out", "__pycache__"))
        shutil.copy(OLD, code / "evaluate_v1.py")
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp), "TINYGPT_STEPS": str(a.steps)}
        subprocess.run([sys.executable, "train.py"], cwd=code, env=env, check=True, capture_output=True, timeout=1800)
        model = (code / "out" / "model.pt").read_bytes()
        print(f"tinygpt evaluation, old (one process) vs new (split); {a.reps} reps each, alternating; "
              f"load average {os.getloadavg()[0]:.1f}")
        new_m = parse_manifest((ENV / ".autoresearch.toml").read_text())
        old_m = new_m.model_copy(update={"model": None, "frozen": ["data.py", "evaluate.py"], "run": "true"})
        new_m = new_m.model_copy(update={"run": "true"})
        heldout = {rel: (ENV / rel).read_bytes() for rel in new_m.heldout()}
        deps = sorted({p for p in sys.path if p.endswith("site-packages") and not p.startswith(sys.prefix)})
        runner = LocalRunner(RunnerCfg(kind="local", slots=1, sandbox="bwrap", sandbox_binds=deps), new_m,
                             str(tmp / "work"))
        for mode in a.modes.split(","):
            old_t, new_t, vals = [], [], {}
            for _ in range(a.reps):
                if mode == "process":
                    t, vals["old"] = timed([sys.executable, "evaluate_v1.py"], code, env, "old")
                    old_t.append(t)
                    t, vals["new"] = timed([sys.executable, "evaluate.py"], code, env, "new")
                    new_t.append(t)
                else:
                    files = {rel: (ENV / rel).read_bytes() for rel in ("data.py",)} | heldout
                    t, vals["old"] = trial(runner, old_m, files | {"evaluate.py": OLD.read_bytes()}, model, tmp)
                    old_t.append(t)
                    files = {rel: (ENV / rel).read_bytes() for rel in new_m.frozen} | heldout
                    t, vals["new"] = trial(runner, new_m, files, model, tmp)
                    new_t.append(t)
            mo, mn = statistics.median(old_t), statistics.median(new_t)
            print(f"{mode:8s} old {mo:6.2f} s  new {mn:6.2f} s  ratio {mn / mo:4.2f}  "
                  f"(old {', '.join(f'{x:.2f}' for x in old_t)}; new {', '.join(f'{x:.2f}' for x in new_t)})  "
                  f"val_loss old {vals['old']:.6f} new {vals['new']:.6f}")
            if mode == "process":      # CPU time is what the load average does not inflate
                co, cn = statistics.median(CPU["old"]), statistics.median(CPU["new"])
                print(f"{'cpu':8s} old {co:6.2f} s  new {cn:6.2f} s  ratio {cn / co:4.2f}  (user + sys of the process tree)")
        runner.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
