"""Git notes I/O, mixed into GitRepo: list and read notes in one batch, write or remove one note
(serialised per ref, retried while another process holds the ref's lock), and batched writes that
land as one `git fast-import` commit per ref instead of a process per note; a batch that also writes
blobs and refs, or several notes refs (a harvest), lands as one fast-import and one ref transaction.
"""

from __future__ import annotations

import hashlib
import os
import re
from contextlib import contextmanager

from autoresearchd.store.gitproc import IDENTITY, GitError, RefBusy, lock_retry
from autoresearchd.store.notestream import commit_head as _commit_head, note_lines as _note_lines, per_ref as _per_ref
from autoresearchd.store.refevents import moved as _moved
from autoresearchd.store.refs import ARCHIVE_PREFIX

REF_REASON = "autoresearchd"         # the reflog message of the daemon's ref writes


class NotesIO:
    """The notes half of GitRepo (it provides path, _run, git, rev_parse, _pyrepo, cat_file_batch,
    tree_of, _tree_entries, commit_tree, update_ref, _notes_lock, _notes_refs_seen, _notes_tips and
    _batch)."""

    # -- notes -------------------------------------------------------------------------------
    def notes_list(self, ref: str) -> dict[str, str]:
        """annotated object sha -> note blob sha, for one notes ref (one process)."""
        self._flush_notes()
        if not self.rev_parse(ref):
            return {}
        out = self.git("notes", "--ref", ref, "list")
        res = {}
        for line in out.splitlines():
            blob, _, obj = line.partition(" ")
            res[obj] = blob
        return res

    def notes_changes(self, old: str, new: str) -> dict[str, str | None]:
        """annotated object sha -> its note blob at `new` (None: the note was removed), for every note
        that differs between two commits of a notes ref: what `git diff-tree -r` of the two says,
        whatever the number of notes."""
        # diff-tree -r's answer, from the two trees as parsed and kept by id (gitexport._tree_entries):
        # only subtrees whose ids differ are read, and no process starts (a notes write was one
        # `diff-tree` for each notes ref at every population read, ~2 a trial)
        added: dict[str, tuple[str, str]] = {}
        gone: dict[str, tuple[str, str]] = {}
        self._tree_delta(self.tree_of(old), self.tree_of(new), "", gone, added)
        res: dict[str, str | None] = {}
        for path, (mode, sha) in added.items():
            if gone.get(path) != (mode, sha):
                res[_note_object(path)] = sha
        for path in gone:
            if path not in added:         # when git re-fans a notes tree, a note is deleted under its
                res.setdefault(_note_object(path), None)   # old path and added under its new one: the addition wins
        res.pop(None, None)
        return res

    def _tree_delta(self, a: str | None, b: str | None, prefix: str, gone: dict, added: dict) -> None:
        """Every non-tree entry under tree a (into gone) and tree b (into added) where the two differ,
        by path: the subtrees both name by the same id are skipped."""
        todo = [(a, b, prefix)]
        while todo:                   # a stack, not recursion: a tree's depth is whatever its writer made it
            a, b, prefix = todo.pop()
            ea = {name: (mode, sha) for mode, name, sha in self._tree_entries(a)} if a else {}
            eb = {name: (mode, sha) for mode, name, sha in self._tree_entries(b)} if b else {}
            for name in ea.keys() | eb.keys():
                x, y = ea.get(name), eb.get(name)
                if x == y:
                    continue
                sub_a = x[1] if x and x[0] == "040000" else None
                sub_b = y[1] if y and y[0] == "040000" else None
                if sub_a or sub_b:
                    todo.append((sub_a, sub_b, prefix + name + "/"))
                if x and not sub_a:
                    gone[prefix + name] = x
                if y and not sub_b:
                    added[prefix + name] = y

    def notes_read_all(self, ref: str) -> dict[str, str]:
        """annotated object sha -> note text, all in one batch."""
        listing = self.notes_list(ref)
        blobs = self.cat_file_batch(list(listing.values()))
        return {obj: blobs[b].decode(errors="replace") for obj, b in listing.items() if b in blobs}

    def note_read(self, ref: str, obj: str) -> str | None:
        """The note on obj (a name git resolves), read from the notes tree through the persistent
        cat-file, as `git notes show` would find it: at the object's id, or under any fan-out
        (ab/cdef..., ab/cd/ef...)."""
        self._flush_notes()
        target, tip = self.rev_parse(obj), self.rev_parse(ref + "^{commit}")
        if not target or not tip:
            return None
        with self._pyrepo() as r:
            node, rest = r.commit(tip).tree, target
            while rest and node.type == "tree":
                try:
                    return node[rest].data_stream.read().decode(errors="replace") or None
                except KeyError:
                    pass
                try:
                    node, rest = node[rest[:2]], rest[2:]
                except KeyError:
                    return None
        return None

    def note_write(self, ref: str, obj: str, text: str) -> None:
        """Write (replace) the note on obj. Serialised: git notes updates one ref per write."""
        if getattr(self._batch, "queue", None) is not None:
            self._batch.queue.append((ref, obj, text))
            return
        args = ["notes", "--ref", ref, "add", "-f", "-F", "-", obj]
        with self._notes_lock:
            try:
                for attempt in lock_retry():
                    with attempt:
                        try:
                            self._run(args, input=text.encode(), env=IDENTITY)
                        except GitError as e:
                            # another process (a CLI user, a second daemon) holds the ref's lock, or moved
                            # the ref between git's read and its write: written again on the new tip
                            raise RefBusy.of(e) if _busy(e) else e from None
            finally:
                self._notes_tips.pop(ref, None)     # its new tip is git's to tell
                _moved(self.git_dir, ref)       # a write of this process is an event (store/refevents.py)

    def note_remove(self, ref: str, obj: str) -> None:
        if getattr(self._batch, "queue", None) is not None:
            self._batch.queue.append((ref, obj, None))
            return
        with self._notes_lock:
            try:
                self._run(["notes", "--ref", ref, "remove", "--ignore-missing", obj], env=IDENTITY, check=False)
            finally:
                self._notes_tips.pop(ref, None)
                _moved(self.git_dir, ref)

    # -- batched notes: one `git fast-import` commit per ref instead of a process per note ------
    @contextmanager
    def notes_batch(self):
        """Within the block, this thread's note_write/note_remove calls are queued, then applied at
        its end (or before this thread reads notes): one commit per ref, refs in the order of their
        last write, so "result note, then clear the lease" keeps its order across refs. Its blobs
        (hash_blob) and plain ref writes (update_ref without an expected old value) are queued too and
        written first, in one process each (GitRepo._flush_refs), or before this thread runs any git."""
        if getattr(self._batch, "queue", None) is not None:
            yield                                # nested: the outer block applies everything
            return
        self._batch.queue, self._batch.refs, self._batch.blobs, self._batch.mark = [], {}, {}, None
        try:
            yield
        finally:
            try:
                self._flush_notes()
            finally:
                self._batch.queue = self._batch.refs = self._batch.blobs = self._batch.mark = None

    def _flush_notes(self) -> None:
        b, queue = self._batch, getattr(self._batch, "queue", None)
        if queue and (b.blobs or b.refs or len({ref for ref, _, _ in queue}) > 1):
            return self._write_together()
        try:
            self._flush_refs()      # the blobs and refs queued meanwhile go first (a log before its note)
        except BaseException:
            self._write_queue()     # the notes queued before them (_flush_refs dropped the rest)
            raise
        self._write_queue()

    def _write_queue(self) -> None:
        queue = getattr(self._batch, "queue", None)
        if not queue:
            return
        self._batch.queue = []
        for ref, items in _per_ref(queue).items():
            self.notes_write_many(ref, items)

    def _write_together(self) -> None:
        """The batch's blobs, refs and notes in two processes (_together; was a hash-object, an update-ref
        and a fast-import per notes ref). If that fails, the notes queued before any blob or ref are
        written as _flush_notes writes them, and it raises."""
        b = self._batch
        blobs, refs, queue, mark = b.blobs, b.refs, b.queue, b.mark
        b.blobs, b.refs, b.queue, b.mark = {}, {}, [], None     # cleared first: the git run below flushes nothing
        per_ref = _per_ref(queue)
        try:
            with self._notes_lock:
                self._together(blobs, refs, per_ref)
        except BaseException as e:
            for ref in [*refs, *per_ref]:
                _moved(self.git_dir, ref)
            if not isinstance(e, GitError):
                raise
            self._notes_tips.clear()
            b.queue = queue[:mark] if mark is not None else queue
            self._write_queue()             # no blob or ref queued: each notes ref alone, as before
            if mark is not None:
                raise

    def _together(self, blobs: dict[str, bytes], refs: dict[str, str], per_ref: dict[str, dict]) -> None:
        """One `git fast-import` writes the blobs and a notes commit per notes ref, each on the tip this
        handle last wrote or read, and moves no ref (`reset`); one `update-ref --stdin` transaction then
        moves every ref, each notes ref only from the tip its commit was built on: a lease is never
        cleared without its result note, no note names a log or archive ref that is not there. A notes
        ref that another writer moved is read again and its commit made anew."""
        tips, zero = self._notes_tips, "0" * (64 if self._object_format() == "sha256" else 40)
        for attempt in lock_retry():
            with attempt:
                olds = {ref: tips[ref] if ref in tips else self.rev_parse(ref) for ref in per_ref}
                made = [ref for ref, items in per_ref.items()      # nothing to remove from an absent ref
                        if olds[ref] is not None or any(t is not None for t in items.values())]
                stream = [b"blob\ndata %d\n%s\n" % (len(d), d) for d in blobs.values()]
                for k, ref in enumerate(made, 1):
                    stream += [_commit_head(ref, k), b"from %s\n" % olds[ref].encode() if olds[ref] else b"",
                               *_note_lines(per_ref[ref]), b"\nreset %s\n\n" % ref.encode()]
                stream += [b"get-mark :%d\n" % k for k in range(1, len(made) + 1)]
                news = self._run(["-c", "fastimport.unpackLimit=1000000", "fast-import", "--quiet", "--done"],
                                 input=b"".join(stream) + b"done\n").split() if stream else []
                blobs = {}                            # written: a retry makes only the commits again
                lines = [f"update {ref} {new}\n" for ref, new in refs.items()]
                lines += [f"update {ref} {new} {olds[ref] or zero}\n" for ref, new in zip(made, news)]
                try:
                    if lines:
                        self._run(["update-ref", "-m", REF_REASON, "--stdin"], input="".join(lines).encode())
                except GitError as e:
                    now = {ref: self.rev_parse(ref) for ref in made}
                    if all(now[ref] == olds[ref] for ref in made) and not e.lock_held:
                        raise                         # not a race with another writer: no retry helps
                    tips.update(now)
                    raise RefBusy.of(e) from None
                tips.update(zip(made, news))
                self._notes_refs_seen.update(made)
                # events, with the values that cannot be stale
                for ref, new in [*refs.items(), *((r, tips[r]) for r in made)]:
                    _moved(self.git_dir, ref, *([new] if ref in per_ref or ref == ARCHIVE_PREFIX + new else []))
                for ref in set(per_ref) - set(made):
                    _moved(self.git_dir, ref)
                return

    def _pending(self) -> None:
        """A blob or ref write is queued: the notes queued from now on may name it (a log blob, its
        ref, an archive ref written before its lease), so they are written only if it is."""
        if self._batch.mark is None:
            self._batch.mark = len(self._batch.queue)

    def _queue_ref(self, ref: str, new: str) -> None:
        self._pending()
        queue = self._batch.refs
        queue.pop(ref, None)            # the last write of a ref wins, in the order of last writes
        queue[ref] = new

    def _queue_blob(self, data: bytes) -> str:
        """A blob's id now (hashed here as git hashes it), the object at the batch's end."""
        sha = hashlib.new(self._object_format(), b"blob %d\0%s" % (len(data), data)).hexdigest()
        self._pending()
        self._batch.blobs[sha] = data
        return sha

    def _object_format(self) -> str:
        """The repository's hash, sha1 or sha256 (extensions.objectFormat), read once."""
        if not hasattr(self, "_hash_algo"):
            self._hash_algo = (self.config_get("extensions.objectformat") or "sha1").lower()
        return self._hash_algo

    def _flush_refs(self) -> None:
        """Write what this thread queued inside notes_batch(): the blobs (one `hash-object` or
        `fast-import`), then the refs (one `git update-ref --stdin` transaction): a trial's log is
        anchored before its note, and a harvest of several trials starts two processes instead of
        three a trial."""
        blobs, refs = getattr(self._batch, "blobs", None), getattr(self._batch, "refs", None)
        if not blobs and not refs:
            return
        mark, self._batch.mark = self._batch.mark, None
        self._batch.blobs, self._batch.refs = {}, {}
        try:
            if len(blobs) == 1:     # hash-object starts in a third of fast-import's time (~1.5 against 5 ms)
                self._run(["hash-object", "-w", "--stdin"], input=next(iter(blobs.values())))
            elif blobs:    # loose objects, as hash-object -w writes them: no pack file per harvest
                stream = b"".join(b"blob\ndata %d\n%s\n" % (len(data), data) for data in blobs.values())
                self._run(["-c", "fastimport.unpackLimit=1000000", "fast-import", "--quiet", "--done"],
                          input=stream + b"done\n")
            if refs:
                lines = "".join(f"update {ref} {new}\n" for ref, new in refs.items())
                try:
                    self._run(["update-ref", "-m", REF_REASON, "--stdin"], input=lines.encode())
                finally:
                    for ref in refs:
                        _moved(self.git_dir, ref)
        except BaseException:
            # none of the notes queued since these writes were queued is written: one may name a blob
            # or ref that is not there (a result note naming a log no ref keeps, leases written before
            # the archive refs they rely on). Their leases stay as git holds them, and the next tick
            # harvests or places them again, as when an unqueued write failed inside its own unit.
            queue = getattr(self._batch, "queue", None)
            if mark is not None and queue is not None:
                del queue[mark:]
            raise

    def ensure_notes_ref(self, ref: str) -> None:
        """Create `ref` as an empty notes commit if it does not exist: with notes.displayRef set,
        every `git log --notes` warns "notes ref ... is invalid" until the ref exists."""
        if self.rev_parse(ref) is not None:
            return
        empty = self.git("mktree", input=b"").strip()
        commit = self.commit_tree(empty, [], "Notes ref created by autoresearchd (no notes yet)")
        try:
            self.update_ref(ref, commit, "0" * len(commit))   # only if still absent: never clobber notes
        except GitError:
            pass                                               # someone wrote the first note meanwhile

    def notes_write_many(self, ref: str, items: dict[str, str | None]) -> None:
        """Write (text) or remove (None) the notes on many objects as one commit on ref. The ref
        moves only if nobody moved it meanwhile (fast-import refuses a non-fast-forward); retried."""
        if not items:
            return
        body = _note_lines(items)
        seen, told = self._notes_refs_seen, None
        with self._notes_lock:
            try:
                for attempt in lock_retry():
                    with attempt:
                        if ref in seen:
                            # fast-import resolves the tip itself (a `git rev-parse` per write was ~1.5 processes a
                            # trial); a ref moved meanwhile is still refused as a non-fast-forward, as below
                            parent = b"from %s^0\n" % ref.encode()
                        else:
                            old = self.rev_parse(ref)
                            if old is None and all(t is None for t in items.values()):
                                return                       # nothing to remove from a ref that does not exist
                            parent = b"from %s\n" % old.encode() if old else b""
                        # the new tip is asked for (get-mark): a batch that writes several refs builds on it
                        stream = _commit_head(ref, 1) + parent + b"".join(body) + b"\nget-mark :1\n"
                        try:   # small imports as loose objects: no pack file per batch
                            new = self._run(["-c", "fastimport.unpackLimit=1000000", "fast-import", "--quiet"],
                                            input=stream).strip()
                            seen.add(ref)
                            self._notes_tips[ref] = told = new
                            return
                        except GitError as e:
                            if ref in seen and "Invalid ref name or SHA1 expression" in e.stderr:
                                seen.discard(ref)            # deleted behind our back: read it again
                                _drop_crash_report(self.path, e.stderr)
                                raise RefBusy.of(e) from None
                            # moved meanwhile (fast-import refuses a non-fast-forward) or locked: again
                            raise RefBusy.of(e) if "Not updating" in e.stderr or _busy(e) else e from None
            finally:     # a write of this process is an event, with its value once git took it (store/refevents.py)
                _moved(self.git_dir, ref, *([told] if told else []))


def _busy(e: GitError) -> bool:
    """git refused a ref update for another writer: its lock held, or the ref not where git read it."""
    return e.lock_held or "cannot lock ref" in e.stderr


def _note_object(path: str) -> str | None:
    """The object a notes tree path annotates (fanned out as ab/cdef...), None for any other file."""
    obj = path.replace("/", "")
    return obj if len(obj) in (40, 64) and not obj.strip("0123456789abcdef") else None


def _drop_crash_report(cwd, stderr: str) -> None:
    """fast-import leaves a crash report in the git dir when it dies (here: a `from` naming a ref
    that is gone); remove the one it named, so an expected failure leaves nothing behind."""
    m = re.search(r"dumping crash report to (\S+)", stderr)
    if m:
        try:
            os.unlink(os.path.join(cwd, m.group(1)))      # relative to the repo, or absolute
        except OSError:
            pass
