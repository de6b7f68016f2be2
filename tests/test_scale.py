"""Scale: many queued ideas on many slots, and a big population read by the CLI and the policies.

- N ideas (branches made in one fast-import) on 16 local slots with a `run` that only prints its value:
  all finish, every note holds the right value, and the daemon's memory stays flat (VmRSS sampled at a
  quarter, half and all of the notes). CI runs N = 100; ARD_FULL=1 runs the full 1,000.
- 10,000 ideas with notes: a population read (the policies' view), the daemon's per-pass read after
  one new note, `status` and `ideas` stay within their targets (read <= 2 s on a quiet machine;
  asserted loosely, CI machines are shared).
Figures are printed (pytest -s shows them); bench/run_all.py reports the same ones.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.livepop import LivePopulation
from autoresearchd.store.notes import format_note, parse_note
from autoresearchd.store.population import read_population

from fixtures_reliability import Daemon, build_population, invariants, write_cfg

FULL = os.environ.get("ARD_FULL") == "1"
LOAD_MANIFEST = """[env]
name = "load"
run = "printf -- '---\\\\nscore: %s\\\\n' \\"$(cat v.txt)\\""
metric = "score"
goal = "min"
time_budget_s = 60
"""


@pytest.fixture
def load_env(make_repo):
    return make_repo({".autoresearch.toml": LOAD_MANIFEST, "v.txt": "2.0\n"}, "research")


def note_count(repo) -> int:
    out = subprocess.run(["git", "-C", str(repo), "notes", "--ref", "refs/notes/autoresearch", "list"],
                         capture_output=True, text=True).stdout
    return len(out.splitlines())


def test_many_queued_ideas_on_16_slots_memory_flat(load_env, tmp_path):
    n = 1000 if FULL else 100
    refs = build_population(load_env, n)
    cfg = write_cfg(tmp_path / "cfg", load_env, runner='kind = "local"\nslots = 16',
                    rest="[daemon]\ntick_s = 0.5\n[policy]\nbaseline_seeds = 1\nconfirm_seeds = 0\n")
    t0 = time.monotonic()
    d = Daemon(cfg)
    samples: dict[str, tuple[int, int, float]] = {}
    marks = {"quarter": n // 4, "half": n // 2, "all": n + 1}
    try:
        while True:
            assert d.p.poll() is None, f"the daemon died:\n{d.tail()}"
            done = note_count(load_env)
            for name, at in marks.items():
                if name not in samples and done >= at:
                    samples[name] = (*d.rss_kb(), time.monotonic() - t0)
            if done >= n + 1:
                break
            assert time.monotonic() - t0 < (900 if FULL else 300), f"only {done} of {n} notes"
            time.sleep(0.5)
    finally:
        d.kill9()
    wall = time.monotonic() - t0
    print(f"\nload: {n} ideas on 16 slots in {wall:.1f}s ({n / wall:.1f} trials/s); daemon VmRSS/VmHWM MB: " +
          ", ".join(f"{k} {v[0] / 1024:.0f}/{v[1] / 1024:.0f} at {v[2]:.0f}s" for k, v in samples.items()))
    repo = GitRepo(load_env)
    notes = invariants(repo)
    assert len(notes) == n
    for ref in refs:
        sha = repo.rev_parse(ref)
        k = int(ref.rsplit("i", 1)[1])
        assert abs(notes[sha].value - (1 + k / 100000)) < 1e-9, (ref, notes[sha].value)
    q, full = samples["quarter"][0], samples["all"][0]
    assert full < q * 1.5 + 50 * 1024, f"daemon RSS grew from {q / 1024:.0f} MB to {full / 1024:.0f} MB"


def _timed(cmd: list[str]) -> float:
    t = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return time.monotonic() - t


def test_10k_ideas_population_status_and_ideas(load_env, tmp_path):
    n = 10_000
    t = time.monotonic()
    build_population(load_env, n, notes=True)
    built = time.monotonic() - t
    repo = GitRepo(load_env)
    t = time.monotonic()
    pop = read_population(repo, "refs/heads/main")
    read_s = time.monotonic() - t
    assert len(pop.ideas) == n and all(i.note is not None for i in pop.ideas)
    assert parse_note(repo.note_read("refs/notes/autoresearch", pop.ideas[-1].commit)).value == pop.ideas[-1].value
    cfg = write_cfg(tmp_path / "cfg", load_env)
    cli = [sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg)]
    status_s = _timed(cli + ["status"])
    ideas_s = _timed(cli + ["ideas", "--limit", "20"])
    ideas_json_s = _timed(cli + ["ideas", "--json"]) if FULL else float("nan")   # slow: rich pretty-prints
    print(f"\n10k ideas: built in {built:.1f}s; population read {read_s:.2f}s (target 2s); status {status_s:.2f}s, "
          f"ideas --limit 20 {ideas_s:.2f}s, ideas --json {ideas_json_s:.2f}s (CLI, incl. interpreter start)")
    assert read_s < 10, f"reading 10k ideas took {read_s:.1f}s"
    # the daemon's per-pass read (store/livepop.py) after one new note: only that idea is built again
    live = LivePopulation(repo, "refs/heads/main")
    first = live.refresh()
    target = pop.ideas[len(pop.ideas) // 2]
    repo.note_write("refs/notes/autoresearch", target.commit,
                    format_note(target.note.model_copy(update={"value": 1.5})))
    t = time.monotonic()
    moved = live.refresh(scan=True)
    tick_s = time.monotonic() - t
    assert moved.by_commit[target.commit].value == 1.5 and len(moved.ideas) == n
    assert sum(a is not b for a, b in zip(moved.ideas, first.ideas)) == 1     # the rest: the same objects
    print(f"10k ideas: the daemon's per-pass read after one note {tick_s:.3f}s (full read {read_s:.2f}s)")
    assert tick_s < 2, f"a per-pass read at 10k ideas took {tick_s:.2f}s"
    assert status_s < 20 and ideas_s < 20 and not ideas_json_s > 60
