"""Dispatch latency and slot utilization of the REAL daemon loop (not a timed test).

Starts a loopback sshd fleet (tests/fixtures_sshd.py used as a library), creates a research repo whose
`run` sleeps SECS seconds and prints a metrics block, and runs `autoresearchd.app.build_daemon(...)
.run_forever(until=...)` with `runner.kind = "ssh"` and `llm.provider = "none"`, so it runs pushed idea
branches only. Then, for the ssh runner and for the local runner (same number of slots):

  latency      an idea branch is created (git update-ref) while the daemon idles with free slots;
               time until the trial's remote `started` stamp. Median of --latency-n.
  utilization  --trials idea branches appear at once (one ref transaction). Trial run times come from
               the result notes (wall_s = done - started stamps); start stamps are read from the trial
               directories (loopback). Figures:
                 end-to-end = busy trial-seconds / (slots x makespan), makespan = branches -> last done;
                              the last partial wave caps it (e.g. 500 over 16 slots: <= 97.7 %);
                 while queued = busy / slot-seconds over [branches, last trial start]: did the daemon
                              keep every slot busy while it had work?
  overhead     daemon time per trial: wall time spent in Daemon.tick and CPU time of the daemon
               process with its git children (the bench's own scanner thread excluded), / trials.

    .venv/bin/python bench/dispatch.py [--trials 500] [--secs 2] [--hosts 4] [--slots 4] [--quick]
                                       [--prestage N] [--runners ssh,local] [--tick 2]
Needs /usr/sbin/sshd (and root for the clean `ardtest` login account, else it logs in as you).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fixtures_sshd import Fleet  # noqa: E402

from autoresearchd import defaults  # noqa: E402
from autoresearchd.app import build_daemon  # noqa: E402
from autoresearchd.config import load_config  # noqa: E402
from autoresearchd.store.gitrepo import GitRepo  # noqa: E402
from autoresearchd.store.notes import parse_note  # noqa: E402
from autoresearchd.store.refs import NOTES_REF

MANIFEST = """[env]
name = "sleepy"
run = "bash run.sh"
metric = "score"
goal = "min"
time_budget_s = 120
"""
RUN_SH = 'sleep {secs}\necho ---\necho "score: 1.0"\n'


# -- the research repo and its idea branches ------------------------------------------------------
def make_research(root: Path, secs: float) -> GitRepo:
    d = root / "research"
    d.mkdir(parents=True)
    (d / ".autoresearch.toml").write_text(MANIFEST)
    (d / "run.sh").write_text(RUN_SH.format(secs=secs))
    (d / "idea.txt").write_text("baseline\n")
    repo = GitRepo.init(d)
    repo.commit_all_initial("baseline")
    return repo


def make_commits(repo: GitRepo, names: list[str]) -> dict[str, str]:
    """One commit per name off main (distinct trees: identical ones would be linked, not run), made
    with one `git fast-import` and no refs yet. name -> commit sha."""
    base = repo.rev_parse("refs/heads/main")
    stream = []
    for i, name in enumerate(names, 1):
        msg, body = f"Bench idea {name}\n\nA trivial idea.\n".encode(), f"{name}\n".encode()
        stream.append(b"commit refs/bench/scratch\nmark :%d\ncommitter bench <b@b> 1700000000 +0000\n" % i)
        stream.append(b"data %d\n%s\nfrom %s\nM 100644 inline idea.txt\ndata %d\n%s\n"
                      % (len(msg), msg, base.encode(), len(body), body))
    marks = Path(tempfile.mktemp(prefix="ard-marks-"))
    repo.git("fast-import", "--quiet", f"--export-marks={marks}", input=b"".join(stream))
    repo.git("update-ref", "-d", "refs/bench/scratch")
    by_mark = dict(line.split() for line in marks.read_text().splitlines())
    marks.unlink()
    return {name: by_mark[f":{i}"] for i, name in enumerate(names, 1)}


def publish(repo: GitRepo, commits: dict[str, str]) -> float:
    """All branches in one ref transaction (like one push); returns the time just before it."""
    lines = "".join(f"create refs/heads/idea/bench/{n} {c}\n" for n, c in commits.items())
    t0 = time.time()
    repo.git("update-ref", "--stdin", input=("start\n" + lines + "commit\n").encode())
    return t0


def results(repo: GitRepo) -> dict[str, float | None]:
    """commit -> wall_s of its first trial, for every result note."""
    out = {}
    for c, text in repo.notes_read_all(NOTES_REF).items():
        n = parse_note(text)
        out[c] = n.trials[0].wall_s if n.trials else None
    return out


# -- watching the trial directories (loopback: remote dirs are local paths) -------------------------
class Scanner(threading.Thread):
    """Records each trial's `started` stamp before the daemon cleans its directory up."""

    def __init__(self, roots: list[Path]):
        super().__init__(daemon=True)
        self.roots, self.started, self.cpu = roots, {}, 0.0
        self.stop = threading.Event()

    def scan(self) -> None:
        for root in self.roots:
            try:
                names = os.listdir(root)
            except FileNotFoundError:
                continue
            for name in names:
                if name in self.started or name.startswith("."):
                    continue
                try:
                    self.started[name] = float((root / name / "started").read_text())
                except (OSError, ValueError):
                    pass

    def run(self) -> None:
        while not self.stop.wait(0.05):
            self.scan()
            self.cpu = time.thread_time()


