"""The local runner's host side in this process (runners/localhost.py) answers what the shell did:
each poll state, each file read back, each removal and the completion-event wait, checked against
the shell code the ssh runner still runs on its hosts (POLL_FN, read_files_many, `rm -rf`), on real
trial directories and real processes. None of them starts a process."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from autoresearchd.config import RunnerCfg
from autoresearchd.manifest import EnvManifest
from autoresearchd.runners import localhost
from autoresearchd.runners.base import POLL_FN, PollState
from autoresearchd.runners.local import LocalRunner, LocalShell
from autoresearchd.runners.readback import FILES, read_files_many

from test_daemon_cost import processes


def shell_word(d: Path, pid: int | None) -> str:
    rc, out, _ = LocalShell().run(POLL_FN + f"st '{d}' {pid or ''}\n")
    assert rc == 0
    return out.decode().strip()


def spawn(cwd: Path, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(["sleep", "60"], cwd=cwd, env=env, start_new_session=True)


@pytest.fixture
def procs():
    made: list[subprocess.Popen] = []
    yield made
    for p in made:
        if p.poll() is None:
            p.kill()
        p.wait()


def trial(tmp_path: Path, name: str, files: dict[str, str]) -> Path:
    d = tmp_path / name
    (d / "code").mkdir(parents=True)
    for n, text in files.items():
        (d / n).write_text(text)
    return d


def test_every_poll_state_is_the_shells(tmp_path, procs):
    """done, missing, nopid (no pgid, a non-number), dead (no such process, a stranger's pid, a
    zombie), running (waiting for its slot: no `started`, or a bad one), running@T (cwd in the trial
    dir, in code/, or only its environment naming the trial dir)."""
    cases: list[tuple[Path, int | None, str]] = []
    cases.append((trial(tmp_path, "done", {"done": "1.5\n", "pgid": "1\n"}), None, "done"))
    cases.append((tmp_path / "missing", None, "missing"))
    cases.append((trial(tmp_path, "nopid", {}), None, "nopid"))
    cases.append((trial(tmp_path, "badpid", {"pgid": "12x\n"}), None, "nopid"))
    cases.append((trial(tmp_path, "spacepid", {"pgid": " 1 2\n"}), None, "nopid"))
    cases.append((trial(tmp_path, "nosuch", {"pgid": "999999999\n"}), None, "dead"))
    stranger = spawn(tmp_path)
    procs.append(stranger)
    cases.append((trial(tmp_path, "stranger", {"pgid": f"{stranger.pid}\n"}), None, "dead"))
    zd = trial(tmp_path, "zombie", {"started": "5\n"})
    zombie = spawn(zd)
    procs.append(zombie)
    os.kill(zombie.pid, signal.SIGKILL)
    while Path(f"/proc/{zombie.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        time.sleep(0.01)
    cases.append((zd, zombie.pid, "dead"))
    for name, sub, started, env, want in (
            ("waiting", "", None, None, "running"),
            ("badstart", "", "12:30\n", None, "running"),
            ("running", "", "1700000000.25\n", None, "running@1700000000.25"),
            ("incode", "code", "7\n", None, "running@7"),
            ("byenv", None, "8\n", "X", "running@8")):
        d = trial(tmp_path, name, {} if started is None else {"started": started})
        cwd = tmp_path if sub is None else d / sub if sub else d
        p = spawn(cwd, {**os.environ, "AR_T": f"{d}/x"} if env else None)
        procs.append(p)
        (d / "pgid").write_text(f"{p.pid}\n")
        cases.append((d, None, want))
        cases.append((d, p.pid, want))          # the pid from the handle, not the file
    for d, pid, want in cases:
        assert shell_word(d, pid) == want, d.name          # the reference itself
        with processes() as started:
            got = localhost.poll_one(str(d), pid)
        assert (got, started) == (want, []), d.name


def test_the_runner_polls_as_the_shell_words_say(tmp_path, procs):
    r = LocalRunner(RunnerCfg(kind="local", slots=1), EnvManifest(run="true", metric="s"), tmp_path / "work")
    d = trial(tmp_path, "t", {"started": "42.5\n"})
    p = spawn(d)
    procs.append(p)
    handles = [{"host": "local", "dir": str(d), "pid": p.pid, "submitted": time.time()},
               {"host": "local", "dir": str(tmp_path / "gone"), "submitted": time.time()},
               {"host": "local", "dir": str(trial(tmp_path, "n", {})), "submitted": time.time()},
               {"host": "local", "dir": str(trial(tmp_path, "old", {})), "submitted": time.time() - 3600}]
    with processes() as started:
        got = r.poll_many(handles)
    assert started == []
    assert got == [PollState.RUNNING, PollState.MISSING, PollState.RUNNING, PollState.LOST]
    assert r.started_at[str(d)] == 42.5


def test_files_read_back_are_the_shells(tmp_path):
    """Regular files are read; a link (to a secret outside), a fifo, a directory in a file's place
    and a missing file are not, as `[ -f ]` then `tar -c` (a link stored as a link) left them."""
    secret = tmp_path / "secret"
    secret.write_text("token\n")
    a = trial(tmp_path, "a", {"run.rc": "0\n", "done": "1\n", "run.tail": "x" * 70000})
    (a / "wrapper.log").symlink_to(secret)
    os.mkfifo(a / "eval.rc")
    (a / "tamper.txt").mkdir()
    b = trial(tmp_path, "b", {"eval.head": "", "started": "3\n"})
    dirs = [str(a), str(b), str(tmp_path / "none")]
    want = read_files_many(LocalShell(), dirs, FILES)
    assert want[0] == {"run.rc": b"0\n", "done": b"1\n", "run.tail": b"x" * 70000}
    with processes() as started:
        got = localhost.read_files(dirs, FILES)
    assert (got, started) == (want, [])


def test_removal_removes_the_trial_not_what_its_links_name(tmp_path):
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "f").write_text("keep\n")
    d = trial(tmp_path, "t", {"run.rc": "0\n"})
    (d / "code" / "ln").symlink_to(outside)
    (d / "code" / "sub").mkdir()
    (d / "code" / "sub" / "g").write_text("x")
    link = tmp_path / "dirlink"
    link.symlink_to(outside)
    with processes() as started:
        localhost.remove([str(d), str(link), str(tmp_path / "never")])
    assert started == [] and not d.exists() and not link.is_symlink()
    assert (outside / "deep" / "f").read_text() == "keep\n"


def test_a_completion_event_wakes_the_wait_and_an_old_one_does_not(tmp_path):
    r = LocalRunner(RunnerCfg(kind="local", slots=1), EnvManifest(run="true", metric="s"), tmp_path / "work")
    root = tmp_path / "work"
    (root / ".events").write_text("before\n")
    t0 = time.monotonic()
    with processes() as started:
        assert r.wait_event("local", 0.5) is False            # a line from before the wait is not an event
    assert started == [] and time.monotonic() - t0 >= 0.45

    def append():
        time.sleep(0.3)
        subprocess.run(["bash", "-c", f"echo t1 >> '{root}/.events'"], check=True)   # as trial.sh does
    th = threading.Thread(target=append)
    th.start()
    t0 = time.monotonic()
    assert r.wait_event("local", 10.0) is True
    took = time.monotonic() - t0
    th.join()
    assert 0.25 < took < 5.0
    (root / ".events").write_bytes(b"x" * 1_000_001)            # emptied past 1 MB, as the shell did
    assert r.wait_event("local", 0.1) is False and (root / ".events").stat().st_size == 0


def test_a_wait_on_a_missing_work_root_makes_it(tmp_path):
    assert localhost.wait_appended(str(tmp_path / "new" / "root"), 0.05) is False
    assert (tmp_path / "new" / "root" / ".events").is_file()
