"""Turn an LLM-written diff into a new git tree, safely, or into an error the LLM can act on.

apply_diff(repo, base, diff, rules):
1. repair and parse the diff (diffparse); refuse, before anything is applied, any path that is
   absolute, has '..', is under .git/ or frozen, any symlink/submodule mode, any binary patch, and
   any diff over the size limit (rejected=True: retrying the same idea blindly will not help);
2. place every hunk with our own locator (fuzzy); a hunk it cannot place, or that fits two
   places, fails here, even where `git apply` would pick one of the places;
3. apply with plain `git apply` (method "git-apply"), else with the repaired diff ("normalized"),
   keeping git's tree only where its files equal our placement's; else build the tree from our
   placement ("fuzzy");
4. gate the resulting tree with safety.check_tree_change.
Nothing here touches the user's working tree, index or HEAD: trees are built in temporary indexes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autoresearchd.implement.diffextract import extract_diff
from autoresearchd.implement.diffparse import FileDiff, Parsed, parse_diff
from autoresearchd.implement.fuzzy import HunkError, apply_hunks, closest_lines
from autoresearchd.implement.safety import GITLINK_MODE, SYMLINK_MODE, SafetyRules, check_path, check_tree_change
from autoresearchd.store.gitrepo import GitError, GitRepo

__all__ = ["ApplyResult", "apply_diff", "extract_diff"]

_FIX_HINT = ("Send a corrected unified diff of the whole change: '--- a/PATH' and '+++ b/PATH' headers, "
             "then @@ hunks whose context (' ') and removed ('-') lines are copied exactly from the "
             "current file, without line numbers.")


@dataclass
class ApplyResult:
    ok: bool
    tree: str | None = None
    changed: list[str] = field(default_factory=list)
    method: str = ""
    error: str | None = None
    rejected: bool = False
    reason: str | None = None


def _reject(reason: str) -> ApplyResult:
    return ApplyResult(ok=False, rejected=True, reason=reason,
                       error=f"The diff was refused: {reason}. Do not resend it; change the idea's "
                             "implementation so that it stays within the allowed files.")


def _fail(reason: str, detail: str) -> ApplyResult:
    return ApplyResult(ok=False, reason=reason, error=detail)


def _safety(parsed: Parsed, diff_text: str, rules: SafetyRules) -> str | None:
    size = len(diff_text.encode())
    if size > rules.max_diff_bytes:
        return f"the diff is {size} bytes, over the {rules.max_diff_bytes}-byte limit"
    if parsed.binary:
        return "the diff contains a binary patch; only text files may be changed"
    for mode in parsed.modes:
        if mode.startswith(SYMLINK_MODE):
            return "the diff creates or changes a symbolic link (mode 120000); symlinks are not allowed"
        if mode.startswith(GITLINK_MODE):
            return "the diff adds a submodule (mode 160000); submodules are not allowed"
    for p in parsed.raw_paths + [q for f in parsed.files for q in (f.old, f.new) if q]:
        reason = check_path(p, rules)
        if reason:
            return reason
    return None


def _expected_paths(files: list[FileDiff]) -> set[str]:
    return {p for f in files for p in (f.old, f.new) if p}


def _plan(repo: GitRepo, base: str, parsed: Parsed, paths: set[str]):
    """Our own application of every file: ({path: bytes|None}, per-file notes) or an ApplyResult."""
    new_files: dict[str, bytes | None] = {}
    done: list[str] = []
    for f in parsed.files:
        if f.old is None:
            if f.new in paths:
                return _fail(f"{f.new} already exists", f"The diff creates {f.new}, but that file already "
                             f"exists. To change it, send hunks against its current content.\n"
                             + _done(done))
            added = [s for h in f.hunks for t, s in h.lines if t == "+"]
            no_eol = bool(f.hunks) and f.hunks[-1].no_eol_new
            new_files[f.new] = ("\n".join(added) + ("" if no_eol or not added else "\n")).encode()
            done.append(f"{f.new} (new file)")
            continue
        if f.old not in paths:
            if f.new and all(not h.before for h in f.hunks):     # a new file without /dev/null
                new_files[f.new] = ("\n".join(s for h in f.hunks for _, s in h.lines) + "\n").encode()
                done.append(f"{f.new} (new file)")
                continue
            similar = sorted(p for p in paths if p.rsplit("/", 1)[-1] == f.old.rsplit("/", 1)[-1])
            hint = f" Did you mean {', '.join(similar)}?" if similar else ""
            return _fail(f"{f.old} not found", f"The diff changes {f.old}, but there is no such file in the "
                         f"repository.{hint}\n" + _done(done))
        raw = repo.read_files(base, [f.old]).get(f.old, b"")
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            return _fail(f"{f.old} is not text", f"{f.old} is not a UTF-8 text file and cannot be patched.")
        try:
            new_text, _ = apply_hunks(text, f.hunks)
        except HunkError as e:
            return _hunk_failure(f, e, text, done)
        if f.new is None:
            new_files[f.old] = None
            done.append(f"{f.old} (deleted)")
            continue
        if f.rename:
            if f.new in paths:
                return _fail(f"{f.new} already exists", f"The diff renames {f.old} to {f.new}, but {f.new} "
                             "already exists.\n" + _done(done))
            new_files[f.old] = None
        new_files[f.new] = new_text.encode()
        done.append(f"{f.path} ({len(f.hunks)} hunk{'s' * (len(f.hunks) != 1)})")
    return new_files


def _done(done: list[str]) -> str:
    if not done:
        return "No file of the diff was applied (a diff is applied whole or not at all)."
    return ("These parts would apply as they are; send them again unchanged with the fix: "
            + "; ".join(done) + ".")


def _hunk_failure(f: FileDiff, e: HunkError, text: str, done: list[str]) -> ApplyResult:
    h = f.hunks[e.hunk]
    path = f.old or f.path
    lines = text.split("\n")
    where = f"hunk {e.hunk + 1} of {len(f.hunks)} in {path} ({h.header})"
    if e.kind == "ambiguous":
        return _fail(f"ambiguous hunk in {path}", f"The diff did not apply: {where}: {e}.\n" + _done(done))
    if e.kind in ("thin", "indent"):
        return _fail(f"hunk {e.hunk + 1} of {path} cannot be placed safely",
                     f"The diff did not apply: {where}: {e}.\n" + _done(done))
    if e.kind == "overlap":
        return _fail(f"overlapping hunks in {path}", f"The diff did not apply: {where}: {e}.\n" + _done(done))
    want = "\n".join(f"{t}{s}" for t, s in h.lines if t != "+")
    if e.kind == "removed_missing" and _contains(lines, [s for t, s in h.lines if t != "-"]):
        return _fail(f"hunk {e.hunk + 1} of {path} seems applied already",
                     f"The diff did not apply: {where}: the file already contains the hunk's result "
                     "(its context and '+' lines), so the change seems to be there already. Leave this "
                     "hunk out.\n" + _done(done))
    what = ("the lines it removes are not in the file" if e.kind == "removed_missing"
            else "its context lines were not found in the file")
    applied_here = [str(k + 1) for k in getattr(e, "fits", [])]
    msg = [f"The diff did not apply: {where} failed: {what}.",
           "The hunk expects these lines (context ' ' and removed '-'), in this order:", want,
           f"The closest lines in {path} are (line numbers are for reference, not part of the file):",
           closest_lines(lines, h)]
    if applied_here:
        msg.append(f"Hunks {', '.join(applied_here)} of {path} fit the file as they are.")
    msg += [_done(done), _FIX_HINT]
    return _fail(f"hunk {e.hunk + 1} of {path} does not match the file", "\n".join(msg))


def _contains(lines: list[str], block: list[str]) -> bool:
    keys = [" ".join(s.split()) for s in lines]
    want = [" ".join(s.split()) for s in block]
    return bool(want) and any(keys[i:i + len(want)] == want for i in range(len(keys) - len(want) + 1))


def _git_tree_agreeing(repo: GitRepo, base_tree: str, text: str, parsed: Parsed,
                       plan: dict[str, bytes | None]) -> tuple[str | None, str]:
    """`git apply` on the diff as written, then on the repaired diff; its tree is used (it keeps
    file modes) only when its files equal our own placement's. git puts an unclear hunk at the
    match nearest the @@ line number, which models often invent; our locator refuses to guess."""
    expected = _expected_paths(parsed.files)
    # --unidiff-zero for the repaired diff: models leave out trailing context without meaning
    # "at the end of the file", which is how git reads a hunk with none.
    for method, patch, extra in (("git-apply", text, ()), ("normalized", parsed.clean, ("--unidiff-zero",))):
        try:
            cand = repo.apply_to_tree(base_tree, patch.encode(), extra)
        except GitError:
            continue
        if {p for _, p in repo.changed_paths(base_tree, cand)} != expected:
            continue
        got = repo.read_files(cand, sorted(expected))
        if all(got.get(p) == data for p, data in plan.items()):
            return cand, method
    return None, ""


def apply_diff(repo: GitRepo, base_commit: str, diff_text: str, rules: SafetyRules) -> ApplyResult:
    if not diff_text or not diff_text.strip():
        return _fail("no diff", "No diff was found in the answer. " + _FIX_HINT)
    text = diff_text.replace("\r\n", "\n").replace("\r", "\n")
    size = len(text.encode())
    if size > rules.max_diff_bytes:
        return _reject(f"the diff is {size} bytes, over the {rules.max_diff_bytes}-byte limit")
    base_tree = repo.tree_of(base_commit)
    paths = {e.path for e in repo.ls_tree(base_tree)}

    def read(p: str) -> str | None:
        data = repo.read_files(base_tree, [p]).get(p)
        return None if data is None else data.decode(errors="replace")

    parsed = parse_diff(text, paths, read)
    reason = _safety(parsed, text, rules)
    if reason:
        return _reject(reason)
    if not parsed.files:
        return _fail("no file changes in the diff", "The answer has no usable file diff. " + _FIX_HINT)
    if parsed.problems:
        return _fail(parsed.problems[0], "The diff cannot be applied safely: " + "; ".join(parsed.problems)
                     + ".\n" + _FIX_HINT)
    plan = _plan(repo, base_tree, parsed, paths)
    if isinstance(plan, ApplyResult):
        return plan
    tree, method = _git_tree_agreeing(repo, base_tree, text, parsed, plan)
    if tree is None:
        tree, method = repo.tree_with_files(base_tree, plan), "fuzzy"
    reason = check_tree_change(repo, base_commit, tree, rules)
    if reason:
        return _reject(reason)
    changed = sorted(p for _, p in repo.changed_paths(base_tree, tree))
    if not changed:
        return _fail("the diff changes nothing", "The diff applied but changes nothing in the repository; "
                     "its changes may already be present. " + _FIX_HINT)
    return ApplyResult(ok=True, tree=tree, changed=changed, method=method)
