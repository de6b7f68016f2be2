"""Which of the daemon's environment variables look like secrets, and the environment without them.

Every process that runs code the daemon does not trust (trials, checks, prepare steps) and every git
process gets `scrubbed_env()`. It sits at the top of the package, below store/, runners/ and
implement/, because all three need it and none may import the others for it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

# Untrusted code (LLM-written or pushed) must not see keys: names matching this stay behind.
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL", re.I)


# build function -> (a copy of os.environ's own bytes mapping, what it built from that environment)
_derived: dict[Callable[[], dict[str, str]], tuple[dict, dict[str, str]]] = {}


def environ_key() -> dict | None:
    """os.environ's own mapping (bytes to bytes), which every change to os.environ writes: equal to
    an earlier copy of it exactly when the environment is the same. Compared in C, it costs ~1 us,
    where reading os.environ decodes every name and value in Python (~0.5 ms a process started:
    the daemon starts several git processes a trial). None where the platform's os.environ has none."""
    data = getattr(os.environ, "_data", None)
    return data if isinstance(data, dict) else None


def per_environ(build: Callable[[], dict[str, str]]) -> dict[str, str]:
    """build()'s environment, built again only when os.environ changed since it was last built
    (environ_key); a new dict each call, the caller's own. The one cache of the daemon's environment:
    scrubbed_env() and git_env() (store/gitproc.py) keep theirs here."""
    key = environ_key()
    if key is None:
        return build()
    c = _derived.get(build)
    if c is None or c[0] != key:
        snap = dict(key)          # taken first: a change while build() runs is seen next time
        c = _derived[build] = (snap, build())
    return dict(c[1])


def _scrub(env) -> dict[str, str]:
    return {k: v for k, v in env.items() if not SECRET_NAME.search(k)}


def _scrubbed_now() -> dict[str, str]:
    return _scrub(os.environ)


def scrubbed_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The daemon's environment (or `environ`) minus every variable whose name looks like a secret
    (a new dict each call)."""
    return _scrub(environ) if environ is not None else per_environ(_scrubbed_now)
