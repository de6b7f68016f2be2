"""runners/sandbox.py and runners/isolation.py with the real bwrap: what a sandboxed command can
and cannot do, the probe that picks a host's sandbox (and the demo's flagged fallback), `sandbox =
"none"` recorded in the outcome, and doctor's warning."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from needs import needs

from autoresearchd.config import RunnerCfg
from autoresearchd.manifest import EnvManifest
from autoresearchd.runners import isolation
from autoresearchd.runners import sandbox as sandboxes
from autoresearchd.runners.base import PollState, TrialSpec
from autoresearchd.runners.local import LocalRunner, LocalShell

from conftest import TOY_EVAL, TOY_MANIFEST, TOY_RUN, sleeper, sleeper_pids

BWRAP = sandboxes.get("bwrap")
needs_bwrap = needs("bwrap", BWRAP.available())
PATH = f"{os.path.dirname(sys.executable)}:/usr/bin:/bin"


def run_in(sb, argv, tmp_path, **kw) -> subprocess.CompletedProcess:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    req = sandboxes.SandboxRequest(argv=argv, cwd=str(work), writable=[str(work)],
                                   env={"PATH": PATH, "HOME": str(work)}, path=PATH, **kw)
    return subprocess.run(sb.argv(req), capture_output=True, text=True, timeout=60)


@needs_bwrap
def test_bwrap_allows_only_the_writable_dir_and_the_given_environment(tmp_path, monkeypatch):
    secret = tmp_path / "outside.txt"
    secret.write_text("private")
    monkeypatch.setenv("AR_TEST_TOKEN", "sk-should-not-pass")
    script = (f"import os, json\n"
              f"open('ok.txt', 'w').write('x')\n"
              f"res = {{'env': sorted(os.environ), 'outside': os.path.exists({str(secret)!r}),"
              f" 'home': os.path.exists({os.path.expanduser('~')!r} + '/.bashrc')}}\n"
              f"for p in ['/usr/zz', {str(tmp_path / 'x')!r}, '/zz']:\n"
              f"    try:\n        open(p, 'w'); res[p] = 'written'\n"
              f"    except OSError as e:\n        res[p] = type(e).__name__\n"
              f"import socket\n"
              f"try:\n    socket.create_connection(('127.0.0.1', 22), timeout=2); res['net'] = 'up'\n"
              f"except OSError:\n    res['net'] = 'down'\n"
              f"import torch\nres['torch'] = torch.__version__\n"
              f"print(json.dumps(res))\n")
    p = run_in(BWRAP, ["python3", "-c", script], tmp_path)
    assert p.returncode == 0, p.stderr
    import json
    res = json.loads(p.stdout)
    assert (tmp_path / "work" / "ok.txt").exists()
    assert not res["outside"] and not res["home"]
    assert "AR_TEST_TOKEN" not in res["env"] and set(res["env"]) <= {"PATH", "HOME", "PWD", "LC_CTYPE"}
    assert res["/usr/zz"] != "written" and res["/zz"] != "written", res
    assert not (tmp_path / "x").exists()     # beside the writable dir: the sandbox's private /tmp at most
    assert res["net"] == "down" and res["torch"]          # the Python environment is there, read-only


@needs_bwrap
def test_bwrap_processes_die_with_the_sandbox(tmp_path):
    tag = sleeper()
    p = run_in(BWRAP, ["bash", "-c", f"setsid sleep {tag} > /dev/null 2>&1 & echo started"], tmp_path)
    assert p.returncode == 0 and "started" in p.stdout
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and sleeper_pids(tag):
        time.sleep(0.05)
    assert not sleeper_pids(tag), "a process outlived its sandbox"


def test_kinds_registry_and_the_none_prefix(tmp_path):
    assert sandboxes.names() == ["apptainer", "bwrap", "none"]
    with pytest.raises(KeyError, match="valid sandboxes: apptainer, bwrap, none"):
        sandboxes.get("docker")
    p = run_in(sandboxes.get("none"), ["bash", "-c", "pwd; echo ${AR_X:-clean}"], tmp_path)
    assert p.stdout.split() == [str(tmp_path / "work"), "clean"]
    assert "runner.sandbox_image" in sandboxes.get("apptainer").available()
    argv = sandboxes.get("apptainer", image="/img.sif").argv(sandboxes.SandboxRequest(
        argv=["python3"], cwd="/w", writable=["/w"], readonly=["/data"], gpus=1))
    assert argv[:2] == ["apptainer", "exec"] and "--nv" in argv and "/w:/w:rw" in argv and "/data:/data:ro" in argv
    assert argv[-2:] == ["/img.sif", "python3"] and ["--network", "none"] == argv[argv.index("--net") + 1:][:2]


def test_a_host_without_the_sandbox_fails_or_the_demo_falls_back_flagged(caplog):
    sh = LocalShell()
    with pytest.raises(RuntimeError, match='bwrap not found.*apt-get install bubblewrap.*runner.sandbox = "none"'):
        isolation.resolve(sh, "local", "bwrap", "", "/nonexistent", fallback=False)
    with caplog.at_level(logging.WARNING, logger="autoresearchd"):
        hs = isolation.resolve(sh, "local", "bwrap", "", "/nonexistent", fallback=True)
    assert hs.sandbox.name == "none"
    msg = [r.getMessage() for r in caplog.records if "UNSANDBOXED" in r.getMessage()]
    assert len(msg) == 1 and "apt-get install bubblewrap" in msg[0] and "\n" not in msg[0]


def _trial(runner: LocalRunner, m: EnvManifest, make_repo) -> tuple[dict, object]:
    repo = make_repo({".autoresearch.toml": TOY_MANIFEST, "run.py": TOY_RUN, "evaluate.py": TOY_EVAL}, "r")
    from autoresearchd.store.gitrepo import GitRepo
    g = GitRepo(repo)
    spec = TrialSpec("t-" + uuid.uuid4().hex[:8], "0" * 40, 0, m, g.archive("HEAD"), g.archive("HEAD", ["evaluate.py"]),
                     ["evaluate.py"])
    h = runner.submit(spec, runner.slots()[0])
    deadline = time.monotonic() + 60
    while runner.poll(h) != PollState.DONE:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return h, runner.fetch(h)


def test_sandbox_none_is_recorded_in_the_outcome(make_repo, tmp_path):
    from autoresearchd.manifest import parse_manifest
    m = parse_manifest(TOY_MANIFEST)
    r = LocalRunner(RunnerCfg(sandbox="none"), m, tmp_path / "trials")
    h, out = _trial(r, m, make_repo)
    assert out.error is None and out.sandbox == "none" and h["sandbox"] == "none"
    assert 1.0 <= out.metrics["score"] < 1.01


@needs_bwrap
def test_doctor_says_which_sandbox_and_warns_on_none(make_repo, tmp_path):
    repo = make_repo({".autoresearch.toml": TOY_MANIFEST, "run.py": TOY_RUN, "evaluate.py": TOY_EVAL}, "research")
    outs = {}
    for kind in ("bwrap", "none"):
        cfg = tmp_path / f"{kind}.toml"
        cfg.write_text(f'[research]\nrepo = "{repo}"\n[runner]\nkind = "local"\nsandbox = "{kind}"\n'
                       f'work_root = "{tmp_path / "trials"}"\n[llm]\nprovider = "none"\n')
        p = subprocess.run([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), "doctor"],
                           capture_output=True, text=True, timeout=120, env=dict(os.environ, COLUMNS="300"))
        outs[kind] = p.stdout
    assert "ok   sandbox on local: bwrap" in outs["bwrap"] and "sandbox on local: none" not in outs["bwrap"]
    assert "warn sandbox on local: none" in outs["none"] and "apt-get install bubblewrap" in outs["none"]
