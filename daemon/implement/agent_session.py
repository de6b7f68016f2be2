"""One coding-agent session: run the CLI (already wrapped in its sandbox) with a clean environment,
collect its JSON event stream, and stop it at its wall-time, turn or USD limit.

The process gets its own session (process group): stopping it sends SIGTERM to the group, then
SIGKILL after a grace period; inside bwrap (--die-with-parent, its own PID namespace) killing the
wrapper ends everything it started. Every string the session produced is passed through
`redact` before it is kept, so the key the CLI was given never reaches a transcript, note or log.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from autoresearchd import defaults
from autoresearchd.implement.agent_cli import AgentCLI, Usage


@dataclass
class SessionResult:
    outcome: str                     # finished | failed | timeout | cost_cap | turn_cap
    reason: str | None               # a sentence for the note when the outcome is not `finished`
    events: list[dict] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    usd: float = 0.0
    wall_s: float = 0.0
    returncode: int | None = None
    stderr_tail: str = ""


def redactor(secrets: list[str]) -> Callable[[str], str]:
    secrets = [s for s in secrets if s and len(s) >= 4]

    def redact(text: str) -> str:
        for s in secrets:
            text = text.replace(s, "***")
        return text
    return redact


def _stop(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, defaults.AGENT_KILL_GRACE_S), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_session(cli: AgentCLI, argv: list[str], env: dict[str, str], cwd: str, home: str, cfg,
                cost: Callable[[Usage], float], redact: Callable[[str], str]) -> SessionResult:
    """Run one session to its end or to a limit. `cost(usage)` prices the usage seen so far."""
    t0 = time.monotonic()
    events: list[dict] = []
    err_tail: deque[str] = deque(maxlen=60)
    lock = threading.Lock()
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    except OSError as e:
        return SessionResult("failed", f"the {cli.name} CLI could not start: {redact(str(e))}")

    def read_out():
        for raw in proc.stdout:
            line = redact(raw.decode(errors="replace")).strip()
            if not line:
                continue
            try:
                ev = json.loads(line)
            except ValueError:
                ev = {"type": "text", "text": line[:4000]}
            with lock:
                events.append(ev if isinstance(ev, dict) else {"type": "value", "value": ev})

    def read_err():
        for raw in proc.stderr:
            err_tail.append(redact(raw.decode(errors="replace")).rstrip()[:2000])

    readers = [threading.Thread(target=f, daemon=True) for f in (read_out, read_err)]
    for t in readers:
        t.start()
    outcome, reason = "finished", None
    while True:
        try:
            proc.wait(timeout=0.25)
            break
        except subprocess.TimeoutExpired:
            pass
        with lock:
            usage = cli.usage(list(events), home)
        usd, elapsed = cost(usage), time.monotonic() - t0
        if elapsed > cfg.wall_s:
            outcome, reason = "timeout", f"the {cli.name} session was stopped at its wall-time limit of {cfg.wall_s:g}s"
        elif usd > cfg.max_usd:
            outcome, reason = "cost_cap", (f"the {cli.name} session was stopped at its cost cap: "
                                           f"${usd:.4f} spent, cap ${cfg.max_usd:g}")
        elif usage.turns > cfg.max_turns:
            outcome, reason = "turn_cap", f"the {cli.name} session was stopped after {usage.turns} turns (limit {cfg.max_turns})"
        else:
            continue
        _stop(proc)
        break
    for t in readers:
        t.join(timeout=5)
    with lock:
        usage = cli.usage(list(events), home)
    usd = cost(usage)
    if outcome == "finished" and usd > cfg.max_usd:
        # the CLI stopped itself at its own cap (claude --max-budget-usd) or ended just past ours
        outcome, reason = "cost_cap", (f"the {cli.name} session reached its cost cap: ${usd:.4f} spent, "
                                       f"cap ${cfg.max_usd:g}")
    elif outcome == "finished" and proc.returncode != 0:
        tail = _session_error(events) or _last_error(events) or "\n".join(list(err_tail)[-15:]) or "no output"
        outcome, reason = "failed", f"the {cli.name} CLI exited with status {proc.returncode}: {tail[-1500:]}"
    elif outcome == "finished" and (msg := _session_error(events)):
        outcome, reason = "failed", f"the {cli.name} session ended with an error: {msg[-1500:]}"
    return SessionResult(outcome, reason, events, usage, usd, time.monotonic() - t0, proc.returncode,
                         "\n".join(err_tail))


def _last_error(events: list[dict]) -> str:
    for ev in reversed(events):
        if ev.get("type") in ("error", "turn.failed", "result") and (ev.get("message") or ev.get("error")):
            e = ev.get("error") or ev.get("message")
            return e.get("message", str(e)) if isinstance(e, dict) else str(e)
    return ""


def _session_error(events: list[dict]) -> str:
    """A failed session that still exited 0 (codex prints turn.failed; claude an error result)."""
    for ev in reversed(events):
        if ev.get("type") == "turn.failed":
            e = ev.get("error") or {}
            return e.get("message", str(e)) if isinstance(e, dict) else str(e)
        if ev.get("type") == "result":
            if ev.get("is_error") or (ev.get("subtype") or "success") != "success":
                return str(ev.get("result") or ev.get("subtype"))
            return ""
    return ""
