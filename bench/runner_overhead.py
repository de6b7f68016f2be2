"""Runner-level overhead of the ssh runner on a loopback sshd fleet (not a timed test).

Starts 4 sshd hosts (tests/fixtures_sshd.py used as a library), then drives N one-second trials over
hosts x slots with a plain single-threaded loop: poll every running trial, fetch + clean up the finished
ones, submit to free slots (`--workers N` polls on N threads). Prints:
  - exec round trip on an open connection and a fresh connect,
  - submit latency: submit() called -> the remote wrapper wrote its `started` stamp,
  - the cost of submit(), poll() and fetch() calls,
  - utilization: busy trial seconds / (slots x makespan), and makespan against the ideal.

    .venv/bin/python bench/runner_overhead.py [--hosts 4] [--slots 4] [--trials 64] [--secs 1] [--workers 1]
        [--progress N]
`--progress N`: each run appends N learning-curve points (docs/environment.md, "Progress: learning
curves") while it sleeps, and every pass of the loop also reads the running trials' curves
(progress_many, one command per host, as the early-stopping rule does), timed on its own.
Needs /usr/sbin/sshd (and root for the clean `ardtest` login account, else it logs in as you).
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fixtures_sshd import Fleet  # noqa: E402

from autoresearchd.config import RunnerCfg  # noqa: E402
from autoresearchd.manifest import EnvManifest  # noqa: E402
from autoresearchd.runners.base import PollState, TrialSpec  # noqa: E402
from autoresearchd.runners.ssh import SSHRunner, SSHShell  # noqa: E402


def code_tar() -> bytes:
    """A small repo-like tree (about 40 KB) as a tar, like `git archive` would give."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for i in range(10):
            data = (f"# module {i}\n" + "x = 1\n" * 700).encode()
            ti = tarfile.TarInfo(f"pkg/mod{i}.py")
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def timed(f, *args):
    t = time.perf_counter()
    return f(*args), time.perf_counter() - t


def ms(xs: list[float]) -> str:
    xs = sorted(xs)
    return f"{statistics.median(xs) * 1e3:7.1f} {xs[int(0.9 * (len(xs) - 1))] * 1e3:7.1f} {xs[-1] * 1e3:7.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--secs", type=float, default=1.0)
    ap.add_argument("--workers", type=int, default=1, help="threads polling the running trials")
    ap.add_argument("--progress", type=int, default=0, help="curve points each run writes (0: none)")
    a = ap.parse_args()

    with Fleet(n=a.hosts) as fleet:
        # raw shell figures
        sh = SSHShell(fleet.host_cfg(0), ssh_config=os.devnull)
        sh.run("true")
        execs = []
        for _ in range(30):
            t = time.perf_counter()
            sh.run("true")
            execs.append(time.perf_counter() - t)
        connects = []
        for _ in range(5):
            sh.close()
            t = time.perf_counter()
            sh.run("true")
            connects.append(time.perf_counter() - t)
        sh.close()

        run = f"sleep {a.secs}; echo ---; echo score: 1"
        if a.progress:
            n = a.progress
            run = (f"for i in $(seq 1 {n}); do sleep {a.secs / n:.4f}; "
                   f"printf '{{\"t\": %s, \"score\": 1.5}}\\n' $(awk \"BEGIN {{print $i/{n}}}\") "
                   f">> \"$AUTORESEARCH_PROGRESS\"; done; echo ---; echo score: 1")
        m = EnvManifest(run=run, metric="score", time_budget_s=120)
        cfg = RunnerCfg(kind="ssh", hosts=fleet.host_cfgs(slots=a.slots, gpus=0))
        r = SSHRunner(cfg, m, ssh_config=os.devnull)
        tar = code_tar()
        free = r.slots()
        n_slots = len(free)
        running: dict[str, tuple] = {}
        submit_call, submit_lat, poll_run, poll_done, fetch_t, busy, curve_t = [], [], [], [], [], [], []
        points = 0
        pool = ThreadPoolExecutor(a.workers)
        started_all = time.time()
        left, finished = a.trials, 0
        while finished < a.trials:
            while free and left:
                slot = free.pop(0)
                spec = TrialSpec(trial_id=f"bench-{left:04d}", commit="0" * 40, seed=left, manifest=m, code_tar=tar)
                t0 = time.time()
                h = r.submit(spec, slot)
                submit_call.append(time.time() - t0)
                running[slot.key] = (slot, h, t0)
                left -= 1
            items = list(running.items())
            if a.progress and items:
                curves, dt = timed(r.progress_many, [it[1][1] for it in items])
                curve_t.append(dt)
            for (key, (slot, h, t0)), (st, dt) in zip(items, pool.map(lambda it: timed(r.poll, it[1][1]), items)):
                if st != PollState.DONE:
                    poll_run.append(dt)
                    if st != PollState.RUNNING:
                        raise SystemExit(f"trial {h['dir']} is {st}")
                    continue
                poll_done.append(dt)
                t = time.perf_counter()
                out = r.fetch(h)
                fetch_t.append(time.perf_counter() - t)
                points += len(getattr(out, "curve", []) or [])
                if out.error:
                    raise SystemExit(f"trial failed: {out.error}")
                d = Path(h["dir"])     # loopback: the stamps are readable here
                started = float((d / "started").read_text())
                submit_lat.append(started - t0)
                busy.append(float((d / "done").read_text()) - started)
                r.cleanup(h)
                del running[key]
                free.append(slot)
                finished += 1
        makespan = time.time() - started_all
        pool.shutdown()
        r.close()

    ideal = a.trials / n_slots * a.secs
    print(f"ssh runner overhead: {a.hosts} loopback hosts x {a.slots} slots = {n_slots} slots, "
          f"{a.trials} trials of {a.secs:g} s, one driver loop, polls on {a.workers} thread(s)")
    print(f"{'figure (ms)':44} {'median':>7} {'p90':>7} {'max':>7}")
    for name, xs in [("exec `true` on an open connection", execs),
                     ("fresh connect + auth + exec", connects),
                     ("submit() call (mkdir, tar, 2 files, launch)", submit_call),
                     ("submit latency: call -> remote start stamp", submit_lat),
                     ("poll() while running", poll_run),
                     ("poll() when done", poll_done),
                     ("fetch() (files + host probe)", fetch_t)] + \
            ([("progress_many() over the running trials", curve_t)] if curve_t else []):
        print(f"{name:44} {ms(xs)}")
    if a.progress:
        print(f"curve points stored at fetch: {points / a.trials:.1f} per trial (of {a.progress} written)")
    util = sum(busy) / (n_slots * makespan)
    print(f"makespan {makespan:.2f} s (ideal {ideal:.2f} s, ratio {makespan / ideal:.2f}); "
          f"utilization {util:.1%} (busy trial-seconds / slot-seconds); "
          f"per-trial wrapper wall {statistics.median(busy):.3f} s median")


if __name__ == "__main__":
    main()
