"""Watches the research repo's refs with watchdog and pokes the daemon when an idea branch appears
or moves (loose refs under refs/heads/idea/, packed-refs, and the hook's poke file). Events only
make things faster: the clock's reconcile finds every branch anyway.
"""

from __future__ import annotations

import logging

from watchdog.events import (DirCreatedEvent, DirDeletedEvent, DirModifiedEvent, DirMovedEvent, FileClosedEvent,
                             FileCreatedEvent, FileDeletedEvent, FileModifiedEvent, FileMovedEvent,
                             FileSystemEventHandler)
from watchdog.observers import Observer

from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.refs import IDEA_BRANCHES

log = logging.getLogger("autoresearchd")


def _relevant(path: str) -> bool:
    return ("/" + IDEA_BRANCHES.rstrip("/") in path or path.endswith("packed-refs") or path.endswith("/autoresearch/poke")
            ) and not path.endswith(".lock")


# Every event but a file opened or closed unwritten, which only say that git read something (each git
# process opens the git dir's config, HEAD and packed-refs; a ref listing opens every refs/heads
# directory): the handler skipped them, but watchdog parsed, grouped and queued each in Python first,
# and they came to more of the daemon's CPU than its tick (issue 29). With the filter inotify never
# reports them.
_EVENTS = [FileCreatedEvent, DirCreatedEvent, FileModifiedEvent, DirModifiedEvent, FileMovedEvent, DirMovedEvent,
           FileDeletedEvent, DirDeletedEvent, FileClosedEvent]


def start_watcher(repo: GitRepo, poke):
    """Start an observer; returns it (call .stop()), or None if watchdog cannot watch here."""
    class Handler(FileSystemEventHandler):
        def on_any_event(self, event):
            if event.event_type in ("opened", "closed_no_write"):   # git reading refs, e.g. our own tick
                return
            paths = [getattr(event, "src_path", ""), getattr(event, "dest_path", "")]
            if any(_relevant(str(p)) for p in paths if p):
                poke()

    (repo.git_dir / "refs" / "heads" / "idea").mkdir(parents=True, exist_ok=True)
    obs = Observer()
    handler = Handler()
    (repo.git_dir / "autoresearch").mkdir(exist_ok=True)
    for d, deep in ((repo.git_dir / "refs" / "heads", True), (repo.git_dir, False), (repo.git_dir / "autoresearch", False)):
        # event_filter: watchdog 4.0 and later (pyproject's floor; checked in 4.0.0's wheel)
        obs.schedule(handler, str(d), recursive=deep, event_filter=_EVENTS)
    obs.daemon = True
    try:
        obs.start()
    except OSError as e:  # e.g. inotify limits; the clock still works
        log.warning("ref watcher unavailable (%s); relying on the clock", e)
        return None
    return obs
