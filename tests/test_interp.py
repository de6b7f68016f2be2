"""Any host's Python (runners/interp.py): trials whose `python` is a version manager's shim (pyenv,
asdf, mise), a conda env or a venv run in the bwrap sandbox through the local and the ssh runner.

Each layout is built here, small but real: a base interpreter copied out of the system directories
(so nothing of it is bound by default), envs that are venvs of it (or, for conda, a prefix of its
own), each holding a package no other env has, and the managers' own shims, which call the
manager's directory as the real ones do (pyenv's libexec, asdf's bin, mise's binary through a link).
Over ssh the layout's directories come first on the login's PATH (authorized_keys `environment=`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from needs import need, needs, not_here

from autoresearchd.config import HostCfg, RunnerCfg
from autoresearchd.manifest import EnvManifest
from autoresearchd.runners import sandbox as sandboxes
from autoresearchd.runners.local import LocalRunner

from fixtures_sshd import Fleet, sshd_missing
from test_runner_contract import run_trial

BWRAP = sandboxes.get("bwrap")
needs_bwrap = needs("bwrap", BWRAP.available())
SYSTEM_PY = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)), None)
NO_SYSTEM_PY = None if SYSTEM_PY else ("no /usr/bin/python3: it builds the layouts (the fleet's login cannot "
                                       "read this venv's)")
needs_system_python = needs("system python3", NO_SYSTEM_PY)
KINDS = ("pyenv", "asdf", "mise", "conda", "venv")
BASH = "#!/usr/bin/env bash\n"


def _exe(p: Path, text: str) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    p.chmod(0o755)


def _copy_python(prefix: Path) -> Path:
    """A Python install of its own at `prefix`: the system binary, its standard library linked in."""
    real = Path(os.path.realpath(SYSTEM_PY))
    ver = subprocess.run([str(real), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    (prefix / "bin").mkdir(parents=True)
    shutil.copy2(real, prefix / "bin" / f"python{ver}")
    for n in ("python3", "python"):
        (prefix / "bin" / n).symlink_to(f"python{ver}")
    lib = prefix / "lib" / f"python{ver}"
    lib.mkdir(parents=True)
    stdlib = Path(subprocess.run([str(real), "-c", "import os; print(os.path.dirname(os.__file__))"],
                                 capture_output=True, text=True, check=True).stdout.strip())
    for e in stdlib.iterdir():
        if e.name not in ("site-packages", "dist-packages"):
            (lib / e.name).symlink_to(e)
    return prefix / "bin" / "python3"


def _with_package(py: Path, kind: str) -> None:
    """A package only this env has, in its own site-packages."""
    site = subprocess.run([str(py), "-c", "import site; print(site.getsitepackages()[0])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    pkg = Path(site) / f"ardpkg_{kind}"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"WHERE = {kind!r}\n")


def _venv(base_py: Path, d: Path, kind: str) -> Path:
    subprocess.run([str(base_py), "-m", "venv", "--without-pip", str(d)], check=True, capture_output=True)
    _with_package(d / "bin" / "python", kind)
    return d / "bin" / "python"


def build(kind: str, root: Path, base_py: Path) -> list[str]:
    """Layout `kind` under the fake home `root`; returns the PATH entries the user's shell would set."""
    h = root / kind
    if kind == "pyenv":          # shims/python -> $PYENV_ROOT/libexec/pyenv exec -> versions/X/bin
        pr = h / ".pyenv"
        _venv(base_py, pr / "versions" / "3-ar", kind)
        (pr / "version").write_text("3-ar\n")
        _exe(pr / "libexec" / "pyenv", BASH + 'set -e\n[ "$1" = exec ] || exit 1; shift\nprogram=$1; shift\n'
             'version=${PYENV_VERSION:-$(cat "$PYENV_ROOT/version")}\n'
             'exec "$PYENV_ROOT/versions/$version/bin/$program" "$@"\n')
        for n in ("python", "python3"):
            _exe(pr / "shims" / n, BASH + f'set -e\nprogram="${{0##*/}}"\nexport PYENV_ROOT="{pr}"\n'
                 f'exec "{pr}/libexec/pyenv" exec "$program" "$@"\n')
        return [str(pr / "shims"), str(pr / "bin")]
    if kind == "asdf":           # shims/python -> asdf exec python -> installs/python/X (from .tool-versions)
        ad = h / ".asdf"
        _venv(base_py, ad / "installs" / "python" / "3-ar", kind)
        (h / ".tool-versions").write_text("python 3-ar\n")
        _exe(ad / "bin" / "asdf", BASH + '[ "$1" = exec ] || exit 1; shift; program=$1; shift\n'
             f'v=$(awk \'$1 == "python" {{print $2}}\' "{h}/.tool-versions")\n'
             f'exec "${{ASDF_DATA_DIR:-{ad}}}/installs/python/$v/bin/$program" "$@"\n')
        for n in ("python", "python3"):
            _exe(ad / "shims" / n, BASH + f'# asdf-plugin: python 3-ar\nexec {ad}/bin/asdf exec "{n}" "$@"\n')
        return [str(ad / "shims"), str(ad / "bin")]
    if kind == "mise":           # shims/python is a link to the mise binary; installs/python/3 -> 3.0-ar
        md = h / ".local" / "share" / "mise"
        _venv(base_py, md / "installs" / "python" / "3.0-ar", kind)
        (md / "installs" / "python" / "3").symlink_to("3.0-ar")
        (h / ".config" / "mise").mkdir(parents=True)
        (h / ".config" / "mise" / "config.toml").write_text('[tools]\npython = "3"\n')
        _exe(h / ".local" / "bin" / "mise", BASH + 'program=${0##*/}\n'
             f'v=$(sed -n \'s/^python = "\\(.*\\)"/\\1/p\' "{h}/.config/mise/config.toml")\n'
             f'exec "{md}/installs/python/$v/bin/$program" "$@"\n')
        (md / "shims").mkdir()
        for n in ("python", "python3"):
            (md / "shims" / n).symlink_to(h / ".local" / "bin" / "mise")
        return [str(md / "shims"), str(h / ".local" / "bin")]
    if kind == "conda":          # an env with a prefix of its own (no pyvenv.cfg), activated: its bin on PATH
        cd = h / "miniconda3"
        py = _copy_python(cd / "envs" / "ar")
        (cd / "envs" / "ar" / "conda-meta").mkdir()
        (cd / "envs" / "ar" / "conda-meta" / "history").write_text("")
        _with_package(py, kind)
        _exe(cd / "condabin" / "conda", BASH + "echo conda 0.0\n")
        return [str(cd / "envs" / "ar" / "bin"), str(cd / "condabin")]
    if kind == "venv":           # a venv whose base interpreter (pyvenv.cfg home) is outside the system dirs
        _venv(base_py, h / "venvs" / "ar", kind)
        return [str(h / "venvs" / "ar" / "bin")]
    raise ValueError(kind)


