"""Run one function on several threads at once and wait for them all: how the tests make the
daemon's tick, the dashboard's poller and the writers share one repo handle."""

import threading


def run_in_threads(target, n: int = 4) -> None:
    """target(k) for k in 0..n-1, each on its own thread, all started before any is joined."""
    threads = [threading.Thread(target=target, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
