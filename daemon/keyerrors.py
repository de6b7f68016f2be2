"""A pydantic ValidationError as one line that names the key at fault, with a did-you-mean for an
unknown key. `config.py` (the daemon's `.autoresearch.toml`) and `manifest.py` (an env's `[env]`
table) both report through it, so it is a leaf: it imports nothing of the project."""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ValidationError


def suggest(model: type[BaseModel], loc: tuple) -> str:
    """did-you-mean for the last key of an error location."""
    m: Any = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        f = getattr(m, "model_fields", {}).get(part)
        if f is None:
            return ""
        ann = f.annotation
        for cand in (ann, *getattr(ann, "__args__", ())):
            if isinstance(cand, type) and issubclass(cand, BaseModel):
                m = cand
                break
            inner = getattr(cand, "__args__", ())
            if inner and isinstance(inner[0], type) and issubclass(inner[0], BaseModel):
                m = inner[0]
                break
    names = list(getattr(m, "model_fields", {}))
    close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def format_validation_error(e: ValidationError, model: type[BaseModel], source: str) -> str:
    err = e.errors()[0]
    loc = tuple(err["loc"])
    key = ".".join(str(x) for x in loc)
    if err["type"] == "extra_forbidden":
        return f"{source}: unknown key '{key}'{suggest(model, loc)}"
    got = err.get("input")
    got_s = f" (got {got!r})" if not isinstance(got, (dict, list)) else ""
    return f"{source}: {key}: {err['msg']}{got_s}"