@pytest.fixture(scope="module")
def layouts():
    """{kind: PATH entries} under one world-readable root (the fleet's login must read it)."""
    need("system python3", NO_SYSTEM_PY)
    root = Path(tempfile.mkdtemp(prefix="ard-interp-"))
    root.chmod(0o755)
    try:
        base_py = _copy_python(root / "base")
        yield root, {k: build(k, root, base_py) for k in KINDS}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _manifest(kind: str) -> EnvManifest:
    # both names, each importing the package only this env has; the metric proves the run finished
    py = f"import sys, ardpkg_{kind} as m; print(sys.executable, m.WHERE)"
    return EnvManifest(run=f"python -c {py!r} && python3 -c {py!r} && echo --- && echo 'score: 1'",
                       metric="score", time_budget_s=60)


def _assert_ran_in(out, kind: str, root: Path) -> None:
    log = out.log.decode(errors="replace")
    assert out.exit_code == 0 and out.error is None, (out.error, log)
    assert out.metrics == {"score": 1.0}
    lines = [ln for ln in log.splitlines() if ln.endswith(f" {kind}")]
    assert len(lines) == 2 and all(ln.startswith(str(root / kind)) for ln in lines), log
    assert out.software and out.software.startswith("py3"), out.software     # the fingerprint found it too


@needs_bwrap
@needs_system_python
@pytest.mark.parametrize("kind", KINDS)
def test_local_trial_runs_the_configured_interpreter_through_its_shim(kind, layouts, tmp_path, monkeypatch):
    root, paths = layouts
    monkeypatch.setenv("PATH", ":".join(paths[kind] + [os.environ["PATH"]]))
    m = _manifest(kind)
    r = LocalRunner(RunnerCfg(sandbox="bwrap", python=f"{paths[kind][0]}/python"), m, tmp_path / "trials")
    _, out = run_trial(r, m, b"")
    _assert_ran_in(out, kind, root)
    assert r.host_sandbox("local").python.found[0].command == f"{paths[kind][0]}/python"


