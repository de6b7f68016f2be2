"""Benchmark: how the read side scales with the population (1k and 10k ideas; 100k with --big).

For each size it builds a research repo of N idea commits with result notes, logs and transcripts
(one `git fast-import` stream, tests/popbuilder.py), then times:
  read      read_population(): every ref, commit and note in a fixed number of git processes
  status    summary.summary() (includes its own read)
  ideas     summary.leaderboard() (includes its own read)
  export    export.records() (includes one diff-tree for all diffs)
  dedupe    the duplicate index over every idea text, if autoresearchd.policies.dedupe exists
Each figure is the best of --repeat runs. Usage:
  .venv/bin/python bench/population.py [--sizes 1000 10000] [--big] [--repeat 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from popbuilder import build_population, write_cfg  # noqa: E402

from autoresearchd.config import load_config  # noqa: E402
from autoresearchd.store.population import read_population  # noqa: E402
from autoresearchd.views.export import records  # noqa: E402
from autoresearchd.views.summary import leaderboard, summary  # noqa: E402


def _clear() -> None:
    """Forget parsed objects: a cold read, as a fresh `status` process sees it."""
    from autoresearchd.store import population
    population._NOTES.clear()
    population._IDEAS.clear()


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def dedupe_timer(pop):
    """A callable that builds the duplicate index over every idea's text."""
    from autoresearchd.policies.dedupe import DuplicateIndex
    items = [(i.idea_id, f"{i.title}\n\n{i.text}") for i in pop.ideas]

    def run():
        DuplicateIndex().add_many(items)
    return run, "DuplicateIndex"


def bench(n: int, root: Path, repeat: int) -> dict:
    d = root / f"pop{n}"
    d.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    repo = build_population(d / "research", n, seed=0)
    build = time.perf_counter() - t
    cfg = load_config(write_cfg(d, repo.path))
    pop = read_population(repo, "refs/heads/main")
    row = {"n": n, "build": build,
           "cold": best_of(lambda: (_clear(), read_population(repo, "refs/heads/main")), repeat),
           "read": best_of(lambda: read_population(repo, "refs/heads/main"), repeat),
           "status": best_of(lambda: summary(cfg), repeat),
           "ideas": best_of(lambda: leaderboard(cfg), repeat),
           "export": best_of(lambda: records(cfg), 1)}
    fn, why = dedupe_timer(pop)
    row["dedupe"] = best_of(fn, 1) if fn else None
    row["dedupe_note"] = why
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--big", action="store_true", help="also 100,000 ideas (minutes)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", help="build the repos here and keep them")
    a = ap.parse_args(argv)
    sizes = a.sizes + ([100_000] if a.big else [])
    with tempfile.TemporaryDirectory(prefix="ard-bench-") as tmp:
        root = Path(a.keep) if a.keep else Path(tmp)
        rows = [bench(n, root, a.repeat) for n in sizes]
    print("read s: cold = a fresh process (nothing parsed yet); warm = the daemon's per-tick re-read")
    print(f"{'ideas':>8} {'build s':>8} {'cold s':>7} {'warm s':>7} {'status s':>9} {'ideas s':>8} {'export s':>9} "
          f"{'dedupe s':>9}  read per 1k ideas")
    for r in rows:
        dd = f"{r['dedupe']:9.3f}" if r["dedupe"] is not None else f"{'n/a':>9}"
        print(f"{r['n']:>8} {r['build']:8.2f} {r['cold']:7.3f} {r['read']:7.3f} {r['status']:9.3f} {r['ideas']:8.3f} "
              f"{r['export']:9.3f} {dd}  {r['read'] / r['n'] * 1000:.3f}")
    notes = {r["dedupe_note"] for r in rows if r["dedupe"] is None}
    for why in notes:
        print(f"dedupe: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
