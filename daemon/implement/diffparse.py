"""Repair the diff found in an LLM's answer (diffextract.py finds it), then parse it (with `unidiff`)
into file patches.

LLM diffs are rarely well formed. This module forgives the common slips before any strict parser
sees the text: fences and prose around the diff, CRLF, missing or extra `a/` `b/` `./` prefixes,
line-number prefixes copied from the numbered context the model was shown (`  12| code`,
`12: code`, `12<TAB>code`), context lines that lost their leading space, wrong hunk counts and
missing line numbers in `@@` headers. It renders a clean git-style diff, parses it with unidiff,
and returns `FileDiff` objects. It never guesses silently where a guess could change the result:
a truncated last hunk, elided lines (`...`) and stray diff lines are reported as problems.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from unidiff import PatchSet

from autoresearchd.implement.diffextract import FENCE, is_header

_HUNK = re.compile(r"^@@(?!@)([^@]*)(?:@@|$)")
_OLD_RANGE = re.compile(r"-(\d+)(?:,(\d+))?")
_NEW_RANGE = re.compile(r"\+(\d+)(?:,(\d+))?")


def _hunk_numbers(line: str) -> tuple[int, int | None, int | None] | None:
    """(old start, old count, new count) of an @@ line (0/None where absent); None if not one."""
    m = _HUNK.match(line)
    if not m:
        return None
    o, n = _OLD_RANGE.search(m.group(1)), _NEW_RANGE.search(m.group(1))
    return (int(o.group(1)) if o else 0, int(o.group(2) or 1) if o else None,
            int(n.group(2) or 1) if n else None)
_NUM = re.compile(r"^\s*(\d+)\s*(?:\||:|\t|│)")
_EXT = re.compile(r"^(old mode|new mode|deleted file mode|new file mode|similarity index|"
                  r"dissimilarity index|rename from|rename to|copy from|copy to|index)\b ?(.*)$")
_ELLIPSIS = {"...", "…", "# ...", "// ...", "# ... rest unchanged ...", "[...]"}


@dataclass
class Hunk:
    old_start: int                       # 1-based line in the original file; 0 when not stated
    lines: list[tuple[str, str]]         # (tag, text): ' ' context, '-' removed, '+' added
    header: str = ""
    no_eol_new: bool = False             # "\ No newline at end of file" after the new side

    @property
    def before(self) -> list[tuple[str, str]]:
        return [(t, s) for t, s in self.lines if t != "+"]


@dataclass
class FileDiff:
    old: str | None                      # path in base; None for a new file
    new: str | None                      # path afterwards; None for a deleted file
    hunks: list[Hunk] = field(default_factory=list)
    rename: bool = False
    new_mode: str | None = None          # mode named by new file mode / new mode
    headers: list[str] = field(default_factory=list)   # each hunk's @@ line as the model wrote it
    starts: list[int] = field(default_factory=list)    # each hunk's stated first line (0: none)

    @property
    def path(self) -> str:
        return self.new or self.old or ""


@dataclass
class Parsed:
    files: list[FileDiff]
    raw_paths: list[str]                 # every path as written (prefix-stripped), for safety checks
    modes: list[str]                     # every mode the diff names
    binary: bool
    problems: list[str]                  # reasons the diff cannot be trusted (for the LLM)
    clean: str                           # the repaired diff, git style


@dataclass
class _Block:
    old: str | None = None
    new: str | None = None
    has_headers: bool = False
    ext: dict[str, str] = field(default_factory=dict)
    hunks: list[list] = field(default_factory=list)     # [old_start, decl_old, decl_new, body, at_end]


def _strip_path(p: str) -> str:
    p = p.split("\t")[0].strip()
    if len(p) > 1 and p[0] == p[-1] == '"':
        p = p[1:-1]
    return p


class _Resolver:
    """Map the paths a model wrote onto the base tree's paths."""

    def __init__(self, paths: set[str], read: Callable[[str], str | None]):
        self.paths, self._read, self._cache = paths, read, {}

    def lines(self, path: str | None) -> list[str] | None:
        if path is None or path not in self.paths:
            return None
        if path not in self._cache:
            text = self._read(path)
            self._cache[path] = None if text is None else text.split("\n")
        return self._cache[path]

    def resolve(self, p: str | None, existing: bool) -> str | None:
        if p is None or p == "/dev/null":
            return None
        p = p.replace("\\", "/")
        while p.startswith("./"):
            p = p[2:]
        stripped = p[2:] if p[:2] in ("a/", "b/") else p
        while stripped.startswith("./"):
            stripped = stripped[2:]
        for cand in (stripped, p):
            if cand in self.paths:
                return cand
        if existing:
            hits = [q for q in self.paths if q.endswith("/" + stripped)]
            if len(hits) == 1:
                return hits[0]
        top = p.split("/", 1)[0]
        has_dir = any(q.startswith(top + "/") for q in self.paths)
        return p if (p != stripped and has_dir) else stripped


