"""Imports (docs/architecture.md, "Imports"): read from the source with `ast`, nothing is imported.

- No import of the project inside a function: an import hidden in a function hides a cycle or an
  upward import. Inside a function only the optional dependencies below may load, each marked with a
  `# lazy: <why>` comment; stdlib and core dependencies load at module level. The one exception is a
  root (the CLI: nothing imports it), whose commands load their modules when they run.
- No cycle among the modules (an import inside a function counts).
- Each folder of docs/architecture.md's table imports only what its "may import" column allows, and
  the folders (each top module on its own) import each other without a cycle.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import REPO_ROOT

# import name -> the pyproject extra that installs it: the only packages a function may import, lazily
OPTIONAL = {
    "torch": "tinygpt", "numpy": "tinygpt", "matplotlib": "report", "optuna": "tune", "cmaes": "tune",
    "wandb": "wandb", "starlette": "serve", "uvicorn": "serve", "pyarrow": "dev", "selenium": "dev",
    "vllm": "gpu", "transformers": "grpo",
}

# root modules: nothing imports them, so an import in one of their functions cannot hide a cycle. The
# CLI loads each command's module when that command runs, so `stop` or `status` does not pay for
# importing the whole daemon; each such import is marked `# lazy:` too.
ROOTS = {"daemon/cli.py": "autoresearchd.cli"}

# TEMPORARY, for the lead to empty at merge: function-level project imports left in files another
# branch rewrites at the same time, as (file, imported module), one entry per import. Empty: the
# engine split, the last such rewrite, is on main and its imports moved up after it.
TEMPORARY: list[tuple[str, str]] = []

# source folder -> package, as pyproject's package-dir maps them
SOURCES = {"daemon": "autoresearchd", "runners": "autoresearchd.runners", "policies": "autoresearchd.policies",
           "envs": "autoresearchd.envs"}
# leaf modules import nothing of the project, so every folder may import them
LEAVES = {"defaults", "goal", "registry", "scrub", "inert", "vocab", "keyerrors"}
# docs/architecture.md, "The folders": folder -> the folders and top modules it may import ("*": any)
MAY_IMPORT = {
    "top": {"*"},
    "views": {"*"},
    "engine": {"store", "implement", "runners", "policies", "llm", "tune", "top"},
    "implement": {"store", "runners", "llm", "tune", "top"},
    "tune": {"store", "top"},
    "store": set(),
    "llm": set(),
    "runners": {"manifest"},
    "policies": {"store", "llm"},
    "envs": set(),
}
NEVER = {"store": {"runners", "engine", "implement", "views"}, "engine": {"views"}, "implement": {"engine", "views"}}


def module_of(path: Path, root: Path = REPO_ROOT) -> str:
    rel = path.relative_to(root)
    parts = [SOURCES[rel.parts[0]], *rel.with_suffix("").parts[1:]]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def source_files(folders=("daemon", "runners", "policies"), root: Path = REPO_ROOT) -> list[Path]:
    return sorted(p for f in folders for p in (root / f).rglob("*.py") if "templates" not in p.parts)


MODULES = {module_of(p): p for p in source_files(SOURCES)}


def targets(node: ast.Import | ast.ImportFrom, mod: str, path: Path) -> list[str]:
    """The project modules (or other top-level packages) an import statement loads."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        pkg = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        base = ".".join(pkg[:len(pkg) - node.level + 1] + ([node.module] if node.module else []))
    else:
        base = node.module
    subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES]
    return subs or [base]


def imports(path: Path, root: Path = REPO_ROOT):
    """(node, in a function, targets) for every import statement of a file."""
    mod, tree = module_of(path, root), ast.parse(path.read_text(), str(path))
    out = []

    def walk(node, in_func: bool):
        for ch in ast.iter_child_nodes(node):
            if isinstance(ch, (ast.Import, ast.ImportFrom)):
                out.append((ch, in_func, targets(ch, mod, path)))
            walk(ch, in_func or isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))
    walk(tree, False)
    return out


def lazy_marked(lines: list[str], node: ast.AST) -> bool:
    """A `# lazy: why` on the import's lines, or above it on a comment, a `try:` or an import of the
    same block (one comment covers a group of lazy imports)."""
    mark = re.compile(r"#\s*lazy:\s*\S")
    if any(mark.search(ln) for ln in lines[node.lineno - 1:node.end_lineno]):
        return True
    i = node.lineno - 2
    while i >= 0 and re.match(r"\s*(#|try:|import |from \S+ import )", lines[i]):
        if mark.search(lines[i]):
            return True
        i -= 1
    return False


def function_level_violations(root: Path = REPO_ROOT, temporary=TEMPORARY) -> list[str]:
    left = list(temporary)
    bad = []
    for path in source_files(root=root):
        rel, lines = str(path.relative_to(root)), path.read_text().splitlines()
        for node, in_func, tgts in imports(path, root):
            if not in_func:
                continue
            for t in tgts:
                top = t.split(".")[0]
                if t.startswith("autoresearchd"):
                    if rel in ROOTS and lazy_marked(lines, node):
                        continue
                    if (rel, t) in left:
                        left.remove((rel, t))
                        continue
                    bad.append(f"{rel}:{node.lineno}: imports {t} inside a function (move it to module level; "
                               f"a cycle it hid is broken by moving the shared code down)")
                elif top not in OPTIONAL:
                    bad.append(f"{rel}:{node.lineno}: imports {t} inside a function; only the optional "
                               f"dependencies ({', '.join(sorted(OPTIONAL))}) may load lazily")
                elif not lazy_marked(lines, node):
                    bad.append(f"{rel}:{node.lineno}: lazy import of {t} without a `# lazy: <why>` comment")
    bad += [f"TEMPORARY lists {f} importing {m} inside a function, which it no longer does: remove the entry"
            for f, m in left]
    return bad


