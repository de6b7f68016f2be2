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

import logging

from rich.console import Console
from rich.segment import Segment

# The character table and the pure functions live in the leaf module `inert` (the store writes notes
# and commits through them too); re-exported here for the views.
from autoresearchd.inert import (HIDDEN_CATEGORIES, HIDDEN_RANGES, MULTILINE, html_text,  # noqa: F401
                                 is_hidden, needs_escaping, one_line, visible)


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
