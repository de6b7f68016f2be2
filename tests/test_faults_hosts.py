"""Host faults through the whole daemon on the ssh runner (real sshd hosts on loopback):
- a host's sshd dies in the middle of a run: the other host keeps working, and the trial is harvested
  (never run twice) when the host is back, or requeued elsewhere once its lease expires;
- a host that accepts TCP and never speaks: the connect/banner time-out fires, its slot is unreachable,
  the other hosts do the work;
- (full, unwritable or filling work roots, and outages past the TTL: tests/test_host_health.py);
- a run that prints 100 MB: the log is capped, the metric is still read, the daemon's memory stays flat.
"""

from __future__ import annotations

import resource
import socket
import threading
import time

import pytest
from fixtures_hosts import Running, counted_run, host_toml, no_ssh_config, on_host, shared_dir, ssh_cfg  # noqa: F401
from fixtures_sshd import ssh_fleet, sshd_missing  # noqa: F401
from needs import needs

from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.notes import Status
from autoresearchd.store.population import read_population

from conftest import TOY_RUN, branch_idea
from fixtures_reliability import invariants, wait_for

pytestmark = needs("sshd", sshd_missing())


@pytest.mark.parametrize("ttl", [120.0, 3.0], ids=["harvest-after-restart", "requeue-after-ttl"])
def test_sshd_killed_mid_run(ssh_fleet, toy_env, tmp_path, shared_dir, ttl):
    counter = shared_dir / "runs.log"
    ideas = {branch_idea(toy_env, f"h/i{k}", f"Idea {k}", {"run.py": counted_run(counter, 0.6 + k / 100, 1.5)}):
             0.6 + k / 100 for k in range(5)}
    cfg = ssh_cfg(tmp_path, toy_env, [host_toml(ssh_fleet, 0), host_toml(ssh_fleet, 1)],
                  daemon=f"lease_ttl_s = {ttl}\n")
    r = Running(cfg)
    try:
        def started_on_gpu0():
            ran = counter.read_text().split() if counter.exists() else []
            return [lz for lz in on_host(r.pop(), "gpu0") if lz.trial_id in ran]
        victim = wait_for(started_on_gpu0, 90, step=0.1, what="a trial running on gpu0")[0]
        done_before = sum(1 for i in r.pop().ideas if i.note is not None)
        ssh_fleet.stop_host(0)
        try:
            # the other host keeps going while gpu0 is down
            wait_for(lambda: sum(1 for i in r.pop().ideas if i.note is not None) >= done_before + 2, 90, step=0.2,
                     what="gpu1 to finish more ideas while gpu0 is down")
            if ttl < 60:      # with a long TTL the slot stays busy with the unreachable trial's lease
                wait_for(lambda: {s["slot"]: s["state"] for s in r.d.slots.table()}["gpu0/0"]
                         == "unreachable", 30, step=0.2, what="gpu0's slot to show unreachable")
        finally:
            ssh_fleet.start_host(0)
        r.until_settled(120)
        r.until_no_leases(60)     # after the TTL variant: the stale trial on gpu0 is resolved too
    finally:
        r.stop()
        ssh_fleet.kill_trials()
    notes = invariants(GitRepo(toy_env))
    assert set(notes) == set(ideas) and all(0 <= notes[c].value - v < 0.011 for c, v in ideas.items())
    started = counter.read_text().split()
    victim_runs = [t for t in started if t.startswith(victim.trial_id.split("-s")[0])]
    if ttl > 60:
        # harvested once the host was back: the victim ran exactly once and its result came from gpu0.
        # A submit cut by the outage is requeued at once (its lease `stale`); if it did start on gpu0
        # anyway, it was cancelled on return and is named in its note's `superseded`, never counted.
        keys = [t.split("-r")[0] if "-r" in t.rsplit("-s", 1)[-1] else t for t in started]
        superseded = {t for n in notes.values() for t in n.superseded}
        twice = {k for k in keys if keys.count(k) > 1}
        assert len(set(started)) == len(started) and len(set(keys)) == len(ideas), started
        assert all(k in superseded or any(t in superseded for t in started if t.startswith(k + "-r"))
                   for k in twice), (started, superseded)
        assert victim_runs == [victim.trial_id]
        n = next(n for n in notes.values() if n.trials[0].trial_id == victim.trial_id)
        assert n.host == "gpu0"
    else:
        # the lease expired: requeued (retry suffix) and measured elsewhere, one result per idea; the
        # original, if it finished first on gpu0, counts instead and its twin is superseded
        n = next(n for n in notes.values() if n.trials[0].trial_id.startswith(victim.trial_id))
        assert len(n.trials) == 1 and len(n.superseded) <= 1, n
        if n.host == "gpu1":
            assert n.trials[0].trial_id.startswith(victim.trial_id + "-r")
        else:
            # (no twin at all when gpu0 came back before the requeued seed found a free slot: the
            # stale trial, still running, became live again)
            assert n.trials[0].trial_id == victim.trial_id, n
            assert [t for t in victim_runs if t != victim.trial_id] == n.superseded, (victim_runs, n.superseded)


