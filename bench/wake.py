"""Poke-to-tick latency of the REAL daemon loop: how long after `Daemon.poke()` (what the ref watcher,
a finished trial's event, a finished implementation and a host's passed probe call) the reconcile
begins, on an idle daemon whose clock (daemon.tick_s = 60) would not tick on its own.

Runs `autoresearchd.app.build_daemon(...).run_forever(...)` on a one-commit research repo with the
local runner and `llm.provider = "none"`, waits for the baseline's result (so nothing else is in
flight), then pokes --n times at random phases and records when the next reconcile pass begins (its
first step, `Daemon.read(scan=True)`; a poke during a pass is served by another pass of that tick).

    .venv/bin/python bench/wake.py [--n 200]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dispatch import make_research, results, wait, write_config  # noqa: E402

from autoresearchd.app import build_daemon  # noqa: E402
from autoresearchd.config import load_config  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="pokes measured")
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ard-bench-wake-"))
    repo = make_research(root, 0.1)
    d = build_daemon(load_config(write_config(root, repo, "local", None, 1, 60.0)), with_llm=False)
    entered: list[float] = []
    read = d.read

    def timed_read(scan: bool = False):
        if scan:                               # a pass begins
            entered.append(time.perf_counter())
        return read(scan)
    d.read = timed_read
    stop = threading.Event()
    th = threading.Thread(target=d.run_forever, kwargs=dict(install_signals=False, until=lambda pop: stop.is_set()),
                          daemon=True)
    th.start()
    try:
        wait(lambda: repo.rev_parse("refs/heads/main") in results(repo), 120, "the baseline", 0.1)
        time.sleep(2.0)                        # the result's own pokes are served
        lat = []
        for _ in range(a.n):
            time.sleep(random.uniform(0.02, 0.2))
            n, t0 = len(entered), time.perf_counter()
            d.poke()
            wait(lambda: len(entered) > n, 30, "a pass after the poke", 0.0005)
            lat.append((entered[n] - t0) * 1000)
    finally:
        stop.set()
        th.join(60)
    lat.sort()
    print(f"poke -> reconcile pass, {len(lat)} pokes (ms): median {statistics.median(lat):.2f}, "
          f"p90 {lat[int(0.9 * len(lat)) - 1]:.2f}, max {lat[-1]:.2f}")


if __name__ == "__main__":
    main()
