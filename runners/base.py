"""The Runner protocol and the shell-based runner that local, ssh and slurm share.

A runner places a trial directory on a host (the code as a tar of the commit, the frozen harness,
`trial.sh`, a quoted `trial.env`), starts `trial.sh` detached, and later reads the files it left.
Everything the daemon needs to find the trial again after a crash is in the JSON-able handle,
which the loop stores in the lease note. Only this package talks to hosts. What a trial left is
read back by runners/readback.py (its files, its poll word, its learning curve, a full disk's hint).
"""

from __future__ import annotations

import shlex
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

from autoresearchd import defaults
from autoresearchd.manifest import EnvManifest

from .isolation import HostSandbox, host_path, resolve, trial_sandbox
from .limits import limit_env
from .prepare import prepare_key
from .readback import FILES, by_host, disk_hint, poll_word, read_files_many, read_many
from .outcome import outcome_from_files, whole_tail  # noqa: F401  (re-exported: the runners' shared API)
from .protocol import (HostUnreachable, PollState, Runner, Shell, Slot, TrialOutcome,  # noqa: F401
                       TrialSpec)
from .trialdir import (MINE_FN, POLL_FN, PROBE, SECRET_NAME, slot_file,  # noqa: F401
                       bundle, scrubbed_env, trial_env, trial_script)


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

    def __init__(self, cfg, manifest: EnvManifest, *, sandbox_fallback: bool = False):
        self.cfg = cfg
        self.manifest = manifest
        # the config-less embedded demo may run unsandboxed (flagged) where bwrap is missing (make_runner)
        self.sandbox_fallback = sandbox_fallback
        # pre-staging needs the detached launch (a scheduler such as Slurm queues jobs itself)
        detached = type(self).launch is ShellRunner.launch
        self.prestage = max(1, int(getattr(cfg, "prestage", None) or self.PRESTAGE)) if detached else 1
        self._pool: ThreadPoolExecutor | None = None
        # trial dir -> when its run started (seen by the last poll); absent while a trial waits for its slot
        self.started_at: dict[str, float] = {}
        self.errors: dict[str, str] = {}      # host -> last connection error (the ssh runner fills it)
        self.hosts: dict | None = None        # configured hosts by name (the ssh runner's)
        self._pool_lock = threading.Lock()

    # -- subclass hooks ------------------------------------------------------------------------
    def slots(self) -> list[Slot]:
        raise NotImplementedError

    def shell_for(self, host: str) -> Shell:
        raise NotImplementedError

    def work_root(self, host: str) -> str:
        raise NotImplementedError

    def path_prefix(self, host: str) -> str:
        return "$PATH"

    def data_env(self, host: str) -> dict[str, str]:
        return dict(self.manifest.data)

    def host_slots(self, host: str) -> int:
        """How many trials run on `host` at once: its share of the host's memory and processes is
        the host's divided by this (runners/limits.sh)."""
        return max(1, sum(1 for s in self.slots() if s.host == host))

    def host_sandbox(self, host: str) -> HostSandbox:
        """The sandbox that isolates trials on `host` (runner.sandbox, probed there once)."""
        cache = self.__dict__.setdefault("_sandboxes", {})
        if host not in cache:
            kind = getattr(self.cfg, "sandbox", None) or defaults.SANDBOX
            cache[host] = resolve(self.shell_for(host), host, kind, getattr(self.cfg, "sandbox_image", ""),
                                  self.path_prefix(host), self.sandbox_fallback, self.python_for(host))
        return cache[host]

    def python_for(self, host: str) -> str | None:
        """The interpreter configured for `host` (runner.python), else None: PATH's (runners/interp.py)."""
        return getattr(self.cfg, "python", None) or None

    def trial_path(self, host: str) -> str:
        """The trials' PATH on `host`: path_prefix, after the resolved interpreter's directory where
        PATH would find a shim (runners/interp.py)."""
        py = self.host_sandbox(host).python
        return py.path(self.path_prefix(host)) if py else self.path_prefix(host)

    # Braces: only the wrapper goes to the background. Without them `&` backgrounds the whole
    # `cd && setsid ...` list in a subshell that keeps our stdout open until the trial ends.
    LAUNCH = "{ setsid nohup bash trial.sh > wrapper.log 2>&1 < /dev/null & echo $!; }"

    @staticmethod
    def queued(lock: str, launch: str) -> str:
        """`launch` (run in the trial directory) as the tail of its slot's queue (docs/hosts.md, "The
        slot's queue"): the trial is numbered one past the slot's last (`<slot>.last`; `seq` in the
        trial directory), and the lock of its entry in the slot's ring of turns (`<slot>.q/<k mod
        256>`, emptied) is taken here, before the wrapper starts, which inherits it on fd 7. trial.sh
        waits for the turns before its own, then for the slot, so staged trials run in submit order (a
        wrapper launched later can reach a bare flock first). `>|`: a remote shell may set noclobber;
        `flock -w`: a turn a lost wrapper still held 256 trials ago does not hold the submit."""
        q = shlex.quote
        base = lock[:-len(".lock")]
        take = ("flock -w 5 7 2>/dev/null || python3 -c 'import fcntl; fcntl.flock(7, fcntl.LOCK_EX | fcntl.LOCK_NB)' "
                "2>/dev/null || :")
        return (f"{{ n=; [ ! -r {q(base + '.last')} ] || read -r n < {q(base + '.last')}; "
                f"case $n in ''|*[!0-9]*|0?*|?????????*) n=0;; esac; k=$((n + 1)); "
                f"echo $k >| seq && echo $k >| {q(base + '.last')} && mkdir -p {q(base + '.q')}; }} && "
                f"{{ {take}; {launch}; }} 7>| {q(base + '.q')}/$((k % 256))")

    def launch(self, sh: Shell, tdir: str, spec: TrialSpec, slot: Slot) -> dict[str, Any]:
        """Start trial.sh detached; return extra handle fields. (A subclass that overrides this, e.g.
        with sbatch, gets a separate upload round trip; the default is fused into submit's.)"""
        rc, out, err = sh.run(f"cd {shlex.quote(tdir)} && {self.LAUNCH}")
        return self._launched(sh, rc, out, err)

    def _launched(self, sh: Shell, rc: int, out: bytes, err: bytes) -> dict[str, Any]:
        if rc != 0 or not out.split() or not out.split()[-1].isdigit():
            raise RuntimeError(f"could not start the trial on {sh.name}: {whole_tail(err) or f'exit {rc}'}")
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
        lock = f"{root}/.slots/{slot_file(slot.slot)}.lock" if self.prestage > 1 else ""
        hs = self.host_sandbox(slot.host)
        # `~/x` data paths name the host user's home: inside, HOME is the trial's own directory
        data = {k: host_path(v, hs.home) or v for k, v in self.data_env(slot.host).items()}
        m = spec.manifest
        key = spec.prepare_key or (prepare_key(m, []) if m.prepare else "")
        sandbox = trial_sandbox(hs, tdir, m, data, list(getattr(self.cfg, "sandbox_binds", [])),
                                f"{root}/.prepared/{key}" if m.prepare else None)
        env_text = trial_env(spec, slot, self.trial_path(slot.host), self.cfg.log_head_bytes,
                             self.cfg.log_tail_bytes, data, self.scheduler_gpus, lock,
                             f"{root}/.events", sandbox, limit_env(m, self.host_slots(slot.host)))
        fused = type(self).launch is ShellRunner.launch
        # Room first (nothing is written to a disk without min_free_mb free), then a fresh directory: a
        # retry of the same trial id starts clean. A failure removes what it staged, so a full disk is
        # not left fuller.
        # (`rm` only where a directory is there, one `mkdir` where no space check stands between them,
        # and code/ comes in the tar: 3 process starts fewer a trial on the host)
        space = self.space_check(root, slot.host)
        # the trial's directory is this user's alone (0700): a run may leave a setuid program in code/
        # (a root daemon's run: setuid root), which no other local user may reach (docs/security.md)
        mkdirs = f"mkdir -p -m 700 {q(root)}/.slots {q(tdir)}" if space == "true" else \
            f"mkdir -p {q(root)}/.slots && {space} && mkdir -m 700 {q(tdir)}"
        launch = self.queued(lock, self.LAUNCH) if lock else self.LAUNCH
        cmd = (f"{{ {{ [ ! -e {q(tdir)} ] && [ ! -L {q(tdir)} ] || rm -rf {q(tdir)}; }} && {mkdirs} && "
               f"cd {q(tdir)} && tar -x --no-same-owner -f -" + (f" && {launch}" if fused else "") +
               f"; }} || {{ rc=$?; cd / && rm -rf {q(tdir)}; exit $rc; }}")
        submitted = time.time()
        rc, out, err = sh.run(cmd, stdin=bundle(spec, env_text), timeout=300)
        if fused:
            extra = self._launched(sh, rc, out, err)
        elif rc != 0:
            raise RuntimeError(f"copying the trial to {slot.host} failed: {whole_tail(err) or f'exit {rc}'}")
        else:
            extra = self.launch(sh, tdir, spec, slot)
        return {"host": slot.host, "slot": slot.slot, "dir": tdir, "submitted": submitted,
                "sandbox": sandbox.kind, **extra}

    # -- host health -------------------------------------------------------------------------------
    def min_free_kb(self, host: str) -> int:
        """Free space a host's work root needs before a trial is staged there (0: no check)."""
        return 0

    def space_check(self, root: str, host: str) -> str:
        """Shell that fails (exit 75) with the `df` figure and the path when `root`'s disk has less
        than min_free_kb free."""
        need = int(self.min_free_kb(host))
        if need <= 0:
            return "true"
        q = shlex.quote
        return (f"avail=$(df -Pk {q(root)} | awk 'NR==2 {{print $4}}') && {{ [ \"$avail\" -ge {need} ] || "
                f"{{ printf 'only %s kB free on the disk holding %s on %s (df -Pk); min_free_mb = {need / 1024:g}\\n' "
                f"\"$avail\" {q(root)} {q(host)} >&2; exit 75; }}; }}")

    def check_host(self, host: str, force: bool = False) -> str | None:
        """A health probe: None when the host can take a trial (it answers, its work root is
        writable, enough space is free), else why not, whole. `force` reconnects at once."""
        try:
            if force:
                self.reconnect(host)
            root = self.work_root(host).rstrip("/")
            q = shlex.quote(root)
            rc, _, err = self.shell_for(host).run(
                f"mkdir -p {q}/.slots && t={q}/.probe.$$ && : > \"$t\" && rm -f \"$t\" && "
                f"{self.space_check(root, host)}", timeout=60)
        except Exception as e:  # noqa: BLE001 - any failure is the verdict
            return str(e)
        if rc != 0:
            return whole_tail(err) or f"the work root check on {host} exited {rc}"
        return None

    def reconnect(self, host: str) -> None:
        """Drop any connection back-off for `host` (its next command connects at once)."""

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
        groups = by_host(handles)

        def one(host: str) -> None:
            idx = groups[host]
            calls = "".join(f"st {shlex.quote(handles[i]['dir'])} {int(handles[i].get('pid') or 0) or ''}\n"
                            for i in idx)
            try:
                rc, res, _ = self.shell_for(host).run(POLL_FN + calls, timeout=30)
            except HostUnreachable:
                return
            words = res.decode(errors="replace").split()
            if rc != 0 or len(words) != len(idx):
                return
            for i, w in zip(idx, words):
                word, _, began = w.partition("@")
                out[i] = poll_word(word, handles[i])
                if began:
                    try:
                        self.started_at[handles[i]["dir"]] = float(began)
                    except ValueError:
                        pass
        self.map(one, list(groups))
        return out

    def progress_many(self, handles: list[dict[str, Any]]) -> list[list[tuple[float, float]] | None]:
        """Each running trial's learning curve so far, (t, value) points of the manifest's metric
        (runners/readback.py reads it, runners/progress.py parses it: bounded, tolerant); None where its host could not be read."""
        return read_many(self, handles, self.manifest.metric)

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
        groups = by_host(handles)

        def one(host: str) -> None:
            idx = groups[host]
            try:
                sh = self.shell_for(host)
                files = self.read_files(sh, [handles[i]["dir"] for i in idx], FILES)
                probes = [self.probe(sh, handles[i]) for i in idx]
            except Exception as e:  # noqa: BLE001 - reported per trial
                for i in idx:
                    out[i] = e
                return
            for i, got, probe in zip(idx, files, probes):
                o = out[i] = outcome_from_files(got, self.manifest, probe)
                o.sandbox = handles[i].get("sandbox")
                if o.exit_code is None and not o.timed_out and (hint := disk_hint(sh, handles[i]["dir"])):
                    o.error, o.host_fault = f"{o.error}; {hint}", hint
        self.map(one, list(groups))
        return out

    def read_files(self, sh: Shell, dirs: list[str], names: list[str]) -> list[dict[str, bytes]]:
        """The named files of several trial dirs on `sh`'s host (the local runner reads them itself)."""
        return read_files_many(sh, dirs, names)

    def disk_hint(self, handle: dict[str, Any]) -> str | None:
        """"the disk holding DIR on HOST is full (...)" when a dead trial's disk is full, else None."""
        return disk_hint(self.shell_for(handle["host"]), handle["dir"])

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
            # the trials' PATH, so the fingerprint names the python (and torch) the runs really use
            try:
                prefix = self.trial_path(host)
            except Exception:  # noqa: BLE001 - a host whose sandbox cannot be probed: its plain PATH
                prefix = self.path_prefix(host)
            path = "export PATH=" + '"$PATH"'.join(shlex.quote(part) for part in prefix.split("$PATH")) + "\n"
            hit = cache[host] = (time.monotonic(), sh.run(path + PROBE, timeout=60)[1].decode(errors="replace"))
        return hit[1]

    def cancel(self, handle: dict[str, Any]) -> None:
        sh = self.shell_for(handle["host"])
        q = shlex.quote(handle["dir"])
        # the mark first: a wrapper that has not written its pgid yet (just submitted, or queued behind
        # the slot's lock) exits at its next check instead of running (trial.sh); it ran before
        # only groups whose leader is still this trial's: a pid from a file may be reused by now
        sh.run(MINE_FN + f": 2>/dev/null > {q}/cancelled; g=; for f in {q}/run.pid {q}/eval.pid {q}/eval_inputs.pid {q}/model.pid {q}/pgid; do read -r p < \"$f\" && "
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
        groups = by_host(handles)
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
