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
    Sandbox.prefix(req) -> list[str] (the same without req.argv, for wrappers that append a command).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import ClassVar

from autoresearchd import defaults

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


def env_dirs(path: str | None) -> list[str]:
    """The install prefixes behind a PATH (`/opt/venv/bin` -> `/opt/venv`), and those of the
    interpreters its `python*` links resolve to (a venv's base Python): the Python environment and its
    tools, bound read-only so `python` inside finds the same packages."""
    out: list[str] = []

    def add(bindir: str) -> None:
        bindir = bindir.rstrip("/")
        if bindir.endswith("/bin") and bindir.startswith("/") and len(bindir) > 4:
            if (p := bindir[:-4]) not in out:
                out.append(p)
    for d in (path or "").split(os.pathsep):
        add(d)
        try:
            links = [e.path for e in os.scandir(d) if e.name.startswith("python")] if d.startswith("/") else []
        except OSError:
            continue
        for link in links:
            add(os.path.dirname(os.path.realpath(link)))
    return out


class Sandbox:
    """A sandbox kind. Subclasses set `name` and build the argv."""
    name: ClassVar[str] = ""
    isolated: ClassVar[bool] = True          # False only for `none`

    def available(self) -> str | None:
        raise NotImplementedError

    def prefix(self, req: SandboxRequest) -> list[str]:
        raise NotImplementedError

    def argv(self, req: SandboxRequest) -> list[str]:
        return self.prefix(req) + list(req.argv)


class Bwrap(Sandbox):
    """bubblewrap: unprivileged user namespaces (or a setuid bwrap); the default."""
    name = "bwrap"

    def available(self) -> str | None:
        exe = shutil.which("bwrap")
        if not exe:
            return f"bwrap not found; {INSTALL_HINT}"
        # a real start: bwrap exists but user namespaces may be off (kernel.unprivileged_userns_clone=0,
        # an AppArmor restriction, a container without CAP_SYS_ADMIN)
        try:
            p = subprocess.run([exe, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"],
                               capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"bwrap does not start: {e}"
        if p.returncode != 0:
            why = p.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no message"]
            return f"bwrap cannot create a sandbox here ({why[0]}); user namespaces may be disabled " \
                   f"(see docs/security.md: use sandbox = \"apptainer\" or a setuid bwrap)"
        return None

    def prefix(self, req: SandboxRequest) -> list[str]:
        a = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--clearenv"]
        if req.network:
            a.append("--share-net")
        for d in defaults.SANDBOX_SYSTEM_DIRS:
            a += ["--ro-bind-try", d, d]
        for f in defaults.SANDBOX_ETC_FILES:
            a += ["--ro-bind-try", f, f]
        a += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
        if req.gpus > 0:
            a += ["--ro-bind-try", "/sys", "/sys"]
            for dev in defaults.SANDBOX_GPU_DEVICES:
                a += ["--dev-bind-try", dev, dev]
        for d in env_dirs(req.path) + list(req.readonly):
            a += ["--ro-bind-try", d, d]
        for d in req.writable:
            a += ["--bind", d, d]
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

    def available(self) -> str | None:
        exe = shutil.which("apptainer") or shutil.which("singularity")
        if not exe:
            return "apptainer not found; install apptainer (https://apptainer.org/docs/admin/main/installation.html)"
        if not self.image:
            return "apptainer needs an image: set runner.sandbox_image"
        return None

    def prefix(self, req: SandboxRequest) -> list[str]:
        a = ["apptainer", "exec", "--contain", "--cleanenv", "--no-home", "--no-mount", "home,cwd",
             "--pid", "--ipc", "--writable-tmpfs"]
        if not req.network:
            a += ["--net", "--network", "none"]
        if req.gpus > 0:
            a.append("--nv")
        for d in env_dirs(req.path) + list(req.readonly):
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

    def available(self) -> str | None:
        return None

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
