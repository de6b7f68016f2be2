"""Watches the research repo's refs with watchdog and pokes the daemon when an idea branch appears
or moves (loose refs under refs/heads/idea/, packed-refs, and the hook's poke file). Events only
make things faster: the clock's reconcile finds every branch anyway.
"""

from __future__ import annotations

import logging

from watchdog.events import FileSystemEventHandler
from watchdog.observers import Observer

from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.refs import IDEA_BRANCHES

log = logging.getLogger("autoresearchd")


def _relevant(path: str) -> bool:
    return ("/" + IDEA_BRANCHES.rstrip("/") in path or path.endswith("packed-refs") or path.endswith("/autoresearch/poke")
            ) and not path.endswith(".lock")


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
    obs.schedule(handler, str(repo.git_dir / "refs" / "heads"), recursive=True)
    obs.schedule(handler, str(repo.git_dir), recursive=False)
    (repo.git_dir / "autoresearch").mkdir(exist_ok=True)
    obs.schedule(handler, str(repo.git_dir / "autoresearch"), recursive=False)
    obs.daemon = True
    try:
        obs.start()
    except OSError as e:  # e.g. inotify limits; the clock still works
        log.warning("ref watcher unavailable (%s); relying on the clock", e)
        return None
    return obs
