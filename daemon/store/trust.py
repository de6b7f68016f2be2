"""What the daemon refuses to believe about a measurement: pure decisions, no I/O.

A trial whose runner reported tamper evidence, or whose metric of record lies outside the plausible
range the manifest declares (or is not a finite number), is `suspicious`: its value is kept in the
note for people to inspect, with the reason, but a suspicious note is never promoted, never offered
to a policy as a parent and never shown as a best result (those all read only `succeeded` notes).
An idea whose trials used more compute than `compute_cap` times the baseline's (the kernel's CPU
seconds, GPU seconds where the env has GPUs), or whose run reports more of a `budget_metrics` count
than the baseline's, is `over_budget` by the same path: kept, explained, never a result.
The evidence comes from the runner's outcome (`TrialOutcome.tamper`) and the daemon's own reading of
the metric, never from anything the trial reports about itself.
"""

from __future__ import annotations

import math
import statistics

from autoresearchd import defaults
from autoresearchd.vocab import Status


def implausible(value: float, metric: str, plausible: tuple[float, float] | None) -> str | None:
    """Why `value` cannot be an honest measurement of `metric` (None if it can)."""
    if not math.isfinite(value):
        return f"implausible: {metric}={value} is not a finite number"
    if plausible is None:
        return None
    lo, hi = plausible
    if value < lo:
        return f"implausible: {metric}={value:.6g} is below the plausible range [{lo:g}, {hi:g}] the manifest declares"
    if value > hi:
        return f"implausible: {metric}={value:.6g} is above the plausible range [{lo:g}, {hi:g}] the manifest declares"
    return None


def suspicion(value: float | None, tamper: list[str], manifest) -> str | None:
    """The reason a trial's result must not be trusted, or None. Tamper evidence wins over range:
    a run that touched the harness proves nothing even when its number looks ordinary."""
    if tamper:
        shown = "; ".join(t.strip() for t in tamper[:defaults.TAMPER_SHOWN])
        more = f" (+{len(tamper) - defaults.TAMPER_SHOWN} more)" if len(tamper) > defaults.TAMPER_SHOWN else ""
        return f"tamper: {shown}{more}"
    if value is None:
        return None
    return implausible(value, manifest.metric, manifest.plausible)


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def over_budget(trials: list, baseline_trials: list, manifest) -> tuple[str, dict] | None:
    """(why, figures) when an idea's measured trials used more than the env allows, else None.
    Compute: each succeeded trial's CPU seconds (GPU seconds where gpus > 0) against compute_cap x
    the median over the baseline's succeeded trials. budget_metrics: the run's own count (steps,
    tokens) against the baseline's median; an idea that stops reporting one is over too."""
    ok = [t for t in trials if t.status == Status.SUCCEEDED]
    base = [t for t in baseline_trials if t.status == Status.SUCCEEDED]
    if not ok or not base:
        return None
    unit = "gpu_s" if manifest.gpus > 0 else "cpu_s"
    cap = manifest.compute_cap
    ref = _median([getattr(t, unit) for t in base if getattr(t, unit, None) is not None])
    used = [getattr(t, unit) for t in ok if getattr(t, unit, None) is not None]
    # the allowance has an absolute part too: a trial of a few CPU seconds (a toy env, a quick
    # check) varies by more than 25% under load from interpreter start-up and scheduling alone
    slack = defaults.COMPUTE_SLACK_S
    if cap and ref and used and max(used) > cap * ref + slack:
        what = "GPU" if unit == "gpu_s" else "CPU"
        allowed = cap * ref + slack
        figs = {"unit": unit, "used": round(max(used), 3), "baseline": round(ref, 3), "cap": cap,
                "slack_s": slack, "allowed": round(allowed, 3)}
        return (f"over_budget: {max(used):.1f} {what} seconds in a trial, over compute_cap {cap:g} x the "
                f"baseline's median {ref:.1f} s + {slack:g} s = {allowed:.1f} s"), figs
    for k in manifest.budget_metrics:
        ref = _median([t.run_metrics[k] for t in base if k in (t.run_metrics or {})])
        if ref is None:
            continue
        for t in ok:
            v = (t.run_metrics or {}).get(k)
            if v is None or v > ref:
                said = "did not report it" if v is None else f"reported {k}: {v:g}"
                return (f"over_budget: run {said}, the baseline's is {ref:g} (the env's rule: budget_metrics "
                        f"{k} may not exceed the baseline's)"), {"unit": k, "used": v, "baseline": ref}
    return None