# -- over ssh: the layout first on the login's PATH ---------------------------------------------------
@pytest.fixture(scope="module")
def env_fleet():
    """One sshd host that takes PATH from authorized_keys (`environment=`), rewritten per test."""
    need("sshd", sshd_missing())
    with Fleet(n=1, extra_config="PermitUserEnvironment yes\n") as f:
        yield f


def _login_path(fleet: Fleet, entries: list[str]) -> None:
    pub = Path(f"{fleet.client_key}.pub").read_text().strip()
    path = ":".join(entries + ["/usr/local/bin", "/usr/bin", "/bin"])
    (fleet.hosts[0].dir / "authorized_keys").write_text(f'environment="PATH={path}" {pub}\n')


def _ssh_runner(fleet: Fleet, m: EnvManifest, **host):
    from autoresearchd.runners.ssh import SSHRunner
    return SSHRunner(RunnerCfg(kind="ssh", sandbox="bwrap", hosts=[fleet.host_cfg(0, **host)]), m, ssh_config=os.devnull)


@needs_bwrap
@needs_system_python
@pytest.mark.parametrize("kind", KINDS)
def test_ssh_trial_runs_the_shims_interpreter_in_the_sandbox(kind, layouts, env_fleet):
    root, paths = layouts
    _login_path(env_fleet, paths[kind])
    m = _manifest(kind)
    r = _ssh_runner(env_fleet, m)
    try:
        rc, out, _ = r.shell_for("gpu0").run("command -v python")
        assert out.decode().strip() == f"{paths[kind][0]}/python"      # the login really finds the shim first
        _, o = run_trial(r, m, b"")
        _assert_ran_in(o, kind, root)
    finally:
        r.close()


@needs_bwrap
@needs_system_python
def test_ssh_host_python_setting_names_a_shim_with_tilde(layouts, env_fleet):
    """A host's `python` (here `~/...`, expanded there) wins over its PATH's."""
    root, paths = layouts
    _login_path(env_fleet, [])
    home = env_fleet.home
    link = home / f".ard-pyenv-{uuid.uuid4().hex[:6]}"
    link.symlink_to(root / "pyenv" / ".pyenv")
    try:
        m = _manifest("pyenv")
        r = _ssh_runner(env_fleet, m, python=f"~/{link.name}/shims/python")
        try:
            _, o = run_trial(r, m, b"")
            _assert_ran_in(o, "pyenv", root)
        finally:
            r.close()
    finally:
        link.unlink()


# -- exit 127: which command, called by whom, and what to do -------------------------------------------
@needs_bwrap
def test_exit_127_names_the_missing_command_and_the_remedy(tmp_path, monkeypatch):
    """A tool on PATH whose script calls a directory the sandbox does not bind (as a shim calls its
    manager), and a command that exists nowhere: each note says which, and what to do."""
    hidden = Path(tempfile.mkdtemp(prefix="ard-hidden-"))
    try:
        _exe(hidden / "libexec" / "tool", BASH + "echo never\n")
        tools = tmp_path / "tools" / "bin"
        _exe(tools / "mytool", BASH + f'exec "{hidden}/libexec/tool" "$@"\n')
        monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
        assert subprocess.run(["mytool"], capture_output=True, text=True).stdout == "never\n"   # fine outside
        for run, missing, by in (("mytool --x", f"{hidden}/libexec/tool", f"called by {tools}/mytool"),
                                 ("echo hi && no-such-tool-zz 1", "no-such-tool-zz", None)):
            m = EnvManifest(run=run, metric="score", time_budget_s=30)
            r = LocalRunner(RunnerCfg(sandbox="bwrap"), m, tmp_path / "trials")
            _, out = run_trial(r, m, b"")
            assert out.exit_code == 127
            assert out.error.startswith(f"run exited 127: `{missing}` was not found where the trial runs"), out.error
            assert (by in out.error) if by else "called by" not in out.error
            assert "runner.python" in out.error and "runner.sandbox_binds" in out.error and "env.setup" in out.error
    finally:
        shutil.rmtree(hidden, ignore_errors=True)


