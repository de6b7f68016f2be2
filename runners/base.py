"""The Runner protocol and the shell-based runner that local, ssh and slurm share.

A runner places a trial directory on a host (the code as a tar of the commit, the frozen harness,
`trial.sh`, a quoted `trial.env`), starts `trial.sh` detached, and later reads the files it left.
Everything the daemon needs to find the trial again after a crash is in the JSON-able handle,
which the loop stores in the lease note. Only this package talks to hosts.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import tarfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
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


# Trials run untrusted code (LLM-written or pushed): variables that look like secrets stay behind.
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL", re.I)


def scrubbed_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The daemon's environment minus every variable whose name looks like a secret."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items() if not SECRET_NAME.search(k)}


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
              data_env: dict[str, str], scheduler_gpus: bool = False, slot_lock: str = "",
              events: str = "") -> str:
    """The quoted variables file that trial.sh sources. Every value goes through shlex.quote.
    With `scheduler_gpus` (Slurm --gres), CUDA_VISIBLE_DEVICES is left as the job got it."""
    m = spec.manifest
    q = shlex.quote

    def qpath(v: str) -> str:
        # `$PATH` inside path_prefix (the ssh default) must expand on the host, the rest stays literal
        return '"$PATH"'.join(q(part) for part in v.split("$PATH"))
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
        "AR_SLOT_LOCK": slot_lock,     # trial.sh waits for this lock before its clock starts
        "AR_EVENTS": events,           # trial.sh appends a line here when it is done
    }
    out = [f"{k}={qpath(v) if k == 'AR_PATH' else q(v)}" for k, v in lines.items()]
    out.append("AR_FROZEN=(" + " ".join(q(p) for p in spec.frozen_paths) + ")")
    out.append("AR_ARTIFACTS=(" + " ".join(q(p) for p in m.artifacts) + ")")
    exports = {"AUTORESEARCH_SEED": str(spec.seed), "AUTORESEARCH_TRIAL": spec.trial_id,
               "AUTORESEARCH_TIME_BUDGET_S": str(int(m.time_budget_s)),
               **({} if scheduler_gpus else {"CUDA_VISIBLE_DEVICES": ",".join(map(str, slot.gpus))}),
               "PATH": path_prefix, **data_env}
    out += [f"export {k}={qpath(v) if k == 'PATH' else q(v)}" for k, v in exports.items()]
    return "\n".join(out) + "\n"


# Is process $2 this trial's ($1)? PIDs wrap quickly on a busy host, so a pid file alone can name a
# stranger. The wrapper and its groups work in the trial dir, code/ or eval/ (test builtins, no fork).
_MINE_FN = r"""mine() {
  [ -d /proc/1 ] || return 0
  [ /proc/$2/cwd -ef "$1" ] || [ /proc/$2/cwd -ef "$1/code" ] || [ /proc/$2/cwd -ef "$1/eval" ] ||
    { tr '\0' '\n' < /proc/$2/environ | grep -qF "=$1/"; } 2>/dev/null
}
"""
_POLL_FN = _MINE_FN + r"""st() {
  if [ -e "$1/done" ]; then echo done; return; fi
  if [ ! -d "$1" ]; then echo missing; return; fi
  p=$2; [ -n "$p" ] || { read -r p < "$1/pgid"; } 2>/dev/null || p=
  case $p in ''|*[!0-9]*) echo nopid; return;; esac
  s=; if [ -d /proc/1 ]; then { read -r s < "/proc/$p/stat"; } 2>/dev/null; s=${s##*) }; s=${s%% *}
    mine "$1" "$p" || s=
  else s=$(ps -o stat= -p "$p" 2>/dev/null); fi
  if [ -e "$1/done" ]; then echo done; elif [ -z "$s" ] || [ "${s#Z}" != "$s" ]; then echo dead; else echo running; fi
}
"""
# A trial whose wrapper has not written its pid file yet (crash between lease and submit) counts as
# starting for this long after submit, then as lost.
STARTING_GRACE_S = 60.0


def _slot_file(slot: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.,-]", "_", slot) or "_"


def bundle(spec: TrialSpec, env_text: str) -> bytes:
    """One tar holding code/ (the commit), eval/ (the harness), trial.sh and trial.env, so a trial
    directory is placed with a single upload."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as out:
        for prefix, data in (("code", spec.code_tar), ("eval", spec.eval_tar)):
            d = tarfile.TarInfo(prefix)
            d.type, d.mode = tarfile.DIRTYPE, 0o755
            out.addfile(d)
            if not data:
                continue
            with tarfile.open(fileobj=io.BytesIO(data)) as src:
                for m in src:
                    m.name = f"{prefix}/{m.name}"
                    if m.islnk():        # hard links name a member of the same archive
                        m.linkname = f"{prefix}/{m.linkname}"
                    out.addfile(m, src.extractfile(m) if m.isreg() else None)
        for name, data, mode in (("trial.sh", trial_script(), 0o755), ("trial.env", env_text.encode(), 0o644)):
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = len(data), mode, int(time.time())
            out.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


