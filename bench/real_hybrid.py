"""The real tinygpt comparison of issue 30: the hybrid search (replayed LLM ideas plus the knob tuner)
against the LLM-only search (the same replayed ideas, no tuner), at an equal CPU-hour budget, run the
way a user runs the product: `autoresearchd start --until idle` on two research dirs at once.

    python bench/real_hybrid.py --out /tmp/rh [--budget-h 0.1] [--steps 60] [--seed 0]
    python bench/real_hybrid.py --report /tmp/rh          # read a finished run's dirs again

What it does:
- copies envs/tinygpt into OUT/env, where the manifest's `run` is `TINYGPT_STEPS=<steps>
  TINYGPT_THREADS=1 python train.py`: fewer steps than the template's 200, so that the two searches
  fit in about half an hour of a shared 2-core machine, and one torch thread per arm (one slot each).
  Everything else is the template's: the code, the frozen evaluator, the knobs, the compute rule
  (measured against this env's 60-step baseline). train.py itself is not edited, so the replayed
  diffs apply as recorded; an idea that changes its own `steps` is overridden by the variable;
- writes OUT/llm/.autoresearch.toml and OUT/hybrid/.autoresearch.toml from the repo's
  .autoresearch.toml, changing the research repo and env (each arm's own repo, from OUT/env), the
  replay provider and its file (envs/replays/tinygpt.jsonl: the same ideas in the same order),
  `daemon.max_gpu_hours` (the budget: on a CPU env the CPU-hours of the notes, the baseline's trials
  included; daemon/store/spend.py `budget_hours`), `policy.seed` and `tune.seed`; the two configs
  differ only in `[tune] enabled`;
- starts both daemons at once under `nice -n 5` (both see the same machine load) and waits until each
  exits by itself (`--until idle`: the budget reached, nothing queued, running or pending confirmation);
- prints per arm: trials run (seeds measured, the baseline's included), CPU-hours spent (the notes'
  `cpu_s`), the baseline's val_loss, the best val_loss and its idea twice: the product's best
  (`Population.best(confirmed=True)`, what `status` reports: promoted, a gain clear of the noise on
  one seed, or confirmed) and the best confirmed on fresh seeds (more than one seed); and the paired
  differences hybrid − llm (the same ideas, seeds, budget and machine time).

The budget stops *proposing*: trials already queued or running when it is reached still finish (and
a pending best is still confirmed), so each arm spends a little more than the budget; the table shows
what each really spent.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARMS = ("llm", "hybrid")


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)        # a TOML basic string is a JSON string for what we write
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {v!r} as TOML")


def dump_toml(d: dict, prefix: str = "") -> str:
    """A TOML writer for what a config holds: tables of scalars, lists and nested tables."""
    scalars = {k: v for k, v in d.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in d.items() if isinstance(v, dict)}
    out = []
    if prefix and scalars:
        out.append(f"[{prefix}]")
    out += [f"{json.dumps(k) if not k.replace('_', '').isalnum() else k} = {toml_value(v)}"
            for k, v in scalars.items()]
    for k, v in tables.items():
        name = json.dumps(k) if not k.replace("_", "").isalnum() else k
        out.append(dump_toml(v, f"{prefix}.{name}" if prefix else name))
    return "\n".join(x for x in out if x) + "\n"


def make_env(out: Path, steps: int) -> Path:
    """envs/tinygpt with `steps` training steps and one torch thread; nothing else changed."""
    env = out / "env"
    shutil.copytree(ROOT / "envs" / "tinygpt", env, ignore=shutil.ignore_patterns("out", "__pycache__"))
    manifest = env / ".autoresearch.toml"
    text = manifest.read_text()
    old = 'run = "python train.py"'
    if old not in text:
        raise SystemExit(f"envs/tinygpt's manifest has no line {old!r}: update bench/real_hybrid.py")
    manifest.write_text(text.replace(old, f'run = "TINYGPT_STEPS={steps} TINYGPT_THREADS=1 python train.py"'))
    return env


def make_config(out: Path, arm: str, env: Path, budget_h: float, seed: int) -> Path:
    cfg = tomllib.loads((ROOT / ".autoresearch.toml").read_text())
    cfg["research"]["repo"] = str(out / arm / "research")
    cfg["research"]["env"] = str(env)
    cfg["llm"]["provider"] = "replay"                 # what `auto` picks with no key; named, so a key changes nothing
    cfg["llm"]["replay_file"] = str(ROOT / "envs" / "replays" / "tinygpt.jsonl")
    cfg["daemon"]["max_gpu_hours"] = budget_h         # CPU-hours on this CPU env
    cfg["policy"]["seed"] = seed
    cfg["tune"] = {"enabled": arm == "hybrid", "seed": seed}
    path = out / arm / ".autoresearch.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# bench/real_hybrid.py, arm {arm}: the repo's .autoresearch.toml with the changes its "
                    "docstring lists\n" + dump_toml(cfg))
    return path


def daemon_env() -> dict:
    env = dict(os.environ)
    for k in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):   # the replay is the LLM of both arms
        env.pop(k, None)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"   # trials' python: this venv
    return env


def run_arms(out: Path, timeout_s: float) -> dict[str, float]:
    exe = str(Path(sys.executable).parent / "autoresearchd")
    procs, logs, t0 = {}, {}, time.time()
    for arm in ARMS:
        logs[arm] = open(out / arm / "daemon.log", "w")
        procs[arm] = subprocess.Popen(["nice", "-n", "5", exe, "--config", str(out / arm / ".autoresearch.toml"),
                                       "start", "--until", "idle"], stdout=logs[arm], stderr=subprocess.STDOUT,
                                      env=daemon_env(), cwd=out / arm)
    walls: dict[str, float] = {}
    loads = []
    while len(walls) < len(procs):
        time.sleep(10)
        loads.append(os.getloadavg()[0])
        for arm, p in procs.items():
            if arm not in walls and p.poll() is not None:
                walls[arm] = time.time() - t0
                print(f"{arm}: exited {p.returncode} after {walls[arm]:.0f} s", flush=True)
        if time.time() - t0 > timeout_s:
            for arm, p in procs.items():
                if arm not in walls:
                    print(f"{arm}: still running after {timeout_s:.0f} s: stopping it (the table is partial)")
                    subprocess.run([exe, "--config", str(out / arm / ".autoresearch.toml"), "stop"],
                                   env=daemon_env(), check=False)
                    p.wait(120)
                    walls[arm] = time.time() - t0
    for f in logs.values():
        f.close()
    (out / "run.json").write_text(json.dumps({"walls": walls, "load_mean": sum(loads) / max(1, len(loads)),
                                              "load_max": max(loads, default=0.0)}))
    return walls


def arm_figures(out: Path, arm: str) -> dict:
    sys.path.insert(0, str(ROOT))
    from autoresearchd.config import load_config
    from autoresearchd.research import open_research
    from autoresearchd.store.population import read_population
    from autoresearchd.store import ranking
    from autoresearchd.store.spend import budget_hours
    from autoresearchd.vocab import Origin

    cfg = load_config(out / arm / ".autoresearch.toml")
    research = open_research(cfg, create=False)
    pop = read_population(research.repo, research.baseline_ref)
    notes = [i.note for i in pop.ideas if i.note is not None]
    trials = sum(len(n.trials) for n in notes) + (len(pop.baseline_note.trials) if pop.baseline_note else 0)
    goal = research.manifest.goal
    best = pop.best(goal, confirmed=True)        # the product's best: promoted (a clear gain on one seed) or confirmed
    confirmed = best is not None and len(best.note.values) > 1
    held = [i for i in pop.comparable() if i.confirmed and len(i.note.values) > 1]
    multi = ranking.ranked(held, goal)[0] if held else None         # the product's one order of best
    return {"arm": arm, "trials": trials, "cpu_h": budget_hours(pop, research.manifest.gpus),
            "ideas": sum(1 for i in pop.ideas if i.note is not None and i.note.trials and i.origin != Origin.TUNE),
            "tuned": sum(1 for i in pop.ideas if i.note is not None and i.note.trials and i.origin == Origin.TUNE),
            "baseline": pop.baseline_value, "baseline_values": pop.baseline_note.values if pop.baseline_note else [],
            "best": best.value if best is not None else None, "best_confirmed": confirmed,
            "best_idea": _what(best), "multi": multi.value if multi is not None else None,
            "multi_idea": _what(multi)}


def _what(i) -> tuple | None:
    if i is None:
        return None
    return (i.title.split(":")[0], i.idea_id, len(i.note.values), i.note.decision,
            i.note.tune["knobs"] if i.note.tune else None)


def _cell(value, what, baseline) -> str:
    if value is None:
        return "none | - | -"
    knobs = f", knobs {what[4]}" if what[4] else ""
    gain = "-" if baseline is None else f"{value - baseline:+.4f}"
    return f"{value:.4f} | {what[0]} ({what[1]}, {what[2]} seed{'s' if what[2] > 1 else ''}, {what[3]}{knobs}) | {gain}"


def report(out: Path, budget_h: float | None = None) -> None:
    rows = {arm: arm_figures(out, arm) for arm in ARMS}
    run = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {}
    print(f"budget: max_gpu_hours = {budget_h if budget_h is not None else '?'} (CPU-hours on this CPU env); "
          f"wall: {', '.join(f'{a} {w:.0f} s' for a, w in run.get('walls', {}).items())}; "
          f"load average (1 min, sampled every 10 s): mean {run.get('load_mean', 0):.1f}, "
          f"max {run.get('load_max', 0):.1f}")
    print("| arm | trials run | LLM ideas measured | tuned trials | CPU-hours spent | baseline val_loss (seeds) "
          "| best val_loss (status's: promoted or confirmed) | its idea | − baseline mean "
          "| best confirmed on fresh seeds (> 1 seed) | its idea | − baseline mean |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows.values():
        base = "-" if r["baseline"] is None else (f"{r['baseline']:.4f} ("
                                                  + ", ".join(f"{v:.4f}" for v in r["baseline_values"]) + ")")
        print(f"| {r['arm']} | {r['trials']} | {r['ideas']} | {r['tuned']} | {r['cpu_h']:.3f} | {base} "
              f"| {_cell(r['best'], r['best_idea'], r['baseline'])} | {_cell(r['multi'], r['multi_idea'], r['baseline'])} |")
    h, l_ = rows["hybrid"], rows["llm"]
    for key, what in (("best", "best val_loss"), ("multi", "best confirmed on fresh seeds")):
        if h[key] is not None and l_[key] is not None:
            print(f"paired difference, {what}, hybrid − llm: {h[key] - l_[key]:+.4f} "
                  "(one pair: same replayed ideas, trial seeds, budget and machine time; lower is better)")
        else:
            print(f"paired difference, {what}: not defined (an arm has none)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="a new directory for the env, the two research dirs and logs")
    ap.add_argument("--report", type=Path, help="print the table of a finished run's directory")
    ap.add_argument("--budget-h", type=float, default=0.1, help="max_gpu_hours of both arms (CPU-hours here)")
    ap.add_argument("--steps", type=int, default=60, help="training steps per trial (the template has 200)")
    ap.add_argument("--seed", type=int, default=0, help="policy.seed and tune.seed of both arms")
    ap.add_argument("--timeout-s", type=float, default=3600, help="stop both daemons after this long")
    a = ap.parse_args()
    if a.report:
        meta = json.loads((a.report / "bench.json").read_text()) if (a.report / "bench.json").exists() else {}
        report(a.report, meta.get("budget_h"))
        return
    if a.out is None:
        ap.error("--out or --report is needed")
    a.out.mkdir(parents=True)
    env = make_env(a.out, a.steps)
    for arm in ARMS:
        make_config(a.out, arm, env, a.budget_h, a.seed)
    (a.out / "bench.json").write_text(json.dumps({"budget_h": a.budget_h, "steps": a.steps, "seed": a.seed}))
    print(f"tinygpt at {a.steps} steps (the template trains 200: shortened so both searches fit a shared "
          f"machine), 1 torch thread and 1 slot per arm; budget {a.budget_h} CPU-hours each; seed {a.seed}; "
          f"both arms start now under nice -n 5 ({a.out})", flush=True)
    run_arms(a.out, a.timeout_s)
    report(a.out, a.budget_h)


if __name__ == "__main__":
    main()
