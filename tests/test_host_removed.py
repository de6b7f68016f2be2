"""A daemon restarted with another host list while a trial runs on a host it no longer lists.

Walking karpathy/ng-video-lecture, a daemon stopped while a local trial ran was started again with
the ssh runner: the old lease's host `local` was marked `degraded: host local does not answer`, its
seed waited out the whole lease TTL (120 s) before it ran on the configured host, and `status` kept
showing `host local degraded ...` for the rest of the daemon's life. A host the config does not list
never answers: the seed is requeued at once and no host is shown degraded for it.
Real sshd hosts on loopback, the real daemon.
"""

from __future__ import annotations

from fixtures_hosts import Running, counted_run, host_toml, no_ssh_config, on_host, shared_dir, ssh_cfg  # noqa: F401
from fixtures_sshd import ssh_fleet, sshd_missing  # noqa: F401
from needs import needs

from conftest import branch_idea
from fixtures_reliability import wait_for

pytestmark = needs("sshd", sshd_missing())


def test_a_trial_on_a_host_no_longer_configured_is_requeued_at_once(ssh_fleet, toy_env, tmp_path, shared_dir):
    counter = shared_dir / "runs.log"
    branch_idea(toy_env, "h/slow", "A slow idea", {"run.py": counted_run(counter, 0.7, 20)})
    first = Running(ssh_cfg(tmp_path / "a", toy_env, [host_toml(ssh_fleet, 0)]))
    try:
        wait_for(lambda: any(lz.trial_id.startswith("h-") for lz in on_host(first.pop(), "gpu0"))
                 and counter.exists() and "h-" in counter.read_text(), 90, step=0.2, what="the idea running on gpu0")
    finally:
        first.stop()
    # started again with gpu1 only (default lease TTL, 120 s): the idea's seed runs on gpu1 at once
    second = Running(ssh_cfg(tmp_path / "b", toy_env, [host_toml(ssh_fleet, 1)]))
    try:
        wait_for(lambda: any(lz.trial_id.startswith("h-") for lz in on_host(second.pop(), "gpu1")), 40, step=0.2,
                 what="the idea's seed placed on gpu1 well within the lease TTL")
        assert "gpu0" not in second.d.slots.hosts(), second.d.slots.hosts()
        second.until_settled(120)
        idea = next(i for i in second.pop().ideas if i.title == "A slow idea")
        assert idea.note is not None and idea.note.host == "gpu1", idea.note
    finally:
        second.stop()
        ssh_fleet.kill_trials()
