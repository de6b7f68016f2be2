"""How a test says it cannot run here (issue 28: a CI that cannot skip silently).

Every skip in the suite goes through one of three doors, and tests/test_ci_strict.py fails on a
`pytest.skip`, `pytest.mark.skip`/`skipif` or `pytest.xfail` anywhere else:

- `need(what, missing)` (in a test or fixture) and `needs(what, missing)` (a mark, also as a module's
  `pytestmark`): a system tool or facility that .ci/run provides: sshd, bubblewrap, Slurm, node and the
  agent CLIs, chromium, tmux, strace, a system python3, root's tmpfs mounts and cgroups. `missing` is
  None where it is there, else why not; then the test skips with `what: missing`, and under CI=true
  (.ci/run exports it) it fails instead, so a CI machine that lost a tool cannot go green without
  testing what needs it;
- `pytest.importorskip(module)`: an optional Python package (an extra); it skips, under CI too;
- `not_here(why)`: this machine is not the one the test is about (a pyenv shim that is not there, a
  GPU host for a test of CPU-only choices); it skips, under CI too.
"""

from __future__ import annotations

import os

import pytest

CI_MESSAGE = "CI=true: a system tool this test needs is missing, so it would have skipped"


def ci_strict() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need(what: str, missing: str | None) -> None:
    """A system tool or facility the test needs: nothing when `missing` is None; else a skip saying
    `what: missing`, or under CI=true a failure saying it."""
    if missing is None:
        return
    reason = f"{what}: {missing}"
    if ci_strict():
        pytest.fail(f"{CI_MESSAGE}: {reason}", pytrace=False)
    pytest.skip(reason)


def needs(what: str, missing: str | None) -> pytest.MarkDecorator:
    """`need` as a mark, checked when each marked test is set up (`pytest_runtest_setup` below)."""
    return pytest.mark.needs(what, missing)


def not_here(why: str, module: bool = False) -> None:
    """A skip that CI=true keeps: the test is about a kind of machine this is not."""
    pytest.skip(why, allow_module_level=module)


# -- the hooks tests/conftest.py takes over -------------------------------------------------------------
def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "needs(what, missing): a system tool or facility (tests/needs.py)")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    for mark in item.iter_markers("needs"):
        need(*mark.args)
