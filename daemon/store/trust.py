"""What the daemon refuses to believe about a measurement: pure decisions, no I/O.

A trial whose runner reported tamper evidence, or whose metric of record lies outside the plausible
range the manifest declares (or is not a finite number), is `suspicious`: its value is kept in the
note for people to inspect, with the reason, but a suspicious note is never promoted, never offered
to a policy as a parent and never shown as a best result (those all read only `succeeded` notes).
The evidence comes from the runner's outcome (`TrialOutcome.tamper`) and the daemon's own reading of
the metric, never from anything the trial reports about itself.
"""

from __future__ import annotations

import math

from autoresearchd import defaults



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
