"""`autoresearchd doctor [--run]`: checks git, the config and its environment through the same
validation path as `start` (daemon/validate.py), the runner's hosts and which API keys are present
(never printing them). It only reads: no repo is created, no hook or git config is written.

`--run` goes further: the env's `check` on the baseline, then one trial of the baseline (run and
evaluate, seed 0) on the configured runner; it prints the metric read, or the step that failed and
the end of its log.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from rich.markup import escape

from autoresearchd import defaults
from autoresearchd.implement import agent_cli
from autoresearchd.implement.implementer import check_sandbox, run_check
from autoresearchd.makerunner import make_runner
from autoresearchd.runners import sandbox
from autoresearchd.runners.base import TrialSpec
from autoresearchd.runners.isolation import sandbox_check
from autoresearchd.runners.protocol import PollState
from autoresearchd.store.gitproc import run_git
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.refs import branch_ref
from autoresearchd.validate import ERROR, OK, WARN, EnvSource, findings
from autoresearchd.views.safe import UNTRUSTED, untrusted_lines


class _Printer:
    def __init__(self, console):
        self.console, self.ok = console, True

    def __call__(self, level: str, what: str, hint: str = "") -> None:
        self.ok &= level != ERROR
        mark = {OK: "[green]ok[/]  ", WARN: "[yellow]warn[/]", ERROR: "[red]FAIL[/]"}[level]
        tail = f" — {hint}" if hint and level != OK else ""
        self.console.print(f"{mark} {escape(what + tail)}", highlight=False, soft_wrap=True)


def doctor(cfg, console, run: bool = False, budget_s: int | None = None) -> int:
    line = _Printer(console)
    git = shutil.which("git")
    ver = run_git(["--version"], check=False).strip() if git else ""     # store/: the one module that runs git
    line(OK if git else ERROR, f"git: {ver or 'not found'}", "install git")
    line(OK, f"config: {cfg.path or '(defaults, no file)'}")
    found, src = findings(cfg)
    for f in found:
        line(f.level, f.what, f.hint)
    if src is not None and not any(f.level == ERROR for f in found):
        _hosts(cfg, src, line)
        _sandboxes(cfg, src, line)
    _llm(cfg, line)
    if run:
        if not line.ok:
            line(ERROR, "doctor --run: not running the baseline until the problems above are fixed")
        else:
            _run_baseline(cfg, src, line, console, budget_s)
    return 0 if line.ok else 1


def _hosts(cfg, src: EnvSource, line) -> None:
    if cfg.runner.kind == "local":
        line(OK, f"runner 'local': {cfg.runner.slots if src.manifest.gpus == 0 else len(cfg.runner.gpus)} slot(s)")
        return
    runner = _runner(cfg, src, None)
    try:
        slots = runner.slots()
    except Exception as e:  # noqa: BLE001 - doctor reports, it does not crash
        line(ERROR, f"runner '{cfg.runner.kind}': {e}", "check the host entries (docs/hosts.md)")
        return
    finally:
        runner.close()
    bad = sorted({s.host for s in slots if not s.reachable})
    line(ERROR if bad or not slots else OK,
         f"runner '{cfg.runner.kind}': {len(slots)} slot(s)" + (f", unreachable: {', '.join(bad)}" if bad else ""),
         "check the host entries and known_hosts (docs/hosts.md)")


def _sandboxes(cfg, src: EnvSource, line) -> None:
    """Which sandbox isolates trials on each host; `none` (chosen or fallen back to) is a warning."""
    kind = cfg.runner.sandbox or defaults.SANDBOX
    with tempfile.TemporaryDirectory(prefix="ard-doctor-") as work:
        runner = _runner(cfg, src, Path(work))
        try:
            hosts = sorted({s.host for s in runner.slots() if s.reachable})
            for host in hosts:
                try:
                    hs = runner.host_sandbox(host)
                except Exception as e:  # noqa: BLE001 - reported, as a failure
                    line(ERROR, f"sandbox on {host}: {e}")
                    continue
                if hs.python is not None:
                    line(OK, f"python on {host}: {hs.python.describe()}")
                if hs.sandbox.isolated:
                    line(OK, f"sandbox on {host}: {hs.sandbox.name}")
                else:
                    why = 'runner.sandbox = "none"' if kind == "none" else f"{kind} unavailable"
                    line(WARN, f"sandbox on {host}: none ({why}): trials can reach the evaluator, the daemon's "
                               f"files and this host; notes say `sandbox: none`",
                         "docs/security.md; Debian: apt-get install bubblewrap")
        except Exception as e:  # noqa: BLE001 - doctor reports, it does not crash
            line(ERROR, f"sandbox: {e}")
        finally:
            runner.close()


def _llm(cfg, line) -> None:
    # the provider's verdict is one of the findings (validate.llm_findings): one line, ok or FAIL
    keys = [k for k in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", cfg.llm.api_key_env) if k and os.environ.get(k)]
    line(OK, "API keys present: " + (", ".join(sorted(set(keys))) or "none"))
    if cfg.implementer.kind != "diff":
        _agent(cfg, line)


def _agent(cfg, line) -> None:
    """A coding-agent implementer: its CLI's version, its sandbox and where its login comes from."""
    try:
        cli = agent_cli.get(cfg.implementer.kind)
    except KeyError:
        return      # an unknown kind is one of the findings above
    a = cfg.implementer.agent
    exe = cli.find(a.command)
    ver = ""
    if exe:
        try:
            ver = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            ver = "(no version)"
    if exe:      # a missing CLI is one of the findings above (start refuses it too)
        line(OK, f"implementer {cli.name}: {exe} {ver}".rstrip())
    try:
        why = sandbox.get(a.sandbox).available()
    except KeyError as e:
        why = e.args[0]
    line(OK if why is None else ERROR, f"agent sandbox: {a.sandbox}", why or "")
    key = a.api_key_env or cli.key_env
    line(OK, f"agent login: {key} is set" if os.environ.get(key) else
         f"agent login: {key} not set; the CLI's own login in {a.home or '(a fresh HOME: none)'} will be used")