def test_exit_127_parses_each_shells_wording():
    from autoresearchd.runners.interp import not_found
    cases = {"bash: line 1: torchrun: command not found": "`torchrun`",
             "sh: 1: python: not found": "`python`",
             "env: 'python3': No such file or directory": "`python3`",
             "/h/.asdf/shims/python: line 3: /h/.asdf/bin/asdf: No such file or directory": "`/h/.asdf/bin/asdf`",
             "bash: ./train.py: /opt/py/bin/python: bad interpreter: No such file or directory": "`/opt/py/bin/python`"}
    for log, what in cases.items():
        msg = not_found("some output\n" + log + "\n", "evaluation")
        assert msg.startswith(f"evaluation exited 127: {what} was not found"), msg
    assert "(the interpreter of ./train.py)" in not_found(list(cases)[-1])
    assert not_found("Killed\n").startswith("run exited 127 (a command was not found); ")


# -- doctor --run: every host's interpreter, inside the sandbox, before the first trial ----------------
@needs_bwrap
@needs_system_python
def test_doctor_run_checks_the_interpreter_inside_the_sandbox_on_each_host(layouts, env_fleet, make_repo, tmp_path):
    """A pyenv env whose torch needs a file outside it (as a CUDA library under /opt would be): torch
    imports outside the sandbox, not inside. doctor --run says so, with the fix, and runs no trial;
    with the directory in runner.sandbox_binds it passes and the baseline runs."""
    from conftest import TOY_EVAL, TOY_MANIFEST, TOY_RUN
    root, _ = layouts
    home = root / f"doctor-{uuid.uuid4().hex[:6]}"
    entries = build("pyenv", home, root / "base" / "bin" / "python3")
    cuda = home / "opt-cuda"
    cuda.mkdir()
    (cuda / "version.txt").write_text("9.9\n")
    site = next((home / "pyenv" / ".pyenv" / "versions" / "3-ar" / "lib").glob("python3*/site-packages"))
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text(f"__version__ = open({str(cuda / 'version.txt')!r}).read().strip()\n")
    _login_path(env_fleet, entries)
    repo = make_repo({".autoresearch.toml": TOY_MANIFEST, "run.py": TOY_RUN, "evaluate.py": TOY_EVAL}, "research")
    h = env_fleet.hosts[0]
    outs = []
    for binds in ([], [str(cuda)]):
        cfg = tmp_path / f"c{len(binds)}.toml"
        cfg.write_text(f'[research]\nrepo = "{repo}"\n[runner]\nkind = "ssh"\nsandbox = "bwrap"\n'
                       f'sandbox_binds = {binds!r}\n'.replace("'", '"') +
                       f'[[runner.hosts]]\nname = "gpu0"\nhost = "127.0.0.1"\nport = {h.port}\nuser = "{env_fleet.user}"\n'
                       f'key = "{env_fleet.client_key}"\nknown_hosts = "{env_fleet.known_hosts}"\ngpus = 0\n'
                       f'work_root = "{h.work_root}"\n[llm]\nprovider = "none"\n')
        p = subprocess.run([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), "doctor", "--run"],
                           capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, COLUMNS="400", AUTORESEARCHD_SSH_CONFIG=os.devnull))
        outs.append((p.returncode, p.stdout + p.stderr))
    (rc0, o0), (rc1, o1) = outs
    exe = f"{home}/pyenv/.pyenv/versions/3-ar/bin/python"
    assert f"python on gpu0: python = {exe} (via {entries[0]}/python): Python 3" in o0 and ", torch" in o0, o0
    assert rc0 == 1 and "FAIL `python` imports torch outside the sandbox on gpu0 but not inside" in o0, o0
    assert str(cuda / "version.txt") in o0 and "running the baseline once" not in o0
    assert rc1 == 0, o1
    assert f"ok   interpreter inside the sandbox on gpu0: python = {exe} (via {entries[0]}/python)" in o1, o1
    assert "baseline run + evaluate" in o1


