"""A bad host never costs an idea (issue 22), on real loopback sshd hosts:
- a work root that is full (a 1 MB tmpfs under the 512 MB minimum) or unwritable: every idea succeeds
  on the other host with `max_retries = 0` (so no retry was spent), and the bad host shows as
  `degraded` with its reason, in the slot table and in `status`;
- a disk that fills during the run: the trial is requeued on the other host, the fault is in the note;
- sshd killed and restarted within the lease TTL: the finished result is harvested, nothing is rerun,
  within seconds of sshd's return (the recovery time is printed);
- an outage past the TTL: the requeued idea has exactly one result; when the host returns its stale
  trial is cancelled and its directory removed (or, had it finished first, its result counts and the
  re-run twin is cancelled), and the trial that does not count is listed as superseded.
"""

from __future__ import annotations

import io
import os
import re
import tempfile
import time
from pathlib import Path

import pytest
from fixtures_hosts import (Running, counted_run, host_toml, no_ssh_config, on_host, shared_dir,  # noqa: F401
                            ssh_cfg, tiny_disk)
from fixtures_sshd import ssh_fleet, sshd_missing  # noqa: F401
from needs import needs
from rich.console import Console

from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.views.observe import status

from conftest import TOY_RUN, branch_idea
from fixtures_reliability import invariants, wait_for

pytestmark = needs("sshd", sshd_missing())


def started(counter: Path) -> list[str]:
    return counter.read_text().split() if counter.exists() else []


@pytest.mark.parametrize("bad", ["full", "unwritable"])
def test_bad_work_root_costs_the_host_not_the_ideas(ssh_fleet, toy_env, tmp_path, shared_dir, request, bad):
    counter = shared_dir / "runs.log"
    ideas = {branch_idea(toy_env, f"{bad}/i{k}", f"Idea {k}", {"run.py": counted_run(counter, 0.6 + k / 100)}):
             0.6 + k / 100 for k in range(3)}
    if bad == "full":
        root = request.getfixturevalue("tiny_disk") / "trials"     # 1 MB free, 512 MB wanted
    else:
        ro = Path(tempfile.mkdtemp(prefix="ard-ro-"))
        ro.chmod(0o555)                 # owned by root: the login user cannot create trial dirs here
        request.addfinalizer(lambda: (ro.chmod(0o755), os.rmdir(ro)))
        root = ro / "trials"
    cfg = ssh_cfg(tmp_path, toy_env, [host_toml(ssh_fleet, 0, work_root=str(root), slots=2),
                                      host_toml(ssh_fleet, 1, slots=2)], daemon="max_retries = 0\n")
    r = Running(cfg)
    try:
        r.until_settled(120)
        slots = {s["slot"]: s for s in r.d.slots.table()}
        health = r.d.slots.health.table()["gpu0"]
        out = io.StringIO()
        status(r.d.cfg, Console(file=out, width=400))
    finally:
        r.stop()
    assert health["faults"] >= 1 and slots["gpu0/0"]["state"] == slots["gpu0/1"]["state"] == "degraded", slots
    reason = slots["gpu0/0"]["reason"]
    if bad == "full":
        assert re.search(rf"only \d+ kB free on the disk holding {re.escape(str(root))} on gpu0 \(df -Pk\); "
                         r"min_free_mb = 512$", reason), reason
    else:
        assert "Permission denied" in reason and str(root) in reason, reason
    assert f"host gpu0 degraded: {reason}" in out.getvalue(), out.getvalue()
    assert any(ln.startswith("slots:") and "degraded" in ln for ln in out.getvalue().splitlines()), out.getvalue()
    notes = invariants(GitRepo(toy_env))          # every idea succeeded, with max_retries = 0
    assert all(n.host == "gpu1" for n in notes.values()) and \
        all(abs(notes[c].value - v) < 0.011 for c, v in ideas.items())


