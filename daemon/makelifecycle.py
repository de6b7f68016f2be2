"""The lifecycle writer a Config names: the research repo's one writer of idea state changes, built
with the observers the config asks for (the W&B mirror, with [wandb] enabled). `start` (app.py)
builds it for the daemon's parts and `queue` (human.py) records through it: so it sits below both,
and `queue` does not import the whole daemon to build it (as makerunner.py for the runner)."""

from __future__ import annotations

from autoresearchd.config import Config
from autoresearchd.store.lifecycle import Lifecycle
from autoresearchd.views.wandb_mirror import make_mirror


def make_lifecycle(cfg: Config, research) -> Lifecycle:
    """The writer for `research`'s repo with its observers, fixed here: no part builds one of its
    own that no observer hears."""
    mirror = make_mirror(cfg, research)
    return Lifecycle(research.repo, observers=[mirror.written] if mirror is not None else [])
