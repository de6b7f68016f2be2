"""Trial bookkeeping in git: lease notes (refs/notes/autoresearch-runs) and result notes.

Crash-safety rests on write order. At dispatch the lease is written before the runner starts the
trial; at harvest the log blob is anchored, then the result note is written, then the lease is
cleared. A restart at any point re-derives the same state: a result already in the note is never
harvested twice, and a lease without a result is polled again.
"""

from __future__ import annotations

import time

from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.notes import Lease, Note, format_leases, format_note, parse_leases, parse_note
from autoresearchd.store.refs import LOGS_PREFIX, NOTES_REF, RUNS_REF


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

    def upsert_lease(self, commit: str, lease: Lease) -> None:
        cur = [lz for lz in self.leases(commit) if lz.trial_id != lease.trial_id]
        self.write_leases(commit, cur + [lease])

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