def test_disk_filling_during_the_run_is_requeued_elsewhere(ssh_fleet, toy_env, tmp_path, shared_dir, tiny_disk):
    counter = shared_dir / "runs.log"
    fill = counted_run(counter, 0.5).replace("x = 0.5", "open('filler.bin', 'wb').write(b'0' * 4_000_000)\nx = 0.5")
    sha = branch_idea(toy_env, "disk/fills", "Writes 4 MB", {"run.py": fill})
    # gpu1 is listed first, so it takes the baseline and the idea meets the small disk on gpu0
    cfg = ssh_cfg(tmp_path, toy_env, [host_toml(ssh_fleet, 1),
                                      host_toml(ssh_fleet, 0, work_root=str(tiny_disk / "trials"), min_free_mb=0.25)],
                  runner="prestage = 1\n", daemon="max_retries = 0\n")
    r = Running(cfg)
    try:
        r.until_no_leases(120)
    finally:
        r.stop()
    n = invariants(GitRepo(toy_env))[sha]          # succeeded, with max_retries = 0
    runs = started(counter)
    t = n.trials[0]
    # it ran on gpu0 first, filled the disk there, and was measured on gpu1; the note keeps the fault
    assert n.host == "gpu1" and len(runs) == len(t.faults) + 1 and t.trial_id.endswith(f"-r{len(t.faults)}"), \
        (n, runs)
    assert t.faults and all(f.startswith("gpu0: ") and "is full" in f for f in t.faults), t.faults
    assert not list((tiny_disk / "trials").glob("*-s0*")), "the full trial's directory was left on gpu0"


def _slow_on_gpu0(shared: Path, first_s: float, twin_s: float, value: float, other_s: float = 0.3) -> str:
    """A run that records its pid and start, sleeps `first_s` as a first attempt on gpu0, `twin_s` as a
    re-run (-rN) elsewhere, `other_s` otherwise."""
    return TOY_RUN.replace("x = 1.0", f"""import re, time
tid = os.environ['AUTORESEARCH_TRIAL']
open({str(shared / 'runs.log')!r}, 'a').write(tid + '\\n')
open({str(shared)!r} + '/pid-' + tid, 'w').write(str(os.getpid()))
rerun = re.search(r'-s\\d+-r\\d+$', tid) is not None
time.sleep({first_s} if '/gpu0/' in os.getcwd() and not rerun else {twin_s} if rerun else {other_s})
x = {value}""")


