"""Host faults through the whole daemon on the ssh runner (real sshd hosts on loopback):
- a host's sshd dies in the middle of a run: the other host keeps working, and the trial is harvested
  (never run twice) when the host is back, or requeued elsewhere once its lease expires;
- a host that accepts TCP and never speaks: the connect/banner time-out fires, its slot is unreachable,
  the other hosts do the work;
- a full disk (a 1 MB tmpfs work root) and an unwritable work root: the trial fails or is given up
  with the reason in its note;
- a run that prints 100 MB: the log is capped, the metric is still read, the daemon's memory stays flat.
"""

from __future__ import annotations

import os
import resource
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest
from fixtures_sshd import have_sshd, ssh_fleet  # noqa: F401

from autoresearchd.app import build_daemon
from autoresearchd.config import load_config
from autoresearchd.gitrepo import GitRepo
from autoresearchd.loop import settled
from autoresearchd.notes import Status
from autoresearchd.population import read_population

from conftest import TOY_RUN, branch_idea
from fixtures_reliability import invariants, wait_for, write_cfg

if not have_sshd():
    pytest.skip("/usr/sbin/sshd is not installed (apt-get install openssh-server)", allow_module_level=True)


def host_toml(fleet, i=None, **over) -> str:
    if i is None:
        kw = {}
    else:
        h = fleet.hosts[i]
        kw = dict(name=h.name, host="127.0.0.1", port=h.port, user=fleet.user, key=str(fleet.client_key),
                  known_hosts=str(fleet.known_hosts), gpus=1, work_root=h.work_root, connect_timeout_s=2.0)
    kw.update(over)
    lines = "".join(f"{k} = {v!r}\n".replace("'", '"') if isinstance(v, str) else f"{k} = {v}\n"
                    for k, v in kw.items())
    return "[[runner.hosts]]\n" + lines


def ssh_cfg(tmp_path, research, hosts: list[str], daemon: str = "", runner: str = "") -> Path:
    return write_cfg(tmp_path / "cfg", research, runner='kind = "ssh"\n' + runner + "".join(hosts),
                     rest=f"[daemon]\ntick_s = 0.3\n{daemon}[policy]\nbaseline_seeds = 1\nconfirm_seeds = 0\n")


class Running:
    """The daemon in a thread of this process, so the test can break hosts while it works."""

    def __init__(self, cfg):
        self.d = build_daemon(load_config(cfg), with_llm=False)
        self.t = threading.Thread(target=self.d.run_forever, kwargs={"install_signals": False}, daemon=True)
        self.t.start()

    def pop(self):
        return read_population(self.d.repo, self.d.research.baseline_ref)

    def until_settled(self, timeout: float):
        wait_for(lambda: settled(self.pop()), timeout, step=0.2, what="the daemon to settle")

    def stop(self):
        self.d._stopped.set()
        self.t.join(60)


@pytest.fixture
def shared_dir():
    """A directory the fleet's login user can write (the runs log their starts there)."""
    d = Path(tempfile.mkdtemp(prefix="ard-faults-"))
    d.chmod(0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(autouse=True)
def no_ssh_config(monkeypatch):
    monkeypatch.setenv("AUTORESEARCHD_SSH_CONFIG", os.devnull)


def counted_run(counter: Path, value: float, sleep: float = 0.0) -> str:
    return TOY_RUN.replace("x = 1.0", f"open({str(counter)!r}, 'a').write(os.environ['AUTORESEARCH_TRIAL'] + "
                                      f"'\\n')\nimport time; time.sleep({sleep})\nx = {value}")


def on_host(pop, host: str) -> list:
    return [lz for i in pop.ideas for lz in i.leases if lz.host == host and lz.state == "running"]


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
                wait_for(lambda: {s["slot"]: s["state"] for s in r.d.dispatcher.slot_table()}["gpu0/0"]
                         == "unreachable", 30, step=0.2, what="gpu0's slot to show unreachable")
        finally:
            ssh_fleet.start_host(0)
        r.until_settled(120)
    finally:
        r.stop()
        ssh_fleet.kill_trials()
    notes = invariants(GitRepo(toy_env))
    assert set(notes) == set(ideas) and all(0 <= notes[c].value - v < 0.011 for c, v in ideas.items())
    started = counter.read_text().split()
    victim_runs = [t for t in started if t.startswith(victim.trial_id.split("-s")[0])]
    if ttl > 60:
        # harvested once the host was back: run exactly once, result from gpu0
        assert len(started) == len(set(started)) == len(ideas) + 0, started
        assert victim_runs == [victim.trial_id]
        n = next(n for n in notes.values() if n.trials[0].trial_id == victim.trial_id)
        assert n.host == "gpu0"
    else:
        # the lease expired: requeued (retry suffix) and measured elsewhere; one result per idea
        n = next(n for n in notes.values() if n.trials[0].trial_id.startswith(victim.trial_id))
        assert n.trials[0].trial_id.startswith(victim.trial_id + "-r") and len(n.trials) == 1
        assert n.host == "gpu1"


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
        slots = {s["slot"]: s["state"] for s in r.d.dispatcher.slot_table()}
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


@pytest.fixture
def tiny_disk(ssh_fleet):
    """A 1 MB tmpfs owned by the fleet's login user (root only), else skip."""
    d = Path(tempfile.mkdtemp(prefix="ard-tiny-"))
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(d)], capture_output=True, text=True)
    if p.returncode != 0:
        d.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()}")
    d.chmod(0o777)
    yield d
    ssh_fleet.kill_trials()
    subprocess.run(["umount", "-l", str(d)], capture_output=True)
    shutil.rmtree(d, ignore_errors=True)


def test_disk_full_and_unwritable_work_root_fail_with_reason(ssh_fleet, toy_env, tmp_path, tiny_disk):
    fill = TOY_RUN.replace("x = 1.0", "open('filler.bin', 'wb').write(b'0' * 4_000_000)\nx = 0.5")
    full = branch_idea(toy_env, "disk/full", "Fills the disk", {"run.py": fill})
    ro = Path(tempfile.mkdtemp(prefix="ard-ro-"))
    ro.chmod(0o555)                     # owned by root: the login user cannot create trial dirs here
    try:
        # gpu0's work root is the tiny disk; gpu1's cannot be written at all
        cfg = ssh_cfg(tmp_path, toy_env, [host_toml(ssh_fleet, 0, work_root=str(tiny_disk / "trials")),
                                          host_toml(ssh_fleet, 1, work_root=str(ro / "trials"))],
                      daemon="max_retries = 1\n")
        r = Running(cfg)
        try:
            r.until_settled(120)
        finally:
            r.stop()
    finally:
        ro.chmod(0o755)
        shutil.rmtree(ro, ignore_errors=True)
    repo = GitRepo(toy_env)
    pop = read_population(repo, "refs/heads/main")
    n = pop.by_commit[full].note
    assert n.status in (Status.FAILED, Status.LOST), n
    # gpu0's disk is full, gpu1 cannot create the trial dir: the note says which
    assert "is full" in n.error or "Permission denied" in n.error, n.error
    # the baseline ran too (on the tiny disk) or was given up with a reason: never silently stuck
    assert pop.baseline_note is not None and (pop.baseline_note.status == Status.SUCCEEDED
                                              or pop.baseline_note.error)
    assert not repo.notes_list("refs/notes/autoresearch-runs"), "stale leases"


@pytest.mark.slow
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
