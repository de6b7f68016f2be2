"""Shared fixtures: real git repos in temporary directories; offline W&B; no network but loopback."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Tests must never pick up a developer's real keys.
for _k in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
    os.environ.pop(_k, None)

REPO_ROOT = Path(__file__).resolve().parent.parent


def git(cwd, *args, input=None, check=True) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    p = subprocess.run(["git", *args], cwd=cwd, input=input, capture_output=True, text=True, env=env)
    if check and p.returncode != 0:
        raise AssertionError(f"git {args} failed: {p.stderr}")
    return p.stdout


@pytest.fixture
def make_repo(tmp_path):
    """make_repo(files) -> path of a fresh git repo on `main` with one commit of `files`."""
    def _make(files: dict[str, str], name: str = "repo") -> Path:
        d = tmp_path / name
        d.mkdir()
        git(d, "init", "-q", "-b", "main")
        for rel, text in files.items():
            p = d / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        git(d, "add", "-A")
        git(d, "commit", "-q", "-m", "baseline")
        return d
    return _make