def _alive(shared: Path, trial: str) -> bool:
    """The trial's run process still exists 5 s on (a zombie waiting to be reaped counts as gone)."""
    pid = int((shared / f"pid-{trial}").read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        if state == "Z":
            return False
        time.sleep(0.1)
    return True


def _victim_on_gpu0(r: Running, counter: Path):
    def running():
        return [lz for lz in on_host(r.pop(), "gpu0") if lz.purpose == "idea" and lz.trial_id in started(counter)]
    return wait_for(running, 90, step=0.1, what="an idea's trial running on gpu0")[0]


def test_sshd_back_within_ttl_harvests_without_rerun(ssh_fleet, toy_env, tmp_path, shared_dir):
    counter = shared_dir / "runs.log"
    outage = float(os.environ.get("ARD_OUTAGE_S", "8"))
    ideas = [branch_idea(toy_env, f"back/i{k}", f"Idea {k}",
                         {"run.py": _slow_on_gpu0(shared_dir, 1.5, 0.3, 0.8 + k / 100)}) for k in range(2)]
    cfg = ssh_cfg(tmp_path, toy_env, [host_toml(ssh_fleet, 0), host_toml(ssh_fleet, 1)],
                  runner="prestage = 1\n", daemon="lease_ttl_s = 120\n")
    r = Running(cfg)
    try:
        victim = _victim_on_gpu0(r, counter)
        ssh_fleet.stop_host(0)
        done = ssh_fleet.remote_path(victim.handle["dir"]) / "done"
        try:
            wait_for(done.exists, 30, step=0.1, what="the trial to finish while its host is away")
            time.sleep(max(0.0, outage - 1.5))
        finally:
            ssh_fleet.start_host(0)
        back = time.monotonic()
        wait_for(lambda: any(i.note is not None for i in r.pop().ideas if i.commit == victim_commit(r, victim)),
                 60, step=0.05, what="the finished trial to be harvested")
        recovery = time.monotonic() - back
        r.until_no_leases(60)
    finally:
        r.stop()
        ssh_fleet.kill_trials()
    print(f"\nrecovery: result harvested {recovery:.1f} s after sshd was back ({outage:.0f} s outage, TTL 120 s)")
    notes = invariants(GitRepo(toy_env))
    assert set(ideas) <= set(notes)
    runs = started(counter)
    assert len(runs) == len(set(runs)) and victim.trial_id in runs, runs       # nothing ran twice
    n = next(n for n in notes.values() if n.trials[0].trial_id == victim.trial_id)
    assert n.host == "gpu0" and not n.superseded
    assert recovery < 20, f"harvest took {recovery:.1f} s after the host was back (reconnect capped at 3 s)"


def victim_commit(r: Running, victim) -> str:
    return next(i.commit for i in r.pop().ideas if any(lz.trial_id == victim.trial_id for lz in i.leases)
                or (i.note and any(t.trial_id.startswith(victim.trial_id) for t in i.note.trials)))


@pytest.mark.parametrize("first", ["stale-cancelled", "stale-counts"])
def test_outage_past_ttl_one_result_and_stale_trial_removed(ssh_fleet, toy_env, tmp_path, shared_dir, first):
    counter = shared_dir / "runs.log"
    # stale-cancelled: the gpu0 original would run a minute, its re-run on gpu1 is quick;
    # stale-counts: the original finishes in 3 s while its host is away, the re-run would take a minute
    secs = (60, 0.3) if first == "stale-cancelled" else (3, 60)
    ideas = [branch_idea(toy_env, f"ttl{first}/i{k}", f"Idea {k}",
                         {"run.py": _slow_on_gpu0(shared_dir, *secs, 0.8 + k / 100)}) for k in range(2)]
    cfg = ssh_cfg(tmp_path, toy_env, [host_toml(ssh_fleet, 0), host_toml(ssh_fleet, 1)],
                  runner="prestage = 1\n", daemon="lease_ttl_s = 3\n")
    r = Running(cfg)
    try:
        victim = _victim_on_gpu0(r, counter)
        commit = victim_commit(r, victim)
        stale_dir = ssh_fleet.remote_path(victim.handle["dir"])
        ssh_fleet.stop_host(0)
        down = time.monotonic()
        try:
            # the lease expires and the seed is requeued on gpu1
            twin = wait_for(lambda: [t for t in started(counter) if t.startswith(victim.trial_id + "-r")], 60,
                            step=0.1, what="the requeued twin to start on gpu1")[0]
            requeued = time.monotonic() - down
            if first == "stale-cancelled":
                wait_for(lambda: next(i for i in r.pop().ideas if i.commit == commit).note is not None, 60,
                         step=0.1, what="the twin's result")
            else:
                wait_for((stale_dir / "done").exists, 30, step=0.1, what="the original to finish on gpu0")
        finally:
            ssh_fleet.start_host(0)
        back = time.monotonic()
        r.until_no_leases(60)
        settled_s = time.monotonic() - back
        print(f"\n{first}: twin started {requeued:.1f} s after sshd died (TTL 3 s); "
              f"stale trial resolved {settled_s:.1f} s after sshd was back")
        twin_dir = Path(str(stale_dir).replace("/gpu0/", "/gpu1/")).parent / twin
    finally:
        r.stop()
        ssh_fleet.kill_trials()
    notes = invariants(GitRepo(toy_env))
    assert set(ideas) <= set(notes)
    n = notes[commit]
    assert len(n.trials) == 1, n.trials
    if first == "stale-cancelled":
        # the re-run counts; the original was cancelled and removed when gpu0 came back
        assert n.host == "gpu1" and n.trials[0].trial_id == twin and n.superseded == [victim.trial_id], n
        assert any("unreachable for more than 3s" in f for f in n.trials[0].faults), n.trials[0].faults
        assert not stale_dir.exists() and not _alive(shared_dir, victim.trial_id)
    else:
        # the original finished first: its result counts, the re-run was cancelled and removed
        assert n.host == "gpu0" and n.trials[0].trial_id == victim.trial_id and n.superseded == [twin], n
        assert not twin_dir.exists() and not _alive(shared_dir, twin) and not stale_dir.exists()
