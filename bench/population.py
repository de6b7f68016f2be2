"""Benchmark: how the read side scales with the population (1k and 10k ideas; 100k with --big).

For each size it builds a research repo of N idea commits with result notes, logs and transcripts
(one `git fast-import` stream, tests/popbuilder.py; with --keep DIR a repo built there before is
reused), packs its refs as `git gc` leaves a repo (--loose-refs: not), then times the daemon's own
read path, a `Daemon` built as `start` builds it (app.build_daemon, no LLM) and its `read(scan=True)`,
what each tick does at its start:
  cold      a daemon's first pass in a process that has parsed nothing and with no saved parses (a
            first start): the Daemon built, then its first read (a full one)
  save      what that pass does after its dispatch: the parses saved for the next start (only once
            they are defaults.PARSE_CACHE_SAVE_NEW entries or more; below that, 0 and saved untimed)
  saved     the same with the parses an earlier daemon saved (store/parsecache.py): its restart
  tick      a later pass (not the periodic full read): one note written and one branch pushed since
  idle      the same when nothing moved
  event     a read within a pass (no scan) after the daemon's process wrote one note and one branch
and the views' read:
  full      read_population() with every object parsed already: every ref, commit and note in a
            fixed number of git processes (`status`, `ideas`, export)
  status    summary.summary() (includes its own read)
  ideas     summary.leaderboard() (includes its own read)
  export    export.records() (includes one diff-tree for all diffs)
  dedupe    the duplicate index over every idea text, if autoresearchd.policies.dedupe exists
Each figure is the best of --repeat runs; the last lines give the reads per 1,000 ideas, for each
size, to show how the cost grows with the population. Usage:
  .venv/bin/python bench/population.py [--sizes 1000 10000] [--big] [--repeat 3] [--keep DIR] [--reads-only]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from popbuilder import build_population, write_cfg  # noqa: E402

from autoresearchd.app import build_daemon  # noqa: E402
from autoresearchd.config import load_config  # noqa: E402
from autoresearchd.store import parsecache  # noqa: E402
from autoresearchd.store.gitrepo import GitRepo, state_dir  # noqa: E402
from autoresearchd.store.ideas import format_message  # noqa: E402
from autoresearchd.store.notes import Note, Status, format_note  # noqa: E402
from autoresearchd.store.population import read_population  # noqa: E402
from autoresearchd.store.refs import IDEA_BRANCHES, IDEAS_PREFIX, NOTES_REF  # noqa: E402
from autoresearchd.views.export import records  # noqa: E402
from autoresearchd.views.summary import leaderboard, summary  # noqa: E402


def _clear() -> None:
    """Forget parsed objects: a cold read, as a fresh `status` process sees it."""
    from autoresearchd.store import population
    population._NOTES.clear()
    population._IDEAS.clear()


def cpu_s() -> float:
    """CPU seconds of this process and its finished children (git): on a shared machine the wall
    clock also counts the other jobs' time."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


CPU: dict[str, float] = {}


def best_of(fn, repeat: int, name: str | None = None, before=None) -> float:
    """The best wall time of `repeat` runs of fn (after `before`, untimed); the CPU time of that run
    goes to CPU[name]."""
    times = []
    for _ in range(repeat):
        if before is not None:
            before()
        c, t = cpu_s(), time.perf_counter()
        fn()
        times.append((time.perf_counter() - t, cpu_s() - c))
    wall, cpu = min(times)
    if name:
        CPU[name] = cpu
    return wall


def daemon_timers(repo: GitRepo, cfg):
    """(cold, saved): each builds a Daemon and runs its first read, from nothing / from the saved
    parses; then the daemon of the last run, for the per-pass timers."""
    made = []       # the last daemon built (one at a time: each holds a whole population)
    cache = state_dir(repo) / parsecache.FILE

    def first(keep: bool):
        _clear()
        if not keep:
            cache.unlink(missing_ok=True)
        for old in made:
            old.live.close()
        made.clear()
        d = build_daemon(cfg, with_llm=False)
        d.read(scan=True)
        made.append(d)

    def cold():
        first(False)

    def saved():
        first(True)
    return cold, saved, made


def tick_timers(daemon):
    """(a pushed branch and a note, then a scan), (nothing moved, a scan), (own writes, no scan), as
    the daemon's later passes read them (not its periodic full read)."""
    repo = daemon.repo
    daemon._passes = 1
    daemon.read(scan=True)
    main = repo.rev_parse("refs/heads/main")
    count = [0]

    def commit(k: int) -> str:
        tree = repo.tree_with_files(main, {"train.py": f"# bench {k} {time.time()}\n".encode()})
        return repo.commit_tree(tree, [main], format_message(f"Bench idea {k}", "", {"Idea-Id": f"bench-{k}"}))

    def note(c: str) -> None:
        repo.note_write(NOTES_REF, c, format_note(Note(status=Status.SUCCEEDED, metric="val_loss", value=3.2)))

    def push():
        count[0] += 1
        c = commit(count[0])
        repo.git("update-ref", f"{IDEA_BRANCHES}bench/p{count[0]}", c)      # another writer: no event
        note(c)

    def own():
        count[0] += 1
        c = commit(count[0])
        repo.update_ref(IDEAS_PREFIX + f"bench-{count[0]}", c)
        repo.update_ref(f"{IDEA_BRANCHES}bench/o{count[0]}", c)
        note(c)
    return ((push, lambda: daemon.read(scan=True)), (None, lambda: daemon.read(scan=True)),
            (own, lambda: daemon.read(scan=False)))


