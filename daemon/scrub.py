"""Which of the daemon's environment variables look like secrets, and the environment without them.

Every process that runs code the daemon does not trust (trials, checks, prepare steps) and every git
process gets `scrubbed_env()`. It sits at the top of the package, below store/, runners/ and
implement/, because all three need it and none may import the others for it.
"""

from __future__ import annotations

import os
import re

# Untrusted code (LLM-written or pushed) must not see keys: names matching this stay behind.
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL", re.I)


# (a copy of os.environ's own bytes mapping, the daemon's environment scrubbed from it): see below
_cache: tuple[dict, dict[str, str]] | None = None


def environ_key() -> dict | None:
    """os.environ's own mapping (bytes to bytes), which every change to os.environ writes: equal to
    an earlier copy of it exactly when the environment is the same. Compared in C, it costs ~1 us,
    where reading os.environ decodes every name and value in Python (~0.5 ms a process started:
    the daemon starts several git processes a trial). None where the platform's os.environ has none."""
    data = getattr(os.environ, "_data", None)
    return data if isinstance(data, dict) else None


def scrubbed_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The daemon's environment minus every variable whose name looks like a secret (a new dict
    each call); worked out again whenever os.environ changed since the last call."""
    global _cache
    if environ is not None:
        return {k: v for k, v in environ.items() if not SECRET_NAME.search(k)}
    key, c = environ_key(), _cache
    if key is None or c is None or c[0] != key:
        snap = dict(key) if key is not None else None      # taken first: a change meanwhile misses next time
        env = {k: v for k, v in os.environ.items() if not SECRET_NAME.search(k)}
        if snap is None:
            return env
        c = _cache = (snap, env)
    return dict(c[1])
