"""The population kept current by the changes: the daemon's tick and the dashboard read only what moved.

`LivePopulation.refresh` finds what changed since its last call three ways, each costing what changed:
- notes and leases: the notes refs (with the proposals and the baseline, few refs) listed at each
  refresh (with `own_writes`, the daemon's tick: at a scan, and between scans only the notes refs
  this process wrote); then, per notes ref that moved, the notes changed
  between the notes commit it read last and the new one, from the two trees as parsed and kept by id
  (GitRepo.notes_changes: only subtrees whose ids differ are read, through the persistent cat-file;
  no process);
- the refs this process wrote itself (update_ref/delete_ref: the implementer's marks, branches,
  proposals and records, the dispatcher's archives; every notes write) are events
  (store/refevents.py); the refs named are read again with one for-each-ref, none for the values
  a write told (refevents.read), and a refresh after no write of its own starts no process;
- a scan (`scan=True`, the start of each tick) lists the idea refs (branches, records, archives, the
  daemon's marks, the screens/ refs; with `own_writes`, only the namespaces another process may
  write, store/reflisting.py), the notes refs, the proposals and the baseline in one for-each-ref
  and compares the idea refs' lines with the last listing's: pushes, force-pushes, deletions,
  notes and proposals written by other processes.
The screened runs (refs/autoresearch/screens/, store/screens.py) ride on the same three: their refs are
scanned and told like idea refs, and a screen is built again only when its ref, note or lease moved.
Only ideas whose ref, commit, own mark, note or lease changed are built again; the ordered idea list,
the winner of each commit (a branch before its archive ref), the placements of pushed ideas and the
baseline's exclusion are patched for those alone. Nothing handed out is ever modified: a changed idea
is a new object. `reset()` drops every derived structure, so the next refresh is a full re-read (the
daemon's start and its periodic safety net, defaults.POPULATION_FULL_READ_TICKS); after any refresh
with `scan=True` the population equals `read_population` on the same repo (tests/test_livepop.py).
"""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter

from autoresearchd import defaults
from autoresearchd.store import refevents
from autoresearchd.store.gitrepo import GitError, GitRepo
from autoresearchd.store.ideas import Idea
from autoresearchd.store.population import (_IDEAS, _NOTES, Population, _at_baseline, _baseline_notes,
                                            _make_idea, _make_screen, _note, bulk, not_an_idea, read_objects,
                                            ref_rank)
from autoresearchd.store.liveorder import ShownOrder
from autoresearchd.store.reflisting import BY_OTHERS, SCANNED, Listing, cut, runs
from autoresearchd.store.refs import (ARCHIVE_PREFIX, IDEAS_PREFIX, NOTES_NAMESPACE, NOTES_REF,
                                      PROPOSALS_PREFIX, RUNS_REF, SCREENS_PREFIX)
from autoresearchd.store.screens import LiveScreens

MAX_EVENT_REFS = 500        # more refs told than this: one scan lists them all for less


_rank = ref_rank     # which ref shows a commit reached by several (population.ref_rank)


