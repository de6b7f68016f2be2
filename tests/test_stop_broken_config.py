"""`autoresearchd stop` while the config in the work tree is broken.

Walking karpathy/ng-video-lecture (adopt's layout: the daemon config and the `[env]` manifest in the
repo's own `.autoresearch.toml`), a user who broke that file (a dropped `metric`) could no longer
stop the daemon they had started: every command, `stop` included, validated the file first and
exited 2 (`env.metric: Field required`), and the daemon ran on. `stop` needs only the pidfile: it
now says what is wrong with the config and stops the daemon anyway. Real git, a real detached daemon.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from conftest import TOY_EVAL, TOY_MANIFEST, TOY_RUN, wait_file

OWN = ('[research]\nrepo = "."\n[runner]\nsandbox = "none"\nkind = "local"\n[daemon]\ntick_s = 0.3\n'
       '[llm]\nprovider = "none"\n\n' + TOY_MANIFEST)


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "autoresearchd.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purpose (its parent, the detaching `start`, has exited)
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_stop_works_when_the_config_no_longer_loads(make_repo):
    repo = make_repo({".autoresearch.toml": OWN, "run.py": TOY_RUN, "evaluate.py": TOY_EVAL}, "own")
    p = _cli("start", "--detach", cwd=repo)
    assert p.returncode == 0, p.stdout + p.stderr
    pid = int(wait_file(repo / ".git" / "autoresearch" / "daemon.pid", timeout=60))
    try:
        assert _alive(pid)
        (repo / ".autoresearch.toml").write_text(OWN.replace('metric = "score"\n', ""))     # not committed
        assert _cli("status", cwd=repo).returncode == 2          # strict, as documented
        s = _cli("stop", cwd=repo)
        assert s.returncode == 0, s.stdout + s.stderr
        assert "env.metric" in s.stderr and "stopping the daemon of" in s.stderr, s.stderr
        assert f"sent stop to {pid}" in s.stdout, s.stdout
        deadline = time.time() + 60
        while _alive(pid) and time.time() < deadline:
            time.sleep(0.2)
        assert not _alive(pid), "the daemon still runs after `stop`"
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_stop_with_a_broken_config_and_no_daemon_says_the_config_error(make_repo):
    repo = make_repo({".autoresearch.toml": OWN.replace('metric = "score"\n', ""), "run.py": TOY_RUN,
                      "evaluate.py": TOY_EVAL}, "nodaemon")
    s = _cli("stop", cwd=repo)
    assert s.returncode == 2 and "env.metric" in s.stderr and "Traceback" not in s.stderr, s.stderr
