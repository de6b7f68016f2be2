"""Every module of the product is small and says what it is for: under 400 lines, opening with a
docstring (the style the project holds itself to; docs/architecture.md, "Folders"). Measured on the
files themselves, so a module that grows past the limit fails here, not in a reviewer's reading."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("daemon", "runners", "policies", "envs")
MAX_LINES = 400


def modules():
    return sorted(p for f in FOLDERS for p in (ROOT / f).rglob("*.py")
                  if "__pycache__" not in p.parts and "node_modules" not in p.parts)


def test_there_are_modules_to_check():
    assert len(modules()) > 100


@pytest.mark.parametrize("path", modules(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_module_is_under_400_lines_and_opens_with_its_job(path):
    text = path.read_text()
    lines = text.count("\n")
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines (limit {MAX_LINES}): split it by role"
    if path.name == "__init__.py" and not text.strip():
        return
    assert ast.get_docstring(ast.parse(text)), f"{path.relative_to(ROOT)} opens with no docstring saying its job"