def _runner(cfg, src: EnvSource, work_dir: Path | None):
    return make_runner(cfg, None, manifest=src.manifest, local_dir=work_dir)


# -- doctor --run ------------------------------------------------------------------------------------
def _tars(cfg, src: EnvSource) -> tuple[bytes, bytes | None, list[str], str]:
    """(code tar, frozen-harness tar, frozen paths, commit label) of the baseline, read-only."""
    m = src.manifest
    if src.root is None:              # an existing research repo: the baseline commit
        repo = GitRepo(cfg.resolve(cfg.research.repo))
        branch = cfg.research.baseline or m.baseline
        commit = repo.rev_parse(branch_ref(branch))
        frozen = sorted(f for f in src.files if m.is_frozen(f))
        return (repo.archive(commit, exclude=m.heldout()), (repo.archive(commit, frozen) if frozen else None),
                frozen, commit)

    def tar_of(paths: list[str]) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as t:
            for p in paths:
                t.add(src.root / p, arcname=p)
        return buf.getvalue()
    frozen = sorted(f for f in src.files if m.is_frozen(f))
    code = [f for f in src.files if not any(f == h or f.startswith(h + "/") for h in m.heldout())]
    return tar_of(code), (tar_of(frozen) if frozen else None), frozen, "template"


def _tail(text: str) -> str:
    return text[-defaults.DOCTOR_LOG_TAIL_CHARS:].rstrip() or "(no output)"


def _run_baseline(cfg, src: EnvSource, line, console, budget_s: int | None) -> None:

    m = src.manifest
    if budget_s:
        m = m.model_copy(update={"time_budget_s": int(budget_s)})
    code, harness, frozen, commit = _tars(cfg, src)
    if m.check:
        try:
            why = run_check(m, code, cfg.implementer.check_timeout_s, sandbox=check_sandbox(cfg))
        except RuntimeError as e:
            why = f"the check was not run: {e}"
        if why:
            line(ERROR, f"check failed: {why.splitlines()[0]}")
            console.print(f"[bold]end of the check's output[/]: {UNTRUSTED}", highlight=False)
            console.print(escape(untrusted_lines(_tail(why))), highlight=False, soft_wrap=True)
            return
        line(OK, f"check: `{m.check}` passed on the baseline")
    else:
        line(WARN, "no env.check: implemented ideas are not checked before they run")
    with tempfile.TemporaryDirectory(prefix="ard-doctor-") as work:
        runner = _runner(cfg, src, Path(work))
        handle = None
        try:
            slots = [s for s in runner.slots() if s.reachable]
            if not slots:
                line(ERROR, f"doctor --run: runner '{cfg.runner.kind}' has no reachable slot")
                return
            if not _interpreters(runner, sorted({s.host for s in slots}), m, line):
                return
            spec = TrialSpec(f"doctor-{int(time.time())}", commit, 0, m, code, harness, frozen, "doctor")
            console.print(f"running the baseline once on {escape(slots[0].key)} "
                          f"(run budget {m.time_budget_s}s, evaluate {m.eval_budget_s}s) …", highlight=False)
            handle = runner.submit(spec, slots[0])
            deadline = time.time() + m.time_budget_s + m.eval_budget_s + 2 * defaults.KILL_GRACE_S + 120
            state = runner.poll(handle)
            while state not in (PollState.DONE, PollState.LOST, PollState.MISSING) and time.time() < deadline:
                time.sleep(1.0)
                state = runner.poll(handle)
            if state != PollState.DONE:
                line(ERROR, f"doctor --run: the trial did not finish ({state.value}) within its budgets")
                return
            _report(runner.fetch(handle), m, line, console, src.files)
        finally:
            if handle is not None:
                try:
                    runner.cleanup(handle)
                except Exception:  # noqa: BLE001 - a leftover dir is harmless
                    pass
            runner.close()