def dedupe_timer(pop):
    """A callable that builds the duplicate index over every idea's text."""
    from autoresearchd.policies.dedupe import DuplicateIndex
    items = [(i.idea_id, f"{i.title}\n\n{i.text}") for i in pop.ideas]

    def run():
        DuplicateIndex().add_many(items)
    return run, "DuplicateIndex"


def bench(n: int, root: Path, repeat: int, loose: bool, views: bool = True) -> dict:
    d = root / f"pop{n}"
    d.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    if (d / "research" / ".git").is_dir():
        repo, build = GitRepo(d / "research"), float("nan")     # built by an earlier run: reused
    else:
        repo = build_population(d / "research", n, seed=0)
        build = time.perf_counter() - t
    if not loose:
        repo.git("pack-refs", "--all")
    cfg = load_config(write_cfg(d, repo.path))
    cold, saved, made = daemon_timers(repo, cfg)
    row = {"n": n, "build": build, "cold": best_of(cold, repeat, "cold")}
    row["save"] = best_of(made[-1].save_parses, 1, "save")
    if not (state_dir(repo) / parsecache.FILE).exists():     # not due below PARSE_CACHE_SAVE_NEW: saved for `saved`
        parsecache.save(repo)
    row["saved"] = best_of(saved, repeat, "saved")
    (push, tick), (_, idle), (own, event) = tick_timers(made[-1])
    row.update({"tick": best_of(tick, repeat, "tick", before=push),
                "idle": best_of(idle, repeat, "idle"),
                "event": best_of(event, repeat, "event", before=own),
                "read": best_of(lambda: read_population(repo, "refs/heads/main"), repeat, "read")})
    row["cpu"] = dict(CPU)
    pop = read_population(repo, "refs/heads/main")
    nan = float("nan")
    row.update({"status": best_of(lambda: summary(cfg), repeat), "ideas": best_of(lambda: leaderboard(cfg), repeat),
                "export": best_of(lambda: records(cfg), 1)} if views else {"status": nan, "ideas": nan, "export": nan})
    fn, why = dedupe_timer(pop) if views else (None, "not timed (--reads-only)")
    row["dedupe"] = best_of(fn, 1) if fn else None
    row["dedupe_note"] = why
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--big", action="store_true", help="also 100,000 ideas (minutes)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", help="build the repos here and keep them (a repo built there before is reused)")
    ap.add_argument("--reads-only", action="store_true", help="time the population reads only, not the views")
    ap.add_argument("--loose-refs", action="store_true", help="leave the built repo's refs loose (not packed)")
    a = ap.parse_args(argv)
    sizes = a.sizes + ([100_000] if a.big else [])
    with tempfile.TemporaryDirectory(prefix="ard-bench-") as tmp:
        root = Path(a.keep) if a.keep else Path(tmp)
        rows = [bench(n, root, a.repeat, a.loose_refs, not a.reads_only) for n in sizes]
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    print("read s, wall (CPU incl. git): the daemon's read (Daemon.read): cold = its first pass with nothing parsed"
          " or saved;\nsaved = its first pass from the saved parses; tick = a later pass (a note and a push"
          " moved), idle = nothing moved,\nevent = a read within a pass; full = read_population, every object"
          " parsed already (the views)")
    keys = ("cold", "saved", "tick", "idle", "event", "read")
    cols = ("cold s", "saved s", "tick s", "idle s", "event s", "full s")
    print(f"{'ideas':>8} {'build s':>8} " + " ".join(f"{c:>14}" for c in cols) +
          f" {'status s':>9} {'ideas s':>8} {'export s':>9} {'dedupe s':>9}")
    for r in rows:
        dd = f"{r['dedupe']:9.3f}" if r["dedupe"] is not None else f"{'n/a':>9}"
        wc = " ".join(f"{r[k]:6.3f} ({r['cpu'][k]:5.2f})" for k in keys)
        print(f"{r['n']:>8} {r['build']:8.2f} {wc} {r['status']:9.3f} {r['ideas']:8.3f} "
              f"{r['export']:9.3f} {dd}")
    print("the first pass, after its dispatch, saves the parses for the next start: " +
          ", ".join(f"{r['save']:.2f} s ({r['cpu']['save']:.2f}) at {r['n']}" for r in rows))
    print("per 1,000 ideas, s wall (CPU):")
    for r in rows:
        per = r["n"] / 1000
        print(f"{r['n']:>8} {'':8} " + " ".join(f"{r[k] / per:6.3f} ({r['cpu'][k] / per:5.2f})" for k in keys))
    notes = {r["dedupe_note"] for r in rows if r["dedupe"] is None}
    for why in notes:
        print(f"dedupe: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
