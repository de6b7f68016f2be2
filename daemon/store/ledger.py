"""Trial bookkeeping in git: lease notes (refs/notes/autoresearch-runs), result notes, and the refs
that keep what they name (log blobs' anchors, archive refs). The lifecycle writer (store/lifecycle.py)
is its only writer.

Crash-safety rests on write order. At dispatch the archive ref and the lease are written before the
runner starts the trial; at harvest the log blob is anchored, then `write_result` writes the archive
ref, the result note and the lease clear, in that order. A restart at any point re-derives the same
state: a result already in the note is never harvested twice, a lease without a result is polled
again, and a lease is never cleared without its result note. Inside a notes batch (store/gitnotes.py)
the refs are written first at the flush, then each notes ref in the order of its last write, and a
failed ref write drops the notes queued after it.
"""

from __future__ import annotations

import time

from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.notes import Lease, Note, format_leases, format_note, parse_leases, parse_note
from autoresearchd.store.refs import ARCHIVE_PREFIX, LOGS_PREFIX, NOTES_REF, RUNS_REF


class Ledger:
    """Reads and writes leases and results for one research repo."""

    def __init__(self, repo: GitRepo):
        self.repo = repo

    # -- leases ----------------------------------------------------------------------------------
    def leases(self, commit: str) -> list[Lease]:
        text = self.repo.note_read(RUNS_REF, commit)
        return parse_leases(text) if text else []

    def write_leases(self, commit: str, leases: list[Lease]) -> None:
        if leases:
            self.repo.note_write(RUNS_REF, commit, format_leases(leases))
        else:
            self.repo.note_remove(RUNS_REF, commit)

    def all_leases(self) -> dict[str, list[Lease]]:
        return {c: parse_leases(t) for c, t in self.repo.notes_read_all(RUNS_REF).items()}

    # -- logs ------------------------------------------------------------------------------------
    def store_log(self, name: str, data: bytes) -> str:
        """Anchor a log blob under refs/autoresearch/logs/<name> so gc never drops it."""
        sha = self.repo.hash_blob(data)
        self.repo.update_ref(LOGS_PREFIX + name, sha)
        return sha

    # -- results ---------------------------------------------------------------------------------
    def note(self, commit: str) -> Note | None:
        text = self.repo.note_read(NOTES_REF, commit)
        return parse_note(text) if text else None

    def write_note(self, commit: str, note: Note) -> None:
        note.finished_at = note.finished_at or time.time()
        self.repo.note_write(NOTES_REF, commit, format_note(note))

    def write_result(self, commit: str, note: Note, kept: list[Lease] | None = None, archive: bool = False) -> None:
        """One result, whole: the archive ref (when asked: a commit on an idea branch), the note, then
        the leases still kept (None: left as they are). The lease clear comes last, so a crash between
        the writes leaves a note beside leases the next harvest drops, never a cleared lease without its
        note."""
        if archive:
            self.archive(commit)
        self.write_note(commit, note)
        if kept is not None:
            self.write_leases(commit, kept)

    # -- archive ---------------------------------------------------------------------------------
    def archive(self, commit: str) -> None:
        """Keep a commit that runs or ran under refs/autoresearch/archive/: a branch deleted or
        force-pushed meanwhile loses nothing."""
        self.repo.update_ref(ARCHIVE_PREFIX + commit, commit)
