"""Which characters of a text a terminal or a renderer would obey rather than show, and the text with
each written out as its escape (`\\x1b`, `\\u202e`). Pure functions of the standard library: the
store writes notes and commit messages through them, the views print through them
(views/safe.py, docs/security.md "Every byte from an idea is data")."""

from __future__ import annotations

import functools
import html
import re

# Unicode categories a terminal or a renderer may obey rather than show: controls (C0, DEL, C1),
# format characters (bidi, zero-width, soft hyphen, tags...), lone surrogates, line/paragraph separators.
HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
# Those categories as code point ranges (Unicode 14, Python 3.11's unicodedata, plus the Egyptian
# format controls Unicode 15 added): one regex finds them at C speed, where asking unicodedata about
# every non-ASCII character cost 0.4 s per 512 KiB of CJK text. tests/test_escapes.py checks the
# table against the running Python's unicodedata, so a newer Unicode's additions fail a test.
HIDDEN_RANGES = ((0x00, 0x1F), (0x7F, 0x9F), (0xAD, 0xAD), (0x600, 0x605), (0x61C, 0x61C), (0x6DD, 0x6DD),
                 (0x70F, 0x70F), (0x890, 0x891), (0x8E2, 0x8E2), (0x180E, 0x180E), (0x200B, 0x200F),
                 (0x2028, 0x202E), (0x2060, 0x2064), (0x2066, 0x206F), (0xD800, 0xDFFF), (0xFEFF, 0xFEFF),
                 (0xFFF9, 0xFFFB), (0x110BD, 0x110BD), (0x110CD, 0x110CD), (0x13430, 0x1343F),
                 (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0001, 0xE0001), (0xE0020, 0xE007F))
MULTILINE = "\n\t"       # kept where a field is printed on several lines on purpose (bodies, diffs, logs)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


@functools.lru_cache(maxsize=8)
def _pattern(keep: str) -> re.Pattern:
    """The hidden characters, less those in `keep`, as one character class."""
    kept = sorted(ord(c) for c in set(keep))
    parts = []
    for lo, hi in HIDDEN_RANGES:
        for k in kept:                      # split a range around each kept character
            if lo <= k <= hi:
                if lo < k:
                    parts.append((lo, k - 1))
                lo = k + 1
        if lo <= hi:
            parts.append((lo, hi))
    return re.compile("[" + "".join(re.escape(chr(lo)) + ("-" + re.escape(chr(hi)) if hi > lo else "")
                                    for lo, hi in parts) + "]")


def _escaped(m: re.Match) -> str:
    ch = m.group()
    if ch in _NAMED:
        return _NAMED[ch]
    cp = ord(ch)
    return f"\\x{cp:02x}" if cp <= 0xFF else f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"


def is_hidden(ch: str) -> bool:
    """True for a character that a terminal or a text renderer would obey or hide instead of show."""
    return _pattern("").fullmatch(ch) is not None


def visible(text: str | None, keep: str = MULTILINE) -> str:
    """`text` with every control and format character replaced by its escape written out; the
    characters in `keep` (by default newline and tab) stay as they are."""
    if not text:
        return text or ""
    return _pattern(keep).sub(_escaped, text)


def needs_escaping(text: str, keep: str = MULTILINE) -> bool:
    return _pattern(keep).search(text) is not None


def one_line(text: str | None) -> str:
    """For a field printed on one line: newlines and tabs are escaped too."""
    return visible(text, keep="")


def html_text(text: str | None) -> str:
    """HTML-escaped, with control and format characters made visible (see the module docstring)."""
    return html.escape(visible(text))
