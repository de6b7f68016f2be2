"""Turning the files a finished trial left into a TrialOutcome: exit codes, time-outs, the capped
logs, tamper evidence, and the metrics of record (the frozen evaluate step's, when there is one)."""

from __future__ import annotations

from autoresearchd.manifest import EnvManifest

from .interp import not_found
from .metrics import parse_metrics
from .protocol import TrialOutcome


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


def whole_tail(data: bytes | str, limit: int = 2000) -> str:
    """The end of an error text, cut only between lines (or words), never inside one: a message
    cut mid-word hides where the problem is."""
    text = (data.decode(errors="replace") if isinstance(data, bytes) else data).strip()
    if len(text) <= limit:
        return text
    cut = text[-limit:]
    for sep in ("\n", " "):
        if sep in cut:
            return "... " + cut.split(sep, 1)[1].lstrip()
    return "... " + cut


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
            # the evaluator's own captured stdout only: no file in the trial directory is believed
            metrics = parse_metrics(eval_log.decode(errors="replace"))
            source = "evaluate"
            if "eval.timed_out" in files:
                error = "evaluation timed out"
            elif eval_rc == 127:
                error = not_found(eval_log.decode(errors="replace"), "evaluation")
            elif eval_rc not in (0, None):
                error = f"evaluation exited {eval_rc}"
    else:
        metrics = parse_metrics(run_log.decode(errors="replace"), files.get("run_result.json"))
        source = "run"
    prep_rc = _int(files.get("prepare.rc"))
    if prep_rc not in (0, None):
        why = f"timed out after {manifest.prepare_budget_s}s" if prep_rc == 124 else f"exited {prep_rc}"
        tail = files.get("prepare.log", b"").decode(errors="replace")[-1500:].strip()
        error = f"prepare {why} (the run did not start)" + (f"; its output ends with:\n{tail}" if tail else "")
    elif timed_out:
        error = "run exceeded its time budget of %ss" % manifest.time_budget_s
    elif rc is None:
        wrapper = whole_tail(files.get("wrapper.log", b""), 1000)
        error = "run left no exit code (killed, or the wrapper failed)" + (f": {wrapper}" if wrapper else "")
    elif rc == 127:
        error = not_found(run_log.decode(errors="replace"))
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
