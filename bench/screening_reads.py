"""What reading the screens costs: make N screened commits with notes in a fresh repo, then time
`read_population` (which carries them: store/screens.py) cold (commit messages and note blobs parsed)
and warm (the parse caches hold them), and the daemon's LivePopulation: its first read, and a refresh
after one more screen note (what a tick pays when a screened run finishes). The screener reads no git
of its own: it reads `Population.screens`.
Usage: python bench/screening_reads.py [N]"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autoresearchd.engine import screening
from autoresearchd.manifest import parse_manifest
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.lifecycle import Lifecycle
from autoresearchd.store import population
from autoresearchd.store.livepop import LivePopulation
from autoresearchd.store.notes import Note, Status
from autoresearchd.store.population import read_population

# the fidelity knob and its screening (tests/test_screening_daemon.py declares its env with it too)
STEPS = """
[[env.knobs]]
name = "steps"
type = "int"
low = 1
high = 1000
baseline = 100
[env.screening]
knob = "steps"
fraction = 0.25
"""
MANIFEST = '[env]\nrun = "python3 run.py"\nmetric = "score"\n' + STEPS


def main(n: int) -> None:
    env = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@b", GIT_COMMITTER_NAME="b",
               GIT_COMMITTER_EMAIL="b@b")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        subprocess.run(["git", "init", "-q", "-b", "main"], cwd=d, check=True)
        (d / ".autoresearch.toml").write_text(MANIFEST)
        (d / "run.py").write_text("print(1)\n")
        subprocess.run(["git", "add", "-A"], cwd=d, check=True, env=env)
        subprocess.run(["git", "commit", "-qm", "base"], cwd=d, check=True, env=env)
        repo, m = GitRepo(d), parse_manifest(MANIFEST)
        lc = Lifecycle(repo)
        head = repo.rev_parse("HEAD")
        t = time.perf_counter()
        with lc.batch():
            for i in range(n):
                c = screening.make_screen(repo, lc, m, head, f"idea{i}")
                lc.screen_result(c, Note(status=Status.SUCCEEDED, screened={"value": 1.0 + i / n}))
        print(f"make_screen + its note x{n}: {(time.perf_counter() - t) / n * 1000:.1f} ms each")
        for label in ("cold", "warm", "warm"):
            if label == "cold":
                population._NOTES.clear()
                population._IDEAS.clear()
            t = time.perf_counter()
            got = read_population(repo, "main").screens
            print(f"read_population with {len(got)} screens ({label}): {(time.perf_counter() - t) * 1000:.1f} ms")
        live = LivePopulation(repo, "main")
        t = time.perf_counter()
        live.refresh()
        print(f"LivePopulation first read (warm caches): {(time.perf_counter() - t) * 1000:.1f} ms")
        for k in range(3):      # against a refresh for a note on a commit that is no screen (the baseline's)
            lc.result(head, None, Note(status=Status.SUCCEEDED, value=1.0 + k))
            t = time.perf_counter()
            live.refresh(scan=False)
            base = time.perf_counter() - t
            c = screening.make_screen(repo, lc, m, head, f"one-more-{k}")
            lc.screen_result(c, Note(status=Status.SUCCEEDED, screened={"value": 1.0}))
            t = time.perf_counter()
            pop = live.refresh(scan=False)
            ms = (time.perf_counter() - t) * 1000
            print(f"LivePopulation refresh after one more screen and its note: {ms:.1f} ms "
                  f"({len(pop.screens)} screens); after a baseline note: {base * 1000:.1f} ms")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