def _more_diff_follows(lines: list[str], j: int) -> bool:
    for k in range(j + 1, min(len(lines), j + 12)):
        if is_header(lines, k):
            return False
        if lines[k][:1] in "+-":
            return True
    return False


def _read_body(lines: list[str], j: int, decl: tuple, file_lines: list[str]) -> tuple[list[str], int]:
    body: list[str] = []
    synthetic: set[int] = set()             # blank lines we read as blank context
    n_old = n_new = 0
    exact = set(file_lines)
    known = {s.strip() for s in file_lines} - {""}
    while j < len(lines):
        ln = lines[j]
        if is_header(lines, j) or FENCE.match(ln):
            break
        satisfied = decl[0] is not None and n_old >= decl[0] and n_new >= (decl[1] or 0)
        if ln == "" or (ln.strip() == "" and ln[0] != " "):
            nxt = next((x for x in lines[j + 1:] if x.strip()), None)
            if nxt is None or (satisfied and nxt[:1] not in "+- "):
                break
            synthetic.add(len(body))
            body.append(" ")
        elif ln[0] == " " and ln[1:] not in exact and ln in exact:
            body.append(" " + ln)           # an indented context line that lost its marker
        elif ln[0] in " +-\\":
            body.append(ln)
        elif ln.strip() in _ELLIPSIS or _NUM.match(ln):
            body.append(" " + ln)
        elif ln.strip() in known and _more_diff_follows(lines, j):
            body.append(" " + ln)           # a context line that lost its leading space
        else:
            break
        tag = body[-1][0]
        n_old += tag in " -"
        n_new += tag in " +"
        j += 1
    while body and len(body) - 1 in synthetic:
        body.pop()
    return body, j


def _strip_numbers(body: list[str], file_lines: list[str] | None) -> tuple[list[str], int | None]:
    """Remove line-number prefixes copied from a numbered view; also return the first number."""
    before = [k for k, ln in enumerate(body) if ln[:1] in " -" and ln[1:].strip()]
    nums = [(k, _NUM.match(body[k][1:])) for k in before]
    hits = [(k, m) for k, m in nums if m]
    if not hits or len(hits) < 0.6 * len(before):
        return body, None
    values = [int(m.group(1)) for _, m in hits]
    if any(b <= a for a, b in itertools.pairwise(values)):
        return body, None
    known = set(file_lines or [])
    variants = [(sum(1 for ln in body if ln[:1] in " -" and ln[1:] in known), -1, body)]
    for eat_space in (True, False):
        out = []
        for ln in body:
            m = _NUM.match(ln[1:]) if ln[:1] in " -+" else None
            rest = ln[1 + m.end():] if m else ln[1:]
            if m and eat_space and rest.startswith(" "):
                rest = rest[1:]
            out.append(ln[0] + rest)
        score = sum(1 for ln in out if ln[:1] in " -" and ln[1:] in known)
        variants.append((score, int(eat_space), out))
    best = max(variants, key=lambda v: (v[0], v[1]))
    k0, m0 = hits[0]
    offset = sum(1 for ln in body[:k0] if ln[:1] in " -")
    return best[2], int(m0.group(1)) - offset


def parse_diff(text: str, paths: set[str], read: Callable[[str], str | None]) -> Parsed:
    """Repair and parse `text` against a base tree (`paths`, and `read(path)` for file text).
    A text that does not end with a newline is taken as possibly cut off (see extract_diff)."""
    res = _Resolver(paths, read)
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    blocks, binary, problems = _scan(lines, res)
    parsed = Parsed([], [], [], binary, problems, "")
    _render(blocks, res, parsed, cut_off=not text.endswith("\n"))
    _fill_hunks(parsed.clean, parsed.files)
    for f in parsed.files:
        if len(f.hunks) != len(f.headers):     # never drop a hunk silently
            parsed.problems.append(f"could not read every hunk of {f.path}; check its @@ lines")
    return parsed


