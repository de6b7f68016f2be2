"""The frozen launcher: runs train.py on every visible GPU and owns the wall-clock budget. FROZEN.

    python launch.py            the trial's `run`: torchrun --standalone --nproc_per_node=<GPUs> train.py
    python launch.py --smoke    the idea `check`: a tiny CPU run on synthetic shards, then evaluate.py

The training budget (1,500 s, counted from the launch, so start-up and compilation are inside it) is
enforced here, outside the code that ideas edit. train.py learns the deadline from $NANOGPT_DEADLINE
(and the budget's length from $NANOGPT_BUDGET_S, for its progress curve's share of the run)
and, at the deadline, the launcher also creates $NANOGPT_STOP_FILE; train.py then finishes its step
and saves the model's body to $NANOGPT_ARTIFACT and its LM head to $NANOGPT_HEAD. Whatever is still
running a grace period later is killed. The run succeeds only if train.py exited 0 (or was killed
after the deadline) AND saved both files.

Knobs (environment; the manifest's defaults are the paper's): NANOGPT_TRAIN_BUDGET_S (1500),
NANOGPT_SAVE_GRACE_S (90), NANOGPT_NPROC (default: one process per visible GPU, 1 on a CPU host).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import shards  # noqa: E402

TRAIN_BUDGET_S = 1500.0
SAVE_GRACE_S = 90.0
KILL_WAIT_S = 10.0


def visible_gpus() -> int:
    """GPUs this run may use: CUDA_VISIBLE_DEVICES when set (empty means none), else nvidia-smi."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        return len([d for d in cvd.split(",") if d.strip() and d.strip() != "-1"])
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def stop_group(proc: subprocess.Popen) -> None:
    """TERM the whole training process group (torchrun and its workers), then KILL what is left."""
    _signal_group(proc, signal.SIGTERM)
    try:
        proc.wait(KILL_WAIT_S)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc, signal.SIGKILL)   # workers may outlive torchrun itself
    proc.wait()


def launch(train: Path, budget_s: float, grace_s: float, nproc: int, env: dict[str, str],
           artifact: Path, head: Path, workdir: Path) -> int:
    """Run train.py under the budget; return the launcher's exit code (0 = a usable artifact)."""
    for old in (artifact, head):
        if old.exists():
            old.unlink()                   # only a model saved by this run counts
    start = time.time()
    deadline = start + budget_s
    stop_file = Path(tempfile.mkdtemp(prefix="nanogpt-stop-")) / "stop"
    env = dict(env, NANOGPT_DEADLINE=f"{deadline:.3f}", NANOGPT_BUDGET_S=f"{budget_s:.3f}",
               NANOGPT_STOP_FILE=str(stop_file),
               NANOGPT_ARTIFACT=str(artifact), NANOGPT_HEAD=str(head), PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", str(train)]
    print(f"launch: {' '.join(cmd)}  (budget {budget_s:.0f}s, save grace {grace_s:.0f}s)", flush=True)
    # Own process group, so the budget can end every worker; a TERM from the trial wrapper is passed on.
    proc = subprocess.Popen(cmd, cwd=workdir, env=env, start_new_session=True)

    def forward(signum, _frame):
        stop_group(proc)
        sys.exit(128 + signum)

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, forward)
    killed = False
    try:
        proc.wait(max(0.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
        stop_file.touch()
        print(f"launch: training budget of {budget_s:.0f}s reached; asked train.py to stop and save", flush=True)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            print(f"launch: train.py still running {grace_s:.0f}s after the deadline; killing it", flush=True)
            stop_group(proc)
            killed = True
    _signal_group(proc, signal.SIGKILL)    # stray workers of a torchrun that already exited
    shutil.rmtree(stop_file.parent, ignore_errors=True)
    wall = time.time() - start
    if not killed and proc.returncode != 0:
        print(f"launch: train.py failed (exit {proc.returncode}) after {wall:.0f}s", flush=True)
        return proc.returncode if proc.returncode > 0 else 1
    missing = [str(p) for p in (artifact, head) if not p.is_file()]
    if missing:
        print(f"launch: FAILED: no model saved at {' and '.join(missing)} (train.py must save the body "
              f"and the head when told to stop)", flush=True)
        return 3
    print(f"launch: done in {wall:.0f}s; model saved at {artifact}", flush=True)
    return 0


def smoke(env: dict[str, str]) -> int:
    """The check: train a tiny model on CPU from synthetic shards, then score it with evaluate.py."""
    from make_synthetic_shards import make_shards
    tmp = Path(tempfile.mkdtemp(prefix="nanogpt-smoke-"))
    try:
        vocab = "512"      # a small vocabulary keeps the CPU steps fast; the model code is the same
        make_shards(tmp / "data", train_tokens=40_000, val_tokens=4_200, shard_tokens=20_000, vocab=int(vocab))
        env = dict(env, NANOGPT_DATA=str(tmp / "data"), NANOGPT_SMOKE="1", NANOGPT_SMOKE_VOCAB=vocab,
                   CUDA_VISIBLE_DEVICES="",
                   TORCHDYNAMO_DISABLE="1", OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "2"))
        art = tmp / shards.ARTIFACT
        art.parent.mkdir(parents=True)
        budget = float(env.get("NANOGPT_TRAIN_BUDGET_S", 90))
        rc = launch(HERE / "train.py", budget, float(env.get("NANOGPT_SAVE_GRACE_S", 30)),
                    int(env.get("NANOGPT_NPROC", 1)), env, art, tmp / shards.HEAD_ARTIFACT, Path.cwd())
        if rc != 0:
            return rc
        ev = dict(env, AUTORESEARCH_ARTIFACTS=str(tmp), NANOGPT_EVAL_SIZE="4096", NANOGPT_EVAL_SEQ_LEN="64",
                  NANOGPT_EVAL_BATCH="8", NANOGPT_EVAL_VOCAB=vocab)
        for k in ("AUTORESEARCH_RESULT", "AUTORESEARCH_EVAL_PHASE", "AUTORESEARCH_MODEL_IO"):
            ev.pop(k, None)                    # the check's numbers are not a result; all steps run here
        return subprocess.run([sys.executable, str(HERE / "evaluate.py")], env=ev).returncode
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny CPU run + evaluation (the idea check)")
    a = ap.parse_args(argv)
    env = dict(os.environ)
    if a.smoke:
        return smoke(env)
    gpus = visible_gpus()
    nproc = int(env.get("NANOGPT_NPROC") or max(1, gpus))
    budget = float(env.get("NANOGPT_TRAIN_BUDGET_S") or TRAIN_BUDGET_S)
    grace = float(env.get("NANOGPT_SAVE_GRACE_S") or SAVE_GRACE_S)
    print(f"launch: {gpus} visible GPU(s), {nproc} process(es)", flush=True)
    return launch(HERE / "train.py", budget, grace, nproc, env, Path.cwd() / shards.ARTIFACT,
                  Path.cwd() / shards.HEAD_ARTIFACT, Path.cwd())


if __name__ == "__main__":
    sys.exit(main())
