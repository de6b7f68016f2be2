"""An idea's learning curve against the band of the baseline's seeds: the dashboard's idea page (as
data for its chart) and `autoresearchd show` (as a small table of t, the idea's value and the band).

The curves are the runs' own reports (runners/progress.py): untrusted numbers, re-checked when read
(finite, t in (0, 1], increasing), shown as numbers only and never as text of the run's.
"""

from __future__ import annotations

from autoresearchd import defaults
from autoresearchd.engine.stopping import band, window
from autoresearchd.runners import progress


def _curves(repo, note) -> list[list[tuple[float, float]]]:
    out = []
    for t in (note.trials if note else []):
        if t.curve:
            pts = progress.loads(repo.read_blob(t.curve) or b"")
            if pts:
                out.append(pts)
    return out


def curve_payload(repo, note, baseline_note) -> dict | None:
    """{"t": grid, "idea": [value or None per t, one list per seed], "mean", "lo", "hi"} (the band:
    mean ± one standard deviation of the baseline's seeds) on defaults.STOPPING_GRID steps of t, or
    None when neither the idea nor the baseline has a curve. A stopped idea adds where it stopped."""
    mine, refs = _curves(repo, note), _curves(repo, baseline_note)
    if not mine and not refs:
        return None
    grid = [k / defaults.STOPPING_GRID for k in range(1, defaults.STOPPING_GRID + 1)]
    width = 1.0 / defaults.STOPPING_GRID
    bands = [band(refs, t, width) for t in grid]
    out = {"t": grid, "idea": [[window(c, t, width) if t <= c[-1][0] + 1e-12 else None for t in grid] for c in mine],
           "mean": [b[0] if b else None for b in bands],
           "lo": [b[0] - b[1] if b else None for b in bands], "hi": [b[0] + b[1] if b else None for b in bands]}
    if note is not None and note.stopped:
        out["stopped_t"] = note.stopped.get("t")
    return out


def curve_lines(repo, note, baseline_note, metric: str) -> list[str]:
    """`show`'s table: every fourth grid step of t, the idea's seeds and the baseline band."""
    p = curve_payload(repo, note, baseline_note)
    if p is None or not p["idea"]:
        return []
    lines = [f"learning curve ({metric}, the run's own report: untrusted, never the result) "
             f"vs the baseline's seeds, mean ± std:"]
    fmt = (lambda v: "-" if v is None else f"{v:.4g}")
    for k, t in enumerate(p["t"]):
        if (k + 1) % 4 and k != len(p["t"]) - 1:
            continue
        vals = " ".join(fmt(c[k]) for c in p["idea"])
        base = "-" if p["mean"][k] is None else f"{p['mean'][k]:.4g} ± {p['hi'][k] - p['mean'][k]:.2g}"
        lines.append(f"  t={t:.2f}  idea {vals:>10}   baseline {base}")
    if p.get("stopped_t") is not None:
        lines.append(f"  stopped at t={p['stopped_t']:g}")
    return lines
