"""Secrets never leave the environment: a full daemon run (detached, with its log file) with fake API
keys set, an LLM endpoint that echoes the key back in its error messages (as real APIs do for a wrong
key), an idea whose code prints its whole environment (in the run and in the pre-GPU check), and the
W&B mirror when it exists. Then every git object (notes, log blobs, commit messages, trees), the daemon
log, the state dir, the trial dirs and every W&B file are searched for the key values: none found.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_llm import FakeLLM, Reply, Status as HTTP

from conftest import TOY_EVAL, TOY_MANIFEST, TOY_RUN
from fixtures_reliability import ToyLLM, llm_config, toy_diff, wait_for, write_cfg


# an idea whose code dumps its environment to stdout (and so to the run log)
DUMP = toy_diff(0.5).replace("+x = 0.5000\n", "+x = 0.5\n+print(sorted(os.environ.items()))\n") \
    .replace("@@ -1,3 +1,3 @@", "@@ -1,3 +1,4 @@")


def all_objects(repo: Path) -> bytes:
    p = subprocess.run(["git", "-C", str(repo), "cat-file", "--batch-all-objects", "--batch"], capture_output=True,
                       check=True)
    return p.stdout


def files_under(*roots: Path):
    for root in roots:
        if root.is_file():
            yield root
        elif root.is_dir():
            for p in root.rglob("*"):
                if p.is_file() and not p.is_symlink():
                    yield p


def test_no_secret_reaches_git_logs_state_or_wandb(make_repo, tmp_path):
    keys = {"OPENAI_API_KEY": f"sk-FAKE-{secrets.token_hex(16)}",
            "ANTHROPIC_API_KEY": f"sk-ant-FAKE-{secrets.token_hex(16)}",
            "WANDB_API_KEY": secrets.token_hex(20), "HF_TOKEN": f"hf_FAKE{secrets.token_hex(12)}"}
    manifest = TOY_MANIFEST.replace("context =", 'check = "python3 run.py"\ncontext =')
    env_repo = make_repo({".autoresearch.toml": manifest, "run.py": TOY_RUN, "evaluate.py": TOY_EVAL}, "research")
    wandb_dir = tmp_path / "wandb"
    wandb_dir.mkdir()
    # the W&B mirror is checked too where its optional dependency (wandb) is installed
    wandb = ("[wandb]\nenabled = true\nmode = \"offline\"\nproject = \"secrets-test\"\n"
             if importlib.util.find_spec("wandb") else "")
    leak = f"Incorrect API key provided: {keys['OPENAI_API_KEY']}. You can find your API key at ..."

    def implement(req, value):
        k = round((value - 0.5) * 1000)
        if k == 0:
            return Reply(DUMP)                                     # runs, prints its environment
        if k == 1:
            return HTTP(500, message=leak)                         # error text carries the key
        if k == 2:                                                  # check prints env and fails
            return Reply(DUMP.replace("+print(sorted(os.environ.items()))\n",
                                      "+print(sorted(os.environ.items())); raise SystemExit(3)\n"))
        return Reply(toy_diff(value))

    calls = []

    def propose(req, n):
        calls.append(n)
        return HTTP(401, message=leak) if len(calls) == 1 else None

    with FakeLLM() as fake:
        fake.script(*[ToyLLM(implement=implement, propose_reply=propose)] * 200)
        cfg = write_cfg(tmp_path / "cfg", env_repo, llm=llm_config(fake.openai_url, max_ideas=5), rest=wandb)
        env = dict(os.environ, **keys, WANDB_MODE="offline", WANDB_DIR=str(wandb_dir), PYTHONUNBUFFERED="1")
        out = tmp_path / "cli.out"
        with open(out, "wb") as f:
            p = subprocess.run([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), "start", "--detach",
                                "--until", "idle"], env=env, stdout=f, stderr=subprocess.STDOUT, timeout=60)
        assert p.returncode == 0, out.read_text()
        state = env_repo / ".git" / "autoresearch"
        pidfile = state / "daemon.pid"
        wait_for(pidfile.exists, 20, what="the detached daemon's pidfile")
        pid = int(pidfile.read_text())
        try:
            wait_for(lambda: not pidfile.exists(), 150, step=0.2, what="the detached daemon to reach idle")
        finally:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        sent = [r.headers.get("authorization", "") for r in fake.requests]
    assert any(keys["OPENAI_API_KEY"] in h for h in sent), "the provider never used the key (test is void)"
    assert (state / "daemon.log").stat().st_size > 0
    log_text = (state / "daemon.log").read_text()
    assert "401" in log_text or "Incorrect API key" in log_text or "proposing failed" in log_text
    # the idea that printed its environment ran, so its log is in git
    blobs = all_objects(env_repo)
    assert b"AUTORESEARCH_SEED" in blobs, "no environment dump reached git (test is void)"
    places = {"git objects": blobs}
    for path in files_under(state, cfg.parent, wandb_dir, out, env_repo / ".git" / "config"):
        places[str(path)] = path.read_bytes()
    for name, value in keys.items():
        secret = value.encode()
        found = [where for where, data in places.items() if secret in data or secret[-16:] in data]
        assert not found, f"{name} leaked into: {found}"
    time.sleep(0)
