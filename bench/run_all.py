"""Run every benchmark in bench/ that exists and print one table of figures.

    .venv/bin/python bench/run_all.py [--quick] [--big] [--load 300] [--skip NAME,...] [--only NAME,...]

Other benches (apply_rate, dedupe, runner_overhead, dispatch, population, promotion, serve) run as subprocesses
with small arguments when --quick is given; the last lines of each one's output (its figures) are
shown. Its own figures:
  - population read (the policies' and CLI's view of the repo) at 1k and 10k ideas with notes (100k with
    --big); target: 10k <= 2 s;
  - daemon throughput: --load N trivial ideas on 16 local slots, trials per second and the daemon's RSS;
  - the tinygpt baseline: one run of envs/tinygpt's `run` command on this CPU, wall time and metric.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
PY = sys.executable

# name -> (args for a quick run, args for a normal run)
OTHERS = {
    "apply_rate": ([], []),
    "dedupe": (["--sizes", "1000,10000", "--queries", "50"], []),
    "runner_overhead": (["--hosts", "2", "--slots", "2", "--trials", "16"], []),
    "dispatch": ([], []),
    "population": ([], []),
    "promotion": (["--trials", "100"], []),
    "serve": (["--ideas", "1000", "--updates", "20"], []),
}


def run_other(name: str, quick: bool, timeout: float) -> tuple[str, float, list[str]]:
    path = ROOT / "bench" / f"{name}.py"
    if not path.is_file():
        return "absent", 0.0, []
    args = OTHERS[name][0 if quick else 1]
    t = time.monotonic()
    try:
        p = subprocess.run([PY, str(path), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return f"timed out ({timeout:.0f}s)", time.monotonic() - t, []
    wall = time.monotonic() - t
    lines = [ln.rstrip() for ln in p.stdout.splitlines() if ln.strip()]
    status = "ok" if p.returncode == 0 else f"exit {p.returncode}: {(p.stderr.strip().splitlines() or [''])[-1][:120]}"
    return status, wall, lines[-25:]       # the benches print their figures last


def make_env(base: Path) -> Path:
    """A repo whose `run` prints the value in v.txt (the scale tests' env)."""
    from test_scale import LOAD_MANIFEST
    d = base / "research"
    d.mkdir(parents=True)
    (d / ".autoresearch.toml").write_text(LOAD_MANIFEST)
    (d / "v.txt").write_text("2.0\n")
    env = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@b", GIT_COMMITTER_NAME="b",
               GIT_COMMITTER_EMAIL="b@b")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "baseline"]):
        subprocess.run(["git", *args], cwd=d, check=True, env=env, capture_output=True)
    return d


def population_read(n: int) -> tuple[float, float, float]:
    """(seconds to build n ideas with notes, first read, best of two more reads in the same process)."""
    from fixtures_reliability import build_population

    from autoresearchd.store.gitrepo import GitRepo
    from autoresearchd.store.population import read_population
    with tempfile.TemporaryDirectory(prefix="ard-bench-") as tmp:
        repo_path = make_env(Path(tmp))
        t = time.monotonic()
        build_population(repo_path, n, notes=True)
        built = time.monotonic() - t
        repo = GitRepo(repo_path)
        times = []
        for _ in range(3):
            t = time.monotonic()
            pop = read_population(repo, "refs/heads/main")
            times.append(time.monotonic() - t)
        assert len(pop.ideas) == n
    return built, times[0], min(times[1:])


def daemon_load(n: int) -> tuple[float, float, float]:
    """(wall s, trials/s, peak RSS MB) for n trivial ideas on 16 local slots."""
    from fixtures_reliability import Daemon, build_population, write_cfg
    with tempfile.TemporaryDirectory(prefix="ard-bench-") as tmp:
        repo_path = make_env(Path(tmp))
        build_population(repo_path, n)
        cfg = write_cfg(Path(tmp) / "cfg", repo_path, runner='kind = "local"\nslots = 16',
                        rest="[daemon]\ntick_s = 0.5\n[policy]\nbaseline_seeds = 1\nconfirm_seeds = 0\n")
        t = time.monotonic()
        d = Daemon(cfg)
        peak = 0
        try:
            while True:
                out = subprocess.run(["git", "-C", str(repo_path), "notes", "--ref", "refs/notes/autoresearch",
                                      "list"], capture_output=True, text=True).stdout
                peak = max(peak, d.rss_kb()[1])
                if len(out.splitlines()) >= n + 1 or d.p.poll() is not None or time.monotonic() - t > 1800:
                    break
                time.sleep(0.5)
        finally:
            d.kill9()
        wall = time.monotonic() - t
    return wall, n / wall, peak / 1024


