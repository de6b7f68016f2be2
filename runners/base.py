"""The Runner protocol and the shell-based runner that local, ssh and slurm share.

A runner places a trial directory on a host (the code as a tar of the commit, the frozen harness,
`trial.sh`, a quoted `trial.env`), starts `trial.sh` detached, and later reads the files it left.
Everything the daemon needs to find the trial again after a crash is in the JSON-able handle,
which the loop stores in the lease note. Only this package talks to hosts.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass, field
from enum import Enum
from importlib import resources
from typing import Any, ClassVar, Protocol

from autoresearchd import defaults
from autoresearchd.manifest import EnvManifest

from .metrics import parse_metrics


@dataclass
class Slot:
    host: str                # host name (local: "local")
    slot: str                # slot id within the host, e.g. "0" or "gpu2,3"
    gpus: list[int] = field(default_factory=list)
    reachable: bool = True

    @property
    def key(self) -> str:
        return f"{self.host}/{self.slot}"


@dataclass
class TrialSpec:
    trial_id: str
    commit: str
    seed: int
    manifest: EnvManifest
    code_tar: bytes                  # git archive of the commit
    eval_tar: bytes | None = None    # git archive of the baseline's frozen files (harness)
    frozen_paths: list[str] = field(default_factory=list)
    purpose: str = "idea"


class PollState(str, Enum):
    RUNNING = "running"
    DONE = "done"
    UNREACHABLE = "unreachable"      # transient: the host did not answer
    MISSING = "missing"              # the host answered, the trial directory is gone
    LOST = "lost"                    # the runner knows the trial died without a result (node fail)


@dataclass
class TrialOutcome:
    exit_code: int | None
    timed_out: bool
    metrics: dict[str, float]
    metrics_source: str              # "evaluate" | "run" | "none"
    log: bytes                       # run log (capped head + tail) followed by the eval log
    wall_s: float | None = None
    tamper: list[str] = field(default_factory=list)
    error: str | None = None
    accelerator: str | None = None
    software: str | None = None
    eval_exit_code: int | None = None
    requeue: bool = False            # e.g. Slurm preemption: run again, not a failure


class Shell(Protocol):
    """How a runner reaches a host. Commands are shell strings; callers quote every value."""
    name: str

    def run(self, cmd: str, stdin: bytes | None = None, timeout: float = 60.0) -> tuple[int, bytes, bytes]: ...
    def close(self) -> None: ...


class HostUnreachable(Exception):
    """The host did not answer; the loop treats the trial as unknown until the lease TTL."""


class Runner(Protocol):
    name: ClassVar[str]

    def slots(self) -> list[Slot]: ...
    def submit(self, spec: TrialSpec, slot: Slot) -> dict[str, Any]: ...
    def poll(self, handle: dict[str, Any]) -> PollState: ...
    def fetch(self, handle: dict[str, Any]) -> TrialOutcome: ...
    def cancel(self, handle: dict[str, Any]) -> None: ...
    def cleanup(self, handle: dict[str, Any]) -> None: ...
    def close(self) -> None: ...


def trial_script() -> bytes:
    return resources.files("autoresearchd.runners").joinpath("trial.sh").read_bytes()


_PROBE = r"""
acc=cpu
if command -v nvidia-smi >/dev/null 2>&1; then
  n=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
  c=$(nvidia-smi -L 2>/dev/null | wc -l); [ -n "$n" ] && acc="$c x $n"
