"""The local runner: trials as detached subprocesses in per-trial directories on this machine.

GPU slots come from `runner.gpus` (one slot per `env.gpus` of them, each with its own
CUDA_VISIBLE_DEVICES); a CPU-only machine gets `runner.slots` CPU slots. Polls, read-backs, removals
and the wait for completion events are done in this process (runners/localhost.py), not by a
`bash -c` each: the submit (tar, the detached wrapper) and cancel still go through the shell.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

from autoresearchd.manifest import EnvManifest

from . import localhost
from .base import PollState, Shell, ShellRunner, Slot, poll_word, scrubbed_env


def local_gpu_count() -> int:
    """GPUs visible on this machine (nvidia-smi, else /dev/nvidiaN)."""
    if shutil.which("nvidia-smi"):
        try:
            p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
            return sum(1 for ln in p.stdout.splitlines() if ln.startswith("GPU "))
        except (OSError, subprocess.SubprocessError):
            return 0
    return sum(1 for p in Path("/dev").glob("nvidia[0-9]*"))


class LocalShell:
    name = "local"

    def run(self, cmd: str, stdin: bytes | None = None, timeout: float = 60.0) -> tuple[int, bytes, bytes]:
        p = subprocess.run(["bash", "-c", cmd], input=stdin if stdin is not None else b"",
                           capture_output=True, timeout=timeout, env=scrubbed_env())
        return p.returncode, p.stdout, p.stderr

    def close(self) -> None:
        pass


class LocalRunner(ShellRunner):
    name: ClassVar[str] = "local"

    def __init__(self, cfg, manifest: EnvManifest, work_root: str | os.PathLike, *, sandbox_fallback: bool = False):
        super().__init__(cfg, manifest, sandbox_fallback=sandbox_fallback)
        self._root = str(Path(cfg.work_root or work_root).expanduser().resolve())
        Path(self._root).mkdir(parents=True, exist_ok=True)
        self._shell = LocalShell()

    def slots(self) -> list[Slot]:
        per = max(1, self.manifest.gpus)
        if self.cfg.gpus and self.manifest.gpus > 0:
            ids = list(self.cfg.gpus)
            return [Slot("local", ",".join(map(str, ids[i:i + per])), ids[i:i + per])
                    for i in range(0, len(ids) - per + 1, per)]
        return [Slot("local", str(i)) for i in range(max(1, self.cfg.slots))]

    def shell_for(self, host: str) -> LocalShell:
        return self._shell

    def work_root(self, host: str) -> str:
        return self._root

    def path_prefix(self, host: str) -> str:
        # The interpreter that runs the daemon comes first, so `python` finds the same packages.
        return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "/usr/bin:/bin")])

    # -- the host side, in this process (runners/localhost.py) ------------------------------------
    def _poll_batched(self, handles: list[dict[str, Any]]) -> list[PollState]:
        if not os.path.isdir("/proc/1"):        # no /proc: the shell's `ps` answers
            return super()._poll_batched(handles)
        out = []
        for h in handles:
            word, _, began = localhost.poll_one(h["dir"], int(h.get("pid") or 0) or None).partition("@")
            out.append(poll_word(word, h))
            if began:
                try:
                    self.started_at[h["dir"]] = float(began)
                except ValueError:
                    pass
        return out

    def read_files(self, sh: Shell, dirs: list[str], names: list[str]) -> list[dict[str, bytes]]:
        return localhost.read_files(dirs, names)

    def _cleanup_batched(self, handles: list[dict[str, Any]]) -> None:
        localhost.remove([h["dir"] for h in handles])

    def wait_event(self, host: str, timeout: float = 10.0) -> bool:
        return localhost.wait_appended(self.work_root(host).rstrip("/") or "/", timeout)
