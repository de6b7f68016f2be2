"""A CI that cannot skip silently (issue 28). Under CI=true a test that would skip because a system
tool or facility is missing fails the run; elsewhere it still skips with its reason. The rule is
structural: every skip in the suite goes through tests/needs.py (`need`/`needs` for a system tool or
facility, `pytest.importorskip` for an optional Python package, `not_here` for a machine the test is
not about), and a scan of tests/ fails on any other. The behaviour is checked by running pytest itself on
a scratch test file whose conftest loads the suite's real hooks. And run_until_settled fails at its
deadline, also while the daemon is busy."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

SCRATCH = '''
import pytest
from needs import need, needs, not_here

pytestmark = needs("bwrap", {module_missing!r})

def test_needs_sshd():
    need("sshd", "/usr/sbin/sshd is not installed (apt-get install openssh-server)")

@needs("tmux", "not installed (apt-get install tmux)")
def test_marked_for_tmux():
    assert True

@needs("strace", None)
def test_marked_and_there():
    assert True

def test_needs_a_python_package():
    pytest.importorskip("no_such_package_here", reason="no_such_package_here is not installed")

def test_about_another_machine():
    not_here("this machine's python3 is not a pyenv shim")

def test_plain():
    assert True
'''

CONFTEST = f'''
import sys
sys.path.insert(0, {str(HERE)!r})
from needs import pytest_configure, pytest_runtest_setup
'''


def run(tmp_path: Path, ci: str | None, module_missing: str | None = None) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_scratch.py").write_text(SCRATCH.format(module_missing=module_missing))
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                           str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_outside_ci_a_missing_tool_skips_and_says_which(tmp_path):
    p = run(tmp_path, None)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "2 passed, 4 skipped" in p.stdout, p.stdout
    assert "sshd: /usr/sbin/sshd is not installed" in p.stdout and "tmux: not installed" in p.stdout


@pytest.mark.parametrize("ci", ["true", "1"])
def test_under_ci_a_missing_tool_fails_and_says_which(tmp_path, ci):
    p = run(tmp_path, ci)
    assert p.returncode == 1, p.stdout + p.stderr
    # the sshd skip fails the test, the tmux mark its setup (an error), each naming the tool; a Python
    # package and another machine still skip
    assert "1 failed, 2 passed, 2 skipped, 1 error" in p.stdout, p.stdout
    assert "a system tool this test needs is missing" in p.stdout and "openssh-server" in p.stdout
    assert "apt-get install tmux" in p.stdout


def test_under_ci_a_modules_missing_tool_fails_each_test(tmp_path):
    p = run(tmp_path, "true", module_missing="bwrap not found")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "6 errors" in p.stdout and "bwrap: bwrap not found" in p.stdout, p.stdout


# -- the rule: every skip goes through tests/needs.py --------------------------------------------------
SKIPS = ("pytest.skip", "pytest.xfail", "pytest.mark.skip", "pytest.mark.skipif", "pytest.mark.xfail",
         "unittest.SkipTest", "unittest.skip", "SkipTest")


def stray_skips(root: Path = HERE) -> list[str]:
    """`file:line: what` for each skip in the test suite that bypasses tests/needs.py: a `pytest.skip`,
    `pytest.xfail`, a skip or skipif mark, a unittest skip, or an importorskip whose name is not a Python
    module's (a tool's name with a slash, a dash or a space)."""
    bad = []
    for path in sorted(p for p in root.rglob("*.py") if "node_modules" not in p.parts and p.name != "needs.py"):
        rel = path.relative_to(root).as_posix()
        here = []
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.Attribute) and ast.unparse(n) in SKIPS or \
                    isinstance(n, ast.Name) and n.id == "SkipTest":
                here.append((n.lineno, ast.unparse(n)))
            elif isinstance(n, ast.Call) and ast.unparse(n.func) == "pytest.importorskip":
                name = n.args[0].value if n.args and isinstance(n.args[0], ast.Constant) else None
                if not (isinstance(name, str) and all(part.isidentifier() for part in name.split("."))):
                    here.append((n.lineno, ast.unparse(n)))
        bad += [f"{rel}:{line}: {what}" for line, what in sorted(here)]
    return bad


def test_every_skip_in_the_suite_goes_through_needs():
    """A system tool's skip written any other way would skip under CI too: needs.py is the only door."""
    assert not stray_skips(), "skip through tests/needs.py (need, needs, not_here) or pytest.importorskip:\n" \
        + "\n".join(stray_skips())


