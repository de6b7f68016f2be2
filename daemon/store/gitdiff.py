"""Diffs between commits and trees, mixed into GitRepo (gitrepo.py): the unified diff shown to people and
LLMs (no attribute, driver or textconv of the research repo decides what it shows), changed paths, and
the raw blob changes the arrival gate checks, for one pair or many in one `diff-tree --stdin`."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RawChange:
    """One line of `git diff-tree -r --raw`: modes are strings such as "100644", "120000", "000000"."""
    old_mode: str
    new_mode: str
    old_sha: str
    new_sha: str
    status: str
    path: str



class DiffsIO:
    """GitRepo's diff reads; uses its `_run` and `git` (gitrepo.py)."""

    def _read_detached(self, args: list[str], **kw):
        """A read run with an empty scratch work tree and index: `git diff` takes attributes (`-diff`
        hides a change as "Binary files differ", `diff=<driver>` picks a textconv) from the research
        repo's checkout and index, never from the trees it compares; here from neither."""
        with tempfile.TemporaryDirectory(prefix="ard-detached-") as d:
            env = {"GIT_DIR": str(self.git_dir), "GIT_WORK_TREE": d, "GIT_INDEX_FILE": os.path.join(d, "index")}
            return self._run(args, env=env, cwd=Path(d), **kw)

    def diff(self, a: str, b: str, stat: bool = False) -> str:
        """The change from a to b as shown to people and LLMs: no attribute, driver or textconv
        decides what it shows."""
        args = ["diff", "--no-color", "--no-ext-diff", "--no-textconv"]
        if stat:
            args.append("--stat")
        return self._read_detached([*args, a, b])

    def diffs_first_parent(self, commits: list[str]) -> dict[str, str]:
        """commit -> unified diff against its first parent, for many commits in one process
        (export and reports read thousands of ideas; a root commit maps to "")."""
        if not commits:
            return {}
        uniq = list(dict.fromkeys(commits))
        out = self._read_detached(["diff-tree", "--stdin", "-p", "--diff-merges=first-parent", "--no-color",
                                   "--no-ext-diff", "--no-textconv", "--always", "--format=%x00%H"],
                                  input=("\n".join(uniq) + "\n").encode(), binary=True).decode(errors="replace")
        res = {c: "" for c in uniq}
        for chunk in out.split("\0")[1:]:
            sha, _, diff = chunk.partition("\n")
            res[sha.strip()] = diff.lstrip("\n")
        return res

    def changed_paths(self, a: str, b: str) -> list[tuple[str, str]]:
        """(status, path) pairs between two commits; renames report both sides."""
        out = self.git("diff", "--name-status", "--no-renames", "-z", a, b, binary=True).decode(
            errors="surrogateescape")
        parts = [p for p in out.split("\0") if p]
        return [(parts[i], parts[i + 1]) for i in range(0, len(parts) - 1, 2)]

    def diff_tree_raw(self, a: str, b: str) -> list["RawChange"]:
        """Every changed blob between two commits or trees, with modes and ids (no rename detection)."""
        out = self.git("diff-tree", "-r", "-z", "--no-renames", "--no-commit-id", a, b, binary=True)
        parts = out.split(b"\0")
        res, i = [], 0
        while i + 1 < len(parts) and parts[i].startswith(b":"):
            om, nm, osha, nsha, status = parts[i][1:].decode().split()
            res.append(RawChange(om, nm, osha, nsha, status, parts[i + 1].decode(errors="surrogateescape")))
            i += 2
        return res

    def diff_tree_raw_many(self, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], list["RawChange"]]:
        """diff_tree_raw(a, b) of many pairs of commits (full ids) in one `git diff-tree --stdin`: a
        line "B A" compares A's tree with B's, as if A were B's parent. An answer that does not
        parse as asked is left out (the caller asks diff_tree_raw)."""
        if len(pairs) < 2:
            return {}
        out = self.git("diff-tree", "--stdin", "-r", "-z", "--no-renames", "--always", "--format=%H",
                       input="".join(f"{b} {a}\n" for a, b in pairs).encode(), binary=True)
        res: dict[tuple[str, str], list[RawChange]] = {}
        parts, i, k, cur = out.split(b"\0"), 0, -1, None
        while i < len(parts):
            tok = parts[i][1:] if parts[i].startswith(b"\n") else parts[i]   # a diff starts on a new line
            if tok.startswith(b":") and cur is not None and i + 1 < len(parts):
                om, nm, osha, nsha, status = tok[1:].decode().split()
                cur.append(RawChange(om, nm, osha, nsha, status, parts[i + 1].decode(errors="surrogateescape")))
                i += 2
                continue
            if tok:                     # "<B>": the next pair's answer begins (--always: even when empty)
                k += 1
                if k >= len(pairs) or tok.decode(errors="replace") != pairs[k][1]:
                    return {}           # not the answer asked for: trust none of it
                cur = res[pairs[k]] = []
            i += 1
        return res if len(res) == len(set(pairs)) else {}
