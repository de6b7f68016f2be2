"""Sandboxes for untrusted commands (a trial's `run`, its evaluator, a coding agent): a registry of
kinds (`bwrap`, `apptainer`, `none`) that turn a SandboxRequest into the argv to execute.

The request is an allow-list: the command sees the system directories (read-only), the directories
named in `readonly`, the parents of PATH's `bin` entries (the Python environment, read-only), and the
`writable` ones. Nothing else of the host exists inside: not $HOME, not the research repo's .git,
not other trials, not the runner's status files. The environment is exactly `env` (no secret can
leak in by inheritance), the network is off unless asked for, GPUs are passed through when asked,
and every process dies with the sandbox (its own PID namespace, --die-with-parent).

Stable API (other modules build on it; extend, do not break):
    SandboxRequest(argv, cwd, writable, readonly, env, network=False, gpus=0, path=None)
    get(name) -> Sandbox;  names() -> list[str]
    Sandbox.name; Sandbox.available() -> str | None (None: usable here, else a one-line reason);
    Sandbox.argv(req) -> list[str] (the full command line, ready for subprocess/execvp);
    Sandbox.prefix(req) -> list[str] (the same without req.argv, for wrappers that append a command);
    Sandbox.check_script() -> str (shell printing `ok` or a one-line reason: probes a remote host);
    env_dirs(path) -> list[str];  ENV_DIRS_SCRIPT, prefixes(bin_dirs) (the same for a remote host).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass, field
from typing import ClassVar

from autoresearchd import defaults

from . import interp
from .seccomp import LAUNCHER as SECCOMP_LAUNCHER

INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; RHEL: dnf install bubblewrap)"


@dataclass
class SandboxRequest:
    argv: list[str]                                   # the command to run inside
    cwd: str                                          # its working directory (one of the binds)
    writable: list[str] = field(default_factory=list)  # bound read-write at the same path
    readonly: list[str] = field(default_factory=list)  # bound read-only at the same path (missing: skipped)
    env: dict[str, str] = field(default_factory=dict)  # the whole environment inside
    network: bool = False
    gpus: int = 0                                     # > 0: /dev/nvidia* and /sys are passed through
    path: str | None = None                           # PATH whose */bin parents are bound read-only


# Lists, for the PATH it runs with, the directories to bind read-only: for each PATH entry and each
# directory its `python*` links resolve to (a venv's base interpreter), the install prefix when it
# holds a Python environment (pyvenv.cfg, conda-meta, lib/python3*), else just that bin directory
# (so ~/.cargo/bin binds, ~/.cargo and its credentials do not). Entries this user cannot reach are
# left out (bwrap refuses them). One listing for every host, this one included (bash).
ENV_DIRS_SCRIPT = r"""IFS=:; for d in $PATH; do case $d in /*) [ -d "$d" ] || continue
  xs=("$d"); for p in "$d"/python*; do [ -e "$p" ] && xs+=("$(dirname -- "$(readlink -f -- "$p")")"); done
  for x in "${xs[@]}"; do
    r=${x%/bin}; set -- "$r"/lib/python3*
    if [ -n "$r" ] && [ "$r" != "$x" ] && { [ -e "$r/pyvenv.cfg" ] || [ -d "$r/conda-meta" ] || [ -e "$1" ]; }
    then printf '%s\n' "$r"; else printf '%s\n' "$x"; fi
  done;; esac; done; true"""


def prefixes(dirs: list[str]) -> list[str]:
    """The absolute directories of an ENV_DIRS_SCRIPT listing, in order, once each."""
    out: list[str] = []
    for d in dirs:
        d = d.strip().rstrip("/")
        if d.startswith("/") and d not in out:
            out.append(d)
    return out


def env_dirs(path: str | None) -> list[str]:
    """The Python environment and tools behind a PATH on this machine, to bind read-only so that
    `python` inside finds the same packages (a venv, its base interpreter, ~/.local, conda), with
    what PATH's python reports it needs (runners/interp.py: its prefixes and sys.path)."""
    home = os.path.expanduser("~")
    p = subprocess.run(["bash", "-c", f"({ENV_DIRS_SCRIPT})\n{interp.probe_script(None)}"], capture_output=True,
                       text=True, env={"PATH": path or os.environ.get("PATH", ""), "HOME": home}, timeout=60)
    lines = p.stdout.splitlines()
    return prefixes([x for x in lines if not x.startswith("interp ")] + interp.parse(lines).binds(home))


def _ro_dirs(req: SandboxRequest) -> list[str]:
    """req.readonly and the env dirs of req.path, once each, less what the system binds cover."""
    out: list[str] = []
    for d in (env_dirs(req.path) if req.path else []) + list(req.readonly):
        if d not in out and not any(d == s or d.startswith(s + "/") for s in defaults.SANDBOX_SYSTEM_DIRS):
            out.append(d)
    return out


class Sandbox:
    """A sandbox kind. Subclasses set `name` and build the argv."""
    name: ClassVar[str] = ""
    isolated: ClassVar[bool] = True          # False only for `none`

    def check_script(self) -> str:
        """Shell that prints `ok` where this sandbox works, else a one-line reason."""
        raise NotImplementedError

    def available(self) -> str | None:
        """None when usable on this machine, else why not (one line)."""
        try:
            p = subprocess.run(["bash", "-c", self.check_script()], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"{self.name}: cannot check: {e}"
        out = (p.stdout.strip().splitlines() or [f"{self.name}: check failed"])[-1]
        return None if out == "ok" else out

    def prefix(self, req: SandboxRequest) -> list[str]:
        raise NotImplementedError

    def argv(self, req: SandboxRequest) -> list[str]:
        return self.prefix(req) + list(req.argv)


class Bwrap(Sandbox):
    """bubblewrap: unprivileged user namespaces (or a setuid bwrap); the default."""
    name = "bwrap"

    def check_script(self) -> str:
        # a real start: bwrap may exist while user namespaces are off (kernel.unprivileged_userns_clone=0,
        # an AppArmor restriction, a container without CAP_SYS_ADMIN); with the seccomp filter, as trials get it
        return ("if ! command -v bwrap >/dev/null 2>&1; then echo " + shlex.quote(f"bwrap not found; {INSTALL_HINT}") +
                f"; elif e=$(env -i PATH={defaults.SANDBOX_LAUNCH_PATH} bash -c {shlex.quote(SECCOMP_LAUNCHER)} "
                "bwrap --ro-bind / / --unshare-all --die-with-parent --cap-drop ALL --seccomp 3 true 2>&1); "
                "then echo ok; "
                "else echo \"bwrap cannot create a sandbox here (${e##*$'\\n'}); user namespaces may be off: "
                "see docs/security.md (apptainer, or a setuid bwrap)\"; fi")

    def prefix(self, req: SandboxRequest) -> list[str]:
        # `env -i`: bwrap is PID 1 inside and /proc/1/environ is its own environment, which --clearenv
        # (the child's) does not touch; so bwrap itself starts with nothing of the caller's
        # --as-pid-1: the command (trial.sh's inner bash) is the namespace's PID 1, so it reaps every
        # orphan inside and bwrap reaps it: the CPU time of the whole tree, a double-forked grandchild
        # too, reaches the wrapper's rusage (bwrap's own init is never reaped: its figure was lost)
        # `bash -c SECCOMP_LAUNCHER bwrap`: opens the seccomp filter (runners/seccomp.py: no kernel keyrings
        # inside, the one kernel state the namespaces leave shared) on fd 3 and execs bwrap, found on the
        # launch PATH, with an empty environment
        # --cap-drop ALL: started by root, bwrap maps root to root and left the step every capability of
        # its user namespace (CAP_SYS_ADMIN: `mount -o remount,bind,rw` made each read-only bind writable,
        # the Python environment the scorer runs included; tests/test_sandbox_root.py)
        a = ["env", "-i", f"PATH={defaults.SANDBOX_LAUNCH_PATH}", "bash", "-c", SECCOMP_LAUNCHER,
             "bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--as-pid-1", "--clearenv",
             "--cap-drop", "ALL", "--seccomp", "3"]
        if req.network:
            a.append("--share-net")
        for d in defaults.SANDBOX_SYSTEM_DIRS:
            a += ["--ro-bind-try", d, d]
        for f in defaults.SANDBOX_ETC_FILES:
            a += ["--ro-bind-try", f, f]
        a += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm", "--tmpfs", "/tmp"]
        if req.gpus > 0:
            a += ["--ro-bind-try", "/sys", "/sys"]
            for dev in defaults.SANDBOX_GPU_DEVICES:
                a += ["--dev-bind-try", dev, dev]
        for d in _ro_dirs(req):
            a += ["--ro-bind-try", d, d]
        for d in req.writable:
            a += ["--bind", d, d]
        a += ["--remount-ro", "/"]       # the sandbox's own root too: only the writable binds and /tmp take writes
        # /proc read-only (its own /proc/self/fd links still reach the pipes): under a root daemon the step's
        # uid is the kernel's root, and the host's global sysctls (kernel.core_pattern: a program the
        # kernel runs as root) and /proc/sysrq-trigger took its writes; bwrap 0.8 covers /proc/sys only
        # where access(W_OK) allows, which /proc/sys refuses (tests/test_sandbox_root.py)
        a += ["--remount-ro", "/proc"]
        for k, v in req.env.items():
            a += ["--setenv", k, v]
        return a + ["--chdir", req.cwd, "--"]


class Apptainer(Sandbox):
    """apptainer (or singularity) for clusters where unprivileged user namespaces are off: it runs
    from an image (`defaults.SANDBOX_IMAGE` or the runner's `sandbox_image`), with the host's home,
    environment and network left out."""
    name = "apptainer"

    def __init__(self, image: str | None = None):
        self.image = image or defaults.SANDBOX_IMAGE

    def check_script(self) -> str:
        if not self.image:
            return "echo 'apptainer needs an image: set runner.sandbox_image'"
        return ("if command -v apptainer >/dev/null 2>&1; then echo ok; else echo 'apptainer not found on PATH; "
                "install it (https://apptainer.org/docs/admin/main/installation.html)'; fi")

    def prefix(self, req: SandboxRequest) -> list[str]:
        a = ["apptainer", "exec", "--contain", "--cleanenv", "--no-home", "--no-mount", "home,cwd",
             "--pid", "--ipc", "--writable-tmpfs"]
        if not req.network:
            a += ["--net", "--network", "none"]
        if req.gpus > 0:
            a.append("--nv")
        for d in _ro_dirs(req):
            a += ["--bind", f"{d}:{d}:ro"]
        for d in req.writable:
            a += ["--bind", f"{d}:{d}:rw"]
        for k, v in req.env.items():
            a += ["--env", f"{k}={v}"]
        return a + ["--pwd", req.cwd, self.image]


class NoSandbox(Sandbox):
    """No isolation: an explicit choice (`sandbox = "none"`); every note then says `sandbox: none`."""
    name = "none"
    isolated = False

    def check_script(self) -> str:
        return "echo ok"

    def prefix(self, req: SandboxRequest) -> list[str]:
        # still a clean environment and the requested directory, nothing more
        return ["sh", "-c", 'cd "$1" && shift && exec "$@"', "sh", req.cwd,
                "env", "-i", *(f"{k}={v}" for k, v in req.env.items())]


_KINDS: dict[str, type[Sandbox]] = {k.name: k for k in (Bwrap, Apptainer, NoSandbox)}


def names() -> list[str]:
    return sorted(_KINDS)


def get(name: str, **kw) -> Sandbox:
    """The sandbox kind `name`; an unknown name lists the valid ones."""
    if name not in _KINDS:
        raise KeyError(f"unknown sandbox '{name}'; valid sandboxes: {', '.join(names())}")
    cls = _KINDS[name]
    return cls(**kw) if kw else cls()


def register(cls: type[Sandbox]) -> None:
    _KINDS[cls.name] = cls
