"""Benchmark `autoresearchd serve` on a big research repo: server time of the first page and the lineage,
how soon a new note reaches the page, and the server's memory over a bounded run of live updates.

    .venv/bin/python bench/serve.py [--ideas 10000] [--updates 200] [--repo DIR] [--load 2]

Server time is the `Server-Timing` header the dashboard sets on every response (time inside the app,
from the request's arrival to its first byte); wall time from this client is printed next to it. The
first page is what a browser fetches on opening the overview: the HTML, its JS/CSS and the overview and
leaderboard JSON. Each update writes a result note (as the daemon does: a new one on an idea, or an
amended one) and touches the heartbeat file; an event-stream client waits for the server's change
event and then refetches the overview and the leaderboard, as the page does. The live-update figure
is the time from the note being in git (`git notes add` returned) to the change event, and to the
page's data refetched. RSS of the server process is sampled along the way. `--load N` runs N busy
loops (`python -c 'while True: pass'`) beside the server for the whole run.
Targets (issue 19): first page <= 1 s server time at 10k ideas, lineage <= 2 s, a new note on the page
within 2 s, memory flat.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from dashserver import Server, ok_note  # noqa: E402
from popbuilder import BASELINE_VALUES, build_population, write_cfg  # noqa: E402

from autoresearchd import defaults  # noqa: E402
from autoresearchd.gitrepo import GitRepo, state_dir  # noqa: E402
from autoresearchd.notes import format_note  # noqa: E402

FIRST_PAGE = ["/", "/static/app.js", "/static/app.css", "/static/vendor/uPlot.iife.min.js",
              "/static/vendor/uPlot.min.css", "/api/overview", "/api/ideas"]


def get(url: str) -> tuple[float, float, bytes]:
    """(server ms, wall ms, body)."""
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as r:
        body = r.read()
        timing = r.headers.get("server-timing", "app;dur=0")
    wall = (time.perf_counter() - t0) * 1000
    return float(timing.split("dur=")[1]), wall, body


def page(base: str, paths: list[str]) -> tuple[float, float]:
    server = wall = 0.0
    for p in paths:
        s, w, _ = get(base + p)
        server, wall = server + s, wall + w
    return server, wall


class Events(threading.Thread):
    """An event-stream client: counts change events."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url, self.changes, self.cond, self.at = url, 0, threading.Condition(), 0.0

    def run(self):
        with urllib.request.urlopen(self.url + "/api/events", timeout=600) as r:
            for line in r:
                if line.startswith(b"event: change"):
                    with self.cond:
                        self.changes += 1
                        self.at = time.perf_counter()
                        self.cond.notify_all()

    def wait_beyond(self, n: int, timeout: float = 60.0) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: self.changes > n, timeout)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ideas", type=int, default=10_000)
    ap.add_argument("--updates", type=int, default=200)
    ap.add_argument("--repo", help="build (or reuse) the population here instead of a temporary directory")
    ap.add_argument("--load", type=int, default=0, help="busy loops to run beside the server (0: none)")
    args = ap.parse_args()
    tmp = tempfile.TemporaryDirectory() if not args.repo else None
    d = Path(args.repo or tmp.name)
    d.mkdir(parents=True, exist_ok=True)
    if not (d / "research").exists():
        t0 = time.time()
        build_population(d / "research", args.ideas)
        print(f"built a {args.ideas}-idea research repo in {time.time() - t0:.1f}s")
    cfg = write_cfg(d, d / "research")
    repo = GitRepo(d / "research")
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    t0 = time.time()
    srv = Server(cfg)
    print(f"server ready after {time.time() - t0:.2f}s (population read and indexed before it prints its URL)")
    try:
        base = srv.url
        first = page(base, FIRST_PAGE)
        warm = [page(base, FIRST_PAGE) for _ in range(5)]
        print(f"first page ({len(FIRST_PAGE)} requests): server {first[0]:.0f} ms, wall {first[1]:.0f} ms; "
              f"warm median server {statistics.median(w[0] for w in warm):.0f} ms")
        lin = [get(base + "/api/lineage?depth=2")[:2] for _ in range(3)]
        top = json.loads(get(base + "/api/lineage?depth=1")[2])["root"]["kids"][0]["id"]
        sub = get(base + f"/api/lineage?depth=3&root={top}")
        print(f"lineage (root, depth 2): server {lin[0][0]:.0f} ms first, {statistics.median(x[0] for x in lin):.0f} "
              f"ms median; a focused subtree (depth 3): {sub[0]:.0f} ms")
        best = json.loads(get(base + "/api/overview")[2])["best"]["idea"]
        print(f"idea page (diff, seeds, attempts, logs): server {get(base + '/api/idea/' + best)[0]:.0f} ms")
        ev = Events(base)
        ev.start()
        time.sleep(1.0)
        # half the updates amend one note, half file a first note on an idea that had none
        target = next(c for c, n in repo.notes_list(defaults.NOTES_REF).items() if c != repo.rev_parse("main"))
        noted = repo.notes_list(defaults.NOTES_REF)
        fresh = [c for c in repo.refs("refs/heads/" + defaults.IDEA_PREFIX).values() if c not in noted]
        bmean = sum(BASELINE_VALUES) / 3
        sd = state_dir(repo)
        rss, lat, rebuild, shown = [], [], [], []
        for k in range(args.updates):
            seen = ev.changes
            (sd / "daemon.json").write_text(json.dumps({"pid": os.getpid(), "started": time.time() - 100,
                                                         "heartbeat": time.time(), "slots": [{"slot": "a/0",
                                                         "state": "busy" if k % 2 else "free", "trial": None}]}))
            on = fresh.pop() if k % 2 and fresh else target
            repo.note_write(defaults.NOTES_REF, on, format_note(ok_note(bmean - 0.001 * (k % 50), bmean, "improved")))
            t0 = time.perf_counter()
            if not ev.wait_beyond(seen):
                print(f"update {k}: no change event within 60 s")
                return 1
            lat.append(ev.at - t0)
            server_ms, _ = page(base, ["/api/overview", "/api/ideas"])
            shown.append(time.perf_counter() - t0)
            rebuild.append(server_ms)
            if k % max(1, args.updates // 10) == 0 or k == args.updates - 1:
                rss.append(srv.rss_kb())
        print(f"{args.updates} updates (load: {args.load} busy loops): change event after a note, median "
              f"{statistics.median(lat):.2f} s, max {max(lat):.2f} s; page data refetched, median "
              f"{statistics.median(shown):.2f} s, p90 {statistics.quantiles(shown, n=10)[-1]:.2f} s, max "
              f"{max(shown):.2f} s; overview + leaderboard after a change: median "
              f"{statistics.median(rebuild):.0f} ms server")
        print("server RSS (MiB) over the run: " + " ".join(f"{r / 1024:.0f}" for r in rss))
        grow = (rss[-1] - rss[1]) / rss[1] * 100 if len(rss) > 2 else 0.0
        print(f"RSS growth from the second sample to the end: {grow:+.1f}%")
    finally:
        srv.stop()
        for p in spinners:
            p.kill()
            p.wait()
        if tmp:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
