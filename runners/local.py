"""The local runner: trials as detached subprocesses in per-trial directories on this machine.

GPU slots come from `runner.gpus` (one slot per `env.gpus` of them, each with its own
CUDA_VISIBLE_DEVICES); a CPU-only machine gets `runner.slots` CPU slots.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

from autoresearchd.manifest import EnvManifest

from .base import ShellRunner, Slot, scrubbed_env


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
