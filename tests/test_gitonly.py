"""Only daemon/store/ runs git (docs/architecture.md, "Git access"): read from the source with `ast`.

Every git process gets the store's clean environment (secrets scrubbed, no hooks, no fsmonitor:
`gitproc.run_git`, `CleanGit`); a `subprocess` call that starts `git` anywhere else would get the
daemon's whole environment. Flagged outside daemon/store/: a `subprocess.run`/`Popen`/`check_output`/
`check_call`/`call` whose argv is a literal list or tuple starting with "git", or whose command string
starts with "git ". `views/doctor.py` ran `git --version` this way; it asks `run_git` now.
"""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO_ROOT

SCANNED = ("daemon", "runners", "policies")
SPAWN = {"run", "Popen", "check_output", "check_call", "call"}


def git_spawns(root: Path = REPO_ROOT) -> list[str]:
    bad = []
    for top in SCANNED:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel.startswith("daemon/store/") or "templates" in path.parts:
                continue
            for n in ast.walk(ast.parse(path.read_text(), rel)):
                if not (isinstance(n, ast.Call) and n.args and ast.unparse(n.func).startswith("subprocess.")
                        and ast.unparse(n.func).split(".")[-1] in SPAWN):
                    continue
                argv = n.args[0]
                first = argv.elts[0] if isinstance(argv, (ast.List, ast.Tuple)) and argv.elts else argv
                if isinstance(first, ast.Constant) and isinstance(first.value, str) and \
                        (first.value == "git" or first.value.startswith("git ")):
                    bad.append(f"{rel}:{n.lineno}: {ast.unparse(n)[:80]}")
    return bad


def test_only_the_store_starts_git():
    assert not git_spawns(), "run git through daemon/store/ (gitproc.run_git):\n" + "\n".join(git_spawns())


def test_the_scan_finds_each_way_of_starting_git(tmp_path):
    (tmp_path / "daemon" / "store").mkdir(parents=True)
    (tmp_path / "daemon" / "v.py").write_text(
        "import subprocess\n"
        "subprocess.run(['git', '--version'])\n"
        "subprocess.Popen(('git', 'log'))\n"
        "subprocess.check_output('git status', shell=True)\n"
        "subprocess.run(['bwrap', '--version'])\n")
    (tmp_path / "daemon" / "store" / "g.py").write_text("import subprocess\nsubprocess.run(['git', 'log'])\n")
    assert [b.split(":")[1] for b in git_spawns(tmp_path)] == ["2", "3", "4"]
