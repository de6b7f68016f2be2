"""The once-per-host `prepare` step (data download, preprocessing): its cache key, a hash of its
inputs, and running it on the daemon machine so that `check` sees what trials see.

On a host, trial.sh runs prepare.sh before it takes its slot and starts its budget clock; the result
lives in <work_root>/.prepared/<key> and is reused by every later trial with the same key.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from importlib import resources
from pathlib import Path

from autoresearchd import defaults


def prepare_key(manifest, inputs: list[tuple[str, str]]) -> str:
    """A hash of everything the prepare step depends on: its command, the setup before it, the
    [env.data] variables, and (path, blob id) of each file matching `prepare_inputs` in the baseline.
    Change any of them and it runs again; nothing else makes it run twice on a host."""
    h = hashlib.sha256()
    for part in (manifest.prepare or "", manifest.setup or "", *sorted(f"{k}={v}" for k, v in manifest.data.items()),
                 *sorted(f"{sha} {path}" for path, sha in inputs)):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


def prepare_script() -> bytes:
    return resources.files("autoresearchd.runners").joinpath("prepare.sh").read_bytes()


def prepared_dir(root: str | os.PathLike, key: str) -> Path:
    return Path(root) / ".prepared" / key


def run_prepare_local(root: Path, key: str, src: Path, manifest, env: dict[str, str]) -> tuple[int, str]:
    """Run (or reuse) the prepare step under `root` on this machine. Returns (exit code, log tail)."""
    root.mkdir(parents=True, exist_ok=True)
    script = root / ".prepare.sh"
    script.write_bytes(prepare_script())
    log = root / f".prepare-{key}.out"
    env = dict(env, AR_PREPARE=manifest.prepare or "", AR_SETUP=manifest.setup or "",
               AR_PREPARE_BUDGET=str(int(manifest.prepare_budget_s)), AR_KILL_GRACE=str(defaults.KILL_GRACE_S))
    p = subprocess.run(["bash", str(script), str(root), key, str(src), str(log)], env=env,
                       stdin=subprocess.DEVNULL, capture_output=True, start_new_session=True)
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else p.stderr.decode(errors="replace")[-3000:]
    return p.returncode, tail
