"""What the screening step reads from git per tick: make N screened commits in a fresh repo, then time
`read_screens` (cold: commit messages and note blobs read; warm: only the listings).
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
from autoresearchd.store.notes import Note, Status

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
            t = time.perf_counter()
            got = screening.read_screens(repo)
            print(f"read_screens of {len(got)} ({label}): {(time.perf_counter() - t) * 1000:.1f} ms")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
