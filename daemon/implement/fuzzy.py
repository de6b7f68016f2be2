"""Place diff hunks in a file when `git apply` cannot, and explain precisely when they cannot be placed.

The idea follows aider's unified-diff applier: match a hunk's "before" text (context and removed
lines) against the file, first exactly, then ignoring trailing whitespace, then ignoring all
whitespace, then with some outer context dropped, then tolerating a few drifted context lines and
blank-line differences. Two rules keep it from ever applying a change in the wrong place:
- every removed line must be in the file (compared ignoring whitespace only), in order;
- a hunk that fits two places equally well is refused, unless its @@ line number names one of them.
Context lines keep the file's version; added lines are re-indented when the model's indentation
differed from the file's in a consistent way (tabs for spaces, one level too few).
"""

from __future__ import annotations

from dataclasses import dataclass

from rapidfuzz import fuzz

from autoresearchd.implement.diffparse import Hunk

_LEVELS = ("exact", "rstrip", "whitespace")


def _key(s: str, level: str) -> str:
    if level == "exact":
        return s
    if level == "rstrip":
        return s.rstrip()
    return " ".join(s.split())


@dataclass
class Placement:
    mapping: list[int | None]     # per hunk line: the file line it stands for (None: '+', dropped)
    level: str
    lo: int                       # first file line the hunk covers
    hi: int                       # one past the last
    by_number: bool = False       # chosen among equal matches by the @@ line number


class HunkError(Exception):
    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def _match_at(file_keys: list[str], start: int, hunk_keys: list[tuple[str, str, int]],
              slack: int) -> tuple[list[tuple[int, int | None]], int] | None:
    """Walk the hunk's before-lines from file line `start`. Blank lines may be skipped on either
    side and up to `slack` context lines may differ; removed lines must match. Returns the
    (hunk line, file line) pairs and the number of mismatched context lines."""
    pairs: list[tuple[int, int | None]] = []
    fi, misses = start, 0
    n = len(file_keys)
    for idx, (tag, key, hpos) in enumerate(hunk_keys):
        if fi < n and file_keys[fi] == key:
            pairs.append((hpos, fi))
            fi += 1
            continue
        if slack < 0:
            return None
        if key == "" and tag == " ":
            pairs.append((hpos, None))      # a blank line the file does not have here
            continue
        skip = fi
        while skip < n and file_keys[skip] == "" and skip - fi < 2:
            skip += 1
        if skip < n and skip != fi and file_keys[skip] == key:
            pairs.append((hpos, skip))       # the file has extra blank lines here
            fi = skip + 1
            continue
        if tag == "-" or fi >= n:
            return None
        misses += 1
        if misses > slack:
            return None
        pairs.append((hpos, fi))             # a drifted context line: keep the file's version
        fi += 1
    return pairs, misses


def _candidates(file_keys, index, hunk_keys, slack):
    if not hunk_keys:
        return []
    anchors = [(off, k) for off, (t, k, _) in enumerate(hunk_keys) if k and (t == "-" or slack < 0)]
    if not anchors:
        anchors = [(off, k) for off, (_, k, _) in enumerate(hunk_keys) if k]
    starts: set[int] = set()
    for off, k in anchors[:1] if slack < 0 else anchors:
        for i in index.get(k, []):
            for d in range(-2, 3) if slack >= 0 else (0,):
                s = i - off + d
                if 0 <= s < len(file_keys):
                    starts.add(s)
    out = []
    for s in sorted(starts):
        r = _match_at(file_keys, s, hunk_keys, slack)
        if r:
            out.append(r)
    return out


