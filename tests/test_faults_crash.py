"""Crash safety: `kill -9` the real daemon process at seeded random points (while it implements
ideas with a slowed LLM, while it dispatches, while git writes a note), restart, run until idle, and
check that nothing was lost or done twice: every trial has exactly one result, no idea is duplicated
or lost (proposals recorded before a kill are implemented after it), no lease is left, git fsck passes.

A `git` shim on the daemon's PATH slows note writes so that kills land inside them. Kills alternate
between the daemon alone (its git child finishes the write) and its whole process group (the write
dies with it, as in an OOM kill of a cgroup). ARD_FULL=1 runs more kill cycles.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from fake_llm import FakeLLM

from autoresearchd.store.gitrepo import GitRepo

from conftest import TOY_RUN, branch_idea
from fixtures_reliability import (Daemon, ToyLLM, idea_refs, invariants, llm_config, run_until_idle, wait_for,
                                  write_cfg)

FULL = os.environ.get("ARD_FULL") == "1"
CYCLES = 24 if FULL else 10          # kill/restart cycles of the dispatch test
LLM_CYCLES = 16 if FULL else 6       # of the implement test (16 kills in CI in all)
SHIM = """#!/bin/bash
# slows note and lease writes (`git notes add`, or `git fast-import` and the `update-ref --stdin` that
# moves the refs for batched ones) so that a kill -9 lands while git writes one
# (each such write is also told, one line to $ARD_SHIM_SEEN, so the test sees every one of them, however
# loaded the machine: a walk of /proc every few ms could miss one)
case " $* " in *" notes "*" add "*|*" fast-import "*|*" update-ref "*" --stdin "*)
  [ -z "${{ARD_SHIM_SEEN:-}}" ] || echo "$$" >> "$ARD_SHIM_SEEN"; sleep {delay};; esac
exec {git} "$@"
"""


def git_shim(tmp: Path, delay: float = 0.15) -> dict:
    import shutil
    d = tmp / "shim"
    d.mkdir()
    (d / "git").write_text(SHIM.format(delay=delay, git=shutil.which("git")))
    (d / "git").chmod(0o755)
    return {"PATH": f"{d}:{os.environ['PATH']}", "ARD_SHIM_SEEN": str(d / "seen")}


def children(pid: int) -> list[str]:
    """Command lines of the descendants of pid (by walking /proc)."""
    kids: dict[int, list[int]] = {}
    cmd: dict[int, str] = {}
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            stat = Path(f"/proc/{e}/stat").read_text()
            cmd[int(e)] = Path(f"/proc/{e}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        kids.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(e))
    out, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(cmd.get(c, ""))
            todo.append(c)
    return out


def started(d: Daemon, limit: float = 60.0) -> None:
    """Wait for this daemon's start (its "research repo" line): its imports and first read can take
    longer than a kill window at load 6-8, so a window counted from the launch missed every point."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and d.p.poll() is None:
        with open(d.log, "rb") as f:
            f.seek(d.log_start)
            if b"research repo:" in f.read():
                return
        time.sleep(0.02)


def kill_at(d: Daemon, rng: random.Random, mode: str, timeout: float = 5.0) -> str:
    """Kill the daemon at a point chosen by `mode`; returns what was hit. `timeout`: how long to wait
    for that point once the daemon has started. A note write is seen by the git shim's own word (each
    one, so the window can be long: 20 s); a submit by a walk of /proc, in 5 s (a longer window let
    the first daemon, whose writes the walk missed, run the whole queue)."""
    # the shim holds each note or lease write for a moment (leases are written just before the runner's
    # submit); `runner` catches the submit itself (tar into the trial dir, the wrapper's launch)
    pattern = {"note": (" notes ", "fast-import", "update-ref -m autoresearchd --stdin"), "runner": ("tar -x -C", "trial.sh"),
               "random": None}[mode]
    told = Path(d.env["ARD_SHIM_SEEN"]) if mode == "note" and "ARD_SHIM_SEEN" in d.env else None
    if pattern is not None:
        started(d)           # (a random kill may still land in the start)
    hit = "random"
    if pattern is None:
        time.sleep(rng.uniform(0.3, 3.0))
    elif told is not None:
        before = told.stat().st_size if told.exists() else 0
        deadline = time.monotonic() + 4 * timeout
        hit = "missed"
        while time.monotonic() < deadline and d.p.poll() is None:
            if told.exists() and told.stat().st_size > before:
                hit = mode
                time.sleep(rng.uniform(0, 0.1))
                break
            time.sleep(0.005)
    else:
        deadline = time.monotonic() + timeout
        hit = "missed"
        while time.monotonic() < deadline and d.p.poll() is None:
            if any(p in c for c in children(d.pid) for p in pattern):
                hit = mode
                time.sleep(rng.uniform(0, 0.1))
                break
            time.sleep(0.005)
    d.kill9(group=rng.random() < 0.5)
    return hit


def slow_run(counter: Path, value: float, sleep: float) -> str:
    return TOY_RUN.replace("x = 1.0", f"open({str(counter)!r}, 'a').write(os.environ['AUTORESEARCH_TRIAL'] + "
                                      f"'\\n')\nimport time; time.sleep({sleep})\nx = {value}")


def trial_key(trial_id: str) -> str:
    """A trial id without its retry suffix: the (idea, commit, seed) it measures."""
    parts = trial_id.split("-")
    return "-".join(parts[:-1]) if parts[-1].startswith("r") and parts[-1][1:].isdigit() else trial_id


