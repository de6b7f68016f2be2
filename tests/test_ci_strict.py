"""Under CI=true a test that would skip for a missing system tool fails the run (issue: a CI that
cannot skip silently); elsewhere it still skips with its reason. Runs pytest itself on a scratch
test file whose conftest loads this suite's real hooks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

SCRATCH = '''
import pytest
pytest.skip("{module_reason}", allow_module_level=True) if {module_skip} else None

def test_needs_sshd():
    pytest.skip("/usr/sbin/sshd is not installed (apt-get install openssh-server)")

def test_needs_pyarrow():
    pytest.skip("pyarrow is not installed")

def test_plain():
    assert True
'''

CONFTEST = f'''
import importlib.util
spec = importlib.util.spec_from_file_location("suite_conftest", {str(HERE / "conftest.py")!r})
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
pytest_runtest_makereport = mod.pytest_runtest_makereport
pytest_make_collect_report = mod.pytest_make_collect_report
'''


def run(tmp_path: Path, ci: str | None, module_skip: bool = False) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_scratch.py").write_text(SCRATCH.format(
        module_reason="bubblewrap is needed: bwrap not found", module_skip=module_skip))
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                           str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_outside_ci_a_missing_tool_skips(tmp_path):
    p = run(tmp_path, None)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 passed, 2 skipped" in p.stdout


@pytest.mark.parametrize("ci", ["true", "1"])
def test_under_ci_a_missing_tool_fails_and_says_which(tmp_path, ci):
    p = run(tmp_path, ci)
    assert p.returncode == 1, p.stdout + p.stderr
    # the sshd skip becomes a failure naming the tool; a missing Python package still skips
    assert "1 failed, 1 passed, 1 skipped" in p.stdout, p.stdout
    assert "a system tool this test needs is missing" in p.stdout and "openssh-server" in p.stdout


def test_under_ci_a_module_level_skip_for_a_tool_fails(tmp_path):
    p = run(tmp_path, "true", module_skip=True)
    assert p.returncode != 0, p.stdout + p.stderr
    assert "bubblewrap" in p.stdout and "system tool" in p.stdout, p.stdout


def test_run_until_settled_fails_on_timeout_instead_of_returning(toy_env, tmp_path):
    """A daemon run that never settles raises: before, the helper returned the unsettled population
    and a test's asserts could still pass on it."""
    from conftest import branch_idea, run_until_settled, write_config
    branch_idea(toy_env, "s/forever", "sleeps past the test's patience",
                {"run.py": "import time\ntime.sleep(25)\nopen('out.txt', 'w').write('1')\n"})
    with pytest.raises(AssertionError, match="did not settle within 3s"):
        run_until_settled(write_config(tmp_path, toy_env), timeout=3)
