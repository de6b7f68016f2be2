"""`autoresearchd stop`: signal the running daemon found by its pidfile, also when the config no longer
loads (a typo made while the daemon runs must not leave it unstoppable)."""

from __future__ import annotations

import os
import signal
import sys
import time
import tomllib
from pathlib import Path

from autoresearchd.config import ConfigError, ResearchCfg, find_config
from autoresearchd.research import is_repo
from autoresearchd.store.gitrepo import GitRepo, state_dir
from autoresearchd.views.safe import SafeConsole, one_line

console = SafeConsole(stderr=False)


def stop_despite(config: str | None, now: bool, err: ConfigError) -> int:
    """`stop` with a config that no longer loads. The pidfile is found from the config file's place
    alone: `research.repo` as the raw TOML says, the git repo holding the file (what adopt writes), the
    default repo. Raises `err` when none of them has a daemon's pidfile."""
    p = Path(config) if config else find_config()
    if p is None or not p.is_file():
        raise err
    try:
        given = (tomllib.loads(p.read_text()).get("research") or {}).get("repo")
    except (tomllib.TOMLDecodeError, OSError, AttributeError):
        given = None
    base = p.resolve().parent
    default = base / ResearchCfg.model_fields["repo"].default
    for cand in ([base / given] if isinstance(given, str) else []) + [base, default]:
        if is_repo(cand) and (state_dir(GitRepo(cand), create=False) / "daemon.pid").is_file():
            sys.stderr.write(f"autoresearchd: {one_line(' '.join(str(err).split()))}\n"
                             f"autoresearchd: stopping the daemon of {cand} anyway (fix the config before `start`)\n")
            return stop_daemon(GitRepo(cand), now)
    raise err


def stop_daemon(repo: GitRepo, now: bool) -> int:
    """SIGTERM (graceful), or twice for `--now`; a pidfile whose process is gone is removed."""
    pidfile = state_dir(repo) / "daemon.pid"
    if not pidfile.is_file():
        console.print("autoresearchd is not running")
        return 1
    pid = int(pidfile.read_text())
    try:
        os.kill(pid, signal.SIGTERM)
        if now:
            time.sleep(0.2)
            os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        console.print(f"no process {pid}; removing a stale pidfile")
        pidfile.unlink()
        return 1
    console.print(f"sent stop to {pid}" + (" (twice: immediate)" if now else
                                           " (graceful: it finishes the implementations in flight first, "
                                           "which can take minutes on a busy machine; `status` shows it "
                                           "stopping; `stop --now` exits at once)"))
    return 0
