"""The Slurm runner: each trial is one batch job on an existing cluster, submitted with sbatch.

The trial directory (code/, eval/, trial.sh, trial.env) is written exactly as for the other shell
runners, on a filesystem the compute nodes share with the submit host; `sbatch` then runs trial.sh
there. Slurm places the job and sets CUDA_VISIBLE_DEVICES from `--gres`, so the runner's slots are
only virtual: `[runner.slurm] max_jobs` of them, "how many of our jobs may be in the queue at once".
The commands run on this machine (sbatch on PATH, SLURM_CONF passed through) or on a login node
over SSH (`[runner.slurm] login` names a `[[runner.hosts]]` entry). The handle keeps the job id,
so a restarted daemon finds the job again from the lease note alone. How a job's Slurm state
maps onto the daemon's poll states, its parsers and the query script: runners/slurmjobs.py.

Jobs are submitted with `--no-requeue`: the daemon, not Slurm, decides about a rerun, so a job
is never run twice under one lease.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from typing import Any, ClassVar

from autoresearchd import defaults
from autoresearchd.manifest import EnvManifest

from .base import (PROBE, SECRET_NAME, HostUnreachable, PollState, Shell, ShellRunner, Slot, TrialOutcome,
                   TrialSpec)
from .local import LocalShell
from .slurmjobs import FINISHED, RERUN, JobInfo, explain, parse_query, poll_state, query_script
from .ssh import SSHShell


def slurm_time(seconds: float) -> str:
    """A --time value, D-HH:MM:SS, rounded up to whole minutes (Slurm's resolution)."""
    minutes = max(1, -(-int(seconds) // 60))
    d, rest = divmod(minutes, 24 * 60)
    return f"{d}-{rest // 60:02d}:{rest % 60:02d}:00"


_SECRET = SECRET_NAME


class _ClientShell:
    """The shell the Slurm commands run in: some extra variables (SLURM_CONF) for every command,
    and a command that hangs (a controller that does not answer) reported as HostUnreachable."""

    def __init__(self, inner: Shell, env: dict[str, str]):
        self.inner, self.name = inner, inner.name
        self.prefix = "".join(f"export {k}={shlex.quote(v)}; " for k, v in env.items())

    def run(self, cmd: str, stdin: bytes | None = None, timeout: float = 60.0) -> tuple[int, bytes, bytes]:
        try:
            return self.inner.run(self.prefix + cmd, stdin=stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise HostUnreachable(f"{self.name}: no answer in {timeout:.0f} s to: {cmd[:80]}") from None

    def close(self) -> None:
        self.inner.close()


class SlurmRunner(ShellRunner):
    name: ClassVar[str] = "slurm"

    def __init__(self, cfg, manifest: EnvManifest, environ: dict[str, str] | None = None,
                 client_env: dict[str, str] | None = None, *, sandbox_fallback: bool = False):
        """`environ`: the daemon's environment (default os.environ). `client_env`: variables
        exported for every Slurm command; default SLURM_CONF from `environ` when sbatch runs
        locally, nothing on a login node (it has its own configuration)."""
        super().__init__(cfg, manifest, sandbox_fallback=sandbox_fallback)
        self.scfg = cfg.slurm
        self.scheduler_gpus = manifest.gpus > 0     # Slurm's --gres sets CUDA_VISIBLE_DEVICES
        self._environ = os.environ if environ is None else environ
        if client_env is None:
            conf = self._environ.get("SLURM_CONF")
            client_env = {"SLURM_CONF": conf} if conf and not cfg.slurm.login else {}
        self._client_env = dict(client_env)
        self._shell: Shell | None = None
        self._home_path: tuple[str, str] | None = None
        self._last: dict[str, JobInfo] = {}         # job id -> last Slurm state seen (for fetch)
        host = self.scfg.login
        if host and not any(h.name == host for h in cfg.hosts):
            raise ValueError(f"runner.slurm.login = '{host}' names no [[runner.hosts]] entry; "
                             f"known hosts: {', '.join(h.name for h in cfg.hosts) or 'none'}")

    # -- where and how --------------------------------------------------------------------------
    @property
    def host(self) -> str:
        return self.scfg.login or "slurm"

    def slots(self) -> list[Slot]:
        return [Slot(self.host, f"job{i}") for i in range(max(1, self.scfg.max_jobs))]

    def host_slots(self, host: str) -> int:
        return 1        # virtual slots: each job has its node's allocation (Slurm's cgroup bounds it)

    def shell_for(self, host: str) -> Shell:
        if self._shell is None:
            inner: Shell
            if self.scfg.login:
                inner = SSHShell(next(h for h in self.cfg.hosts if h.name == self.scfg.login))
            else:
                inner = LocalShell()
            self._shell = _ClientShell(inner, self._client_env)
        return self._shell

    def _home_and_path(self) -> tuple[str, str]:
        if self._home_path is None:
            if self.scfg.login:
                rc, out, err = self.shell_for(self.host).run('printf "%s\\n%s" "$HOME" "$PATH"', timeout=30)
                if rc != 0:
                    raise HostUnreachable(f"{self.host}: {err.decode(errors='replace')[-200:]}")
                home, _, path = out.decode().partition("\n")
            else:
                # The interpreter that runs the daemon comes first, as for the local runner.
                home = os.path.expanduser("~")
                path = os.pathsep.join([os.path.dirname(sys.executable),
                                        self._environ.get("PATH", "/usr/bin:/bin")])
            self._home_path = (home, path)
        return self._home_path

    def work_root(self, host: str) -> str:
        root = self.scfg.work_root
        home = self._home_and_path()[0]
        if root == "~" or root.startswith("~/"):
            return home + root[1:]
        if not root.startswith("/"):
            return os.path.abspath(root) if not self.scfg.login else f"{home}/{root}"
        return root

    def path_prefix(self, host: str) -> str:
        return self._home_and_path()[1]

    def python_for(self, host: str) -> str | None:
        """The login host's own `python`, else runner.python (resolved on the login node)."""
        h = next((h for h in self.cfg.hosts if h.name == self.scfg.login), None) if self.scfg.login else None
        return (h.python if h is not None else None) or super().python_for(host)

    def time_limit_s(self) -> int:
        m = self.manifest
        s = m.time_budget_s + defaults.KILL_GRACE_S + self.scfg.time_margin_s
        if m.evaluate:
            s += m.eval_budget_s + defaults.KILL_GRACE_S
        if m.prepare:      # the job prepares on its node first when that node has no cached copy yet
            s += m.prepare_budget_s + defaults.KILL_GRACE_S
        return int(s)

    def sbatch_argv(self, tdir: str, spec: TrialSpec) -> list[str]:
        out = f"{tdir}/slurm.out".replace("%", "%%")      # -o expands %j and friends; %% is a literal %
        argv = ["sbatch", "--parsable", "--no-requeue", "-J", f"ard-{spec.trial_id}", "-o", out,
                "-D", tdir, f"--time={slurm_time(self.time_limit_s())}"]
        if self.manifest.gpus > 0:
            argv.append(f"--gres=gpu:{self.manifest.gpus}")
        if self.manifest.mem_mb:           # Slurm enforces the job's memory too (the env's limit)
            argv.append(f"--mem={self.manifest.mem_mb}M")
        if self.scfg.partition:
            argv.append(f"--partition={self.scfg.partition}")
        if self.scfg.account:
            argv.append(f"--account={self.scfg.account}")
        argv += list(self.scfg.extra_args)          # last, so they override the above
        # --wrap, not the script itself: sbatch copies a script into its spool, and trial.sh
        # finds its trial directory from $0. The probe records what the compute node has.
        argv += ["--wrap", f"bash probe.sh > probe.txt 2>&1; exec bash {shlex.quote(tdir + '/trial.sh')}"]
        return argv

    def secret_names(self) -> list[str]:
        """Variables of the daemon's environment that look like secrets (local mode only: a login
        node's environment is not ours)."""
        if self.scfg.login:
            return []
        return sorted(n for n in {*os.environ, *self._environ} if _SECRET.search(n))

    def launch(self, sh: Shell, tdir: str, spec: TrialSpec, slot: Slot) -> dict[str, Any]:
        rc, _, err = sh.run(f"cat > {shlex.quote(tdir)}/probe.sh", stdin=PROBE.encode(), timeout=60)
        if rc != 0:
            raise RuntimeError(f"copying probe.sh to {self.host} failed: {err.decode(errors='replace')[-300:]}")
        # sbatch hands its environment to the job (--export=ALL), and the job runs LLM-written
        # code: the daemon's secrets (API keys) stay behind. The job id also goes to a file, for
        # a daemon that crashes before it stores the handle.
        env_u = "".join(f"-u {shlex.quote(n)} " for n in self.secret_names())
        rc, out, err = sh.run(f"j=$(env {env_u}{shlex.join(self.sbatch_argv(tdir, spec))}) && "
                              f"printf '%s\\n' \"$j\" > {shlex.quote(tdir)}/slurm.jobid && printf '%s\\n' \"$j\"",
                              timeout=120)
        words = out.decode(errors="replace").strip().split()
        if rc != 0 or not words:
            msg = err.decode(errors="replace").strip()[-500:]
            if "Unable to contact slurm controller" in msg:    # transient: try again later
                raise HostUnreachable(f"sbatch on {self.host}: {msg}")
            raise RuntimeError(f"sbatch on {self.host} refused the trial (rc {rc}): {msg}")
        return {"job_id": words[-1].split(";")[0]}

    # -- protocol --------------------------------------------------------------------------------
    def job_id(self, handle: dict[str, Any]) -> str | None:
        """The handle's job id; a handle written before sbatch returned (the daemon crashed in
        between) finds it in the trial's `slurm.jobid`. None: sbatch never ran."""
        if handle.get("job_id"):
            return str(handle["job_id"])
        out = self.shell_for(handle["host"]).run(f"cat {shlex.quote(handle['dir'])}/slurm.jobid 2>/dev/null",
                                                 timeout=30)[1].decode(errors="replace").split()
        return out[0].split(";")[0] if out and out[0].split(";")[0].isdigit() else None

    def query(self, handle: dict[str, Any], job: str) -> JobInfo:
        """Ask Slurm about the job (one round trip); remembers the answer for fetch."""
        rc, out, _ = self.shell_for(handle["host"]).run(query_script(job), timeout=60)
        info = parse_query(out.decode(errors="replace"), job)
        if info.state:
            self._last[job] = info
        return info

    def poll(self, handle: dict[str, Any]) -> PollState:
        sh = self.shell_for(handle["host"])
        q = shlex.quote(handle["dir"])
        try:
            rc, out, _ = sh.run(f"if [ -e {q}/done ]; then echo done; elif [ -d {q} ]; then echo here; "
                                f"else echo missing; fi", timeout=30)
            word = out.decode().strip()
            if rc != 0 or word not in ("done", "here", "missing"):
                return PollState.UNREACHABLE
            if word != "here":
                return PollState(word)
            job = self.job_id(handle)
            if job is None:
                return PollState.LOST
            info = self.query(handle, job)
        except HostUnreachable:
            return PollState.UNREACHABLE
        if not info.reachable:
            return PollState.UNREACHABLE
        return poll_state(info.state)

    def probe(self, sh: Shell, handle: dict[str, Any]) -> str:
        """What the compute node had: probe.txt, written by the job before trial.sh."""
        return sh.run(f"cat {shlex.quote(handle['dir'])}/probe.txt 2>/dev/null", timeout=30)[1] \
            .decode(errors="replace")

    def fetch(self, handle: dict[str, Any]) -> TrialOutcome:
        out = super().fetch(handle)
        job = self.job_id(handle) or "?"
        info = self._last.get(job)
        if job != "?" and (info is None or info.state not in FINISHED | RERUN):
            try:
                info = self.query(handle, job)
            except HostUnreachable:
                info = info or JobInfo(None)
        tail = self.shell_for(handle["host"]).run(
            f"tail -c 4000 {shlex.quote(handle['dir'])}/slurm.out 2>/dev/null", timeout=30)[1]
        return explain(out, info or JobInfo(None), job, tail)

    def cancel(self, handle: dict[str, Any]) -> None:
        # scancel alone: Slurm signals every process of the job on its node. The process-group
        # kill of ShellRunner.cancel would run on the submit host, where the compute node's
        # PIDs name unrelated processes. Without a job id (a crash inside submit), by job name.
        job = self.job_id(handle)
        target = shlex.quote(job) if job else "-n " + shlex.quote("ard-" + handle["dir"].rstrip("/").rsplit("/", 1)[-1])
        self.shell_for(handle["host"]).run(f"scancel {target} 2>/dev/null; true", timeout=60)

    def cleanup(self, handle: dict[str, Any]) -> None:
        # A job the daemon gave up on must not start later in a directory that is gone.
        self.cancel(handle)
        super().cleanup(handle)

    def close(self) -> None:
        if self._shell is not None:
            self._shell.close()
            self._shell = None