def tinygpt_baseline() -> tuple[str, float | None, str]:
    """One run of the tinygpt env's `run` command: (status, wall seconds, metrics line)."""
    try:
        from autoresearchd.envs import template_dir
        src = template_dir("tinygpt")
    except Exception as e:  # noqa: BLE001 - the env may not be merged yet
        return f"absent ({type(e).__name__})", None, ""
    from autoresearchd.manifest import parse_manifest
    from autoresearchd.runners.metrics import parse_metrics
    m = parse_manifest((Path(src) / ".autoresearch.toml").read_text())
    import shutil
    with tempfile.TemporaryDirectory(prefix="ard-tinygpt-") as tmp:
        code = Path(tmp) / "code"
        shutil.copytree(src, code, ignore=shutil.ignore_patterns("__pycache__", "wandb"))
        env = dict(os.environ, AUTORESEARCH_SEED="0", AUTORESEARCH_TRIAL="bench", AUTORESEARCH_ARTIFACTS=tmp,
                   AUTORESEARCH_TIME_BUDGET_S=str(m.time_budget_s), AUTORESEARCH_RESULT=str(Path(tmp) / "r.json"),
                   PATH=f"{Path(PY).parent}:{os.environ['PATH']}", **m.data)
        t = time.monotonic()
        p = subprocess.run(["bash", "-c", f"{m.setup + ' && ' if m.setup else ''}{m.run}"], cwd=code, env=env,
                           capture_output=True, text=True, timeout=m.time_budget_s + 120)
        wall = time.monotonic() - t
        rj = Path(tmp) / "r.json"
        metrics = parse_metrics(p.stdout, rj.read_bytes() if rj.exists() else None)
    shown = ", ".join(f"{k}={v:.4g}" for k, v in list(metrics.items())[:4])
    return ("ok" if p.returncode == 0 else f"exit {p.returncode}"), wall, shown


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small arguments for the other benches")
    ap.add_argument("--big", action="store_true", help="also read a 100k-idea population (minutes to build)")
    ap.add_argument("--load", type=int, default=300, help="trivial ideas for the daemon throughput figure (0: skip)")
    ap.add_argument("--skip", default="", help="comma-separated names to skip: the other benches' names, "
                    "popread, load, tinygpt")
    ap.add_argument("--only", default="", help="comma-separated names to run")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per other bench")
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    only = set(filter(None, a.only.split(",")))

    def want(name):
        return name not in skip and (not only or name in only)
    rows: list[tuple[str, str, str]] = []          # figure, value, note
    for name in OTHERS:
        if not want(name):
            continue
        print(f"== bench/{name}.py", flush=True)
        status, wall, figs = run_other(name, a.quick, a.timeout)
        for f in figs:
            print("   " + f)
        rows.append((f"bench/{name}.py", status, f"{wall:.1f}s" if wall else ""))
    if want("popread"):
        for n in [1_000, 10_000] + ([100_000] if a.big else []):
            print(f"== population read, {n} ideas", flush=True)
            built, cold, warm = population_read(n)
            target = "; target <= 2 s" if n == 10_000 else ""
            rows.append((f"population read, {n:,} ideas", f"{cold:.2f} s",
                         f"first read; {warm:.2f} s re-read in the same process; built in {built:.1f} s{target}"))
    if want("load") and a.load:
        print(f"== daemon load, {a.load} ideas on 16 slots", flush=True)
        wall, rate, rss = daemon_load(a.load)
        rows.append((f"daemon: {a.load} trivial ideas, 16 local slots", f"{rate:.1f} trials/s",
                     f"{wall:.0f} s, peak RSS {rss:.0f} MB"))
    if want("tinygpt"):
        print("== tinygpt baseline", flush=True)
        status, wall, shown = tinygpt_baseline()
        rows.append(("tinygpt baseline run (CPU)", f"{wall:.1f} s" if wall is not None else status,
                     f"{status}; {shown}" if wall is not None else ""))
    w0 = max(len(r[0]) for r in rows) if rows else 10
    w1 = max(len(r[1]) for r in rows) if rows else 10
    print("\n" + "figure".ljust(w0) + "  " + "value".ljust(w1) + "  note")
    print("-" * (w0 + w1 + 40))
    for r in rows:
        print(r[0].ljust(w0) + "  " + r[1].ljust(w1) + "  " + r[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
