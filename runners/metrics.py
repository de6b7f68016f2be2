"""The metrics protocol, parsed. An environment in any language reports metrics in one of two ways:

1. a JSON object of numbers written to the file named by `$AUTORESEARCH_RESULT` (wins if present);
2. a final block on stdout: a line that is exactly `---`, then `key: value` lines to the end.

Only the last `---` block counts, so logs may contain earlier ones. Non-numeric values are skipped.
"""

from __future__ import annotations

import json
import math


def _num(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def parse_block(text: str) -> dict[str, float]:
    lines = text.replace("\r\n", "\n").split("\n")
    start = None
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].strip() == "---":
            start = i
            break
    if start is None:
        return {}
    out: dict[str, float] = {}
    for line in lines[start + 1:]:
        key, sep, val = line.partition(":")
        key = key.strip()
        if not sep or not key or " " in key:
            continue
        f = _num(val.strip())
        if f is not None:
            out[key] = f
    return out


def parse_json(data: bytes | str | None) -> dict[str, float]:
    if not data:
        return {}
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return {}
    if not isinstance(obj, dict):
        return {}
    return {str(k): f for k, v in obj.items() if (f := _num(v)) is not None and not isinstance(v, bool)}


def parse_metrics(stdout: str, result_json: bytes | str | None = None) -> dict[str, float]:
    return parse_json(result_json) or parse_block(stdout)