def test_kill9_during_dispatch_and_note_writes(toy_env, tmp_path):
    rng = random.Random(1234)
    counter = tmp_path / "runs.log"
    commits = {}
    for k in range(12):
        v = round(0.6 + k / 100, 2)
        commits[branch_idea(toy_env, f"crash/i{k}", f"Idea {k}", {"run.py": slow_run(counter, v, 0.8)})] = v
    cfg = write_cfg(tmp_path / "cfg", toy_env)
    env = git_shim(tmp_path)
    repo = GitRepo(toy_env)
    hits = []
    for cycle in range(CYCLES):
        d = Daemon(cfg, env=env)
        hits.append(kill_at(d, rng, ("note", "runner", "random", "note")[cycle % 4]))
    assert hits.count("note") >= CYCLES // 3, hits
    run_until_idle(cfg, timeout=120, env=env)
    notes = invariants(repo)
    assert set(notes) == set(commits)
    for c, n in notes.items():
        assert len(n.trials) == 1 and abs(n.value - commits[c]) < 0.011, (c, n)
    # never run twice: each (idea, seed) started at most once, whatever the retries
    started = [trial_key(t) for t in counter.read_text().split()]
    assert len(started) == len(set(started)), sorted(started)


def test_kill9_during_implement_and_proposals(toy_env, tmp_path):
    rng = random.Random(99)
    with FakeLLM() as fake:
        toy = ToyLLM(propose_delay=0.3, implement_delay=1.5)
        fake.script(*[toy] * 400)
        cfg = write_cfg(tmp_path / "cfg", toy_env, llm=llm_config(fake.openai_url, max_ideas=9),
                        rest="")
        repo = GitRepo(toy_env)
        seen: dict[str, set] = {"branch": set(), "proposal": set(), "record": set()}
        branch_commits: dict[str, str] = {}
        hits = []
        for cycle in range(LLM_CYCLES):
            d = Daemon(cfg)
            if cycle % 2 == 0:
                # inside an implementation: the fake server holds an implement request (none is left once
                # every idea is implemented: then the kill lands at a random point). Counted from the
                # daemon's start, not its launch: at load 6-8 the start alone took most of 8 s.
                started(d)
                try:
                    wait_for(lambda: d.p.poll() is None and fake.in_flight > 0 and any(
                        "Implement the research idea" in str(r.body) for r in fake.requests[-3:]), 12,
                        what="an implement call in flight")
                    time.sleep(rng.uniform(0, 0.6))
                    hits.append("implement")
                except AssertionError:
                    hits.append("random")
                d.kill9(group=rng.random() < 0.5)
            else:
                hits.append(kill_at(d, rng, ("runner", "random", "note")[cycle % 3]))
            refs = idea_refs(repo)
            for kind, ids in refs.items():
                seen[kind] |= set(ids)
            for ref, sha in repo.refs("refs/heads/idea/").items():
                assert branch_commits.setdefault(ref, sha) == sha, f"{ref} moved after a restart"
        assert seen["proposal"], "no kill ever found a recorded proposal"
        assert hits.count("implement") >= 2, hits
        run_until_idle(cfg, timeout=180)
        refs = idea_refs(repo)
        final = set(refs["branch"]) | set(refs["record"])
        lost = (seen["branch"] | seen["proposal"] | seen["record"]) - final
        assert not lost, f"ideas lost across restarts: {lost}"
        assert seen["proposal"] <= final, "a proposal recorded before a kill was not implemented after it"
        notes = invariants(repo)
        assert len(refs["branch"]) >= 9
        for sha, n in notes.items():
            assert len(n.trials) == 1
        # each idea implemented into exactly one branch: ids are unique (checked by idea_refs), and no two
        # branches carry the same idea text
        titles = [repo.commit_message(s).splitlines()[0] for s in repo.refs("refs/heads/idea/").values()]
        assert len(titles) == len(set(titles))


def test_stale_git_locks_left_by_a_killed_writer_are_cleared(toy_env, tmp_path):
    """A git process killed while holding a ref lock leaves `<ref>.lock` behind; the daemon must not be
    wedged by it forever (it was: every reconcile failed with 'cannot lock ref')."""
    a = branch_idea(toy_env, "lock/a", "Idea a", {"run.py": TOY_RUN.replace("x = 1.0", "x = 0.7")})
    git_dir = toy_env / ".git"
    locks = [git_dir / "refs/notes/autoresearch.lock", git_dir / "refs/notes/autoresearch-runs.lock"]
    for lock in locks:
        lock.parent.mkdir(parents=True, exist_ok=True)
        lock.write_text("")
        os.utime(lock, (time.time() - 3600, time.time() - 3600))
    run_until_idle(write_cfg(tmp_path / "cfg", toy_env), timeout=60)
    notes = invariants(GitRepo(toy_env))
    assert notes[a].status.value == "succeeded"
    assert not any(lock.exists() for lock in locks)


def test_fresh_lock_of_a_live_writer_is_respected(toy_env, monkeypatch):
    """A lock younger than STALE_LOCK_S may belong to a live git process: it is left alone (the write
    waits for it, store/gitproc.py lock_retry; three tries here, well inside STALE_LOCK_S)."""
    from autoresearchd import defaults
    from autoresearchd.store.gitrepo import GitError
    monkeypatch.setattr(defaults, "GIT_LOCK_TRIES", 3)
    repo = GitRepo(toy_env)
    lock = toy_env / ".git/refs/heads/idea/busy.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("")
    with pytest.raises(GitError):
        repo.update_ref("refs/heads/idea/busy", repo.rev_parse("main"))
    assert lock.exists()