class ShellRunner:
    """Shared implementation: a trial directory under a work root, reached through a Shell.
    Subclasses say which shells exist (hosts) and how to start the wrapper (detached or sbatch).

    Pre-staging: the dispatcher may place up to `prestage` trials on one slot. Each trial's wrapper
    takes the slot's lock (<work_root>/.slots/<slot>.lock) before it stamps `started` and starts its
    budget clock, so the next trial is already on the host when the running one ends."""

    name: ClassVar[str] = "shell"
    scheduler_gpus: bool = False     # True: the scheduler sets CUDA_VISIBLE_DEVICES (Slurm --gres)
    PRESTAGE: ClassVar[int] = 2          # trials per slot: one running, one waiting for the slot lock
    REDERIVABLE: ClassVar[tuple[str, ...]] = ("pid", "submitted")   # handle keys poll() can do without
    MAX_PARALLEL: ClassVar[int] = 8      # hosts polled / fetched / cleaned at once

    def __init__(self, cfg, manifest: EnvManifest):
        self.cfg = cfg
        self.manifest = manifest
        # pre-staging needs the detached launch (a scheduler such as Slurm queues jobs itself)
        detached = type(self).launch is ShellRunner.launch
        self.prestage = max(1, int(getattr(cfg, "prestage", None) or self.PRESTAGE)) if detached else 1
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    # -- subclass hooks ------------------------------------------------------------------------
    def shell_for(self, host: str) -> Shell:
        raise NotImplementedError

    def work_root(self, host: str) -> str:
        raise NotImplementedError

    def path_prefix(self, host: str) -> str:
        return "$PATH"

    def data_env(self, host: str) -> dict[str, str]:
        return dict(self.manifest.data)

    # Braces: only the wrapper goes to the background. Without them `&` backgrounds the whole
    # `cd && setsid ...` list in a subshell that keeps our stdout open until the trial ends.
    LAUNCH = "{ setsid nohup bash trial.sh > wrapper.log 2>&1 < /dev/null & echo $!; }"

    def launch(self, sh: Shell, tdir: str, spec: TrialSpec, slot: Slot) -> dict[str, Any]:
        """Start trial.sh detached; return extra handle fields. (A subclass that overrides this, e.g.
        with sbatch, gets a separate upload round trip; the default is fused into submit's.)"""
        rc, out, err = sh.run(f"cd {shlex.quote(tdir)} && {self.LAUNCH}")
        return self._launched(sh, rc, out, err)

    def _launched(self, sh: Shell, rc: int, out: bytes, err: bytes) -> dict[str, Any]:
        if rc != 0 or not out.split() or not out.split()[-1].isdigit():
            raise RuntimeError(f"could not start the trial on {sh.name}: {err.decode(errors='replace')[-500:]}")
        return {"pid": int(out.split()[-1])}

    # -- helpers -----------------------------------------------------------------------------------
    def map(self, fn, items: list) -> list:
        """fn over items on a small shared pool (one host's slowness does not stall the others);
        exceptions are returned in place of results."""
        def safe(x):
            try:
                return fn(x)
            except Exception as e:  # noqa: BLE001 - the caller decides per item
                return e
        if len(items) <= 1:
            return [safe(x) for x in items]
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.MAX_PARALLEL, thread_name_prefix=f"{self.name}-runner")
        return list(self._pool.map(safe, items))

    def _by_host(self, handles: list[dict[str, Any]]) -> dict[str, list[int]]:
        groups: dict[str, list[int]] = {}
        for i, h in enumerate(handles):
            groups.setdefault(h["host"], []).append(i)
        return groups

    # -- protocol --------------------------------------------------------------------------------
    def predict_handle(self, trial_id: str, slot: Slot) -> dict[str, Any]:
        """The handle known before submit: enough to find the trial again after a crash mid-submit."""
        return {"host": slot.host, "slot": slot.slot, "dir": f"{self.work_root(slot.host).rstrip('/')}/{trial_id}",
                "submitted": time.time()}

    def submit(self, spec: TrialSpec, slot: Slot) -> dict[str, Any]:
        """Place the trial directory and start the wrapper: one round trip (a single tar through stdin)."""
        sh = self.shell_for(slot.host)
        root = self.work_root(slot.host).rstrip("/")
        tdir = f"{root}/{spec.trial_id}"
        q = shlex.quote
        lock = f"{root}/.slots/{_slot_file(slot.slot)}.lock" if self.prestage > 1 else ""
        env_text = trial_env(spec, slot, self.path_prefix(slot.host), self.cfg.log_head_bytes,
                             self.cfg.log_tail_bytes, self.data_env(slot.host), self.scheduler_gpus, lock,
                             f"{root}/.events")
        fused = type(self).launch is ShellRunner.launch
        # Fresh directory: a retry of the same trial id starts clean.
        cmd = (f"rm -rf {q(tdir)} && mkdir -p {q(tdir)} {q(root)}/.slots && cd {q(tdir)} && "
               f"tar -x --no-same-owner -f - && mkdir -p code eval" + (f" && {self.LAUNCH}" if fused else ""))
        submitted = time.time()
        rc, out, err = sh.run(cmd, stdin=bundle(spec, env_text), timeout=300)
        if fused:
            extra = self._launched(sh, rc, out, err)
        elif rc != 0:
            raise RuntimeError(f"copying the trial to {slot.host} failed: {err.decode(errors='replace')[-300:]}")
        else:
            extra = self.launch(sh, tdir, spec, slot)
        return {"host": slot.host, "slot": slot.slot, "dir": tdir, "submitted": submitted, **extra}

    def poll(self, handle: dict[str, Any]) -> PollState:
        return self._poll_batched([handle])[0]

    def poll_many(self, handles: list[dict[str, Any]]) -> list[PollState]:
        """The state of many trials: one command per host, hosts at the same time (a subclass with
        its own poll() gets it called per trial, still hosts at once)."""
        if type(self).poll is not ShellRunner.poll:
            return [PollState.UNREACHABLE if isinstance(x, Exception) else x for x in self.map(self.poll, handles)]
        return self._poll_batched(handles)

    def _poll_batched(self, handles: list[dict[str, Any]]) -> list[PollState]:
        out = [PollState.UNREACHABLE] * len(handles)
        groups = self._by_host(handles)

        def one(host: str) -> None:
            idx = groups[host]
            calls = "".join(f"st {shlex.quote(handles[i]['dir'])} {int(handles[i].get('pid') or 0) or ''}\n"
                            for i in idx)
            try:
                rc, res, _ = self.shell_for(host).run(_POLL_FN + calls, timeout=30)
            except HostUnreachable:
                return
            words = res.decode(errors="replace").split()
            if rc != 0 or len(words) != len(idx):
                return
            for i, w in zip(idx, words):
                out[i] = self._state(w, handles[i])
        self.map(one, list(groups))
        return out

    @staticmethod
    def _state(word: str, handle: dict[str, Any]) -> PollState:
        if word == "nopid":     # crashed between lease and submit, or the wrapper is just starting
            fresh = time.time() - handle.get("submitted", 0) < STARTING_GRACE_S
            return PollState.RUNNING if fresh else PollState.LOST
        return {"done": PollState.DONE, "missing": PollState.MISSING, "running": PollState.RUNNING,
                "dead": PollState.LOST}.get(word, PollState.UNREACHABLE)

    FILES: ClassVar[list[str]] = ["run.rc", "run.timed_out", "started", "done", "tamper.txt", "run_result.json",
                                  "eval.rc", "eval.timed_out", "eval_result.json", "run.head", "run.tail",
                                  "eval.head", "eval.tail", "wrapper.log"]

    def fetch(self, handle: dict[str, Any]) -> TrialOutcome:
        out = self._fetch_batched([handle])[0]
        if isinstance(out, Exception):
            raise out
        return out

    def fetch_many(self, handles: list[dict[str, Any]]) -> list[TrialOutcome | Exception]:
        """Outcomes of finished trials: one command per host, hosts at the same time. A host that
        fails gives its exception in place of each of its outcomes."""
        if type(self).fetch is not ShellRunner.fetch:
            return self.map(self.fetch, handles)
        return self._fetch_batched(handles)

    def _fetch_batched(self, handles: list[dict[str, Any]]) -> list[TrialOutcome | Exception]:
        out: list[TrialOutcome | Exception] = [RuntimeError("not fetched")] * len(handles)
        groups = self._by_host(handles)

        def one(host: str) -> None:
            idx = groups[host]
            try:
                sh = self.shell_for(host)
                files = self._read_files_many(sh, [handles[i]["dir"] for i in idx], self.FILES)
                probes = [self.probe(sh, handles[i]) for i in idx]
            except Exception as e:  # noqa: BLE001 - reported per trial
                for i in idx:
                    out[i] = e
                return
            for i, got, probe in zip(idx, files, probes):
                o = out[i] = outcome_from_files(got, self.manifest, probe)
                if o.exit_code is None and not o.timed_out and (hint := self._disk_hint(sh, handles[i]["dir"])):
                    o.error = f"{o.error}; {hint}"
        self.map(one, list(groups))
        return out

    def _disk_hint(self, sh: Shell, d: str) -> str | None:
        """Why the wrapper could not even write the run's exit code: most often a full disk."""
        try:
            _, out, _ = sh.run(f"df -Pk {shlex.quote(d)} | tail -n 1", timeout=30)
            avail = int(out.split()[3])
        except Exception:  # noqa: BLE001 - only a hint
            return None
        if avail >= 1024:
            return None
        return f"the disk holding {d} on {sh.name} is full ({avail} kB free); free space there"

    def probe(self, sh: Shell, handle: dict[str, Any]) -> str:
        """`accelerator:`/`software:` lines for a trial's outcome: by default the host's, cached."""
        return self._probe(sh, handle["host"])

    PROBE_TTL_S: ClassVar[float] = 600.0

    def _probe(self, sh: Shell, host: str) -> str:
        """accelerator/software of a host, cached a while: the probe starts python (and imports torch,
        seconds on a GPU host), too slow to repeat for every fetch."""
        cache = self.__dict__.setdefault("_probes", {})
        hit = cache.get(host)
        if hit is None or time.monotonic() - hit[0] > self.PROBE_TTL_S:
            hit = cache[host] = (time.monotonic(), sh.run(_PROBE, timeout=60)[1].decode(errors="replace"))
        return hit[1]

    def _read_files(self, sh: Shell, d: str, names: list[str]) -> dict[str, bytes]:
        return self._read_files_many(sh, [d], names)[0]

    def _read_files_many(self, sh: Shell, dirs: list[str], names: list[str]) -> list[dict[str, bytes]]:
        """Read small files of several trial directories in one round trip: the shell picks the ones
        that exist (builtins only) and one `tar` streams them all back."""
        q = shlex.quote
        rels = [d.strip("/") for d in dirs]
        script = ("cd / && for f in " + " ".join(q(f"{r}/{n}") for r in rels for n in names) +
                  "; do [ -f \"$f\" ] && printf '%s\\0' \"$f\"; done | tar -c --null -T - -f -")
        rc, out, err = sh.run(script, timeout=120)
        if rc != 0:
            raise RuntimeError(f"reading trial files on {sh.name} failed: {err.decode(errors='replace')[-300:]}")
        res: list[dict[str, bytes]] = [{} for _ in dirs]
        where = {r: k for k, r in enumerate(rels)}
        with tarfile.open(fileobj=io.BytesIO(out)) as tf:
            for m in tf:
                d, _, name = m.name.rpartition("/")
                if m.isreg() and d in where:
                    res[where[d]][name] = tf.extractfile(m).read()
        return res

    def cancel(self, handle: dict[str, Any]) -> None:
        sh = self.shell_for(handle["host"])
        q = shlex.quote(handle["dir"])
        # only groups whose leader is still this trial's: a pid from a file may be reused by now
        sh.run(_MINE_FN + f"g=; for f in {q}/run.pid {q}/eval.pid {q}/pgid; do read -r p < \"$f\" && "
               f"mine {q} \"$p\" && g=\"$g $p\"; done 2>/dev/null; [ -n \"$g\" ] || exit 0; "
               f"for p in $g; do kill -TERM -- -$p; done 2>/dev/null; sleep 1; "
               f"for p in $g; do kill -KILL -- -$p; done 2>/dev/null; true", timeout=60)

    def cleanup(self, handle: dict[str, Any]) -> None:
        self._cleanup_batched([handle])

    def cleanup_many(self, handles: list[dict[str, Any]]) -> None:
        if type(self).cleanup is not ShellRunner.cleanup:
            self.map(self.cleanup, handles)
        else:
            self._cleanup_batched(handles)

    def _cleanup_batched(self, handles: list[dict[str, Any]]) -> None:
        groups = self._by_host(handles)
        self.map(lambda host: self.shell_for(host).run(
            "rm -rf " + " ".join(shlex.quote(handles[i]["dir"]) for i in groups[host]), timeout=120), list(groups))

    # -- events ------------------------------------------------------------------------------------
    def event_hosts(self) -> list[str]:
        return sorted({s.host for s in self.slots()})

    def wait_event(self, host: str, timeout: float = 10.0) -> bool:
        """Block until a trial on `host` finishes (True) or `timeout` passes (False). The wrapper
        appends to <work_root>/.events when done; `tail -F` waits on it without polling the host."""
        root = shlex.quote(self.work_root(host).rstrip("/"))
        # read returns at the first line; the tail behind it ends at its next write or its time-out
        cmd = (f"mkdir -p {root} && f={root}/.events && touch \"$f\" && "
               f"if [ \"$(wc -c < \"$f\")\" -gt 1000000 ]; then : > \"$f\"; fi && "
               f"read -r line < <(exec timeout {int(timeout)} tail -n0 -F \"$f\" 2>/dev/null < /dev/null); "
               f"[ -n \"$line\" ] && echo event || echo quiet")
        rc, out, _ = self.shell_for(host).run(cmd, timeout=timeout + 30)
        if rc != 0 and not out:
            raise RuntimeError(f"waiting for trial events on {host} failed")
        return out.strip() == b"event"

    def close(self) -> None:
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None


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
        wrapper = files.get("wrapper.log", b"").decode(errors="replace")[-300:].strip()
        error = "run left no exit code (killed, or the wrapper failed)" + (f": {wrapper}" if wrapper else "")
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