def _scan(lines: list[str], res: _Resolver) -> tuple[list[_Block], bool, list[str]]:
    """Cut the text into per-file blocks of git headers and hunk bodies; skip prose."""
    blocks: list[_Block] = []
    binary, problems = False, []
    cur: _Block | None = None
    in_ext, i = False, 0
    while i < len(lines):
        ln = lines[i]
        if ln.startswith("diff --git "):
            cur, in_ext = _Block(has_headers=True), True
            blocks.append(cur)
            m = re.match(r'^diff --git ("?[^"]+"?|\S+) ("?[^"]+"?|\S+)$', ln)
            if m:
                cur.old, cur.new = _strip_path(m.group(1)), _strip_path(m.group(2))
            i += 1
            continue
        m = _EXT.match(ln)
        if in_ext and m:
            cur.ext[m.group(1)] = m.group(2).strip()
            i += 1
            continue
        in_ext = False
        if ln.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            if cur is None or cur.hunks or not cur.has_headers:
                cur = _Block()
                blocks.append(cur)
            cur.old, cur.new = _strip_path(ln[4:]), _strip_path(lines[i + 1][4:])
            i += 2
            continue
        nums = _hunk_numbers(ln)
        if nums:
            if cur is None:
                problems.append("a hunk (@@ line) comes before any file header: start each file with "
                                "'--- a/PATH' and '+++ b/PATH' lines")
                cur = _Block()
                blocks.append(cur)
            old_start, decl = nums[0], nums[1:]
            target = res.resolve(cur.old if cur.old != "/dev/null" else cur.new, True)
            body, i = _read_body(lines, i + 1, decl, res.lines(target) or [])
            if i < len(lines) and lines[i].strip() and not is_header(lines, i) and not FENCE.match(lines[i]):
                nxt = next((x for x in lines[i + 1:i + 4] if not x.strip() or x[:1] in "+-"), "")
                if nxt[:1] in "+-" and not nxt.startswith(("--- ", "+++ ")):
                    problems.append(f"line {i + 1} of the diff ({lines[i][:60]!r}) has no diff marker (' ', "
                                    "'+' or '-') and is not in the file, yet diff lines follow it")
            at_end = all(not x.strip() or FENCE.match(x) for x in lines[i:])
            cur.hunks.append([old_start, decl, body, at_end, ln])
            continue
        if "GIT binary patch" in ln or (ln.startswith("Binary files ") and ln.rstrip().endswith("differ")):
            binary = True
        elif cur is not None and cur.hunks and ln[:1] in "+-" and not ln.startswith(("--- ", "+++ ")) \
                and any(is_header(lines, k) for k in range(i + 1, len(lines))):
            problems.append(f"line {i + 1} of the diff ({ln[:60]!r}) is a diff line outside any hunk; "
                            "check the @@ headers and do not split hunks with prose")
        i += 1
    return blocks, binary, problems


