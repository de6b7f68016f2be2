"""Running git: the clean environment (no secrets, no pager, a fixed identity fallback), the
hook-free command line, git's errors, the removal of a stale lock left by a killed git, a stream of
objects from one `cat-file --batch` (stream_objects); and
GitPython's command wrapper and Repo, made to start their git children the same way, with its
persistent `cat-file` processes read a few objects at a time (PyRepo.read_objects) and started again
when they die.
Only the store's git modules call it.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import git
import tenacity
from git.util import hex_to_bin

from autoresearchd import defaults
from autoresearchd.scrub import per_environ, scrubbed_env


class GitError(RuntimeError):
    """A git command failed; `stderr` holds git's own words."""

    def __init__(self, args: list[str], code: int, stderr: str):
        super().__init__(f"git {' '.join(args[:3])}... failed ({code}): {stderr.strip()}")
        self.argv, self.code, self.stderr = args, code, stderr

    @property
    def lock_held(self) -> bool:
        """git could not take a lock because another git holds it (or a killed one left it): a
        caller whose write is safe to repeat may wait and try again."""
        return _LOCK_RE.search(self.stderr) is not None


class RefBusy(GitError):
    """A git write that another writer got in the way of (it held the ref's lock, or moved the ref
    between this write's read and its update): safe to try again on the new tip (lock_retry)."""

    @classmethod
    def of(cls, e: GitError) -> RefBusy:
        return cls(e.argv, e.code, e.stderr)


def lock_retry() -> tenacity.Retrying:
    """The one wait-and-try-again policy of the store's git writes (`for attempt in lock_retry(): with
    attempt: ...`): a write refused because another git holds a lock it needs, or raised as RefBusy by
    its caller, is tried again, each wait longer than the last; after defaults.GIT_LOCK_TRIES tries, or
    at once for any other error, git's own error is raised."""
    step = defaults.GIT_LOCK_WAIT_STEP_S

    told = []

    def waiting(state: tenacity.RetryCallState) -> None:     # a wait the log shows, once, past a moment
        if not told and (state.seconds_since_start or 0) >= defaults.GIT_LOCK_SAY_S:
            told.append(True)
            e = state.outcome.exception() if state.outcome else None
            said = (getattr(e, "stderr", "") or str(e)).strip().splitlines()
            said = [x for x in said if "lock" in x] or said or [""]      # git's line naming the lock
            logging.getLogger("autoresearchd").warning("waiting for a git lock another process holds (up to %d tries): %s",
                                                       defaults.GIT_LOCK_TRIES, said[0])
    return tenacity.Retrying(
        stop=tenacity.stop_after_attempt(defaults.GIT_LOCK_TRIES), wait=tenacity.wait_incrementing(step, step),
        retry=tenacity.retry_if_exception(lambda e: isinstance(e, RefBusy) or isinstance(e, GitError) and e.lock_held),
        before_sleep=waiting, reraise=True)


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
# A push is data, never configuration (docs/security.md, "A push is data: git mechanisms"): no read
# substitutes objects (refs/replace/*, which a push could add), every pathspec is a literal path (a
# committed file named `:(exclude)x` or `*` is that file), no attributes file outside the tree is
# read, and no mailmap renames anyone.
GIT = ["git", "--no-replace-objects", "--literal-pathspecs", "-c", "core.hooksPath=/dev/null",
       "-c", "core.fsmonitor=false", "-c", "core.attributesFile=/dev/null", "-c", "log.mailmap=false",
       "-c", "advice.graftFileDeprecated=false"]
