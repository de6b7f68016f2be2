"""What only the ssh runner does: host key checks, ~/.ssh/config aliases, slot layout, surviving a
dropped connection or a vanished host, and a capped output flood. Real sshd on loopback throughout."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from fixtures_sshd import free_port, ssh_fleet, sshd_missing  # noqa: F401
from needs import needs

pytestmark = needs("sshd", sshd_missing())

from autoresearchd.config import HostCfg, RunnerCfg  # noqa: E402
from autoresearchd.manifest import EnvManifest  # noqa: E402
from autoresearchd.runners.base import HostUnreachable, PollState, TrialSpec  # noqa: E402
from autoresearchd.runners.ssh import HostAuthError, HostKeyError, SSHRunner, SSHShell  # noqa: E402

from test_runner_contract import TRAIN, wait_done  # noqa: E402


def shell(fleet, i=0, **over) -> SSHShell:
    return SSHShell(fleet.host_cfg(i, **over), ssh_config=os.devnull)


def host_line(fleet, i) -> str:
    typ, key = (fleet.hosts[i].dir / "host_ed25519.pub").read_text().split()[:2]
    return f"[127.0.0.1]:{fleet.hosts[i].port} {typ} {key}\n"


def runner(fleet, m, hosts=None, **cfg) -> SSHRunner:
    return SSHRunner(RunnerCfg(kind="ssh", hosts=hosts or fleet.host_cfgs(), **cfg), m, ssh_config=os.devnull)


def spec(m, code_tar) -> TrialSpec:
    return TrialSpec(trial_id="t-" + uuid.uuid4().hex[:10], commit="0" * 40, seed=1, manifest=m, code_tar=code_tar)


@pytest.fixture
def tar(make_repo):
    from autoresearchd.store.gitrepo import GitRepo
    return GitRepo(make_repo(TRAIN)).archive("HEAD")


# -- host keys --------------------------------------------------------------------------------------
def test_unknown_host_key_is_refused(ssh_fleet, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    sh = shell(ssh_fleet, known_hosts=str(kh))
    with pytest.raises(HostKeyError) as e:
        sh.run("true")
    msg = str(e.value)
    assert "gpu0" in msg and str(kh) in msg and "ssh-keyscan" in msg and "trusted = true" in msg
    assert kh.read_text() == ""
    r = runner(ssh_fleet, EnvManifest(run="true", metric="x"), hosts=[ssh_fleet.host_cfg(0, known_hosts=str(kh))])
    assert [s.reachable for s in r.slots()] == [False] and "ssh-keyscan" in r.errors["gpu0"]


def test_mismatched_host_key_is_refused_even_if_trusted(ssh_fleet, tmp_path):
    kh = tmp_path / "known_hosts"
    wrong = host_line(ssh_fleet, 1).replace(str(ssh_fleet.hosts[1].port), str(ssh_fleet.hosts[0].port))
    kh.write_text(wrong)
    with pytest.raises(HostKeyError) as e:
        shell(ssh_fleet, known_hosts=str(kh), trusted=True).run("true")
    assert "expects" in str(e.value) and "never accepts a changed key" in str(e.value)
    assert kh.read_text() == wrong


def test_trusted_records_an_unknown_key(ssh_fleet, tmp_path):
    kh = tmp_path / "sub" / "known_hosts"
    assert shell(ssh_fleet, known_hosts=str(kh), trusted=True).run("echo ok")[1] == b"ok\n"
    assert kh.read_text() == host_line(ssh_fleet, 0)
    assert shell(ssh_fleet, known_hosts=str(kh)).run("echo again")[1] == b"again\n"   # now known


def test_bad_client_key_and_closed_port(ssh_fleet, tmp_path):
    other = tmp_path / "other_key"              # a key the hosts do not know
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    with pytest.raises(HostAuthError, match="refused our key"):
        shell(ssh_fleet, key=str(other)).run("true")
    with pytest.raises(HostUnreachable, match="cannot connect"):
        shell(ssh_fleet, port=free_port()).run("true")


def test_concurrent_commands_share_one_connection(ssh_fleet):
    from concurrent.futures import ThreadPoolExecutor
    sh = shell(ssh_fleet)
    with ThreadPoolExecutor(12) as ex:
        outs = list(ex.map(lambda i: sh.run(f"sleep 0.05; echo {i}"), range(24)))
    assert [o[1] for o in outs] == [f"{i}\n".encode() for i in range(24)]
    assert sh.run("true", stdin=b"x" * 5_000_000, timeout=20)[0] == 0     # stdin the command never reads
    sh.close()


# -- ~/.ssh/config --------------------------------------------------------------------------------------
def test_alias_from_ssh_config(ssh_fleet, tmp_path, monkeypatch):
    h = ssh_fleet.hosts[1]
    conf = tmp_path / "ssh_config"
    conf.write_text(f"Host mygpu\n  HostName 127.0.0.1\n  Port {h.port}\n  User {ssh_fleet.user}\n"
                    f"  IdentityFile {ssh_fleet.client_key}\n  UserKnownHostsFile {ssh_fleet.known_hosts}\n"
                    f"Host broken\n  HostName 127.0.0.1\n  Port {free_port()}\n  User {ssh_fleet.user}\n"
                    f"  IdentityFile {ssh_fleet.client_key}\n  UserKnownHostsFile {ssh_fleet.known_hosts}\n")
    sh = SSHShell(HostCfg(name="g", alias="mygpu"), ssh_config=conf)
    assert sh.run("whoami")[1].decode().strip() == ssh_fleet.user
    monkeypatch.setenv("AUTORESEARCHD_SSH_CONFIG", str(conf))
    # explicit keys win over the config file
    assert SSHShell(HostCfg(name="g2", alias="broken", port=h.port)).run("echo hi")[1] == b"hi\n"
    with pytest.raises(ValueError, match="alias"):
        SSHShell(HostCfg(name="g3", alias="x"), ssh_config=tmp_path / "absent")
    with pytest.raises(ValueError, match="key file"):
        SSHShell(HostCfg(name="g4", host="127.0.0.1", key=str(tmp_path / "nokey")), ssh_config=os.devnull)


# -- slots ------------------------------------------------------------------------------------------
def test_slot_layout(ssh_fleet):
    h = ssh_fleet.host_cfg(0, gpus=4)
    assert [(s.slot, s.gpus) for s in runner(ssh_fleet, EnvManifest(run="x", metric="m", gpus=2),
                                             hosts=[h]).slots()] == [("0,1", [0, 1]), ("2,3", [2, 3])]
    assert [(s.slot, s.gpus) for s in runner(ssh_fleet, EnvManifest(run="x", metric="m", gpus=0),
                                             hosts=[h]).slots()] == [(str(i), []) for i in range(4)]
    r = runner(ssh_fleet, EnvManifest(run="x", metric="m"), hosts=[ssh_fleet.host_cfg(0, slots=3),
                                                                  ssh_fleet.host_cfg(1, port=free_port())])
    slots = r.slots()
    assert [(s.host, s.reachable) for s in slots] == [("gpu0", True)] * 3 + [("gpu1", False)]
    assert "cannot connect" in r.errors["gpu1"]


# -- detached runs ----------------------------------------------------------------------------------
def test_detached_run_survives_a_new_runner(ssh_fleet, tar):
    m = EnvManifest(run="sleep 1; echo ---; echo score: 4", metric="score")
    r1 = runner(ssh_fleet, m)
    h = r1.submit(spec(m, tar), r1.slots()[0])
    r1.close()
    r2 = runner(ssh_fleet, m)
    assert wait_done(r2, h) == PollState.DONE
    assert r2.fetch(h).metrics == {"score": 4.0}
    r2.close()


def test_host_down_mid_run_then_back(ssh_fleet, tar):
    m = EnvManifest(run="while [ ! -e release ]; do sleep 0.05; done; echo ---; echo score: 5", metric="score")
    r = runner(ssh_fleet, m)
    r.REACHABLE_TTL_S = 0
    s0, s1 = r.slots()
    h0, h1 = r.submit(spec(m, tar), s0), r.submit(spec(m, tar), s1)
    try:
        ssh_fleet.stop_host(0)
        assert r.poll(h0) == PollState.UNREACHABLE
        assert [s.reachable for s in r.slots()] == [False, True]
        assert r.poll(h1) == PollState.RUNNING
        (Path(h1["dir"]) / "code" / "release").touch()
        assert wait_done(r, h1) == PollState.DONE and r.fetch(h1).metrics == {"score": 5.0}
        (Path(h0["dir"]) / "code" / "release").touch()      # it finishes while its host is unreachable
        assert _wait((Path(h0["dir"]) / "done").exists)
        assert r.poll(h0) == PollState.UNREACHABLE
    finally:
        ssh_fleet.start_host(0)
    assert wait_done(r, h0) == PollState.DONE
    assert r.fetch(h0).metrics == {"score": 5.0}
    assert all(s.reachable for s in r.slots())
    r.close()


def _wait(cond, timeout=30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


def test_output_flood_is_capped(ssh_fleet, tar):
    m = EnvManifest(run="head -c 5000000 /dev/zero | tr '\\0' x; echo; echo ---; echo score: 3", metric="score")
    r = runner(ssh_fleet, m, log_head_bytes=1000, log_tail_bytes=1000)
    h = r.submit(spec(m, tar), r.slots()[0])
    assert wait_done(r, h) == PollState.DONE
    out = r.fetch(h)
    assert out.metrics == {"score": 3.0} and out.error is None
    assert 2000 <= len(out.log) < 2200 and b"truncated" in out.log and out.log.startswith(b"x" * 1000)
    r.cleanup(h)
    assert r.poll(h) == PollState.MISSING
    r.close()


def test_a_command_cut_by_the_host_vanishing_is_unreachable_not_exit_minus_1(ssh_fleet):
    """sshd dies mid-command: the command may have run (a submit may have started its trial), so the
    shell raises HostUnreachable (the lease stays `stale`, looked at again when the host answers). It
    returned exit -1 as if the command had failed, and a submit read that way was requeued while its
    trial ran on: the seed ran twice."""
    import threading
    sh = shell(ssh_fleet)
    assert sh.run("true")[0] == 0                # connected
    got: dict = {}

    def long_command():
        try:
            got["rc"] = sh.run("sleep 20", timeout=60)[0]
        except HostUnreachable as e:
            got["error"] = e
    t = threading.Thread(target=long_command)
    t.start()
    time.sleep(1.0)
    ssh_fleet.stop_host(0)
    try:
        t.join(40)
        assert not t.is_alive()
        assert "error" in got, f"the cut command returned exit {got.get('rc')}"
        assert "connection lost" in str(got["error"])
    finally:
        ssh_fleet.start_host(0)
        sh.close()


def test_a_command_killed_by_a_signal_on_a_live_connection_is_its_exit(ssh_fleet):
    """No exit status because the command was killed by a signal (paramiko ignores exit-signal), the
    connection alive: that is the command's result (-1), not a host fault."""
    sh = shell(ssh_fleet)
    try:
        assert sh.run("kill -9 $$")[0] == -1
        assert sh.run("echo still")[1] == b"still\n"
    finally:
        sh.close()
