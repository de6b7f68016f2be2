"""Helpers for the host-fault drills (tests/test_faults_hosts.py, tests/test_host_health.py): host
entries for the loopback sshd fleet, a daemon running in a thread of the test process, counted runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest
from needs import need

from autoresearchd.app import build_daemon
from autoresearchd.config import load_config
from autoresearchd.engine.plan import settled
from autoresearchd.store.population import read_population
from autoresearchd.store.refs import RUNS_REF

from conftest import TOY_RUN
from fixtures_reliability import wait_for, write_cfg


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

    def until_no_leases(self, timeout: float):
        """Settled, and no lease left (stale trials on returned hosts are resolved too)."""
        wait_for(lambda: settled(self.pop()) and not leases_left(self.d.repo), timeout, step=0.2,
                 what="every lease to be resolved")

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


def leases_left(repo) -> dict:
    return repo.notes_list(RUNS_REF)


@pytest.fixture
def tiny_disk(ssh_fleet):
    """A 1 MB tmpfs owned by the fleet's login user (root only), else skip."""
    d = Path(tempfile.mkdtemp(prefix="ard-tiny-"))
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(d)], capture_output=True, text=True)
    if p.returncode != 0:
        d.rmdir()
        need("tmpfs", f"cannot mount one here: {p.stderr.strip()}")
    d.chmod(0o777)
    yield d
    ssh_fleet.kill_trials()
    subprocess.run(["umount", "-l", str(d)], capture_output=True)
    shutil.rmtree(d, ignore_errors=True)