class LivePopulation:
    """A population kept current by reading only what changed since the last read. Refreshed by one
    thread at a time (the tick's, or the dashboard's poller); writers on any thread may tell it of refs."""

    def __init__(self, repo: GitRepo, baseline_ref: str, own_writes: bool = False):
        """`own_writes`: between scans only this process's writes need seeing at once (the daemon's
        tick, which writes the notes it reads), so a refresh without a scan lists nothing else;
        without it every refresh lists the notes refs, proposals and baseline (the dashboard, whose
        notes another process writes)."""
        self.repo, self.baseline_ref, self.own_writes = repo, baseline_ref, own_writes
        self._told: set[str] = set()                # refs this process wrote since the last refresh
        self._told_lock = threading.Lock()
        refevents.listen(repo.git_dir, self._tell)
        self.reset()

    def close(self) -> None:
        refevents.unlisten(self.repo.git_dir, self._tell)

    def _tell(self, ref: str) -> None:
        if ref.startswith(SCANNED) or self._is_cheap(ref):
            with self._told_lock:
                self._told.add(ref)

    def reset(self) -> None:
        """Forget everything derived: the next refresh reads the whole population (the parse caches
        keyed by object id stay: an object's parse never changes)."""
        self.pop: Population | None = None
        self._notes: dict[str, tuple[str | None, dict[str, str]]] = {}    # notes ref -> (commit, obj -> blob)
        self._cheap: dict[str, str] = {}
        self._list = Listing()                   # the idea refs' lines as last read (store/reflisting.py)
        self._refs: dict[str, str] = {}          # idea ref -> sha: branches, records, archives, proposals
        self._marks: dict[str, str] = {}         # the daemon's marks: ref -> sha
        self._own: Counter = Counter()           # sha -> marks on it
        self._by_sha: dict[str, set[str]] = {}   # sha -> idea refs on it
        self._built: dict[str, tuple[tuple, Idea]] = {}    # ref -> (what it was built from, unplaced idea)
        self._shown = ShownOrder()               # the shown ideas in order, by id, by commit
        self._pushed: set[str] = set()           # winning refs of commits the daemon did not write
        self._placed: dict[str, tuple[Idea, Idea]] = {}    # ref -> (unplaced idea, its placed copy)
        self._bkey: tuple = (None, None, None)   # the baseline commit, its note and lease blobs
        self._screens = LiveScreens()            # the screened runs (store/screens.py)
        self._unlisted: dict[str, object] = {}   # commit -> note: Population.unlisted

    # -- what changed ------------------------------------------------------------------------------
    def _notes_map(self, ref: str, commit: str | None) -> tuple[dict[str, str], set[str]]:
        """(obj -> blob at `commit`, the objs whose note changed since the last call)."""
        old, cur = self._notes.get(ref, (None, {}))
        if commit == old:
            return cur, set()
        changes = None
        if commit is not None and old is not None:
            try:
                changes = self.repo.notes_changes(old, commit)
            except GitError:                # the old commit is gone (a pruned, rewritten notes ref)
                changes = None
        if changes is not None:
            new = dict(cur)                 # the previous map may be in use by a caller still
            for obj, blob in changes.items():
                if blob is None:
                    new.pop(obj, None)
                else:
                    new[obj] = blob
            changed = set(changes)
        else:
            new = self.repo.notes_list(ref) if commit is not None else {}
            changed = {o for o in cur.keys() | new.keys() if cur.get(o) != new.get(o)}
        self._notes[ref] = (commit, new)
        return new, changed

    def _is_cheap(self, ref: str) -> bool:
        """A ref every refresh used to list: a notes ref, a proposal, the baseline branch."""
        return ref.startswith((NOTES_NAMESPACE, PROPOSALS_PREFIX)) or ref == self.baseline_ref

    def _listed(self, listing: bool, spec: list[str], whole: bool) -> tuple[dict[str, str], dict[str, str | None]]:
        """(the notes refs, proposals and baseline now; the scanned refs that moved: ref -> new sha,
        None: deleted). A listing reads them with one for-each-ref: with `own_writes` and not `whole`,
        only the namespaces another process may write and this process's own writes by name
        (store/reflisting.py); else every idea ref. Without a listing, the refs this process wrote
        since the last refresh and (unless `own_writes`) the notes refs, proposals and baseline: one
        for-each-ref, none with `own_writes` when this process wrote nothing."""
        with self._told_lock:
            told, self._told = self._told, set()
        if listing or len(told) > MAX_EVENT_REFS:
            whole = whole or not self.own_writes or len(told) > MAX_EVENT_REFS
            scanned = SCANNED if whole else BY_OTHERS
            named = [] if whole else sorted(r for r in told if not r.startswith(scanned) and not self._is_cheap(r))
            out = self.repo.git("for-each-ref", "--format=%(objectname) %(refname)",
                                NOTES_NAMESPACE, PROPOSALS_PREFIX, *spec, *scanned, *named)
            cheap_text, out = cut(out, [" " + NOTES_NAMESPACE, " " + PROPOSALS_PREFIX] +
                                   [f" {r}\n" for r in spec])
            cheap = {ref: sha for sha, ref in (ln.split(" ", 1) for ln in cheap_text.splitlines())}
            found = runs(out)
            moved: dict[str, str | None] = {}
            for ns in scanned:
                moved.update(self._list.compare(ns, found.get(ns, "")))
            now = {ref: sha for ns in SCANNED if ns not in scanned
                   for sha, _, ref in (ln.partition(" ") for ln in found.get(ns, "").splitlines())}
            if not whole:
                # own writes told while it listed (another thread): a mark written before a branch the
                # listing shows is read with it (the implementer writes mark, branch, then deletes the
                # proposal), as when the listing held the marks; they stay told for the next refresh
                with self._told_lock:
                    late = {r for r in self._told if not r.startswith(scanned) and not self._is_cheap(r)}
                if late - set(named):
                    named = sorted(set(named) | late)
                    now = self.repo.refs(*named)
            if named:       # this process's own writes in the namespaces not listed, read by name
                for ref in named:
                    old = self._old(ref)
                    if now.get(ref) != old:
                        moved[ref] = now.get(ref)
                        self._list.patch(ref, old, now.get(ref))
            return cheap, moved
        if self.own_writes:
            cheap = dict(self._cheap)
            if not told:
                return cheap, {}
            now = refevents.read(self.repo, told)      # the values its writes told; the rest from git
        else:       # the cheap refs and the refs told, in one listing
            now = self.repo.refs(NOTES_NAMESPACE, PROPOSALS_PREFIX, *spec,
                                 *sorted(r for r in told if not self._is_cheap(r)))
            cheap = {r: sha for r, sha in now.items() if self._is_cheap(r)}
            # refs told while it listed are read now: a proposal the listing found deleted had its
            # branch written (and told) before, so the idea is seen as one or the other, never neither
            with self._told_lock:
                late, self._told = self._told, set()
            if late:
                again = self.repo.refs(*sorted(late))
                told |= late
                for ref in late:
                    now.pop(ref, None)
                    if ref in again:
                        now[ref] = again[ref]
                    if self._is_cheap(ref):
                        cheap.pop(ref, None)
                        if ref in again:
                            cheap[ref] = again[ref]
        moved = {}
        for ref in told:
            if self._is_cheap(ref):
                if ref in now:
                    cheap[ref] = now[ref]
                else:
                    cheap.pop(ref, None)
            elif now.get(ref) != self._old(ref):
                moved[ref] = now.get(ref)
        for ref, sha in moved.items():
            self._list.patch(ref, self._old(ref), sha)
        return cheap, moved

    def _old(self, ref: str) -> str | None:
        """What a scanned ref pointed at when last read."""
        if ref.startswith(SCREENS_PREFIX):
            return self._screens.refs.get(ref[len(SCREENS_PREFIX):])
        return self._marks.get(ref) if ref.startswith(IDEAS_PREFIX) else self._refs.get(ref)

    # -- the refresh -------------------------------------------------------------------------------
    def refresh(self, scan: bool = True) -> Population | None:
        """The new population when anything changed since the last call, else None. Without `scan`,
        branches moved by other processes are seen at the next scan (notes, proposals, the baseline
        and this process's own ref writes at once; with `own_writes`, only this process's writes at
        once, everything else at the next scan)."""
        try:
            with bulk():
                return self._refresh(scan)
        except BaseException:
            self.reset()        # a read that failed half-way: the next one reads everything again
            raise

    def _refresh(self, scan: bool) -> Population | None:
        repo = self.repo
        first = self.pop is None
        spec = [self.baseline_ref] if self.baseline_ref.startswith("refs/") else []
        # the proposals before the idea refs: an idea the implementer turns from proposal into branch
        # (mark, branch, proposal deleted) is seen as one or the other, never neither
        cheap, moved = self._listed(scan or first, spec, first)
        baseline = (cheap.get(self.baseline_ref) if spec else repo.rev_parse(self.baseline_ref)) or None
        for ref in self._cheap.keys() | cheap.keys():
            if ref.startswith(PROPOSALS_PREFIX) and self._cheap.get(ref) != cheap.get(ref):
                moved[ref] = cheap.get(ref)
        notes, nchanged = self._notes_map(NOTES_REF, cheap.get(NOTES_REF))
        leases, lchanged = self._notes_map(RUNS_REF, cheap.get(RUNS_REF))
        bkey = (baseline, notes.get(baseline), leases.get(baseline)) if baseline else (None, None, None)
        self._cheap = cheap
        sshas: set[str] = set()              # the commits screens/ refs moved from and to
        skeys = {self._screens.move(r, moved.pop(r), sshas) for r in [r for r in moved if r.startswith(SCREENS_PREFIX)]}
        if not first and not moved and not skeys and not nchanged and not lchanged and bkey == self._bkey:
            return None
        self._rescreen(self._screens.touched(skeys, set(nchanged) | lchanged), notes, leases)
        shas = set(nchanged) | lchanged | sshas     # a screen's commit shows no idea (population.not_an_idea)
        if bkey[0] != self._bkey[0]:
            shas |= {bkey[0], self._bkey[0]} - {None}
        for ref, sha in moved.items():       # the index first: a sha's refs include the new ones
            if ref.startswith(IDEAS_PREFIX):
                self._move_mark(ref, sha, shas)
            else:
                self._move_ref(ref, sha, shas)
        refs = {r for s in shas if s in self._by_sha for r in self._by_sha[s]}
        refs |= {r for r in moved if not r.startswith(IDEAS_PREFIX)}
        self._rebuild(refs, notes, leases)
        shas |= {self._refs.get(r) for r in refs} - {None}
        for sha in shas:         # every old winner out first: a ref that moved was another sha's winner
            self._unwin(sha)
        # many ideas placed at once (a full read): appended, then sorted once; one insort each moves
        # half the list, n²/2 pointer moves (at 100k ideas, seconds of the daemon's start)
        many = len(shas) > defaults.POPULATION_BULK_WINS
        for sha in shas:
            self._win(sha, baseline, many)
        if many:
            self._shown.sort()
        self._bkey = bkey
        self._unlist(shas | sshas, notes, baseline)
        self._place()
        self._shown.index()
        shown = self._shown
        objs = repo.cat_file_batch([b for b in bkey[1:] if b and b not in _NOTES])
        self.pop = Population(list(shown.seq), baseline,
                              *_baseline_notes(baseline, bkey[1], bkey[2], objs),
                              at_baseline=_at_baseline({r: baseline for r in self._by_sha.get(baseline, ())},
                                                       baseline),
                              by_id=dict(shown.by_id), by_commit=dict(shown.by_commit),
                              screens=dict(self._screens.screens), unlisted=dict(self._unlisted))
        return self.pop

    def _unlist(self, shas: set[str], notes: dict, baseline: str | None) -> None:
        """Population.unlisted for the commits whose note, refs or baseline role changed."""
        want = {}
        for sha in shas:
            blob = notes.get(sha)
            # (a commit an idea ref reaches but that shows no idea: an old baseline, population.not_an_idea)
            if blob and sha not in self._shown.winner and sha not in self._screens.by_sha and sha != baseline:
                want[sha] = blob
            else:
                self._unlisted.pop(sha, None)
        objs = read_objects(self.repo, [b for b in want.values() if b not in _NOTES], set(), set(want.values()))
        self._unlisted.update((c, _note(b, objs)) for c, b in want.items() if b in objs or b in _NOTES)

    def _rescreen(self, keys: set[str], notes: dict, leases: dict) -> None:
        """Build again the screens of `keys` whose ref, note or lease moved (one cat-file for them all)."""
        want = self._screens.wanted(keys, notes, leases)
        wanted = [w for inputs in want.values() for w in inputs if w and w not in _NOTES and w not in _IDEAS]
        objs = read_objects(self.repo, wanted, {i[0] for i in want.values()}, {i[1] for i in want.values()} - {None})
        self._screens.rebuild(want, objs, _make_screen)

    def _move_mark(self, ref: str, sha: str | None, shas: set[str]) -> None:
        old = self._marks.pop(ref, None)
        if old is not None:
            self._own[old] -= 1
            if not self._own[old]:
                del self._own[old]
            shas.add(old)
        if sha is not None:
            self._marks[ref] = sha
            self._own[sha] += 1
            shas.add(sha)

    def _move_ref(self, ref: str, sha: str | None, shas: set[str]) -> None:
        old = self._refs.pop(ref, None)
        if old is not None:
            self._by_sha[old].discard(ref)
            if not self._by_sha[old]:
                del self._by_sha[old]
            shas.add(old)
        if sha is not None:
            self._refs[ref] = sha
            self._by_sha.setdefault(sha, set()).add(ref)
            shas.add(sha)

    def _rebuild(self, refs: set[str], notes: dict, leases: dict) -> None:
        """Build again the ideas of `refs` whose inputs changed (one cat-file for all of them)."""
        keys = {}
        for ref in refs:
            sha = self._refs.get(ref)
            if sha is None:
                self._built.pop(ref, None)
            else:
                key = (sha, sha in self._own, notes.get(sha), leases.get(sha))
                if self._built.get(ref, (None,))[0] != key:
                    keys[ref] = key
        wanted = [w for key in keys.values() for w in (key[0], key[2], key[3])
                  if w and w not in _NOTES and w not in _IDEAS]
        objs = read_objects(self.repo, wanted, {k[0] for k in keys.values()}, {k[2] for k in keys.values()} - {None})
        for ref, key in keys.items():
            sha, _, nb, lb = key
            if sha in objs or sha in _IDEAS:
                self._built[ref] = (key, _make_idea(ref, sha, self._own, nb, lb, objs))
            else:
                self._built.pop(ref, None)          # not a commit we can read: not an idea

    def _unwin(self, sha: str) -> None:
        """`sha` out of the ordered list (its winner is chosen again by _win)."""
        ref = self._shown.remove(sha)
        if ref is not None:
            self._pushed.discard(ref)

    def _win(self, sha: str, baseline: str | None, append: bool = False) -> None:
        """Which ref shows `sha` now (none for the baseline or an unreadable commit), and its place
        (with `append`, at the end: the caller sorts)."""
        cands = [r for r in self._by_sha.get(sha, ()) if r in self._built]
        if sha == baseline or not cands:
            return
        ref = cands[0] if len(cands) == 1 else min(cands, key=_rank)     # one ref: no key call
        idea = self._built[ref][1]
        if not_an_idea(idea, sha in self._screens.by_sha):     # a screen's or an old baseline's commit
            return
        self._shown.add(sha, ref, idea, (idea.committed_at, idea.idea_id, *_rank(ref)), append)
        if idea.branch and sha not in self._own:
            self._pushed.add(ref)

    def _place(self) -> None:
        """Pushed ideas get the daemon's lineage and epoch (population._placements), on copies."""
        current = max(self._shown.epochs, default=0)
        placed = {}
        for ref in self._pushed:
            i = self._built[ref][1]
            w = self._shown.winner.get(i.base_commit) if i.base_commit else None
            parent = self._built[w[3]][1] if w is not None else None
            parents = [parent.idea_id] if parent is not None and parent is not i else []
            epoch = i.note.epoch if i.note is not None and i.note.epoch is not None else current
            prev = self._placed.get(ref)
            if prev is None or prev[0] is not i or prev[1].parents != parents or prev[1].epoch != epoch:
                prev = (i, dataclasses.replace(i, placed_parents=parents, placed_epoch=epoch))
            placed[ref] = prev
            if self._shown.shown[ref] is not prev[1]:
                self._shown.replace(ref, i.commit, prev[1])
        self._placed = placed
