"""Benchmark: what a cold population read spends per object, each step timed alone on a built repo's
objects (issue 28; docs/architecture.md, "The cold read with nothing saved").

For up to --limit note blobs and idea commits of REPO (a repo tests/popbuilder.py built, e.g.
bench/population.py --keep DIR), best of --repeat runs, µs of CPU per object, the cycle collector off:
  note: its lines (notes._note_fields), pydantic's validation, freezing it (frozen.freeze_parsed)
  saved note: its plain form loaded again (parsecache: marshal, then note_from)
  commit: its header, its message, its trailers, the parse cache's fields (population._parse_idea)
  idea: built from the cached fields by copying them (population._make_idea's way) and, for
        comparison, by the dataclass's __init__ (Idea(**fields))
Usage: .venv/bin/python bench/population_parts.py REPO [--limit 10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import gc
import marshal
import os
import sys
import time

from autoresearchd.store import parsecache, population
from autoresearchd.store.frozen import freeze_parsed
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.ideas import Idea, parse_message
from autoresearchd.store.notes import Note, _note_fields, parse_note
from autoresearchd.store.refs import NOTES_REF
from autoresearchd.store.trailers import parse_trailers


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repo")
    ap.add_argument("--limit", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args(argv)
    repo = GitRepo(a.repo)
    notes = list(repo.notes_list(NOTES_REF).items())[:a.limit]
    raw = dict(repo.cat_file_stream([b for _, b in notes] + [c for c, _ in notes]))
    texts = [raw[b].decode(errors="replace") for _, b in notes]
    commits = [(c, raw[c]) for c, _ in notes]
    fields = [_note_fields(t) for t in texts]
    frozen = [freeze_parsed(parse_note(t)) for t in texts]
    saved = marshal.dumps([parsecache.note_plain(n) for n in frozen if n is not None])
    heads = [population._parse_commit(r) for _, r in commits]
    msgs = [parse_message(h[2]) for h in heads]
    cached = [population._parse_idea(c, r) for c, r in commits]
    steps = {
        "note: lines": lambda: [_note_fields(t) for t in texts],
        "note: validation": lambda: [Note.model_validate(dict(f)) for f in fields],
        "note: lines + validation + freezing": lambda: [freeze_parsed(parse_note(t)) for t in texts],
        "saved note: loaded and rebuilt": lambda: [parsecache.note_from(p) for p in marshal.loads(saved)],
        "commit: header": lambda: [population._parse_commit(r) for _, r in commits],
        "commit: message": lambda: [parse_message(h[2]) for h in heads],
        "commit: trailers": lambda: [parse_trailers(m[2]) for m in msgs],
        "commit: all (the parse cache's fields)": lambda: [population._parse_idea(c, r) for c, r in commits],
        "idea: fields copied into __dict__": lambda: [_copied(f) for f in cached],
        "idea: Idea(**fields)": lambda: [Idea(**dict(f, leases=[])) for f in cached],
    }
    best: dict[str, float] = {}
    gc.disable()
    for _ in range(a.repeat):
        for name, fn in steps.items():
            t = time.process_time()
            fn()
            best[name] = min(best.get(name, float("inf")), time.process_time() - t)
    gc.enable()
    print(f"{len(notes)} notes and commits of {a.repo}, best of {a.repeat}, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; µs of CPU per object:")
    for name, s in best.items():
        print(f"  {name:42s} {s / len(notes) * 1e6:6.1f}")
    return 0


def _copied(fields) -> Idea:
    d = fields.copy()
    d["leases"] = []
    idea = object.__new__(Idea)
    idea.__dict__ = d
    return idea


if __name__ == "__main__":
    sys.exit(main())
