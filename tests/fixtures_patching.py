"""The diff corpus (tests/data/diffs): its cases, their expected files and a repo of its base codebase.
Shared by tests/test_patching.py and bench/apply_rate.py."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from autoresearchd.manifest import _match
from autoresearchd.safety import SafetyRules

DATA = Path(__file__).parent / "data" / "diffs"
SPEC = json.loads((DATA / "cases.json").read_text())
CASES: dict[str, dict] = SPEC["cases"]


def git(cwd, *args, input: bytes | None = None) -> bytes:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, input=input,
                          check=True, capture_output=True).stdout


def base_files() -> dict[str, bytes]:
    root = DATA / "base"
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def expected_files(spec: dict) -> dict[str, bytes]:
    """Base files with the case's intended edits (exact, unique string replacements)."""
    files = {k: v.decode() for k, v in base_files().items()}
    for path, edits in spec.get("edits", {}).items():
        for old, new in edits:
            assert files[path].count(old) == 1, f"bad expectation: {old!r} not unique in {path}"
            files[path] = files[path].replace(old, new)
    for path in spec.get("delete", []):
        del files[path]
    files.update(spec.get("create", {}))
    return {k: v.encode() for k, v in files.items()}


def rules() -> SafetyRules:
    r = SPEC["rules"]
    return SafetyRules(is_frozen=lambda p: _match(p, r["frozen"]), max_file_bytes=r["max_file_bytes"],
                       max_diff_bytes=r["max_diff_bytes"])


def response(name: str) -> str:
    return (DATA / name).read_bytes().decode()


def make_base_repo(dest: Path) -> Path:
    """A git repo on `main` holding the base codebase, committed."""
    shutil.copytree(DATA / "base", dest)
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "base")
    return dest


def work_files(root: Path) -> dict[str, bytes]:
    """Every file under root except .git, as the corpus expects them."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(root).parts}
