"""The runner a Config names, built from the runner registry. `start` (app.py) builds it for the
daemon, the checks (validate.py) build it without connecting to refuse a host entry it cannot use,
and `doctor --run` builds it for one trial in a scratch directory: so it sits below all three."""

from __future__ import annotations

from pathlib import Path

from autoresearchd import defaults
from autoresearchd import runners as runner_registry
from autoresearchd.config import Config, ConfigError
from autoresearchd.research import Research


def make_runner(cfg: Config, research: Research | None, *, manifest=None, local_dir: Path | None = None):
    """The configured runner for the research's env (or for `manifest`, with local trials under
    `local_dir`: how `doctor --run` runs a baseline without a research repo's state dir)."""
    try:
        cls = runner_registry.get(cfg.runner.kind)
    except KeyError as e:
        raise ConfigError(f"runner.kind: {e.args[0]}") from None
    manifest = manifest or research.manifest
    # only the README's config-less demo may fall back to no sandbox (flagged) where bwrap is missing;
    # everyone else gets an error until they install it or choose runner.sandbox = "none"
    fallback = cfg.runner.sandbox is None and cfg.path is None
    if cfg.runner.kind == "local":
        # outside the research repo: a trial must never reach its .git (hooks, notes) or work tree
        return cls(cfg.runner, manifest, local_dir or defaults.local_trial_root(str(research.repo.path)),
                   sandbox_fallback=fallback)
    return cls(cfg.runner, manifest, sandbox_fallback=fallback)
