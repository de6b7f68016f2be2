"""Running one git process: the clean environment (no secrets, no pager, a fixed identity fallback),
the hook-free command line, git's errors, and the removal of a stale lock left by a killed git.
Only the store's git modules call it.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import time
from pathlib import Path

from autoresearchd import defaults
from autoresearchd.scrub import scrubbed_env


class GitError(RuntimeError):
    """A git command failed; `stderr` holds git's own words."""

    def __init__(self, args: list[str], code: int, stderr: str):
        super().__init__(f"git {' '.join(args[:3])}... failed ({code}): {stderr.strip()}")
        self.code, self.stderr = code, stderr


# A clean, deterministic environment for plumbing: no pager, no user hooks prompting, fixed identity
# fallback so commits work on hosts without user.name configured. Variables whose names look secret
# (API keys, tokens) are scrubbed from every git process: a hook or helper git might run must never
# see them.
_BASE_ENV = {
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_PAGER": "cat",
    "LC_ALL": "C",
}
_LOCK_RE = re.compile(r"Unable to create '([^']+\.lock)': File exists")

IDENTITY = {
    "GIT_AUTHOR_NAME": "autoresearchd",
    "GIT_AUTHOR_EMAIL": "autoresearchd@localhost",
    "GIT_COMMITTER_NAME": "autoresearchd",
    "GIT_COMMITTER_EMAIL": "autoresearchd@localhost",
}


# The daemon's own git runs no hooks (a hook planted in the git dir would otherwise run with the
# daemon's rights on its next ref update) and no fsmonitor command, whatever the repo's config says.
GIT = ["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"]
_CONFIG_KEY = re.compile(r"GIT_CONFIG_KEY_\d+")


def git_env(extra: dict | None = None) -> dict[str, str]:
    """The environment of every git process the daemon starts: its own, minus secrets, plus the
    fixed plumbing settings and identity fallback."""
    env = dict(scrubbed_env(), **_BASE_ENV)
    # GIT_CONFIG_KEY_<n> names a config key (its value is GIT_CONFIG_VALUE_<n>): not a secret, and
    # dropping it while GIT_CONFIG_COUNT stays would make every git command fail
    env.update({k: v for k, v in os.environ.items() if _CONFIG_KEY.fullmatch(k)})
    for k, v in IDENTITY.items():
        env.setdefault(k, v)
    env.update(extra or {})
    return env


def run_git(args: list[str], *, input: bytes | None = None, env: dict | None = None, cwd: Path | None = None,
            git_dir: Path | None = None, check: bool = True, binary: bool = False):
    """Run `git ARGS` in cwd; stdout as text (or bytes). A failure to take a lock that a killed git
    left inside git_dir removes the lock and runs the command once more."""
    full_env = git_env(env)
    p = subprocess.run([*GIT, *args], input=input, capture_output=True, cwd=cwd, env=full_env)
    if p.returncode != 0 and _clear_stale_lock(p.stderr, cwd, git_dir):
        # the command failed to take its lock, so it changed nothing: run it again once
        p = subprocess.run([*GIT, *args], input=input, capture_output=True, cwd=cwd, env=full_env)
    if check and p.returncode != 0:
        raise GitError(args, p.returncode, p.stderr.decode(errors="replace"))
    return p.stdout if binary else p.stdout.decode(errors="replace")


def _clear_stale_lock(stderr: bytes, cwd: Path | None, git_dir: Path | None) -> bool:
    """Remove a stale `*.lock` inside git_dir that git named in `stderr`. True if removed."""
    m = _LOCK_RE.search(stderr.decode(errors="replace"))
    if not m or git_dir is None:
        return False
    lock = Path(m.group(1))
    lock = lock if lock.is_absolute() else Path(cwd or ".") / lock
    try:
        if git_dir not in lock.resolve().parents or time.time() - lock.stat().st_mtime < defaults.STALE_LOCK_S:
            return False
        lock.unlink()
    except OSError:
        return False
    logging.getLogger("autoresearchd").warning("removed a stale git lock left by a killed process: %s", lock)
    return True