def _interpreters(runner, hosts: list[str], m, line) -> bool:
    """Every host, before the first trial: its resolved python runs inside the trial's sandbox, sees
    what it sees outside (and torch where it has it), and each step's first command is found there
    (runners/interp.py). False when a host fails."""
    ok = True
    for host in hosts:
        try:
            found = sandbox_check(runner, host, m)
        except Exception as e:  # noqa: BLE001 - reported, as a failure
            found = [(ERROR, f"interpreter check on {host}: {e}", "")]
        for level, what, hint in found:
            line(level, what, hint)
            ok &= level != ERROR
    if not ok:
        line(ERROR, "doctor --run: not running the baseline until every host's interpreter works in the sandbox")
    return ok


_MISSING_FILE = re.compile(r"FileNotFoundError|No such file or directory")


def _missing_file_hint(log: str, m, files: list[str]) -> str:
    """A run that failed on a missing file most often lacks data that only `prepare` makes: say how
    prepare's output reaches the run, or which prepare script the baseline has."""
    if not _MISSING_FILE.search(log):
        return ""
    if m.prepare:
        return ("a file is missing: prepare's output is under $AUTORESEARCH_PREPARED, not in the trial's copy "
                "of the repo; read it from there or link it in at the start of `run` "
                "(docs/bring-your-own-repo.md, step 5)")
    scripts = sorted(f for f in files if re.search(r"(^|/)prepare\w*\.py$", f))
    # the prepare script beside the missing file ("No such file or directory: 'data/x/train.bin'")
    missing = [os.path.normpath(p) for p in re.findall(r"No such file or directory: '([^']+)'", log)]
    near = [s for s in scripts for p in missing if os.path.dirname(s) and
            (os.path.dirname(p) + "/").startswith(os.path.dirname(s) + "/")]
    pick = (near or scripts or ["data/prepare.py"])[0]
    example = f'prepare = "python {pick}"'
    return ("a file is missing: data that is not committed must be made by `prepare`, once per host, "
            f"under $AUTORESEARCH_PREPARED: set env.{example}"
            + (f" (the baseline has {', '.join(scripts)})" if len(scripts) > 1 else "")
            + " and let `run` read it from there (docs/bring-your-own-repo.md, step 5)")


def _report(out, m, line, console, files: list[str] = ()) -> None:
    """The metric, or the exact step that failed (with a hint where the log names its cause) and its
    log tail."""
    log = out.log.decode(errors="replace")
    value = out.metrics.get(m.metric)
    if out.timed_out:
        step, why = "run", f"timed out after {m.time_budget_s}s"
    elif out.exit_code not in (0, None):
        step, why = "run", f"exited with code {out.exit_code}"
    elif m.evaluate and out.eval_exit_code not in (0, None):
        step, why = "evaluate", f"exited with code {out.eval_exit_code}"
    elif out.error:
        step, why = ("evaluate" if m.evaluate else "run"), out.error
    elif value is None:
        step = "evaluate" if m.evaluate else "run"
        why = f"printed no '{m.metric}' (a final `---` block of `key: value` lines, or $AUTORESEARCH_RESULT)"
    else:
        wall = f" in {out.wall_s:.0f}s" if out.wall_s else ""
        if out.cpu_s is not None:           # the kernel's figure, the one compute_cap multiplies
            wall += f" ({out.cpu_s:.1f} CPU seconds; an idea may use compute_cap x the baseline's)"
        line(OK, f"baseline run + evaluate{wall}: {m.metric} = {value:.6g} (read from {out.metrics_source})")
        return
    line(ERROR, f"doctor --run: the {step} step failed: {why}", _missing_file_hint(log, m, list(files)))
    console.print(f"[bold]end of the log[/] (run, then evaluate): {UNTRUSTED}", highlight=False)
    console.print(escape(untrusted_lines(_tail(log))), highlight=False, soft_wrap=True)