# The same for git's own git children (no replace refs), no grafts (info/grafts reparents commits:
# merge-bases, first-parent diffs; --no-replace-objects leaves them on, an empty graft file stands in)
# and no system attributes file.
_PINNED_ENV = {"GIT_NO_REPLACE_OBJECTS": "1", "GIT_GRAFT_FILE": os.devnull, "GIT_ATTR_NOSYSTEM": "1"}
_CONFIG_KEY = re.compile(r"GIT_CONFIG_KEY_\d+")
# The GIT_* variables a daemon may inherit and pass on: where config and identity come from, tracing,
# and how git finds its own programs. Every other one (GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE,
# GIT_OBJECT_DIRECTORY, GIT_ALTERNATE_OBJECT_DIRECTORIES, GIT_NAMESPACE, GIT_REPLACE_REF_BASE,
# GIT_NOTES_REF, GIT_EXTERNAL_DIFF, GIT_ATTR_SOURCE, GIT_SHALLOW_FILE, GIT_*_PATHSPECS, ...: set when
# the daemon is started from a git hook or alias) would point the daemon's reads at other objects.
_KEEP_GIT_VAR = re.compile(r"GIT_(CONFIG_(GLOBAL|SYSTEM|NOSYSTEM|COUNT|PARAMETERS|KEY_\d+|VALUE_\d+)"
                           r"|(AUTHOR|COMMITTER)_(NAME|EMAIL|DATE)|TRACE\w*|EXEC_PATH|CEILING_DIRECTORIES"
                           r"|DISCOVERY_ACROSS_FILESYSTEM)")


def git_env(extra: dict | None = None) -> dict[str, str]:
    """The environment of every git process the daemon starts: its own, minus secrets and minus the
    GIT_* variables that would redirect a read, plus the fixed plumbing settings, the pins of
    _PINNED_ENV and the identity fallback. Built again only when os.environ changed (scrub.py
    per_environ): it was ~10% of the daemon's Python time a trial, a git process or two at a time."""
    env = per_environ(_git_env_now)
    env.update(extra or {})
    return env


def _git_env_now() -> dict[str, str]:
    """git_env() without extra, from os.environ as it is now."""
    env = {k: v for k, v in scrubbed_env().items() if not k.startswith("GIT_") or _KEEP_GIT_VAR.fullmatch(k)}
    env.update(_BASE_ENV, **_PINNED_ENV)
    # GIT_CONFIG_KEY_<n> names a config key (its value is GIT_CONFIG_VALUE_<n>): not a secret, and
    # dropping it while GIT_CONFIG_COUNT stays would make every git command fail
    env.update({k: v for k, v in os.environ.items() if _CONFIG_KEY.fullmatch(k)})
    for k, v in IDENTITY.items():
        env.setdefault(k, v)
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