def test_the_scan_finds_each_way_around_needs(tmp_path):
    (tmp_path / "test_x.py").write_text(
        "import pytest, unittest\n"
        "if x:\n    pytest.skip('sshd missing', allow_module_level=True)\n"                       # 3
        "pytestmark = pytest.mark.skipif(True, reason='bwrap')\n"                                  # 4
        "@pytest.mark.skip(reason='later')\ndef test_a():\n    pytest.xfail('tmpfs')\n"           # 5, 7
        "def test_b():\n    raise unittest.SkipTest('no tmux')\n"                                # 9
        "def test_c():\n    pytest.importorskip('chromium-driver')\n"                             # 11
        "def test_d():\n    pytest.importorskip('selenium.webdriver')\n")                        # fine
    (tmp_path / "needs.py").write_text("import pytest\ndef need():\n    pytest.skip('x')\n")   # the door itself
    assert [f.split(":")[1] for f in stray_skips(tmp_path)] == ["3", "4", "5", "7", "9", "11"], stray_skips(tmp_path)


# -- run_until_settled's deadline ------------------------------------------------------------------------
def test_run_until_settled_fails_on_timeout_instead_of_returning(toy_env, tmp_path):
    """A daemon run that never settles raises: before, the helper returned the unsettled population
    and a test's asserts could still pass on it."""
    from conftest import branch_idea, run_until_settled, write_config
    branch_idea(toy_env, "s/forever", "sleeps past the test's patience",
                {"run.py": "import time\ntime.sleep(25)\nopen('out.txt', 'w').write('1')\n"})
    with pytest.raises(AssertionError, match="did not settle within 3s"):
        run_until_settled(write_config(tmp_path, toy_env), timeout=3)


def test_run_until_settled_fails_at_its_deadline_while_the_daemon_is_busy(toy_env, tmp_path):
    """The proposer waits on a model that answers after 30 s. The loop asks `until` only while no
    worker is busy, so a deadline kept inside it waited for the model (a stuck one: up to pytest-timeout's
    600 s); the deadline is kept outside the daemon, and the message says what the daemon was doing."""
    from conftest import run_until_settled
    from fake_llm import FakeLLM
    from fixtures_reliability import ToyLLM, llm_config, write_cfg
    with FakeLLM() as fake:
        fake.script(*[ToyLLM(propose_delay=30)] * 20)
        cfg = write_cfg(tmp_path / "cfg", toy_env, rest="",
                        llm=llm_config(fake.openai_url).replace("timeout_s = 5", "timeout_s = 35"))
        t0 = time.monotonic()
        with pytest.raises(AssertionError, match=r"did not settle within 6s \(proposing: True"):
            run_until_settled(cfg, timeout=6, with_llm=True)
        took = time.monotonic() - t0
    assert took < 6 + 20, f"failed {took:.0f}s after it began, not at its 6s deadline"


def test_a_test_that_waits_for_its_own_state_fails_at_its_deadline_naming_it(toy_env, tmp_path):
    """A test's own `until` keeps the same deadline: before, such tests folded `or time.time() - t0 > N`
    into it, so a run stuck past N returned quietly into their asserts."""
    from conftest import run_until_settled, write_config

    def never(pop):
        return False
    with pytest.raises(AssertionError, match="did not reach never within 3s"):
        run_until_settled(write_config(tmp_path, toy_env), timeout=3, until=never)