def locate(lines: list[str], hunk: Hunk) -> Placement:
    before = [(i, t, s) for i, (t, s) in enumerate(hunk.lines) if t != "+"]
    stated = hunk.old_start - 1
    if not before:
        if lines:      # line numbers alone are too often invented to place lines by
            raise HunkError("thin", "it has no context lines, so there is no way to tell where its lines "
                            "go; include 2-3 unchanged lines around the change")
        return Placement([None] * len(hunk.lines), "exact", 0, 0)
    n_ctx = sum(1 for _, t, _ in before if t == " ")
    removed = [k for k, (_, t, _) in enumerate(before) if t == "-"]
    # (level, lead trimmed, trail trimmed, slack) in order of trust; slack -1 = strict window
    plans = [(lv, 0, 0, -1) for lv in _LEVELS]
    # Only context outside the outermost changed lines may be dropped: context between changes
    # anchors the added lines.
    changes = [i for i, (t, _) in enumerate(hunk.lines) if t != " "]
    lead_max = sum(1 for i, _, _ in before if i < changes[0]) if changes else 0
    trail_max = sum(1 for i, _, _ in before if i > changes[-1]) if changes else 0
    for total in range(1, n_ctx + 1):
        for lead in range(total + 1):
            trail = total - lead
            if lead <= lead_max and trail <= trail_max and lead + trail < len(before):
                plans.append(("whitespace", lead, trail, -1))
    plans.append(("whitespace", 0, 0, max(1, n_ctx // 3)))
    thin = by_number = False
    keys_by_level: dict[str, tuple[list[str], dict[str, list[int]]]] = {}
    for level, lead, trail, slack in plans:
        part = before[lead:len(before) - trail]
        # a pure insertion needs anchors: one non-blank line matched as written, else two
        need = 1 if (lead == trail == 0 and slack < 0) else 2
        if not removed and sum(1 for _, _, s in part if s.strip()) < need:
            if lead == trail == 0 and slack < 0 and level == "exact":
                thin = True
            continue
        if level not in keys_by_level:
            keys = [_key(s, level) for s in lines]
            index: dict[str, list[int]] = {}
            for i, k in enumerate(keys):
                index.setdefault(k, []).append(i)
            keys_by_level[level] = keys, index
        file_keys, index = keys_by_level[level]
        hunk_keys = [(t, _key(s, level), i) for i, t, s in part]
        found = _candidates(file_keys, index, hunk_keys, slack)
        if not found:
            continue
        best = min(m for _, m in found)
        found = {tuple(p): p for p, m in found if m == best}
        uniq = list(found.values())
        if len(uniq) > 1:
            at_stated = [p for p in uniq if _first(p) - lead == stated]
            if len(at_stated) != 1:
                where = ", ".join(str(_first(p) + 1) for p in uniq[:6])
                raise HunkError("ambiguous", f"its lines match {len(uniq)} places equally well (starting at "
                                f"lines {where}), so it was not applied. Include more unchanged lines around "
                                "the change so that it matches exactly one place, or give the exact line "
                                "number in the @@ header")
            uniq = at_stated
            by_number = True
        mapping: list[int | None] = [None] * len(hunk.lines)
        for hpos, fi in uniq[0]:
            mapping[hpos] = fi
        used = [fi for fi in mapping if fi is not None]
        return Placement(mapping, level if slack < 0 else "drift", min(used), max(used) + 1, by_number)
    if not removed and thin:
        raise HunkError("thin", "its only context is blank or a single line, which does not tell where "
                        "its lines go; include 2-3 non-blank unchanged lines around the change")
    raise HunkError("removed_missing" if removed else "not_found", "")


def _first(pairs) -> int:
    return next(fi for _, fi in pairs if fi is not None)


def _indent(s: str) -> str:
    return s[:len(s) - len(s.lstrip(" \t"))]


def _reindent(pairs: list[tuple[str, str]]):
    """A function fixing an added line's indentation, learnt from (hunk line, file line) pairs:
    tabs for spaces, a constant shift, or a scale (2-space code for 4-space code). An indentation
    that none of these explains raises HunkError: a guess there would be a wrong apply."""
    pairs = [(_indent(h), _indent(f)) for h, f in pairs if h.strip()]
    if all(h == f for h, f in pairs):
        return lambda s: s
    transforms = []
    for w in (4, 8, 2):
        transforms.append(lambda ind, w=w: ind.replace(" " * w, "\t"))
        transforms.append(lambda ind, w=w: ind.replace("\t", " " * w))
    if all(" " not in h + f or "\t" not in h + f for h, f in pairs):
        ch = next((f[0] for _, f in pairs if f), " ")
        for h, f in pairs:
            d = len(f) - len(h)
            if d % 2:      # an odd shift is a lost diff marker, not a re-indentation
                continue
            transforms.append(lambda ind, d=d, ch=ch: ch * (len(ind) + d) if len(ind) + d >= 0 else None)
            if h and f and len(f) != len(h):
                k = len(f) / len(h)
                transforms.append(lambda ind, k=k, ch=ch: ch * int(len(ind) * k)
                                  if float(len(ind) * k).is_integer() else None)
                break
    table = dict(pairs)
    fits = [t for t in transforms if all(t(h) == f for h, f in pairs)]

    def fix(s: str) -> str:
        if not s.strip():
            return s
        ind = _indent(s)
        if fits:       # every explanation of the context must agree on this line
            options = {t(ind) for t in fits}
            new = options.pop() if len(options) == 1 else None
        else:
            new = table.get(ind)
        if new is None:
            raise HunkError("indent", f"its indentation differs from the file's and the added line {s!r} "
                            "cannot be re-indented safely; copy the context lines with their exact "
                            "indentation")
        return new + s[len(ind):]
    return fix


def _check_numbers(placed: list[tuple[Placement, Hunk, int]]) -> None:
    """A line number may settle between equal matches only if the file's other hunks sit exactly
    at their stated lines: a model whose numbers are off elsewhere has no credible numbers."""
    if not any(p.by_number for p, _, _ in placed):
        return
    for p, h, _ in placed:
        first = next((fi for (t, _), fi in zip(h.lines, p.mapping) if t != "+"), None)
        if not p.by_number and h.old_start and first != h.old_start - 1:
            k = next(k for q, _, k in placed if q.by_number)
            e = HunkError("ambiguous", "its lines match more than one place; its @@ line number names one of "
                          f"them, but hunk {hunks_index(placed, h) + 1}'s line number is wrong, so the numbers "
                          "cannot be trusted. Include more unchanged lines around the change so that it "
                          "matches exactly one place")
            e.hunk, e.fits = k, [j for _, _, j in placed if j != k]
            raise e


def hunks_index(placed, h) -> int:
    return next(k for _, x, k in placed if x is h)


def apply_hunks(text: str, hunks: list[Hunk]) -> tuple[str, list[str]]:
    """New file text, and how each hunk was placed. Raises HunkError (with .hunk and .fits set).
    Each hunk becomes edits on the original lines (delete these, insert those before that line),
    so hunks whose context overlaps still combine; two hunks removing the same line do not."""
    lines = text.split("\n")
    eol = text.endswith("\n")
    if eol:
        lines.pop()
    # keep a CRLF file CRLF: the model's lines come without the carriage returns
    cr = "\r" if lines and sum(s.endswith("\r") for s in lines) > len(lines) // 2 else ""
    placed: list[tuple[Placement, Hunk, int]] = []
    first_error: HunkError | None = None
    for k, h in enumerate(hunks):
        try:
            placed.append((locate(lines, h), h, k))
        except HunkError as e:
            e.hunk = k
            first_error = first_error or e
    if first_error:
        first_error.fits = [k for _, _, k in placed]
        raise first_error
    _check_numbers(placed)
    deleted: dict[int, int] = {}
    inserts: dict[int, list[tuple[int, str, Hunk]]] = {}
    for p, h, k in sorted(placed, key=lambda x: (x[0].lo, x[2])):
        try:
            fix = _reindent([(h.lines[i][1], lines[fi]) for i, fi in enumerate(p.mapping) if fi is not None])
            at = p.lo
            for (tag, s), fi in zip(h.lines, p.mapping):
                if tag == "+":
                    inserts.setdefault(at, []).append((k, (fix(s) if p.level not in ("exact", "rstrip")
                                                           else s) + cr, h))
                elif fi is not None:
                    if tag == "-":
                        if fi in deleted:
                            raise HunkError("overlap", f"it removes line {fi + 1}, which hunk "
                                            f"{deleted[fi] + 1} removes too; merge the two hunks into one")
                        deleted[fi] = k
                    at = fi + 1
        except HunkError as e:
            e.hunk, e.fits = k, [j for _, _, j in placed if j != k]
            raise
    out: list[str] = []
    for i in range(len(lines) + 1):
        out += [s for _, s, _ in sorted(inserts.get(i, []), key=lambda x: x[0])]
        if i < len(lines) and i not in deleted:
            out.append(lines[i])
    tail = inserts.get(len(lines))
    if tail:
        eol = not max(tail, key=lambda x: x[0])[2].no_eol_new
    notes = [p.level for p, _, _ in sorted(placed, key=lambda x: x[2])]
    return "\n".join(out) + ("\n" if eol and out else ""), notes


def closest_lines(lines: list[str], hunk: Hunk, around: int = 2) -> str:
    """The file lines most like the hunk's before-text, numbered, for the error message."""
    before = [s for t, s in hunk.lines if t != "+"]
    if not lines or not before:
        return ""
    keys = [" ".join(s.split()) for s in lines]
    want = [" ".join(s.split()) for s in before]
    width = len(want)
    best, best_i = -1.0, 0
    for i in range(max(1, len(lines) - width + 1)):
        score = sum(fuzz.ratio(a, b) for a, b in zip(want, keys[i:i + width]))
        if score > best:
            best, best_i = score, i
    lo, hi = max(0, best_i - around), min(len(lines), best_i + width + around)
    return "\n".join(f"{n + 1:>5}| {lines[n]}" for n in range(lo, hi))
