"""Text from an idea is data: the one place that makes it inert before a terminal, a log line or a web
page shows it.

Titles, commit messages, branch names, errors, file names and trial logs come from LLMs, from pushes
and from the trials themselves. A terminal obeys what starts with a control character: ESC opens CSI
(cursor moves, clear screen, hidden text), OSC (window title, hyperlinks), DCS, APC, PM and SOS; the
8-bit C1 forms (U+0080-U+009F, e.g. U+009B for CSI) do the same on terminals that read them; BS and CR
overprint; BEL rings. Unicode format characters reorder or hide text without any terminal support:
bidi overrides and isolates (U+202A-U+202E, U+2066-U+2069), zero-width characters, the soft hyphen,
line and paragraph separators. `visible` replaces every such character with its escape written out
(`\\x1b`, `\\x9b`, `\\u202e`), so the text is shown, not obeyed, and a reader sees what was tried.
No sequence survives: without its introducing control character, the rest is plain printable text.

Where it applies (docs/security.md, "Every byte from an idea is data"):
- `SafeConsole`, the rich Console every CLI view prints through: strings are made visible before rich
  lays them out, and every text segment again just before it is written (rich's own styles and
  cursor controls are added after, so they still work). A new field printed by any view is covered.
- `SafeFormatter`, the daemon's log lines (terminal and daemon.log): one record per line, newlines in
  a message shown as `\\n`, so a title or an error cannot forge a log line.
- `html_text`, for HTML (the report, the W&B panel): HTML-escaped, and the same characters made
  visible, because a browser obeys bidi overrides in escaped text too.
JSON (status --json, the dashboard's API, export) keeps the raw text: JSON escapes control characters
itself, and the dashboard's page makes them visible when it writes them as text (web/app.js).
"""

from __future__ import annotations

import html
import logging
import functools
import re

from rich.console import Console
from rich.segment import Segment

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


class SafeConsole(Console):
    """A rich Console that never writes a control or format character it was given as text.

    `render_str` makes a printed string visible before rich parses its markup and measures it (so
    tables keep their widths); `render` checks every segment again before it is written, which covers
    Text objects and any renderable a view builds. Segments that carry rich's own controls (Live's
    cursor moves) pass as they are, and styles are turned into escape codes only after this point.
    """

    def render_str(self, text: str, **kw):
        return super().render_str(visible(text), **kw)

    def render(self, renderable, options=None):
        for seg in super().render(renderable, options):
            if seg.control is None and seg.text and needs_escaping(seg.text):
                seg = Segment(visible(seg.text), seg.style)
            yield seg


class SafeFormatter(logging.Formatter):
    """Log lines (the terminal's and daemon.log's): one record per line, whatever the message holds.
    A message's newlines are shown as `\\n`; a traceback keeps its lines, each made visible."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return one_line(super().formatMessage(record))

    def formatException(self, ei) -> str:
        return visible(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return visible(super().formatStack(stack_info))


GUTTER = "| "
UNTRUSTED = "trial output, untrusted text"


def untrusted_lines(text: str | None, indent: str = "") -> str:
    """Output a trial (or a coding agent) wrote, for the terminal: each line made visible and set behind
    a gutter, so no line of it can pass for a line of the view around it."""
    text = (text or "").replace("\r\n", "\n")             # CRLF is a line end
    lines = visible(text.removesuffix("\n"), keep="\n\t").split("\n")
    return "\n".join(indent + GUTTER + ln for ln in lines)
