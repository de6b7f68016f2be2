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


def scrubbed_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The daemon's environment minus every variable whose name looks like a secret."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items() if not SECRET_NAME.search(k)}