def module_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports, at module level or in a function (an import in a
    function is a dependency all the same), a submodule with its packages."""
    g: dict[str, set[str]] = defaultdict(set)
    for mod, path in MODULES.items():
        g[mod]
        for _, _, tgts in imports(path):
            for t in tgts:
                while t and t not in MODULES and "." in t:
                    t = t.rsplit(".", 1)[0]
                parts = t.split(".")
                for i in range(2, len(parts) + 1):       # importing a.b.c runs a.b first
                    if ".".join(parts[:i]) in MODULES and ".".join(parts[:i]) != mod:
                        g[mod].add(".".join(parts[:i]))
    return g


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def folder(mod: str) -> str:
    """The row of docs/architecture.md's table a module belongs to; a top module is its own name."""
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "top"


def row(mod: str) -> str:
    f = folder(mod)
    return f if f in MAY_IMPORT else "top"


def test_no_project_import_inside_a_function_and_only_optional_dependencies_load_lazily():
    bad = function_level_violations()
    assert not bad, "\n".join(bad)


def test_the_roots_are_imported_by_nothing():
    """What makes a root's function-level imports safe: no module imports it, at any level."""
    g = module_graph()
    for root in ROOTS.values():
        assert root in g, root
        users = sorted(m for m, deps in g.items() if root in deps)
        assert not users, f"{root} is imported by {users}: it is no root, move its imports to module level"


def test_the_allowlist_holds_only_optional_dependencies_of_an_extra():
    meta = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    core = {re.split(r"[<>=!~\[ ]", d)[0].lower().replace("-", "_") for d in meta["dependencies"]}
    extras = meta["optional-dependencies"]
    for name, extra in OPTIONAL.items():
        assert name not in core, f"{name} is a core dependency: import it at module level"
        assert any(re.split(r"[<>=!~\[ ]", d)[0].lower() == name for d in extras[extra]), \
            f"{name} is not in the [{extra}] extra of pyproject.toml"


def test_no_cycle_among_the_modules():
    found = cycles(module_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_each_folder_imports_what_the_architecture_table_allows():
    bad = []
    for mod, deps in module_graph().items():
        src = row(mod)
        if src == "top" and mod.split(".")[-1] in LEAVES:
            bad += [f"{mod} is a leaf but imports {d}" for d in sorted(deps)]
            continue
        for d in sorted(deps):
            dst, name = row(d), d.split(".")[1]
            if dst == src or name in LEAVES or "*" in MAY_IMPORT[src]:
                continue
            ok = dst in MAY_IMPORT[src] or (dst == "top" and name in MAY_IMPORT[src])
            if not ok or dst in NEVER.get(src, ()):
                bad.append(f"{mod} ({src}) imports {d} ({dst}): not in its 'may import' column")
    assert not bad, "\n".join(bad)


def test_the_folders_import_each_other_without_a_cycle():
    """Each sub-folder is one node and each top module its own: `runners` may import `manifest` and
    `app` may import `runners`, but no chain of folders leads back to where it started."""
    g: dict[str, set[str]] = defaultdict(set)
    for mod, deps in module_graph().items():
        a = folder(mod)
        g[a] |= {folder(d) for d in deps if folder(d) != a}
    found = cycles(g)
    assert not found, "folder cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_embedded_envs_import_nothing_of_the_daemon():
    bad = [f"{p.relative_to(REPO_ROOT)}:{n.lineno}" for p in source_files(("envs",))
           for n, _, tgts in imports(p) if any(t.startswith("autoresearchd") and not t.startswith("autoresearchd.envs")
                                                for t in tgts)]
    assert not bad, bad


@pytest.mark.parametrize("text,expect", [
    ("def f():\n    from autoresearchd.app import make_runner\n", "imports autoresearchd.app inside a function"),
    ("def f():\n    import json\n", "imports json inside a function"),
    ("def f():\n    import torch\n", "lazy import of torch without a `# lazy: <why>` comment"),
    ("def f():\n    import torch  # lazy: the [tinygpt] extra\n", None),
    ("def f():\n    # lazy: the [tinygpt] extra\n    import torch\n    import numpy\n", None),
    ("def f():\n    from autoresearchd.app import x  # lazy: not an optional dependency\n",
     "imports autoresearchd.app inside a function"),
])
def test_the_walk_names_file_and_line(tmp_path, text, expect):
    """The checker itself, on a tree written for it: it names the file and line of each kind of import."""
    (tmp_path / "daemon").mkdir()
    (tmp_path / "daemon" / "probe.py").write_text(text)
    bad = function_level_violations(tmp_path, temporary=[])
    if expect is None:
        assert bad == []
    else:
        assert len(bad) == 1 and bad[0].startswith("daemon/probe.py:2: ") and expect in bad[0], bad


def test_every_package_folder_is_in_the_wheel():
    """A package that pyproject does not list is left out of the wheel, and a module-level import of it
    then breaks the installed daemon at start (tune/ was missing while only functions imported it)."""
    listed = set(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {module_of(p) for p in source_files(("daemon", "runners", "policies")) if p.name == "__init__.py"}
    assert found <= listed, f"not in pyproject's [tool.setuptools] packages: {sorted(found - listed)}"
