"""The text of notes writes in a `git fast-import` stream (store/gitnotes.py writes it): a notes
commit's head, the lines that write or remove notes (the message as `git notes add` stores it), and
the queued writes of a batch grouped by notes ref. No git runs here."""

from __future__ import annotations

import re
import time

from autoresearchd.store.gitproc import IDENTITY


def per_ref(queue: list) -> dict[str, dict[str, str | None]]:
    """Queued note writes by notes ref, refs in the order of their last write, a later write to the
    same note winning."""
    per_ref: dict[str, dict[str, str | None]] = {}
    for ref, obj, text in queue:
        per_ref.setdefault(ref, {})[obj] = text
    last = {ref: i for i, (ref, _, _) in enumerate(queue)}
    return {ref: per_ref[ref] for ref in sorted(per_ref, key=last.get)}


def commit_head(ref: str, mark: int) -> bytes:
    """A notes commit's first lines in a fast-import stream (its parent and notes follow)."""
    msg = b"Notes added by autoresearchd\n"
    return b"commit %s\nmark :%d\ncommitter %s <%s> %d +0000\ndata %d\n%s\n" % (
        ref.encode(), mark, IDENTITY["GIT_COMMITTER_NAME"].encode(), IDENTITY["GIT_COMMITTER_EMAIL"].encode(),
        int(time.time()), len(msg), msg)


def note_lines(items: dict[str, str | None]) -> list[bytes]:
    """fast-import's lines that write (text) or remove (None) the notes on these objects."""
    body = []
    for obj, text in items.items():
        if text is None:
            body.append(f"N {'0' * 40} {obj}\n".encode())
        else:
            data = stripspace(text).encode()
            body.append(b"N inline %s\ndata %d\n%s\n" % (obj.encode(), len(data), data))
    return body


def stripspace(text: str) -> str:
    """What `git notes add` stores for a message: lines right-stripped, runs of blank lines
    collapsed, no blank lines at either end, a final newline."""
    lines = [ln.rstrip() for ln in text.splitlines()]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")
    return text + "\n" if text else ""
