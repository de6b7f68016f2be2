"""Cold and repeated `read_population` on an existing repo, with whichever autoresearchd the python
running it imports: run it with another checkout's venv for a before/after on the same repo and hour.
Usage: <venv>/bin/python bench/population_reads.py REPO_PATH [--live] [--repeat N]  (wall and CPU
seconds, best of N, 2 by default; the CPU is this process's and its git children's, each given apart
too, since on a shared machine the wall clock counts the other jobs' time). --live times the daemon's
first read instead: a new LivePopulation's refresh (store/livepop.py), nothing parsed before. The cold
figure ends with one allocation after the read, so the collections that the read's objects trigger
(the cycle collector walking them) are counted in it, as the daemon's pass pays them.
"""

from __future__ import annotations

import os
import resource
import sys
import time

import autoresearchd
from autoresearchd.store import population
from autoresearchd.store.gitrepo import GitRepo


def cpu_s() -> tuple[float, float]:
    """CPU seconds of this process and of its finished children (git)."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime


def main(argv: list[str]) -> int:
    repo = GitRepo(argv[0])
    live = "--live" in argv
    repeat = int(argv[argv.index("--repeat") + 1]) if "--repeat" in argv else 2
    res = {}
    for name in ("cold", "again"):
        runs = []
        for _ in range(repeat):
            if name == "cold":           # forget parsed objects: a fresh process
                population._NOTES.clear()
                population._IDEAS.clear()
            (s, c), t = cpu_s(), time.perf_counter()
            if live:
                from autoresearchd.store.livepop import LivePopulation
                LivePopulation(repo, "refs/heads/main").refresh()
            else:
                population.read_population(repo, "refs/heads/main")
            junk = [[] for _ in range(100_000)]     # what the pass allocates next: the collections it triggers
            del junk
            (s2, c2) = cpu_s()
            runs.append((time.perf_counter() - t, s2 - s + c2 - c, s2 - s, c2 - c))
        res[name] = min(runs)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{autoresearchd.__file__} {argv[0]} (load average {load})")
    for name, (wall, cpu, own, git) in res.items():
        print(f"  {name:6s} {wall:7.2f} s wall ({cpu:.2f} s CPU: {own:.2f} this process, {git:.2f} git)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
