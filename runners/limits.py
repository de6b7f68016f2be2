"""A trial's compute and resources, the daemon's side of runners/limits.sh: the variables trial.env
gives it (the manifest's limits, the host's slot count), the files it leaves per step, and what they
say: CPU, wall and GPU seconds of each step, and which limit a step hit.

A limit hit is known from the kernel where a cgroup enforced it (memory.events / memory.oom_control
`oom_kill`, pids.events `max`). Where an rlimit enforced it, the kernel only makes the call fail
(ENOMEM, EAGAIN, EMFILE), so it is read from the failed step's own output: the error text every
runtime prints for those calls. That text is the trial's own (it could print it on purpose), so it
only names why its own failed step failed; it never changes a value or a decision.
"""

from __future__ import annotations

import re
from enum import Enum
from importlib import resources

from autoresearchd import defaults
from autoresearchd.manifest import EnvManifest


class Limit(str, Enum):
    """The per-trial limits, as a note names the one a trial hit (`limit: memory`)."""
    MEMORY = "memory"
    PIDS = "pids"
    OPEN_FILES = "open_files"


# The steps trial.sh meters: `run`, then the evaluation's steps (each its own files S.cpu_us ...).
RUN_STEP = "run"
# A split evaluation (docs/security.md "A model is code") adds the scorer's inputs phase and the model
# runner, whose groups trial.sh sums into one `model` step.
EVAL_STEPS: tuple[str, ...] = ("eval_inputs", "model", "eval")
STEP_SUFFIXES = (".cpu_us", ".time", ".gpu_s", ".limit")

# What each runtime prints when the call an rlimit refused fails (checked only for a failed step).
_LOG_SIGNS = {
    Limit.MEMORY: re.compile(r"MemoryError|Cannot allocate memory|std::bad_alloc|out of memory|"
                             r"failed to allocate", re.I),
    Limit.PIDS: re.compile(r"Resource temporarily unavailable|fork: retry|can't fork|cannot fork|"
                           r"fork failed|pthread_create failed|can't start new thread", re.I),
    Limit.OPEN_FILES: re.compile(r"Too many open files|EMFILE", re.I),
}


def limits_script() -> bytes:
    return resources.files("autoresearchd.runners").joinpath("limits.sh").read_bytes()


def limit_env(m: EnvManifest, host_slots: int) -> dict[str, str]:
    """trial.env's limit variables: the manifest's (0 = derive on the host from its size and
    `host_slots`, the slots the daemon runs there at once) and the defaults the derivation uses."""
    return {"AR_MEM_MB": str(m.mem_mb or 0), "AR_MAX_PIDS": str(m.max_pids or 0),
            "AR_MAX_FILES": str(m.max_open_files or defaults.TRIAL_OPEN_FILES),
            "AR_HOST_SLOTS": str(max(1, int(host_slots))), "AR_MEM_SHARE": str(defaults.TRIAL_MEM_SHARE),
            "AR_PIDS_PER_CPU": str(defaults.TRIAL_PIDS_PER_CPU), "AR_MIN_PIDS": str(defaults.TRIAL_MIN_PIDS),
            "AR_GPU_SAMPLE_S": f"{defaults.GPU_SAMPLE_S:g}"}


def step_files(steps: tuple[str, ...] = (RUN_STEP, *EVAL_STEPS)) -> list[str]:
    """The files a runner fetches for the accounting of `steps`, and the applied limits."""
    return [s + x for s in steps for x in STEP_SUFFIXES] + ["limits"]


def _num(b: bytes | None) -> float | None:
    try:
        return float(b.decode().split()[0]) if b and b.strip() else None
    except (ValueError, UnicodeDecodeError):
        return None


def step_compute(files: dict[str, bytes], step: str) -> tuple[float | None, float | None, float | None]:
    """(CPU seconds, wall seconds, GPU seconds) of one step, None where it left no figure."""
    us = _num(files.get(step + ".cpu_us"))
    wall = None
    try:
        t0, t1 = (float(x) for x in files.get(step + ".time", b"").decode().split()[:2])
        wall = max(0.0, t1 - t0)
    except ValueError:
        pass
    return (us / 1e6 if us is not None else None), wall, _num(files.get(step + ".gpu_s"))


def limit_hit(files: dict[str, bytes], step: str, log: bytes, failed: bool) -> tuple[Limit | None, str]:
    """(the limit a step hit, how it is known). Kernel evidence (a cgroup's event counter) first;
    else, for a failed step only, its output's error text."""
    ev = files.get(step + ".limit", b"").decode(errors="replace").strip()
    for line in ev.splitlines():
        word = line.split(" ", 1)[0]
        if word in ("memory", "pids"):
            return Limit(word), f"cgroup {line}"
    if not failed:
        return None, ""
    text = log.decode(errors="replace")
    for lim, sign in _LOG_SIGNS.items():
        if (m := sign.search(text)):
            return lim, f"its output says {m.group(0)!r}"
    return None, ""


def applied(files: dict[str, bytes]) -> dict[str, str]:
    """The limits trial.sh applied and how (`limits`: `memory_mb 9000 cgroup1` ...), as
    {"memory_mb": "9000 (cgroup1)", ...}."""
    out = {}
    for line in files.get("limits", b"").decode(errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 3:
            out[parts[0]] = f"{parts[1]} ({parts[2]})"
        elif len(parts) == 2:
            out[parts[0]] = parts[1]
    return out