class Silent:
    """A TCP server that accepts connections and never says a word (a hung sshd, a black hole)."""

    def __init__(self):
        self.s = socket.socket()
        self.s.bind(("127.0.0.1", 0))
        self.s.listen(16)
        self.port = self.s.getsockname()[1]
        self.conns: list[socket.socket] = []
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self._stop:
            try:
                c, _ = self.s.accept()
            except OSError:
                return
            self.conns.append(c)

    def close(self):
        self._stop = True
        self.s.close()
        for c in self.conns:
            c.close()


def test_host_that_accepts_and_hangs_is_skipped(ssh_fleet, toy_env, tmp_path, shared_dir):
    counter = shared_dir / "runs.log"
    ideas = [branch_idea(toy_env, f"hang/i{k}", f"Idea {k}", {"run.py": counted_run(counter, 0.7 + k / 100)})
             for k in range(4)]
    silent = Silent()
    hang = host_toml(ssh_fleet, None, name="hung", host="127.0.0.1", port=silent.port, user=ssh_fleet.user,
                     key=str(ssh_fleet.client_key), known_hosts=str(ssh_fleet.known_hosts), gpus=2,
                     work_root="~/never", connect_timeout_s=1.0)
    cfg = ssh_cfg(tmp_path, toy_env, [hang, host_toml(ssh_fleet, 0), host_toml(ssh_fleet, 1)])
    t0 = time.monotonic()
    r = Running(cfg)
    try:
        r.until_settled(90)
        slots = {s["slot"]: s["state"] for s in r.d.slots.table()}
        assert slots["hung/0"] == slots["hung/1"] == "unreachable", slots
        assert "hung" in r.d.runner.errors and ("handshake" in r.d.runner.errors["hung"]
                                                or "timed out" in r.d.runner.errors["hung"]), r.d.runner.errors
    finally:
        r.stop()
        silent.close()
    assert time.monotonic() - t0 < 90
    notes = invariants(GitRepo(toy_env))
    assert set(ideas) <= set(notes)
    assert all(n.host in ("gpu0", "gpu1") for n in notes.values())
    assert silent.conns, "the daemon never tried the hung host (test is void)"


def test_output_flood_is_capped_and_metrics_still_parsed(ssh_fleet, toy_env, tmp_path):
    flood = TOY_RUN.replace("x = 1.0", "import sys\nchunk = ('y' * 1023 + '\\n') * 1024\n"
                                       "for _ in range(100):\n    sys.stdout.write(chunk)\nx = 0.4")
    sha = branch_idea(toy_env, "flood/100mb", "Floods stdout", {"run.py": flood})
    cfg = ssh_cfg(tmp_path, toy_env, [host_toml(ssh_fleet, 0)],
                  runner="log_head_bytes = 65536\nlog_tail_bytes = 65536\n")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    r = Running(cfg)
    try:
        r.until_settled(150)
    finally:
        r.stop()
    grew_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    repo = GitRepo(toy_env)
    n = read_population(repo, "refs/heads/main").by_commit[sha].note
    assert n.status == Status.SUCCEEDED and 0.4 <= n.value < 0.42, n
    log = repo.read_blob(n.log)
    assert 100_000 < len(log) < 200_000 and b"truncated" in log, len(log)
    assert grew_mb < 60, f"the daemon's peak RSS grew by {grew_mb:.0f} MB for a 100 MB log"
