"""Both an editable install and a wheel install into a fresh venv work, expose the `autoresearchd`
console script, and put no generic top-level module (daemon, runners, ...) into site-packages."""

import subprocess
import sys
from pathlib import Path

from needs import needs

from conftest import REPO_ROOT

# the wheel is checked to carry the tinygpt env: a clone has it (a missing one is a broken checkout)
TINYGPT = None if (REPO_ROOT / "envs" / "tinygpt" / "train.py").exists() else "envs/tinygpt/train.py is not there"

GENERIC = {"daemon", "runners", "policies", "envs", "tests", "bench"}


def make_venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    site = next(path.glob("lib/python*/site-packages"))
    # reuse this interpreter's installed dependencies; the package itself is installed fresh
    (site / "deps.pth").write_text("\n".join(p for p in sys.path if p.endswith("site-packages")) + "\n")
    # the venv's bundled setuptools may be older than pyproject asks for; use this interpreter's
    subprocess.run([str(path / "bin" / "python"), "-m", "pip", "uninstall", "-q", "-y", "setuptools"],
                   capture_output=True)
    return site


def check_install(venv: Path, site: Path):
    py = venv / "bin" / "python"
    out = subprocess.run([str(venv / "bin" / "autoresearchd"), "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "init" in out.stdout and "start" in out.stdout
    code = ("import autoresearchd, autoresearchd.runners.local, autoresearchd.policies, autoresearchd.llm, "
            "autoresearchd.envs as e; print(e.template_dir('tinygpt'))\n"
            # the package data each role package reads at run time, through importlib.resources
            "from importlib import resources\n"
            "from autoresearchd.implement.implementer import prompt_template\n"
            "assert prompt_template('implement.md').strip()\n"
            "assert resources.files('autoresearchd.views').joinpath('web', 'index.html').is_file()\n"
            "assert resources.files('autoresearchd').joinpath('templates', 'autoresearch_eval.py.tmpl').is_file()")
    p = subprocess.run([str(py), "-c", code], capture_output=True, text=True, cwd="/")
    assert p.returncode == 0, p.stderr
    assert Path(p.stdout.strip(), "train.py").is_file()
    top = {x.name.split(".")[0] for x in site.iterdir()}
    assert not (top & GENERIC), top & GENERIC


@needs("envs/tinygpt", TINYGPT)
def test_wheel_install(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(dist), str(REPO_ROOT)], check=True, capture_output=True)
    wheel = next(dist.glob("autoresearchd-*.whl"))
    venv = tmp_path / "venv"
    site = make_venv(venv)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
                   check=True, capture_output=True)
    check_install(venv, site)
    import zipfile
    names = zipfile.ZipFile(wheel).namelist()
    assert "autoresearchd/runners/trial.sh" in names and "autoresearchd/implement/prompts/implement.md" in names
    # the dashboard's page and its vendored chart library (with its licence) ship in the wheel
    for f in ("web/index.html", "web/app.js", "web/app.css", "web/vendor/uPlot.iife.min.js", "web/vendor/uPlot.LICENSE"):
        assert "autoresearchd/views/" + f in names, f


@needs("envs/tinygpt", TINYGPT)
def test_editable_install(tmp_path):
    venv = tmp_path / "venv"
    site = make_venv(venv)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "-e", str(REPO_ROOT)], check=True, capture_output=True)
    check_install(venv, site)