def _render(blocks: list[_Block], res: _Resolver, parsed: Parsed, cut_off: bool) -> None:
    """Resolve paths, strip line numbers, recount, check for truncation; write parsed.clean.
    Several sections for the same file become one."""
    sections: dict[tuple, tuple[FileDiff, list[str], list[str], list[int]]] = {}
    for bi, b in enumerate(blocks):
        old_raw = b.ext.get("rename from") or b.ext.get("copy from") or b.old
        new_raw = b.ext.get("rename to") or b.ext.get("copy to") or b.new
        for k in ("new file mode", "deleted file mode", "old mode", "new mode"):
            if k in b.ext:
                parsed.modes.append(b.ext[k])
        is_new = "new file mode" in b.ext or old_raw == "/dev/null"
        is_del = "deleted file mode" in b.ext or new_raw == "/dev/null"
        for p in (old_raw, new_raw):
            if p and p != "/dev/null":
                parsed.raw_paths.append(p[2:] if p[:2] in ("a/", "b/") else p)
        old = None if is_new else res.resolve(old_raw, True)
        new = None if is_del else res.resolve(new_raw, not is_new)
        rename = bool(b.ext.get("rename from") or b.ext.get("copy from")) and old != new
        if old and new and old != new and not rename:
            new = old if old in res.paths else new       # '--- a/x +++ b/y' without rename lines: edit x
            old = old if old in res.paths else new
        if old is None and new is None:
            continue
        if (old, new) not in sections:
            header = [f"diff --git a/{old or new} b/{new or old}"]
            if is_new:
                header.append(f"new file mode {b.ext.get('new file mode', '100644')}")
            if is_del:
                header.append(f"deleted file mode {b.ext.get('deleted file mode', '100644')}")
            if rename:
                header += [f"rename from {old}", f"rename to {new}"]
            header += [f"{k} {b.ext[k]}" for k in ("old mode", "new mode") if k in b.ext]
            if b.hunks or is_new or is_del:
                header += [f"--- {'/dev/null' if is_new else 'a/' + old}",
                           f"+++ {'/dev/null' if is_del else 'b/' + new}"]
            f = FileDiff(old, new, [], rename, b.ext.get("new file mode") or b.ext.get("new mode"))
            sections[(old, new)] = (f, header, [], [0])
            parsed.files.append(f)
        f, _, chunk, delta = sections[(old, new)]
        for hi, (old_start, decl, body, at_end, hline) in enumerate(b.hunks):
            body, num_start = _strip_numbers(body, res.lines(old))
            if num_start:
                old_start = num_start
            n_old = sum(1 for x in body if x[:1] in " -")
            n_new = sum(1 for x in body if x[:1] in " +")
            where = f"hunk {hi + 1} of {new or old} ({hline.strip()[:60]})"
            if not any(x[:1] in "+-" for x in body):
                parsed.problems.append(f"{where} changes nothing (no '+' or '-' lines)")
                continue
            if any(x[1:].strip() in _ELLIPSIS for x in body):
                parsed.problems.append(f"{where} elides lines with '...'; a diff must show every line it "
                                       "keeps or removes between its first and last line")
            if bi == len(blocks) - 1 and hi == len(b.hunks) - 1 and at_end:
                short_o, short_n = (decl[0] or 0) - n_old, (decl[1] or 0) - n_new
                # Only a cut-off answer (no final newline: an unclosed fence or a stream that stopped)
                # can have lost lines. A complete answer whose counts are wrong is a miscount, however
                # large: it is recounted below like any other.
                if cut_off and (max(short_o, short_n) > 0 or decl[0] is None):
                    parsed.problems.append(f"the diff looks truncated (the answer may have hit its length "
                                           f"limit; send a shorter diff): {where} declares {decl[0]} old and "
                                           f"{decl[1]} new lines but only {n_old} and {n_new} are present")
            o = 0 if is_new else max(old_start, 1 if n_old else 0)
            n_start = 1 if is_new else 0 if is_del else max(o + delta[0], 1 if n_new else 0)
            chunk.append(f"@@ -{o},{n_old} +{n_start},{n_new} @@")
            f.headers.append(hline.strip())
            f.starts.append(old_start)          # 0 = the model gave no line number
            chunk += body
            delta[0] += n_new - n_old
    out = []
    for f, header, chunk, _ in sections.values():
        if chunk and not any(h.startswith("--- ") for h in header):
            header += [f"--- a/{f.old}", f"+++ b/{f.new}"]
        out += header + chunk
    parsed.clean = "\n".join(out) + "\n" if out else ""


def _fill_hunks(clean: str, files: list[FileDiff]) -> None:
    """Parse the repaired text with unidiff (the strict parser) and attach its hunks."""
    if not clean:
        return
    by_key = {(f.old, f.new): f for f in files}
    for pf in PatchSet(clean):
        src = None if pf.source_file == "/dev/null" else pf.source_file[2:]
        dst = None if pf.target_file == "/dev/null" else pf.target_file[2:]
        f = by_key.get((src, dst))
        if f is None:
            continue
        for h in pf:
            hl: list[tuple[str, str]] = []
            no_eol_new = False
            for ln in h:
                if ln.line_type == "\\":
                    if hl and hl[-1][0] in " +":
                        no_eol_new = True
                    continue
                hl.append((ln.line_type, ln.value.removesuffix("\n")))
            k = len(f.hunks)
            f.hunks.append(Hunk(f.starts[k], hl, f.headers[k], no_eol_new))
