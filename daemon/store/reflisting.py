"""What a scan finds moved among the idea refs: one for-each-ref's listing compared with the last one,
namespace by namespace (store/livepop.py's scan).

The idea refs live in five namespaces. Who may write each decides what a scan must list:
- `refs/heads/idea/`: people's pushes, and the daemon's branches;
- `refs/autoresearch/records/`: the daemon, and `autoresearchd queue` in its own process (a proposal
  it drops as a duplicate gets its record there);
- `refs/autoresearch/ideas/` (the marks), `archive/` and `screens/`: the daemon's process alone. The
  pre-receive hook refuses a push under refs/autoresearch/, and no command of another process writes
  there (tests/test_livepop.py holds this against the code).
A process that hears its own writes as events (the daemon's tick: LivePopulation's `own_writes`)
therefore lists only the first two at a scan, `BY_OTHERS`: at 100k ideas that is 100k refs instead of
185k, and git's listing costs by the ref it prints. Everything is listed at a whole read (the start,
and every defaults.POPULATION_FULL_READ_TICKS passes), which also catches a ref someone moved by
hand with `git update-ref`. A reader that does not hear the writer's events (the dashboard) lists
all five at every scan.

The listing is sorted by ref name, so each namespace is one run of lines: it is cut out by finding
its first and last line, and compared as one string with the last listing's run. Only a run that
differs is split into lines and compared as sets.
"""

from __future__ import annotations

from autoresearchd.store.refs import ARCHIVE_PREFIX, IDEA_BRANCHES, IDEAS_PREFIX, RECORDS_PREFIX, SCREENS_PREFIX

SCANNED = (IDEA_BRANCHES, RECORDS_PREFIX, ARCHIVE_PREFIX, IDEAS_PREFIX, SCREENS_PREFIX)   # every idea ref
BY_OTHERS = (IDEA_BRANCHES, RECORDS_PREFIX)     # the namespaces another process may write


def namespace(ref: str) -> str | None:
    """The scanned namespace a ref is in (None: not an idea ref)."""
    return next((ns for ns in SCANNED if ref.startswith(ns)), None)


def _run(out: str, needle: str) -> tuple[int, int] | None:
    """(start, end) of the run of lines holding `needle` in a listing sorted by ref name (the refs
    under one prefix are one run: found by its first and last line, str.find, not by splitting every
    line; a listing holds every idea ref); None when no line holds it."""
    i = out.find(needle)
    if i < 0:
        return None
    return out.rfind("\n", 0, i) + 1, out.find("\n", out.rfind(needle)) + 1


def cut(out: str, needles: list[str]) -> tuple[str, str]:
    """(the lines of for-each-ref's output that hold a needle, the rest)."""
    if out and not out.endswith("\n"):
        out += "\n"
    cut = []
    for needle in needles:
        if (r := _run(out, needle)) is not None:
            cut.append(out[r[0]:r[1]])
            out = out[:r[0]] + out[r[1]:]
    return "".join(cut), out


def runs(out: str) -> dict[str, str]:
    """A for-each-ref listing ("<sha> <ref>" lines, sorted by ref) cut into its namespaces' runs of lines.
    A ref holds no space, so " <namespace>" is found only where a line's ref begins."""
    if out and not out.endswith("\n"):
        out += "\n"
    return {ns: out[r[0]:r[1]] for ns in SCANNED if (r := _run(out, " " + ns)) is not None}


class Listing:
    """The lines of the idea refs as last read, by namespace: what a scan compares against. Refs this
    process moved since (its events) are patched in, so the comparison stays right for a namespace
    that a scan does not list."""

    def __init__(self) -> None:
        self.text: dict[str, str | None] = {}   # namespace -> its run in the last listing (None: patched since)
        self.lines: dict[str, set[str]] = {}    # namespace -> "sha ref" of every ref in it

    def compare(self, ns: str, text: str) -> dict[str, str | None]:
        """The refs of `ns` that moved, given its run in a new listing: ref -> new sha (None: gone)."""
        if text == self.text.get(ns):
            return {}
        lines = set(text.splitlines())
        old = self.lines.get(ns, set())
        gone, new = old - lines, lines - old
        self.text[ns], self.lines[ns] = text, lines
        moved: dict[str, str | None] = {ln.partition(" ")[2]: None for ln in gone}
        moved.update((ln.partition(" ")[2], ln.partition(" ")[0]) for ln in new)
        return moved

    def patch(self, ref: str, old: str | None, new: str | None) -> None:
        """A ref this process moved (an event), or one read by name: its line as it is now."""
        ns = namespace(ref)
        if ns is None:
            return
        lines = self.lines.setdefault(ns, set())
        self.text[ns] = None            # the next scan of it compares lines, not the whole run
        lines.discard(f"{old} {ref}")
        if new is not None:
            lines.add(f"{new} {ref}")
