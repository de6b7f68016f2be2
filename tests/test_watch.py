"""The ref watcher (engine/watch.py): it pokes the daemon when an idea branch appears, moves or goes,
when packed-refs is rewritten and when the hook touches its poke file; git reading the repo (every
git process opens config, HEAD and packed-refs) pokes nothing, and since issue 29 inotify does not
even report those reads to it."""

from __future__ import annotations

import subprocess
import threading
import time

from autoresearchd.engine.watch import start_watcher
from autoresearchd.store.gitrepo import GitRepo


def git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def test_the_watcher_pokes_on_branches_and_the_poke_file_not_on_reads(tmp_path):
    repo = GitRepo.init(tmp_path / "r")
    (repo.path / "a").write_text("a\n")
    base = repo.commit_all_initial("base")
    pokes = []
    seen = threading.Event()

    def poke():
        pokes.append(time.monotonic())
        seen.set()
    obs = start_watcher(repo, poke)
    assert obs is not None
    try:
        def after(action) -> bool:
            time.sleep(0.3)              # earlier events (watchdog delays moves by up to 0.5 s) are in
            pokes.clear(), seen.clear()
            action()
            return seen.wait(3)
        for _ in range(3):               # reads only: no poke (git opens config, HEAD, packed-refs, refs/heads)
            assert not after(lambda: (git(repo.path, "for-each-ref"), git(repo.path, "rev-parse", "HEAD"),
                                      git(repo.path, "log", "--oneline", "-1")))
        assert after(lambda: git(repo.path, "update-ref", "refs/heads/idea/x/one", base))      # a new branch
        c2 = git(repo.path, "commit-tree", "-p", base, "-m", "two", git(repo.path, "rev-parse", f"{base}^{{tree}}").strip()).strip()
        assert after(lambda: git(repo.path, "update-ref", "refs/heads/idea/x/one", c2))        # it moves
        assert after(lambda: git(repo.path, "pack-refs", "--all"))                              # packed-refs
        assert after(lambda: git(repo.path, "update-ref", "-d", "refs/heads/idea/x/one"))      # it goes
        assert after(lambda: (repo.git_dir / "autoresearch" / "poke").write_text("1\n"))     # the hook's poke
        assert not after(lambda: git(repo.path, "update-ref", "refs/heads/other", base))        # not an idea
    finally:
        obs.stop()
        obs.join(5)
