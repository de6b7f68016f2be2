"""Learning curves: reading a running trial's progress file, bounded, and parsing it tolerantly.

A run appends JSON lines `{"t": share_of_training, "step": N, "<metric>": value}` to the file named
by AUTORESEARCH_PROGRESS (docs/environment.md, "Progress: learning curves"). The file is written by
untrusted code while it runs, so nothing of it is believed but finite numbers: at most
defaults.PROGRESS_MAX_BYTES are read (its first and last halves when bigger), a line that is not a
JSON object with a finite `t` in (0, 1] and a finite value of the metric is skipped, t must increase
(a line that goes back is skipped), and at most defaults.PROGRESS_MAX_POINTS points are kept.

The reader on the host is one shell loop for every trial of a host (one round trip, as polling is):
`dd iflag=nofollow,nonblock` opens the file without following a link the run put there (a link to a
file the run cannot see, outside its sandbox, is refused by the kernel) and without blocking on a
FIFO; each trial's bytes come back base64-encoded on one line, so no byte the run wrote can forge the
framing of another trial's.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import shlex

from autoresearchd import defaults

Point = tuple[float, float]        # (t, value)


def reader_script(dirs: list[str], max_bytes: int = defaults.PROGRESS_MAX_BYTES,
                  name: str = defaults.PROGRESS_FILE) -> str:
    """Shell printing, for each trial directory in order, one line: the base64 of at most `max_bytes`
    of its code/<name> (empty when there is none). Builtins, coreutils' dd and base64 only."""
    half = max(1, max_bytes // 2)
    fn = ("pr() { f=$1/code/" + shlex.quote(name) + "; "
          "if [ -f \"$f\" ] && [ ! -L \"$f\" ]; then "
          "s=$(stat -c %s -- \"$f\" 2>/dev/null || echo 0); "
          f"if [ \"$s\" -le {max_bytes} ]; then "
          f"dd if=\"$f\" iflag=nofollow,nonblock,count_bytes count={max_bytes} status=none; "
          f"else dd if=\"$f\" iflag=nofollow,nonblock,count_bytes count={half} status=none; echo; "
          f"dd if=\"$f\" iflag=nofollow,nonblock,skip_bytes,count_bytes skip=$((s - {half})) count={half} status=none; fi; "
          "fi 2>/dev/null | base64 -w0; echo; }\n")
    return fn + "".join(f"pr {shlex.quote(d)}\n" for d in dirs)


def decode_lines(out: bytes, n: int) -> list[bytes] | None:
    """The raw progress bytes of `n` trials from reader_script's output (None: the output is not n lines)."""
    lines = out.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if len(lines) != n:
        return None
    res = []
    for line in lines:
        try:
            res.append(base64.b64decode(line.strip(), validate=True))
        except (binascii.Error, ValueError):
            res.append(b"")
    return res


def _finite(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:          # an integer of a thousand digits
        return None
    return f if math.isfinite(f) else None


def parse(data: bytes, metric: str, max_bytes: int = defaults.PROGRESS_MAX_BYTES,
          max_points: int = defaults.PROGRESS_MAX_POINTS) -> list[Point]:
    """The curve in `data` (the run's progress bytes): (t, value) points, t strictly increasing in
    (0, 1], values finite, at most max_points (thinned evenly, the last point kept). Anything else
    is skipped without a word: the file is the run's, not the daemon's."""
    pts: list[Point] = []
    for raw in data[:max_bytes].split(b"\n"):
        if not raw.strip() or len(raw) > 4096:
            continue
        try:
            obj = json.loads(raw, parse_constant=lambda c: None)   # NaN/Infinity read as null, then skipped
        except (ValueError, RecursionError):
            continue
        if not isinstance(obj, dict):
            continue
        t, v = _finite(obj.get("t")), _finite(obj.get(metric))
        if t is None or v is None or not 0 < t <= 1:
            continue
        if pts and t <= pts[-1][0]:
            continue
        pts.append((t, v))
    return thin(pts, max_points)


def thin(pts: list[Point], max_points: int = defaults.PROGRESS_MAX_POINTS) -> list[Point]:
    """At most max_points of pts, evenly spaced by index, the first and last kept."""
    if len(pts) <= max_points or max_points < 2:
        return pts[:max_points] if max_points < 2 else pts
    step = (len(pts) - 1) / (max_points - 1)
    return [pts[round(i * step)] for i in range(max_points)]


def dumps(pts: list[Point]) -> bytes:
    """A curve as stored (the note's `curve` blob): JSON lines {"t", "v"}, one per point."""
    return "".join(json.dumps({"t": t, "v": v}) + "\n" for t, v in pts).encode()


def loads(data: bytes) -> list[Point]:
    """A stored curve back (the same checks as parse: a blob is only as good as what wrote it)."""
    return parse(data, "v")


def at(pts: list[Point], t: float) -> float | None:
    """The curve's value at t, linear between its points (None outside [first t, last t])."""
    if not pts or t < pts[0][0] - 1e-12 or t > pts[-1][0] + 1e-12:
        return None
    for (t0, v0), (t1, v1) in zip(pts, pts[1:]):
        if t0 <= t <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return pts[-1][1]
