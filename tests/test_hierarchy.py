"""No base class uses what only a subclass defines (issue 28; docs/architecture.md, "Why this split"):
read from the source with `ast`, nothing is imported.

For every class of daemon/, runners/ and policies/ that the project subclasses, each `self.X` it uses
must be defined by the class or one of its bases: a method, a class attribute (an annotation alone
declares one), or an attribute it assigns on `self`. A hook a subclass fills in is declared in the base
(`raise NotImplementedError`, or a `ClassVar` annotation), so a reader of the base sees the whole
contract; before issue 28 the Collector called `_noted` and `_occupy`, which only the Dispatcher
defined.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from conftest import REPO_ROOT

SCANNED = ("daemon", "runners", "policies")

# base class -> why it still uses what only its subclass defines. GitRepo is assembled from mixins that
# call each other's methods (NotesIO and TreesIO use GitRepo's run_git, rev_parse, update_ref, ...):
# splitting them into objects with their own state is a rewrite of the git layer, left for its own
# change (reported with issue 28's audit).
KNOWN = {
    "NotesIO": "a mixin of GitRepo (store/gitnotes.py): uses GitRepo's git plumbing",
    "TreesIO": "a mixin of GitRepo (store/gitexport.py): uses GitRepo's git plumbing",
    "DiffsIO": "a mixin of GitRepo (store/gitdiff.py): uses GitRepo's git plumbing",
}


def classes(root: Path = REPO_ROOT) -> dict[str, list[tuple[str, ast.ClassDef]]]:
    out: dict[str, list[tuple[str, ast.ClassDef]]] = defaultdict(list)
    for top in SCANNED:
        for path in sorted((root / top).rglob("*.py")):
            if "templates" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef):
                    out[node.name].append((path.relative_to(root).as_posix(), node))
    return out


def base_names(node: ast.ClassDef) -> list[str]:
    return [ast.unparse(b).split(".")[-1].split("[")[0] for b in node.bases]


def own_names(node: ast.ClassDef) -> set[str]:
    """What a class itself defines: methods, class attributes (annotated or assigned) and every
    attribute one of its methods assigns on `self`."""
    out = set()
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(stmt.name)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            for t in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                out |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and isinstance(n.value, ast.Name) \
                and n.value.id == "self":
            out.add(n.attr)
    return out


def violations(root: Path = REPO_ROOT, known=KNOWN) -> list[str]:
    found = classes(root)
    subclasses: dict[str, set[str]] = defaultdict(set)
    for name, defs in found.items():
        for _, node in defs:
            for b in base_names(node):
                subclasses[b].add(name)

    def defined(name: str, seen: frozenset = frozenset()) -> set[str]:
        out: set[str] = set()
        for _, node in found.get(name, []):
            out |= own_names(node)
            for b in base_names(node):
                if b not in seen:
                    out |= defined(b, seen | {name})
        return out

    def below(name: str) -> set[str]:
        return {s for d in subclasses.get(name, ()) for s in {d} | below(d)}

    bad = []
    for name, defs in found.items():
        subs = below(name)
        if not subs or name in known:
            continue
        mine = defined(name)
        theirs = {x: s for s in sorted(subs) for x in defined(s)}
        for path, node in defs:
            for n in ast.walk(node):
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self" \
                        and n.attr not in mine and n.attr in theirs:
                    bad.append(f"{path}:{n.lineno}: {name} uses self.{n.attr}, which only {theirs[n.attr]} defines")
    return sorted(set(bad))


def test_no_base_class_uses_what_only_a_subclass_defines():
    bad = violations()
    assert not bad, "declare the hook in the base class (or list it in KNOWN, with why):\n" + "\n".join(bad)


def test_the_known_exceptions_still_exist():
    """An entry of KNOWN whose class is gone or no longer uses its subclass is stale: remove it."""
    left = {line.split(": ")[1].split(" uses")[0] for line in violations(known={})}
    assert set(KNOWN) <= left, f"no longer needed in KNOWN: {set(KNOWN) - left}"

def test_the_scan_catches_a_base_that_calls_into_its_subclass(tmp_path):
    """The rule itself: an undeclared hook is named, a declared one (a method raising
    NotImplementedError, a ClassVar annotation, an attribute set in __init__) is not."""
    (tmp_path / "daemon").mkdir()
    (tmp_path / "daemon" / "m.py").write_text(
        "from typing import ClassVar\n"
        "class Base:\n"
        "    kind: ClassVar[type]\n"
        "    def __init__(self):\n"
        "        self.pool = None\n"
        "    def hook(self):\n"
        "        raise NotImplementedError\n"
        "    def run(self):\n"
        "        return self.hook(), self.kind, self.pool, self._noted()\n"
        "class Sub(Base):\n"
        "    kind = int\n"
        "    def hook(self):\n"
        "        return 1\n"
        "    def _noted(self):\n"
        "        return 2\n")
    assert violations(tmp_path) == ["daemon/m.py:9: Base uses self._noted, which only Sub defines"]
