"""Learning curves of real ideas, for calibrating bench/sim_world.py's curve family (issue 29): each idea
of a replay file applied to the tinygpt template, trained at several seeds, its progress lines
("step N  loss L  lr X  Ts", every 25 steps and the last) read as a curve, and the frozen evaluate.py's
val_loss as the final value. One JSON file out, in the format sim_world.TimedWorld.curve() writes.

    python bench/collect_curves.py --out curves.json [--seeds 0,1,2] [--ideas 30] [--steps 200]
        [--replay envs/replays/tinygpt.jsonl] [--parallel 1] [--no-baseline] [--resume]

The template is envs/tinygpt; the unchanged template is run too (the idea "baseline"), so every curve
has the baseline's curves at the same seeds to compare with. An idea's diff is the replay's `code_diff`,
else its revisions in order, the first that `git apply --recount` takes and that passes
`train.py --check`; an idea none of whose diffs works is recorded with status "apply_failed" or
"check_failed" and no curve. Runs use TINYGPT_THREADS=1, so `--parallel N` runs N at once.

Output: {"env": "tinygpt", "steps": S, "seeds": [...], "runs": [{"idea", "seed", "status",
"t": [step / S ...], "step": [...], "value": [train loss ...], "progress": {"t": [...], "value": [...]},
"val_loss", "wall_s"}]}. `t` runs in (0, 1]; `value` is the minibatch training loss the template prints
every 25 steps (one minibatch: noisy per point); `progress` is the curve the daemon itself sees, the
progress protocol's points ($AUTORESEARCH_PROGRESS: the mean training loss of every 10 steps), read by
the daemon's own parser (runners/progress.py); `val_loss` is the metric of record.

Cost: a 200-step run takes about 48 s on an idle core (docs/env-tinygpt.md), 2 to 8 minutes on a
loaded shared one; 30 ideas (envs/replays/tinygpt.jsonl's 15 and bench/data/tinygpt_ideas_b.jsonl's
15) x 3 seeds plus the baseline is 93 runs. `--resume` goes on from what an interrupted collection
kept. The runs collected so far are in bench/data/curves_tinygpt_a.json and _b.json (one per replay
file, so each resumes on its own; docs/policies.md,
"Calibration", says how many), and bench/calibrate_curves.py fits them.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autoresearchd.runners import progress

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "envs" / "tinygpt"
STEP = re.compile(r"^step\s+(\d+)\s+loss\s+([-0-9.naninf]+)", re.M)
VAL = re.compile(r"^val_loss:\s*([-0-9.eE+]+)", re.M)


def diffs_of(rec: dict) -> list[str]:
    """The idea's diff texts in the order to try them (fences and prose stripped by the daemon's own
    extractor)."""
    from autoresearchd.implement.patching import extract_diff
    out = []
    for text in [rec.get("code_diff")] + list(rec.get("revisions") or []):
        d = extract_diff(text or "") if text else None
        if d:
            out.append(d if d.endswith("\n") else d + "\n")
    return out


def prepare(rec: dict | None, work: Path) -> str:
    """Copy the template into `work` and apply the idea: the status ("ok" or why not)."""
    shutil.copytree(TEMPLATE, work, ignore=shutil.ignore_patterns("out", "__pycache__"))
    if rec is None:
        return "ok"
    clean = {p: p.read_bytes() for p in work.rglob("*") if p.is_file()}
    status = "apply_failed"
    for d in diffs_of(rec):
        for p, data in clean.items():
            p.write_bytes(data)
        r = subprocess.run(["git", "apply", "--recount", "-"], cwd=work, input=d.encode(),
                           capture_output=True, check=False)
        if r.returncode != 0:
            continue
        c = subprocess.run([sys.executable, "train.py", "--check"], cwd=work, capture_output=True,
                           env={**os.environ, "TINYGPT_THREADS": "1"}, check=False, timeout=600)
        if c.returncode == 0:
            return "ok"
        status = "check_failed"
    return status


def run_one(title: str, rec: dict | None, seed: int, steps: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="curves-") as d:
        work = Path(d) / "env"
        status = prepare(rec, work)
        row = {"idea": title, "seed": seed, "status": status, "t": [], "step": [], "value": [],
               "progress": {"t": [], "value": []}, "val_loss": None, "wall_s": None}
        if status != "ok":
            return row
        prog = Path(d) / "progress.jsonl"
        env = {**os.environ, "AUTORESEARCH_SEED": str(seed), "TINYGPT_THREADS": "1", "TINYGPT_STEPS": str(steps),
               "AUTORESEARCH_PROGRESS": str(prog)}
        t0 = time.monotonic()
        tr = subprocess.run([sys.executable, "train.py"], cwd=work, env=env, capture_output=True, text=True,
                            check=False, timeout=3600)
        row["wall_s"] = round(time.monotonic() - t0, 1)
        for s, loss in STEP.findall(tr.stdout):
            row["step"].append(int(s) + 1)
            row["t"].append((int(s) + 1) / steps)
            row["value"].append(float(loss))
        # the curve the daemon itself sees: the progress protocol's points, read by its own parser
        pts = progress.parse(prog.read_bytes(), "val_loss") if prog.exists() else []
        row["progress"] = {"t": [t for t, _ in pts], "value": [v for _, v in pts]}
        if tr.returncode != 0:
            row["status"] = "failed"
            return row
        ev = subprocess.run([sys.executable, "evaluate.py"], cwd=work, env=env, capture_output=True, text=True,
                            check=False, timeout=1800)
        m = VAL.search(ev.stdout)
        row["val_loss"] = float(m.group(1)) if m else None
        row["status"] = "ok" if m else "eval_failed"
        return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--replay", default=str(ROOT / "envs" / "replays" / "tinygpt.jsonl"))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--ideas", type=int, default=30, help="at most this many ideas of the replay file")
    ap.add_argument("--steps", type=int, default=200, help="training steps (the template's 200 by default)")
    ap.add_argument("--parallel", type=int, default=1, help="runs at once (each uses one thread)")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip the unchanged template (a second batch of ideas at seeds already run)")
    ap.add_argument("--resume", action="store_true", help="keep the runs already in --out and run only the rest")
    a = ap.parse_args(argv)
    recs = [json.loads(line) for line in open(a.replay) if line.strip()][: a.ideas]
    seeds = [int(s) for s in a.seeds.split(",")]
    work = [("baseline", None, s) for s in seeds if not a.no_baseline] + [(r["title"], r, s) for r in recs for s in seeds]
    runs = []
    if a.resume and Path(a.out).exists():
        # a collection is hours of CPU: an interrupted one goes on where it stopped, the runs it kept
        # (any status) kept and not run again
        runs = json.loads(Path(a.out).read_text())["runs"]
        done = {(r["idea"], r["seed"]) for r in runs}
        work = [w for w in work if (w[0], w[2]) not in done]
        print(f"resuming: {len(runs)} runs kept, {len(work)} to go", flush=True)
    with concurrent.futures.ThreadPoolExecutor(a.parallel) as ex:
        for row in ex.map(lambda w: run_one(w[0], w[1], w[2], a.steps), work):
            runs.append(row)
            print(f"{row['idea'][:40]:40s} seed {row['seed']}: {row['status']} val_loss {row['val_loss']} "
                  f"({len(row['t'])} points, {row['wall_s']} s)", flush=True)
            Path(a.out).write_text(json.dumps({"env": "tinygpt", "steps": a.steps, "seeds": seeds,
                                               "runs": runs}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