def stream_objects(cwd: Path, shas: list[str]):
    """(id, content) of each object, as `git cat-file --batch` in cwd writes it (missing ones left
    out), yielded as they come: the caller parses one object while git reads the next, on another
    core. A cold read of 100k ideas waited for 200k objects before parsing the first
    (bench/population.py). A caller that stops early ends git; a git that fails is a GitError."""
    uniq = list(dict.fromkeys(shas))
    if not uniq:
        return
    p = subprocess.Popen([*GIT, "cat-file", "--batch", "--buffer"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, cwd=cwd, env=git_env(), bufsize=1 << 16)

    def feed():         # a thread: git's output fills its pipe long before all the input is written
        try:
            p.stdin.write(("\n".join(uniq) + "\n").encode())
            p.stdin.close()
        except OSError:         # git died: its exit status says why
            pass
    writer = threading.Thread(target=feed, daemon=True, name="cat-file-feed")
    writer.start()
    done = 0
    try:
        out = p.stdout
        for sha in uniq:
            header = out.readline()
            if not header.endswith(b"\n"):
                break
            last = header[header.rfind(b" ", 0, -1) + 1:-1]      # "<id> <type> <size>", or "<name> missing"
            done += 1
            if last == b"missing" or last == b"ambiguous":
                continue
            data = out.read(int(last))
            out.read(1)
            yield sha, data
    finally:
        if done < len(uniq) and p.poll() is None:
            p.kill()            # the caller stopped early (or git's output broke off)
        writer.join()
        err = p.stderr.read()   # read after stdout: cat-file writes a line or two here, never a pipe's worth
        p.stdout.close()
        p.stderr.close()
        code = p.wait()
    if done < len(uniq):
        raise GitError(["cat-file", "--batch"], code, err.decode(errors="replace") or "output ended early")


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


class CleanGit(git.Git):
    """GitPython's command wrapper, starting git as run_git does. GitPython's own `execute` copies
    os.environ into every child (secrets included) and adds no hook-free options, so both of its
    paths are replaced: the persistent `cat-file` processes of its object database get the same
    command line and environment as run_git, and any other command runs through run_git itself."""

    def execute(self, command, istream=None, *, as_process: bool = False, env: dict | None = None, **kwargs):
        args = [str(a) for a in command[1:]]        # command[0] is GitPython's git executable
        full_env = git_env({**self._environment, **(env or {})})
        if as_process:                 # GitPython reads and writes the pipes; AutoInterrupt ends it
            proc = subprocess.Popen([*GIT, *args], env=full_env, cwd=self._working_dir, stdin=istream or
                                    subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            return self.AutoInterrupt(proc, command)
        if istream is not None or kwargs:
            raise TypeError(f"git {' '.join(args[:2])}: only plain commands run through GitPython here")
        return run_git(args, env=full_env, cwd=Path(self._working_dir)).removesuffix("\n")


_PERSISTENT = ("cat_file_all", "cat_file_header")      # GitPython's attributes for its two cat-files
FULL_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")    # an object id, sha1 or sha256


def _read_answers(out, ids: list[str]) -> dict[str, tuple[str, bytes]]:
    """The answers of `cat-file --batch` to `ids`, in order, from its stdout; EOFError when it broke off."""
    res = {}
    for sha in ids:
        header = out.readline()
        if not header.endswith(b"\n"):
            raise EOFError("cat-file's output ended")
        parts = header.split()           # "<id> <type> <size>", or "<name> missing"
        if len(parts) != 3:
            if parts[-1:] in ([b"missing"], [b"ambiguous"]):
                continue
            raise ValueError(f"cat-file answered {header[:80]!r}")
        size = int(parts[2])
        data = out.read(size)
        if len(data) != size or out.read(1) != b"\n":
            raise EOFError("cat-file's output ended inside an object")
        res[sha] = (parts[1].decode(), data)
    return res


class PyRepo(git.Repo):
    """A GitPython Repo whose every git child is started by CleanGit; objects are read through
    GitCmdObjectDB, i.e. persistent `git cat-file --batch` and `--batch-check` processes."""
    GitCommandWrapperType = CleanGit

    def __init__(self, path: str | os.PathLike):
        try:
            super().__init__(path, odbt=git.GitCmdObjectDB, search_parent_directories=True)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError) as e:
            raise GitError(["rev-parse"], 128, f"not a git repository: {e}") from None
        self._lock, self._pid = threading.RLock(), os.getpid()

    @contextmanager
    def held(self):
        """This Repo for one thread at a time (a cat-file pipe carries one request and its answer at
        a time; the daemon reads from its tick, watcher and implementer threads), in this process
        only: after a fork (the daemon detaching) the child starts its own cat-file processes."""
        if self._pid != os.getpid():
            self.forget_inherited()
            self._lock, self._pid = threading.RLock(), os.getpid()
        with self._lock:
            for attr in _PERSISTENT:    # one that died (killed, OOM) since the last read starts again on
                c = getattr(self.git, attr)     # demand: GitPython would write into its broken pipe forever
                if c is not None and c.proc is not None and c.proc.poll() is not None:
                    self._drop(attr)
            yield self

    def config_value(self, key: str) -> str | None:
        """The last value of `section[.subsection].name` in the system, global and repo config files
        (names compare without case, a subsection with it); None when unset or empty."""
        section, _, name = key.rpartition(".")
        section, _, sub = section.partition(".")
        want = f'{section.lower()} "{sub}"' if sub else section.lower()
        reader, values = self.config_reader(), []
        for sec in reader.sections():
            head, _, quoted = sec.partition(" ")
            if (f"{head.lower()} {quoted}" if quoted else head.lower()) == want:
                values += [v for opt, vals in reader.items_all(sec) if opt.lower() == name.lower() for v in vals]
        return (str(values[-1]).strip() or None) if values else None

    def read_object(self, sha: str) -> tuple[str, bytes] | None:
        """(type, content) of one object by full id through the persistent `cat-file --batch`;
        None when it is missing or the id is malformed."""
        return self.read_objects([sha]).get(sha)

    def read_objects(self, shas: list[str]) -> dict[str, tuple[str, bytes]]:
        """id -> (type, content) of each object by full id (missing or malformed ones left out) through
        the persistent `cat-file --batch`, every request written at once, then the answers read: a few
        objects (defaults.GIT_SMALL_READ: the requests always fit the pipe, so git never waits on us
        while we wait on it) cost one round trip, not a process. git finds an object written after it
        started (loose, or a pack it looks for again on a miss). A cat-file that died, or whose answer
        broke off, is ended and started again once; a second failure is a GitError."""
        ids = [s for s in dict.fromkeys(shas) if isinstance(s, str) and FULL_ID.fullmatch(s)]
        if len(ids) > defaults.GIT_SMALL_READ:
            step = defaults.GIT_SMALL_READ
            return {k: v for i in range(0, len(ids), step) for k, v in self.read_objects(ids[i:i + step]).items()}
        if not ids:
            return {}
        request = "".join(s + "\n" for s in ids).encode()
        attempt = 0
        while True:
            attempt += 1
            cmd = self.git._get_persistent_cmd("cat_file_all", "cat_file", batch=True)
            try:
                cmd.stdin.write(request)
                cmd.stdin.flush()
                return _read_answers(cmd.stdout, ids)
            except (OSError, EOFError, ValueError) as e:
                err = self._drop("cat_file_all")
                if attempt == 2:
                    raise GitError(["cat-file", "--batch"], 1, err or f"persistent cat-file failed: {e}") from None
            except BaseException:       # interrupted half-way: its unread answers would go to the next caller
                self._drop("cat_file_all")
                raise

    def _drop(self, attr: str) -> str:
        """End (kill, reap) and forget one persistent cat-file; GitPython starts a new one on demand.
        What it wrote on stderr is returned (its reason, when it failed)."""
        c = getattr(self.git, attr)
        setattr(self.git, attr, None)
        if c is None or c.proc is None:
            return ""
        proc, err = c.proc, b""
        try:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            err = proc.stderr.read() if proc.stderr else b""
        except (OSError, ValueError):
            pass
        c._terminate()          # closes its pipes (the process is reaped: nothing to signal)
        return err.decode(errors="replace").strip()

    def object_size(self, sha: str) -> int | None:
        """An object's size by full id through the persistent `cat-file --batch-check`; None when it
        is missing or the id is malformed."""
        try:
            return self.odb.info(hex_to_bin(sha)).size
        except (ValueError, TypeError):
            return None

    def close(self) -> None:
        """End the persistent cat-file processes and wait for them (GitPython only signals them)."""
        procs = [c.proc for c in map(self.git.__getattribute__, _PERSISTENT) if c and c.proc]
        super().close()
        for p in procs:
            try:
                p.wait(timeout=defaults.GIT_CLOSE_WAIT_S)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def forget_inherited(self) -> None:
        """In a forked child: drop the parent's cat-file pipes without signalling the parent's
        processes (GitPython would terminate them on garbage collection); new ones start on demand."""
        for c in map(self.git.__getattribute__, _PERSISTENT):
            if c:
                c.proc = None
        self.git.cat_file_all = self.git.cat_file_header = None