def finished(roots: list[Path], commits: set[str]) -> int:
    """How many of `commits` have a trial whose wrapper is done (its name in <work_root>/.events)."""
    keys = {c[:8] for c in commits}
    seen = set()
    for root in roots:
        try:
            text = (root / ".events").read_text()
        except OSError:
            continue
        for name in text.split():
            for part in name.split("-"):
                if part in keys:
                    seen.add(part)
    return len(seen)


def started_of(scanner: Scanner, commit: str) -> float | None:
    return next((t for name, t in scanner.started.items() if f"-{commit[:8]}-s" in name), None)


# -- one runner ------------------------------------------------------------------------------------
def write_config(root: Path, repo: GitRepo, kind: str, fleet: Fleet | None, slots: int, tick: float) -> Path:
    lines = [f'[research]\nrepo = "{repo.path}"', f"[daemon]\ntick_s = {tick}",
             "[policy]\nbaseline_seeds = 1\nconfirm_seeds = 0", '[llm]\nprovider = "none"',
             f'[runner]\nkind = "{kind}"']
    if kind == "local":
        lines.append(f"slots = {slots}\nwork_root = \"{root / 'work'}\"")
    else:
        for h in fleet.host_cfgs(slots=slots // len(fleet.hosts), gpus=0):
            lines.append("[[runner.hosts]]\n" + "\n".join(
                f"{k} = {v!r}".replace("'", '"') for k, v in h.model_dump().items()
                if v is not None and k != "alias"))
    cfg = root / ".autoresearch.toml"
    cfg.write_text("\n".join(lines).replace("True", "true").replace("False", "false") + "\n")
    return cfg


def wait(cond, timeout: float, what: str, step: float = 0.005) -> None:
    deadline = time.time() + timeout
    while not cond():
        if time.time() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(step)


def bench_runner(kind: str, a, fleet: Fleet | None) -> dict:
    root = Path(tempfile.mkdtemp(prefix=f"ard-bench-{kind}-"))
    slots = a.hosts * a.slots
    repo = make_research(root, a.secs)
    cfg = write_config(root, repo, kind, fleet, slots, a.tick)
    d = build_daemon(load_config(cfg), with_llm=False)
    if a.prestage is not None:
        if not hasattr(d.runner, "prestage"):
            raise SystemExit("this runner has no pre-staging (runner.prestage); drop --prestage")
        d.runner.prestage = a.prestage
    roots = [fleet.remote_path(h.work_root) for h in fleet.hosts] if kind == "ssh" else [root / "work"]
    # loop passes, seconds with some tick() running, ticks running now, since when. The scheduler runs
    # ticks on several threads (one waits on the loop's lock): the union of their times is counted
    ticks = {"n": 0, "s": 0.0, "active": 0, "since": 0.0}
    tick, harvest = d.tick, d.collector.harvest
    lock = threading.Lock()

    def timed_tick():
        with lock:
            if ticks["active"] == 0:
                ticks["since"] = time.perf_counter()
            ticks["active"] += 1
        try:
            return tick()
        finally:
            with lock:
                ticks["active"] -= 1
                if ticks["active"] == 0:
                    ticks["s"] += time.perf_counter() - ticks["since"]

    def counted_harvest(pop):        # one per pass of the reconcile loop inside tick()
        ticks["n"] += 1
        return harvest(pop)

    def tick_time() -> float:
        with lock:
            return ticks["s"] + (time.perf_counter() - ticks["since"] if ticks["active"] else 0.0)
    d.collector.harvest = counted_harvest
    d.tick = timed_tick
    stop = threading.Event()
    th = threading.Thread(target=d.run_forever, kwargs=dict(install_signals=False, until=lambda pop: stop.is_set()),
                          daemon=True)
    th.start()
    scanner = Scanner(roots)
    scanner.start()
    try:
        wait(lambda: repo.rev_parse("refs/heads/main") in results(repo), 120, "the baseline", 0.1)
        # latency: one branch at a time, daemon idle with free slots
        lat = []
        for i, (name, c) in enumerate(make_commits(repo, [f"lat{i:03d}" for i in range(a.latency_n)]).items()):
            time.sleep(0.3 + (i % 5) * 0.37)   # land at different phases of the clock
            t0 = publish(repo, {name: c})
            wait(lambda: started_of(scanner, c) is not None, 30, f"trial of {name} to start")
            lat.append(started_of(scanner, c) - t0)
            wait(lambda: c in results(repo), 60, f"result of {name}", 0.05)
        # utilization
        commits = make_commits(repo, [f"u{i:04d}" for i in range(a.trials)])
        time.sleep(a.tick + 0.5)
        r0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        counting.set()
        scan_cpu0 = scanner.cpu
        tn, ts = ticks["n"], tick_time()
        t0 = publish(repo, commits)
        want = set(commits.values())
        # The wait is this process's too: RUSAGE_SELF counts its thread, RUSAGE_CHILDREN its git. So it
        # first watches the wrappers' event files (trial.sh appends its trial's name when done: a file
        # read, no git), then reads the notes (git, every note parsed) only until the last lands;
        # its thread's CPU is taken off (git's, a few reads, stays in: ~0.2 ms per trial)
        me0 = time.thread_time()
        wait(lambda: finished(roots, want) >= len(want), 60 + 20 * a.trials * a.secs / slots, "all trials to end", 0.05)
        wait(lambda: want <= results(repo).keys(), 120, "all results", 0.25)
        me = time.thread_time() - me0
        t_end_daemon = time.time()
        r1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        counting.clear()
        tick_s, tick_n = tick_time() - ts, ticks["n"] - tn
    finally:
        stop.set()
        th.join(60)
        scanner.stop.set()
        scanner.join()
    res = results(repo)
    spans = []
    for c in commits.values():
        st, wall = started_of(scanner, c), res.get(c)
        if st is None or wall is None:
            raise SystemExit(f"trial of {c[:8]} left no start stamp or wall time")
        spans.append((st, st + wall))
    end = max(e for _, e in spans)
    last_start = max(s for s, _ in spans)
    busy = sum(e - s for s, e in spans)
    busy_q = sum(max(0.0, min(e, last_start) - max(s, t0)) for s, e in spans)
    walls = sorted(e - s for s, e in spans)
    cpu = sum(getattr(r1[k], f) - getattr(r0[k], f) for k in (0, 1) for f in ("ru_utime", "ru_stime"))
    cpu -= scanner.cpu - scan_cpu0 + me
    waves = math.ceil(a.trials / slots)
    return {
        "kind": kind, "slots": slots, "latency": lat, "makespan": end - t0,
        "ideal": waves * statistics.median(walls),
        "util": busy / (slots * (end - t0)), "util_q": busy_q / (slots * (last_start - t0)),
        "tick_ms": tick_s / a.trials * 1e3, "ticks": tick_n, "cpu_ms": cpu / a.trials * 1e3,
        "wall": statistics.median(walls), "harvest_lag": t_end_daemon - end,
    }


def report(a, rows: list[dict]) -> None:
    print(f"\ndispatch bench: {a.trials} trials of {a.secs:g} s, {a.hosts} hosts x {a.slots} slots, "
          f"tick_s = {a.tick:g}, prestage = {a.prestage if a.prestage is not None else 'runner default'}")
    cap = a.trials * a.secs / (math.ceil(a.trials / (a.hosts * a.slots)) * a.secs * a.hosts * a.slots)
    hdr = f"{'figure':48} {'target':>10}" + "".join(f" {r['kind']:>10}" for r in rows)
    print(hdr + "\n" + "-" * len(hdr))

    def line(name, target, fmt):
        print(f"{name:48} {target:>10}" + "".join(f" {fmt(r):>10}" for r in rows))
    line(f"dispatch latency, median of {a.latency_n} (ms)", "<= 1000",
         lambda r: f"{statistics.median(r['latency']) * 1e3:.0f}")
    line("dispatch latency, max (ms)", "", lambda r: f"{max(r['latency']) * 1e3:.0f}")
    line("utilization while queued", ">= 98%", lambda r: f"{r['util_q']:.1%}")
    line(f"utilization end-to-end (cap {cap:.1%})", "", lambda r: f"{r['util']:.1%}")
    line("makespan (s)", "", lambda r: f"{r['makespan']:.1f}")
    line("ideal makespan: waves x median trial wall (s)", "", lambda r: f"{r['ideal']:.1f}")
    line("median trial wall, started -> done (s)", "", lambda r: f"{r['wall']:.3f}")
    line("daemon overhead: tick wall per trial (ms)", "", lambda r: f"{r['tick_ms']:.1f}")
    line("daemon overhead: CPU per trial, with git (ms)", "", lambda r: f"{r['cpu_ms']:.1f}")
    line("reconcile passes during the run", "", lambda r: f"{r['ticks']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=500)
    ap.add_argument("--secs", type=float, default=2.0)
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--slots", type=int, default=4, help="slots per host")
    ap.add_argument("--tick", type=float, default=defaults.TICK_S, help="daemon.tick_s")
    ap.add_argument("--prestage", type=int, default=None, help="trials placed per slot (1 = no pre-staging)")
    ap.add_argument("--latency-n", type=int, default=20)
    ap.add_argument("--runners", default="ssh,local")
    ap.add_argument("--quick", action="store_true", help="64 trials, 8 latency samples")
    ap.add_argument("-v", action="store_true", help="daemon log on stderr")
    ap.add_argument("--count-procs", action="store_true",
                    help="count the processes the daemon starts (git by subcommand), per trial of the utilization runs")
    a = ap.parse_args()
    procs = count_processes() if a.count_procs else None
    if a.quick:
        a.trials, a.latency_n = 64, 8
    logging.basicConfig(level=logging.INFO if a.v else logging.WARNING, format="%(asctime)s %(message)s")
    os.environ.setdefault("AUTORESEARCHD_SSH_CONFIG", os.devnull)
    rows = []
    kinds = a.runners.split(",")
    if "ssh" in kinds:
        with Fleet(n=a.hosts) as fleet:
            rows.append(bench_runner("ssh", a, fleet))
    if "local" in kinds:
        rows.append(bench_runner("local", a, None))
    report(a, rows)
    if procs is not None:
        n = len(kinds) * a.trials
        print(f"\nprocesses the daemon started during the utilization runs, per trial of {n}:")
        for k, v in procs.most_common(20):
            print(f"  {v / n:6.2f}  {k}")
        print(f"  {sum(procs.values()) / n:6.2f}  in all")


# set while the utilization run is measured (between the two rusage readings)
counting = threading.Event()


def count_processes() -> "collections.Counter[str]":
    """Counts the subprocesses the daemon's threads start while `counting` is set (the bench's own
    thread left out, as its CPU is): `git <subcommand>`, else argv[0] and argv[1]."""
    import collections
    import subprocess
    counts: collections.Counter[str] = collections.Counter()
    lock, init = threading.Lock(), subprocess.Popen.__init__

    def counted(self, args, *rest, **kw):
        if not counting.is_set() or threading.current_thread() is threading.main_thread():
            return init(self, args, *rest, **kw)        # outside the measured run, or the bench's own
        argv = [args] if isinstance(args, (str, bytes)) else [str(x) for x in args]
        words = [w for w in argv[1:] if not w.startswith("-") and "=" not in w]
        key = f"git {words[0] if words else '?'}" if os.path.basename(argv[0]) == "git" else " ".join(argv[:2])[:40]
        with lock:
            counts[key] += 1
        return init(self, args, *rest, **kw)
    subprocess.Popen.__init__ = counted
    return counts


if __name__ == "__main__":
    main()
