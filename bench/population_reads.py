"""Cold and repeated `read_population` on an existing repo, with whichever autoresearchd the python
running it imports: run with another checkout's venv for a before/after on the same repo and hour.
Usage: <venv>/bin/python bench/population_reads.py REPO_PATH  (prints wall and CPU, best of 2)."""
import os, sys, time, resource
import autoresearchd
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store import population as P
def cpu():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime
repo = GitRepo(sys.argv[1])
def timed(f):
    c, t = cpu(), time.perf_counter(); f(); return time.perf_counter() - t, cpu() - c
res = {}
for name in ("cold", "warm"):
    runs = []
    for _ in range(2):
        if name == "cold":
            P._NOTES.clear(); P._IDEAS.clear()
        runs.append(timed(lambda: P.read_population(repo, "refs/heads/main")))
    res[name] = min(runs)
print(autoresearchd.__file__, sys.argv[1], {k: f"{w:.2f} s wall ({c:.2f} CPU)" for k, (w, c) in res.items()},
      "load", os.getloadavg())
