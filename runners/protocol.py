"""The runner contract: slots, trial specs, poll states, outcomes, the Shell and Runner protocols.
Every runner speaks these types; the daemon stores a runner's JSON-able handle in the lease note."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Protocol

from autoresearchd.manifest import EnvManifest
from autoresearchd.vocab import Purpose


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
    purpose: Purpose = Purpose.IDEA
    prepare_key: str = ""            # hash of the prepare step's inputs (runners/prepare.py)
    knobs: dict[str, str] = field(default_factory=dict)   # AUTORESEARCH_KNOB_* -> value (daemon/tune/knobs.py)


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
    sandbox: str | None = None       # the sandbox kind the trial ran in (bwrap, apptainer, none)
    host_fault: str | None = None    # the host, not the run, failed it (its disk filled): run it elsewhere
    # compute (runners/limits.py; docs/notes.md defines each): run + evaluation, and the evaluation's share
    cpu_s: float | None = None       # CPU seconds of every process of the steps, from the kernel
    gpu_s: float | None = None       # busy GPU seconds (utilisation-weighted); 0.0 without GPUs
    eval_cpu_s: float | None = None
    eval_wall_s: float | None = None
    limit: str | None = None         # the per-trial limit a step hit: memory | pids | open_files
    run_metrics: dict[str, float] = field(default_factory=dict)   # run's own report of budget_metrics
    trust: str | None = None         # manifest.Trust: split | model-code | run (what the metric rests on)
    curve: list = field(default_factory=list)   # run's learning curve, (t, value) points (runners/progress.py): untrusted


class Shell(Protocol):
    """How a runner reaches a host. Commands are shell strings; callers quote every value."""
    name: str

    def run(self, cmd: str, stdin: bytes | None = None, timeout: float = 60.0) -> tuple[int, bytes, bytes]: ...
    def close(self) -> None: ...


class HostUnreachable(Exception):
    """The host did not answer; the loop treats the trial as unknown until the lease TTL."""


class Runner(Protocol):
    """Everything the dispatcher, collector and recovery use of a runner (runners/base.py's
    ShellRunner implements all of it; local, ssh and slurm extend it)."""
    name: ClassVar[str]
    REDERIVABLE: ClassVar[tuple[str, ...]]   # handle keys poll() can do without (kept from the prediction)
    prestage: int                            # trials one slot may hold: one running, the rest waiting
    started_at: dict[str, float]             # trial dir -> when its run started, as the last poll saw
    errors: dict[str, str]                   # host -> its last connection error, for status
    hosts: dict[str, Any] | None             # the configured hosts by name (None: not host-based)

    def slots(self) -> list[Slot]: ...
    def predict_handle(self, trial_id: str, slot: Slot) -> dict[str, Any]: ...
    def submit(self, spec: TrialSpec, slot: Slot) -> dict[str, Any]: ...
    def poll(self, handle: dict[str, Any]) -> PollState: ...
    def poll_many(self, handles: list[dict[str, Any]]) -> list[PollState]: ...
    def fetch(self, handle: dict[str, Any]) -> TrialOutcome: ...
    def fetch_many(self, handles: list[dict[str, Any]]) -> list[TrialOutcome | Exception]: ...
    def disk_hint(self, handle: dict[str, Any]) -> str | None: ...
    def check_host(self, host: str, force: bool = False) -> str | None: ...
    def reconnect(self, host: str) -> None: ...
    def event_hosts(self) -> list[str]: ...
    def wait_event(self, host: str, timeout: float = 10.0) -> bool: ...
    def cancel(self, handle: dict[str, Any]) -> None: ...
    def cleanup(self, handle: dict[str, Any]) -> None: ...
    def cleanup_many(self, handles: list[dict[str, Any]]) -> None: ...
    def close(self) -> None: ...