@needs_bwrap
@needs_system_python
def test_a_pth_files_directory_is_bound_for_trials_and_checks(layouts, tmp_path):
    """A venv whose .pth adds a directory outside it (an editable install): trials and the check's
    sandbox see it, as `python` sees it outside; $HOME itself never is bound."""
    root, _ = layouts
    d = root / f"pth-{uuid.uuid4().hex[:6]}"
    py = _venv(root / "base" / "bin" / "python3", d / "venv", "pth")
    src = d / "src"
    _exe(src / "ardpkg_editable.py", "WHERE = 'editable'\n")
    site = next((d / "venv" / "lib").glob("python3*/site-packages"))
    (site / "zz_editable.pth").write_text(f"{src}\n")
    m = EnvManifest(run="python -c 'import ardpkg_editable as e; print(e.WHERE)' && echo --- && echo 'score: 1'",
                    metric="score", time_budget_s=60)
    r = LocalRunner(RunnerCfg(sandbox="bwrap", python=str(py)), m, tmp_path / "trials")
    _, out = run_trial(r, m, b"")
    assert out.error is None and b"editable" in out.log, (out.error, out.log)
    # the check's sandbox (a SandboxRequest with a PATH) binds the same
    work = tmp_path / "w"
    work.mkdir()
    path = f"{py.parent}:/usr/bin:/bin"
    req = sandboxes.SandboxRequest(argv=["python", "-c", "import ardpkg_editable"], cwd=str(work), writable=[str(work)],
                                   env={"PATH": path, "HOME": str(work)}, path=path)
    p = subprocess.run(BWRAP.argv(req), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    from autoresearchd.runners.interp import Interp, Python
    home = os.path.expanduser("~")
    i = Interp("python", "/x", "/x", {"executable": "/x", "real": "/x",
                                      "dirs": [home, os.path.dirname(home), "/", "/tmp", "/etc", str(src)]})
    assert Python([i]).binds(home) == [str(src)]


def _real_pyenv_shim() -> str | None:
    p = shutil.which("python3")
    try:
        return p if p and "/shims/" in p and "pyenv" in Path(p).read_text(errors="replace")[:2000] else None
    except OSError:
        return None


@needs_bwrap
def test_the_machines_own_pyenv_shim(tmp_path):
    """This machine's real pyenv (when python3 on PATH is its shim), named as runner.python."""
    shim = _real_pyenv_shim()
    if shim is None:
        not_here("this machine's python3 is not a pyenv shim")
    m = EnvManifest(run="python3 -c 'import sys; print(sys.executable)' && echo --- && echo 'score: 1'",
                    metric="score", time_budget_s=60)
    r = LocalRunner(RunnerCfg(sandbox="bwrap", python=shim), m, tmp_path / "trials")
    _, out = run_trial(r, m, b"")
    exe = r.host_sandbox("local").python.ok[0].executable
    assert out.error is None and exe.encode() in out.log and "/shims/" not in exe, (out.error, out.log)


@needs_bwrap
@needs_system_python
def test_interpreter_check_names_a_missing_command_and_an_unbound_sys_path_entry(layouts, tmp_path):
    """What doctor --run reports per host: a step's first command that does not resolve inside, and a
    sys.path entry that is never bound ($HOME itself, named by a .pth)."""
    from autoresearchd.runners.isolation import sandbox_check
    root, _ = layouts
    py = _venv(root / "base" / "bin" / "python3", root / f"home-pth-{uuid.uuid4().hex[:6]}", "homepth")
    site = next((py.parent.parent / "lib").glob("python3*/site-packages"))
    (site / "zz_home.pth").write_text(os.path.expanduser("~") + "\n")
    m = EnvManifest(run="no-such-tool-zz --epochs 1", evaluate="python3 eval.py", metric="score")
    r = LocalRunner(RunnerCfg(sandbox="bwrap", python=str(py)), m, tmp_path / "trials")
    found = sandbox_check(r, "local", m)
    text = "\n".join(f"{lv} {what}" for lv, what, _ in found)
    assert "error `no-such-tool-zz` (a step's first command) is not found inside the sandbox on local" in text, text
    assert f"error `python` inside the sandbox on local cannot see {os.path.expanduser('~')} " in text, text
    assert "python3" not in [ln.split("`")[1] for ln in text.splitlines() if "first command" in ln]
    good = EnvManifest(run="python -c pass", metric="score")
    ok = sandbox_check(LocalRunner(RunnerCfg(sandbox="bwrap", python=str(root / "venv" / "venvs" / "ar" / "bin" / "python")),
                                   good, tmp_path / "t2"), "local", good)
    assert [lv for lv, _, _ in ok] == ["ok"] and "python found" in ok[0][1], ok
