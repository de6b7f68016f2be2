"""Find the diff in an LLM's answer: inside one or more fenced blocks, or bare after the prose.
An unclosed fence (a truncated answer) yields what is there, without the final newline, so that
diffparse.parse_diff can report the last hunk as possibly cut off.
"""

from __future__ import annotations

import re

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+.-]*)[^`]*$")


def is_header(lines: list[str], i: int) -> bool:
    ln = lines[i]
    return (ln.startswith(("diff --git ", "@@"))
            or (ln.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")))


def _looks_like_diff(lines: list[str]) -> bool:
    return any(is_header(lines, i) for i in range(len(lines)))


def extract_diff(response: str) -> str | None:
    """The diff in an LLM answer, fenced or not; None when there is none. Several fenced
    diff blocks are joined. An unclosed fence (truncated output) yields what is there."""
    if not response or not response.strip():
        return None
    lines = response.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence = m.group(1), m.group(2)
        body, i, closed = [], i + 1, False
        while i < len(lines):
            ln = lines[i]
            if ln.startswith(indent) and ln[len(indent):].rstrip() == fence[0] * len(fence) \
                    or (ln.startswith(indent + fence) and ln.strip() == fence):
                closed = True
                break
            body.append(ln.removeprefix(indent))
            i += 1
        i += 1
        if _looks_like_diff(body):
            blocks.append(("\n".join(body).rstrip("\n"), closed))
    if blocks:
        # An unclosed fence means the answer was cut off: the text then ends without a newline,
        # which parse_diff reads as "possibly truncated".
        return "\n".join(b for b, _ in blocks) + ("\n" if blocks[-1][1] else "")
    for k in range(len(lines)):
        if is_header(lines, k):
            return "\n".join(lines[k:]).rstrip("\n") + "\n"
    return None
