"""Trees out and in, byte for byte, mixed into GitRepo: the tar of a commit's tree that a trial, the
evaluator, the quick check and a coding agent get (`archive`), and the tree of an agent's scratch
directory (`tree_from_dir`). Neither goes through git's content conversion: `git archive` and
`git add` apply the tree's own `.gitattributes` (export-ignore, export-subst, filter, text/eol,
ident, working-tree-encoding), so a pushed commit could change what is measured. Here the tar is
written from the raw objects (`ls-tree` and `cat-file`), and files are hashed with
`hash-object --no-filters`: what runs is exactly the commit's blobs (docs/security.md, "A push is
data: git mechanisms").
"""

from __future__ import annotations

import io
import os
import re
import stat
import tarfile
import tempfile
import time
from pathlib import Path

from autoresearchd import defaults
from autoresearchd.store.gitproc import FULL_ID, GitError

# git archive's own modes (tar.umask 0002): what trial directories have always been unpacked with
_DIR_MODE, _FILE_MODE, _EXEC_MODE, _LINK_MODE = 0o775, 0o664, 0o775, 0o777
_UNSAFE_NAMES = {"", ".", "..", ".git"}


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)

_OCTAL = re.compile(rb"[0-7]+")


class TreesIO:
    """The export half of GitRepo (it provides git, _run, rev_parse, read_object, cat_file_batch,
    ls_tree and the _trees and _commit_trees caches)."""

    def archive(self, rev: str, paths: list[str] | None = None, exclude: list[str] | None = None) -> bytes:
        """A tar of the tree at rev, so a host needs neither git nor access to the repo. `paths`
        keeps only these files and directories (literal paths), `exclude` leaves them out (the
        evaluator's held-out files never reach run). Members, modes and order are git archive's for a
        tree without attributes; contents are the blobs themselves, whatever `.gitattributes` says."""
        sha = self.rev_parse(rev)
        if sha is None:
            raise GitError(["archive", rev], 128, f"not a valid object name {rev}")
        typ = (self.read_object(sha) or ("", b""))[0]
        tree = self.tree_of(sha)
        commit = self.rev_parse(sha + "^{commit}") if typ in ("commit", "tag") else None
        mtime = _committer_time(self.read_object(commit)[1]) if commit else int(time.time())
        entries = []                      # (mode, type, sha, path), in git's tree order
        for mode, otype, osha, path in self.tree_listing(tree):
            if any(part.lower() in _UNSAFE_NAMES for part in path.split("/")):
                raise GitError(["archive", rev], 128, f"unsafe path in tree {tree}: {path!r}")
            if paths is not None and not (_under(path, paths) or any(p.startswith(path + "/") for p in paths)):
                continue                  # neither a kept path nor a directory above one (git lists those)
            if exclude and _under(path, exclude):
                continue
            entries.append((mode, otype, osha, path))
        if exclude:
            # a directory left with nothing in it is dropped, as git archive drops it: a held-out
            # file's empty parent would otherwise still tell run where the evaluator's data lives
            inner = [e[3] for e in entries if e[1] != "tree"]
            entries = [e for e in entries if e[1] != "tree" or any(x.startswith(e[3] + "/") for x in inner)]
        if paths is not None:
            missing = [p for p in paths if not any(_under(e[3], [p]) for e in entries)]
            if missing:
                raise GitError(["archive", rev], 128, f"pathspec '{missing[0]}' did not match any files")
        blobs = self.cat_file_batch([s for m, t, s, _ in entries if t == "blob"])
        buf = io.BytesIO()
        pax = {"comment": commit} if commit else {}
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT, pax_headers=pax) as out:
            for mode, otype, osha, path in entries:
                ti = tarfile.TarInfo(path)
                ti.mtime, ti.uname, ti.gname = mtime, "root", "root"
                if otype in ("tree", "commit"):        # a gitlink is an empty directory, as in git archive
                    ti.type, ti.mode = tarfile.DIRTYPE, _DIR_MODE
                    out.addfile(ti)
                elif mode == "120000":
                    ti.type, ti.mode = tarfile.SYMTYPE, _LINK_MODE
                    ti.linkname = blobs[osha].decode(errors="surrogateescape")
                    out.addfile(ti)
                else:
                    data = blobs[osha]
                    ti.size, ti.mode = len(data), _EXEC_MODE if mode == "100755" else _FILE_MODE
                    out.addfile(ti, io.BytesIO(data))
        return buf.getvalue()

    def tree_listing(self, tree: str) -> list[tuple[str, str, str, str]]:
        """(mode, type, sha, path) of every entry under a tree, each subtree before its contents: what
        `git ls-tree -r -t -z` prints (modes canonical, as git reads them), read from the tree objects
        through the persistent cat-file, each tree parsed once per handle (objects never change: a
        trial's archive reads only the trees its idea changed, and starts no `ls-tree`)."""
        out: list[tuple[str, str, str, str]] = []
        stack = [(iter(self._tree_entries(tree)), "")]
        while stack:
            it, prefix = stack[-1]
            entry = next(it, None)
            if entry is None:
                stack.pop()
                continue
            mode, name, osha = entry
            otype = _TYPE_OF.get(mode, "blob")
            out.append((mode, otype, osha, prefix + name))
            if otype == "tree":
                stack.append((iter(self._tree_entries(osha)), prefix + name + "/"))
        return out

    def _tree_entries(self, sha: str) -> tuple[tuple[str, str, str], ...]:
        """(mode, name, sha) of one tree object's entries, in its order; cached by id."""
        hit = self._trees.get(sha)
        if hit is None:
            obj = self.read_object(sha)
            if obj is None or obj[0] != "tree":
                raise GitError(["ls-tree", sha], 128, f"not a tree object: {sha}")
            hit = _parse_tree(obj[1], len(sha) // 2, sha)
            if len(self._trees) >= defaults.GIT_TREE_CACHE:
                self._trees.clear()
            self._trees[sha] = hit
        return hit

    def tree_of(self, commit: str) -> str:
        """The id of the tree a commit (or a tree, a tag, a ref) names; a GitError where it names none."""
        if (tree := self._commit_trees.get(commit)) is not None:
            return tree
        obj = self.read_object(commit) if (full := FULL_ID.fullmatch(commit)) else None
        if obj is not None and obj[0] in ("commit", "tree"):     # one read: GitPython's rev_parse made two
            head = obj[1].split(b"\n", 1)[0]
            tree = commit if obj[0] == "tree" else head[5:].decode() if head.startswith(b"tree ") else None
        else:                     # a ref, a tag, a missing or an odd object: as git resolves it
            tree = self.rev_parse(commit + "^{tree}")
        if tree is None:
            raise GitError(["rev-parse", commit + "^{tree}"], 128, f"no tree for {commit}")
        if full:                  # an object's tree never changes (a ref's may); notes reads ask twice
            if len(self._commit_trees) >= defaults.GIT_TREE_CACHE:
                self._commit_trees.clear()
            self._commit_trees[commit] = tree
        return tree

    def _tree_path(self, tree: str, path: str) -> str | None:
        """The id of the entry at a plain path under a tree, from the parsed trees (TreesIO, kept by
        id); None where git finds none: a missing name, or a non-tree on the way."""
        parts = path.split("/")
        sha = tree
        for i, part in enumerate(parts):
            hit = next((e for e in self._tree_entries(sha) if e[1] == part), None)
            if hit is None or (i < len(parts) - 1 and hit[0] != "040000"):
                return None
            sha = hit[2]
        return sha

    def tree_from_dir(self, base: str, workdir: str | os.PathLike, keep: list[str] = (),
                      max_file_bytes: int | None = None) -> str:
        """The tree of a scratch directory (a coding agent's worktree) as `git add -A` stages it on
        top of base's tree, minus git's conversions: each file's bytes as they are on disk
        (`hash-object --no-filters`), symlinks stay symlinks and nested repositories become gitlinks,
        so the safety gate sees them as they are; files its .gitignore names are left out. The `keep`
        paths (files withheld from the directory on purpose, such as hidden ones) stay as in base.
        Temporary index only; the research repo's own index and work tree are not touched."""
        root = Path(workdir)
        gitdir = self.git("rev-parse", "--absolute-git-dir").strip()
        with tempfile.TemporaryDirectory(prefix="ard-idx-") as d:
            env = {"GIT_INDEX_FILE": os.path.join(d, "index"), "GIT_DIR": gitdir, "GIT_WORK_TREE": str(root)}

            def git(*args, input=None, binary=False):
                return self._run(list(args), input=input, env=env, cwd=root, binary=binary)

            def full(rel: bytes) -> bytes:
                return os.path.join(os.fsencode(root), rel)

            def blob(data: bytes) -> bytes:            # one object from bytes, never through a filter
                return git("hash-object", "-w", "--no-filters", "--stdin", input=data).strip().encode()
            git("read-tree", base)
            tracked = set(filter(None, git("ls-files", "-z", "--cached", binary=True).split(b"\0")))
            # a nested repository is listed once, as `dir/`: git never lists what is inside one
            others = set(filter(None, git("ls-files", "-z", "--others", "--exclude-standard",
                                          binary=True).split(b"\0")))
            in_base = {e.path.encode(errors="surrogateescape"): e for e in self.ls_tree(base)}
            null = "0" * len(self.tree_of(base))
            removed, files, links, nested = [], [], [], []
            for rel in sorted(tracked | others):
                if rel.endswith(b"/"):
                    nested.append(rel.rstrip(b"/"))
                    continue
                try:
                    st = os.lstat(full(rel))
                except (FileNotFoundError, NotADirectoryError):
                    removed.append(rel)
                    continue
                if stat.S_ISLNK(st.st_mode):
                    links.append(rel)
                elif stat.S_ISREG(st.st_mode):
                    if max_file_bytes is not None and st.st_size > max_file_bytes and \
                            getattr(in_base.get(rel), "size", None) != st.st_size:
                        # refused before it is hashed into the repo's object store
                        raise ValueError(f"{rel.decode(errors='replace')} would be {st.st_size} bytes, over the "
                                         f"{max_file_bytes}-byte limit per file")
                    files.append((rel, "100755" if st.st_mode & stat.S_IXUSR else "100644"))
                elif rel in in_base and in_base[rel].mode == "160000":
                    continue                           # a gitlink's (empty) directory: kept, as git add does
                else:
                    removed.append(rel)                # a tracked path that is now a directory
            # --stdin-paths reads one path a line (and unquotes a leading "): other names go one by one
            odd = [(r, m) for r, m in files if b"\n" in r or r.startswith(b'"')]
            plain = [f for f in files if f not in set(odd)]
            shas = git("hash-object", "-w", "--no-filters", "--stdin-paths",
                       input=b"".join(full(r) + b"\n" for r, _ in plain)).split() \
                if plain else []
            info = [b"0 %s\t%s" % (null.encode(), r) for r in removed]
            info += [b"%s %s\t%s" % (m.encode(), s.encode(), r) for (r, m), s in zip(plain, shas)]
            info += [b"%s %s\t%s" % (m.encode(), blob(Path(os.fsdecode(full(r))).read_bytes()), r) for r, m in odd]
            info += [b"120000 %s\t%s" % (blob(os.readlink(full(r))), r) for r in links]
            if info:
                git("update-index", "--replace", "-z", "--index-info", input=b"\0".join(info) + b"\0")
            if nested:                                 # git add turns a repository into a gitlink
                git("add", "--", *[os.fsdecode(n) for n in nested])
            if keep:
                lines = "".join(f"{e.mode} {e.type} {e.sha}\t{e.path}\n" for e in self.ls_tree(base, list(keep)))
                if lines:
                    git("update-index", "--index-info", input=lines.encode())
            return git("write-tree").strip()


_TYPE_OF = {"040000": "tree", "160000": "commit"}      # every other canonical mode is a blob's


def _canon_mode(mode: int) -> int:
    """The mode git reads a tree entry as (canon_mode in git's cache.h): a file is 644 or 755, and
    anything that is no file, link or directory is a gitlink."""
    kind = mode & 0o170000
    if kind == 0o100000:
        return 0o100755 if mode & 0o100 else 0o100644
    return kind if kind in (0o120000, 0o040000) else 0o160000


def _parse_tree(data: bytes, idlen: int, sha: str) -> tuple[tuple[str, str, str], ...]:
    """A raw tree object's entries: "<octal mode> <name>\\0<binary id>" each. Malformed data is a
    GitError, as `git ls-tree` fails on it."""
    entries, i, n = [], 0, len(data)
    while i < n:
        sp = data.find(b" ", i)
        nul = data.find(b"\0", sp + 1) if sp > i else -1
        # octal digits only, as git's tree parser takes a mode (int() would also take "+", "_", spaces)
        ok = nul > sp + 1 and nul + 1 + idlen <= n and _OCTAL.fullmatch(data[i:sp])
        mode = int(data[i:sp], 8) if ok else None
        if mode is None:
            raise GitError(["ls-tree", sha], 128, f"corrupt tree {sha} at byte {i}")
        entries.append((f"{_canon_mode(mode):06o}", data[sp + 1:nul].decode(errors="surrogateescape"),
                        data[nul + 1:nul + 1 + idlen].hex()))
        i = nul + 1 + idlen
    return tuple(entries)


def _committer_time(commit: bytes) -> int:
    """The committer timestamp of a raw commit object (git archive's mtime for every member)."""
    for line in commit.split(b"\n\n", 1)[0].split(b"\n"):
        if line.startswith(b"committer "):
            try:
                return int(line.rsplit(b" ", 2)[-2])
            except (ValueError, IndexError):
                break
    return 0
