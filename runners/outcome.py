"""Turning the files a finished trial left into a TrialOutcome: exit codes, time-outs, the capped
logs, tamper evidence, and the metrics of record (the frozen evaluate step's, when there is one)."""

from __future__ import annotations

from autoresearchd.manifest import EnvManifest

from .interp import not_found
from .limits import EVAL_STEPS, RUN_STEP, applied, limit_hit, step_compute
from .metrics import parse_metrics
from . import progress
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
    eval_log = _joined_log(files, "eval")          # the scorer's (score phase): the only parsed output
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
            # trial.sh's own reason when a split evaluation's step failed (never a sandboxed step's text)
            why = files.get("eval.error", b"").decode(errors="replace").strip()[:500]
            if "eval.timed_out" in files:
                error = "evaluation timed out" + (f": {why}" if why else "")
            elif why:
                error = f"evaluation failed: {why}"
                metrics = {}           # a step failed: nothing the scorer printed before it counts
            elif eval_rc == 127:
                error = not_found(eval_log.decode(errors="replace"), "evaluation")
            elif eval_rc not in (0, None):
                error = f"evaluation exited {eval_rc}"
                if manifest.model and (last := _last_line(eval_log)):
                    error += f": {last}"     # the trusted scorer's reason (a split evaluation's)
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
    log = run_log + split_logs(files) + (b"\n===== evaluate =====\n" + eval_log if eval_log else b"")
    out = TrialOutcome(exit_code=rc, timed_out=timed_out, metrics=metrics, metrics_source=source, log=log,
                       wall_s=(done - started) if started and done else None, tamper=tamper, error=error,
                       accelerator=acc, software=sw, eval_exit_code=eval_rc, trust=manifest.trust().value)
    if manifest.budget_metrics:      # the run's own report, for the env's rule (judge.over_budget)
        reported = parse_metrics(run_log.decode(errors="replace"), files.get("run_result.json"))
        out.run_metrics = {k: v for k, v in reported.items() if k in manifest.budget_metrics}
    # the run's learning curve: untrusted numbers, kept for views and the stopping rule only (never a metric)
    out.curve = progress.parse(files.get("progress.jsonl", b""), manifest.metric)
    _compute(out, files, manifest, run_log, eval_log, rc, eval_rc)
    return out


def _compute(out: TrialOutcome, files: dict[str, bytes], manifest: EnvManifest, run_log: bytes,
             eval_log: bytes, rc: int | None, eval_rc: int | None) -> None:
    """CPU, wall and GPU seconds of run + evaluation (docs/notes.md), and the limit a step hit."""
    # a split evaluation's steps (the scorer's inputs phase, the model runner) have their own logs and
    # exit codes; the one-step evaluation is `eval`
    steps = [(RUN_STEP, run_log, rc)] + [(s, eval_log, eval_rc) if s == "eval" else
                                         (s, _joined_log(files, s), _int(files.get(s + ".rc")))
                                         for s in EVAL_STEPS]
    cpu = wall = gpu = 0.0
    ecpu = ewall = None
    seen = False
    for step, log, code in steps:
        c, w, g = step_compute(files, step)
        if c is None and w is None:
            continue
        seen = True
        cpu, wall, gpu = cpu + (c or 0.0), wall + (w or 0.0), gpu + (g or 0.0)
        if step != RUN_STEP:
            ecpu, ewall = (ecpu or 0.0) + (c or 0.0), (ewall or 0.0) + (w or 0.0)
        if out.limit is None:
            lim, how = limit_hit(files, step, log, code not in (0, None))
            if lim is not None:
                out.limit = lim.value
                value = applied(files).get({"memory": "memory_mb"}.get(lim.value, lim.value), "")
                what = "evaluation" if step != RUN_STEP else "run"
                note = f"limit: {lim.value} ({what}; {how}" + (f"; limit {value}" if value and
                                                                  not how.startswith("cgroup") else "") + ")"
                out.error = f"{out.error}; {note}" if out.error else note
    if not seen:
        return                       # an older wrapper: wall_s stays its started-to-done span
    out.cpu_s, out.wall_s, out.eval_cpu_s, out.eval_wall_s = cpu, wall, ecpu, ewall
    if manifest.gpus > 0:
        # no sampler ran (no nvidia-smi on the host): the GPUs were held for the whole time
        out.gpu_s = gpu if any(step + ".gpu_s" in files for step, _, _ in steps) else wall * manifest.gpus
    else:
        out.gpu_s = 0.0


def _last_line(log: bytes) -> str:
    lines = [ln.strip() for ln in log.decode(errors="replace").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


MODEL_LOG_LABEL = (b"\n===== model runner: UNTRUSTED output of the idea's code (never parsed, "
                   b"not the evaluator's) =====\n")


def split_logs(files: dict[str, bytes]) -> bytes:
    """A split evaluation's other logs, each under its own label: the scorer's inputs phase, then
    the model runner's (the idea's code printed it: untrusted text, kept apart from the scorer's)."""
    out = b""
    inputs, model = _joined_log(files, "eval_inputs"), _joined_log(files, "model")
    if inputs:
        out += b"\n===== evaluate (scorer, inputs phase) =====\n" + inputs
    if model or "model.rc" in files:
        # every line marked, so no line of it can pass for a label or for the scorer's output
        marked = b"".join(b"model| " + ln for ln in model.splitlines(keepends=True))
        out += MODEL_LOG_LABEL + marked + b"\n===== end of the model runner's output =====\n"
    return out
