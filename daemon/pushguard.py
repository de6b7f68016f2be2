"""Whether a push to the research repo runs the daemon's pre-receive guard (docs/security.md, "The
push guard is in force"): the hooks directory every config git reads names, and the guard in it.
`research.configure` pins the directory and refuses a repo for which `guard_problem` says why not.
"""

from __future__ import annotations

import os
from pathlib import Path

from autoresearchd.store.gitrepo import GitRepo

_OURS = "# installed by autoresearchd"      # the hooks' second line: ours to rewrite, others' left alone


def is_ours(text: str) -> bool:
    """A hook's text is the daemon's (its marker in the first two lines): rewritten when it changes;
    any other hook is the user's, left alone."""
    return _OURS in "\n".join(text.splitlines()[:2])


def _stale_hooks(path: Path) -> bool:
    """A hooks directory that is gone, or holds the daemon's own guard: this repo's, written before
    the repo was moved or copied (the value is absolute; a relative one would not name the same
    directory for every hook)."""
    try:
        return not path.is_dir() or is_ours((path / "pre-receive").read_text(errors="replace"))
    except OSError:
        return False


def guard_problem(repo: GitRepo) -> str | None:
    """Why a push to this repo would not run the daemon's pre-receive hook, or None. Every way it
    could be off: core.hooksPath naming another directory (the last value of any config git reads:
    system, global, local, worktree, an included file; the daemon's own `-c` is not one), and the
    hook missing, not the daemon's (the user's own is left alone) or not executable."""
    hooks = (repo.git_dir / "hooks").resolve()
    out = repo.git("config", "--show-scope", "--get-all", "core.hooksPath", check=False)
    values = [ln.split("\t", 1) for ln in out.splitlines()]
    values = [v for v in values if len(v) == 2 and v[0] != "command"]
    if values:
        scope, value = values[-1]
        path = Path(os.path.expanduser(value))
        if (path if path.is_absolute() else repo.git_dir / path).resolve() != hooks:    # push hooks run in $GIT_DIR
            return (f"core.hooksPath = {value} (in the {scope} config) names another directory than "
                    f"{hooks}, where its pre-receive hook is; unset it there or set it to {hooks}")
    pre = hooks / "pre-receive"
    try:
        text = pre.read_text(errors="replace")
    except OSError:
        return f"{pre} is missing"
    if not is_ours(text):
        return f"{pre} is a hook of your own, not the daemon's guard; move it away (or merge it into the guard)"
    if not os.access(pre, os.X_OK):
        return f"{pre} is not executable"
    return None