fi
sw=$(cd / && python3 -c 'import sys,platform;v="py"+platform.python_version()
try:
  import torch;v+=" torch"+torch.__version__+(" cuda"+torch.version.cuda if torch.version.cuda else "")
except Exception: pass
print(v)' 2>/dev/null || echo unknown)
echo "accelerator: $acc"; echo "software: $sw"
"""


def trial_env(spec: TrialSpec, slot: Slot, path_prefix: str, cfg_head: int, cfg_tail: int,
              data_env: dict[str, str]) -> str:
    """The quoted variables file that trial.sh sources. Every value goes through shlex.quote."""
    m = spec.manifest
    q = shlex.quote
    lines = {
        "AR_RUN": m.run,
        "AR_EVALUATE": m.evaluate or "",
        "AR_SETUP": m.setup or "",
        "AR_BUDGET": str(int(m.time_budget_s)),
        "AR_EVAL_BUDGET": str(int(m.eval_budget_s)),
        "AR_KILL_GRACE": str(defaults.KILL_GRACE_S),
        "AR_LOG_HEAD": str(cfg_head),
        "AR_LOG_TAIL": str(cfg_tail),
        "AR_PATH": path_prefix,
        "AR_DATA_ENV": " ".join(f"{k}={q(v)}" for k, v in data_env.items()),
    }
    out = [f"{k}={q(v)}" for k, v in lines.items()]
    out.append("AR_FROZEN=(" + " ".join(q(p) for p in spec.frozen_paths) + ")")
    out.append("AR_ARTIFACTS=(" + " ".join(q(p) for p in m.artifacts) + ")")
    exports = {"AUTORESEARCH_SEED": str(spec.seed), "AUTORESEARCH_TRIAL": spec.trial_id,
               "AUTORESEARCH_TIME_BUDGET_S": str(int(m.time_budget_s)),
               "CUDA_VISIBLE_DEVICES": ",".join(map(str, slot.gpus)) if slot.gpus else "",
               "PATH": path_prefix, **data_env}
    out += [f"export {k}={q(v)}" for k, v in exports.items()]
    return "\n".join(out) + "\n"


class ShellRunner:
    """Shared implementation: a trial directory under a work root, reached through a Shell.
    Subclasses say which shells exist (hosts) and how to start the wrapper (detached or sbatch)."""

    name: ClassVar[str] = "shell"

    def __init__(self, cfg, manifest: EnvManifest):
        self.cfg = cfg
        self.manifest = manifest

    # -- subclass hooks ------------------------------------------------------------------------
    def shell_for(self, host: str) -> Shell:
        raise NotImplementedError

    def work_root(self, host: str) -> str:
        raise NotImplementedError

    def path_prefix(self, host: str) -> str:
        return "$PATH"

    def data_env(self, host: str) -> dict[str, str]:
        return dict(self.manifest.data)

    def launch(self, sh: Shell, tdir: str, spec: TrialSpec, slot: Slot) -> dict[str, Any]:
        """Start trial.sh detached; return extra handle fields."""
        q = shlex.quote(tdir)
        # `&` must apply to the setsid command alone: backgrounding `cd && setsid ...` forks a subshell that
        # keeps our stdout pipe open until the trial ends, so this call would block for the whole run.
        rc, out, err = sh.run(f"cd {q} || exit 1; setsid nohup bash trial.sh > wrapper.log 2>&1 < /dev/null & echo $!")
        if rc != 0:
            raise RuntimeError(f"could not start the trial on {sh.name}: {err.decode(errors='replace')[-500:]}")
        return {"pid": int(out.split()[-1])}

    # -- protocol --------------------------------------------------------------------------------
    def submit(self, spec: TrialSpec, slot: Slot) -> dict[str, Any]:
        sh = self.shell_for(slot.host)
        root = self.work_root(slot.host)
        tdir = f"{root.rstrip('/')}/{spec.trial_id}"
        q = shlex.quote
        env_text = trial_env(spec, slot, self.path_prefix(slot.host), self.cfg.log_head_bytes,
                             self.cfg.log_tail_bytes, self.data_env(slot.host))
        # Fresh directory: a retry of the same trial id starts clean.
        rc, _, err = sh.run(f"rm -rf {q(tdir)} && mkdir -p {q(tdir)}/code {q(tdir)}/eval")
        if rc != 0:
            raise RuntimeError(f"mkdir on {slot.host} failed: {err.decode(errors='replace')[-300:]}")
        for name, data, cmd in (
            ("code", spec.code_tar, f"tar -x -C {q(tdir)}/code"),
            ("eval", spec.eval_tar, f"tar -x -C {q(tdir)}/eval"),
            ("trial.sh", trial_script(), f"cat > {q(tdir)}/trial.sh"),
            ("trial.env", env_text.encode(), f"cat > {q(tdir)}/trial.env"),
        ):
            if data is None:
                continue
            rc, _, err = sh.run(cmd, stdin=data, timeout=300)
            if rc != 0:
                raise RuntimeError(f"copying {name} to {slot.host} failed: {err.decode(errors='replace')[-300:]}")
        extra = self.launch(sh, tdir, spec, slot)
        return {"host": slot.host, "slot": slot.slot, "dir": tdir, "submitted": time.time(), **extra}

    def poll(self, handle: dict[str, Any]) -> PollState:
        sh = self.shell_for(handle["host"])
        q = shlex.quote(handle["dir"])
        try:
            rc, out, _ = sh.run(f"if [ -e {q}/done ]; then echo done; elif [ -d {q} ]; then echo running; "
                                f"else echo missing; fi", timeout=30)
        except HostUnreachable:
            return PollState.UNREACHABLE
        word = out.decode().strip()
        if rc != 0 or word not in ("done", "running", "missing"):
            return PollState.UNREACHABLE
        if word == "running" and not self._alive(sh, handle):
            return PollState.LOST
        return PollState(word)

    def _alive(self, sh: Shell, handle: dict[str, Any]) -> bool:
        """A running trial whose wrapper died without `done` (host rebooted, killed) is lost."""
        pid = handle.get("pid")
        if not pid:
            return True
        q = shlex.quote(handle["dir"])
        rc, out, _ = sh.run(f"s=$(ps -o stat= -p {int(pid)} 2>/dev/null); "
                            f"if [ -e {q}/done ]; then echo yes; elif [ -z \"$s\" ] || [ \"${{s#Z}}\" != \"$s\" ]; "
                            f"then echo no; else echo yes; fi", timeout=30)
        return out.decode().strip() != "no"

    def fetch(self, handle: dict[str, Any]) -> TrialOutcome:
        sh = self.shell_for(handle["host"])
        d = handle["dir"]
        files = ["run.rc", "run.timed_out", "started", "done", "tamper.txt", "run_result.json",
                 "eval.rc", "eval.timed_out", "eval_result.json", "run.head", "run.tail", "eval.head",
                 "eval.tail", "wrapper.log"]
        got = self._read_files(sh, d, files)
        probe = sh.run(_PROBE, timeout=60)[1].decode(errors="replace")
        return outcome_from_files(got, self.manifest, probe)

    def _read_files(self, sh: Shell, d: str, names: list[str]) -> dict[str, bytes]:
        """Read several small files in one round trip, each framed by its name and length."""
        q = shlex.quote
        script = "; ".join(
            f"if [ -f {q(d)}/{n} ]; then printf '%s %s\\n' {q(n)} $(wc -c < {q(d)}/{n}); cat {q(d)}/{n}; fi"
            for n in names)
        rc, out, _ = sh.run(script, timeout=120)
        res, pos = {}, 0
        while pos < len(out):
            nl = out.index(b"\n", pos)
            name, size = out[pos:nl].decode().rsplit(" ", 1)
            pos = nl + 1
            res[name] = out[pos:pos + int(size)]
            pos += int(size)
        return res

    def cancel(self, handle: dict[str, Any]) -> None:
        sh = self.shell_for(handle["host"])
        q = shlex.quote(handle["dir"])
        sh.run(f"for f in {q}/run.pid {q}/eval.pid {q}/pgid; do [ -f $f ] && kill -TERM -- -$(cat $f) 2>/dev/null; "
               f"done; sleep 1; for f in {q}/run.pid {q}/eval.pid {q}/pgid; do [ -f $f ] && "
               f"kill -KILL -- -$(cat $f) 2>/dev/null; done; true", timeout=60)

    def cleanup(self, handle: dict[str, Any]) -> None:
        sh = self.shell_for(handle["host"])
        sh.run(f"rm -rf {shlex.quote(handle['dir'])}", timeout=120)

    def close(self) -> None:
        pass


def _int(b: bytes | None) -> int | None:
    try:
        return int(b.decode().strip()) if b else None
    except ValueError:
        return None


def _float(b: bytes | None) -> float | None:
    try:
        return float(b.decode().strip()) if b else None
    except ValueError:
        return None


def _joined_log(files: dict[str, bytes], prefix: str) -> bytes:
    head, tail = files.get(prefix + ".head", b""), files.get(prefix + ".tail", b"")
    if tail:
        return head + b"\n[... output truncated by autoresearchd: head and tail kept ...]\n" + tail
    return head


def outcome_from_files(files: dict[str, bytes], manifest: EnvManifest, probe: str = "") -> TrialOutcome:
    """Turn the files a trial left into an outcome. With a frozen evaluate step, only its output
    counts: whatever `run` printed or wrote is ignored for the metric of record."""
    run_log = _joined_log(files, "run")
    eval_log = _joined_log(files, "eval")
    rc = _int(files.get("run.rc"))
    timed_out = "run.timed_out" in files
    started, done = _float(files.get("started")), _float(files.get("done"))
    tamper = [ln for ln in files.get("tamper.txt", b"").decode(errors="replace").splitlines()
              if ln.startswith(("<", ">", "run wrote"))]
    metrics: dict[str, float] = {}
    source, error, eval_rc = "none", None, None
    if manifest.evaluate:
        eval_rc = _int(files.get("eval.rc"))
        if rc == 0 and not timed_out:
            metrics = parse_metrics(eval_log.decode(errors="replace"), files.get("eval_result.json"))
            source = "evaluate"
            if "eval.timed_out" in files:
                error = "evaluation timed out"
            elif eval_rc not in (0, None):
                error = f"evaluation exited {eval_rc}"
    else:
        metrics = parse_metrics(run_log.decode(errors="replace"), files.get("run_result.json"))
        source = "run"
    if timed_out:
        error = "run exceeded its time budget of %ss" % manifest.time_budget_s
    elif rc is None:
        error = "run left no exit code (killed, or the wrapper failed): " + \
            files.get("wrapper.log", b"").decode(errors="replace")[-300:]
    elif rc != 0:
        error = f"run exited {rc}"
    elif manifest.metric not in metrics and error is None:
        error = f"no '{manifest.metric}' reported (metrics protocol: a '---' line then 'key: value' lines, " \
                f"or JSON at $AUTORESEARCH_RESULT)"
    acc = sw = None
    for line in probe.splitlines():
        if line.startswith("accelerator: "):
            acc = line[13:].strip()
        elif line.startswith("software: "):
            sw = line[10:].strip()
    log = run_log + (b"\n===== evaluate =====\n" + eval_log if eval_log else b"")
    return TrialOutcome(exit_code=rc, timed_out=timed_out, metrics=metrics, metrics_source=source, log=log,
                        wall_s=(done - started) if started and done else None, tamper=tamper, error=error,
                        accelerator=acc, software=sw, eval_exit_code=eval_rc)


def handle_json(handle: dict[str, Any]) -> str:
    return json.dumps(handle, sort_keys=True)
