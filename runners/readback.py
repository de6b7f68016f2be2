"""Reading back what trials left on their hosts, one round trip per host: the files a finished
trial leaves (`FILES`, streamed back in one tar by `read_files_many`), the poll script's word as a
poll state (`poll_word`), a running trial's learning curve so far (`read_many`; its host script and
parsing are runners/progress.py), and why a run could not even write its exit code (`disk_hint`: a
full disk). `by_host` groups the handles, one command per host. runners/base.py calls them."""

from __future__ import annotations

import io
import shlex
import tarfile
import time
from typing import Any

from autoresearchd import defaults

from .limits import step_files
from .outcome import whole_tail
from .progress import Point, decode_lines, parse, reader_script
from .protocol import PollState, Shell

FILES: list[str] = ["prepare.rc", "prepare.log", "run.rc", "run.timed_out", "started", "done", "tamper.txt", "run_result.json",
                    "eval.rc", "eval.timed_out", "run.head", "run.tail",
                    "eval.head", "eval.tail", "wrapper.log", *step_files(),
                    # the split evaluation: the scorer's inputs phase, the model runner's
                    # (untrusted) log, and trial.sh's own reason when a step failed
                    "eval_inputs.head", "eval_inputs.tail", "model.head", "model.tail",
                    "model.rc", "model.timed_out", "eval.error",
                    "progress.jsonl"]     # the run's learning curve, bounded by trial.sh


def by_host(handles: list[dict[str, Any]]) -> dict[str, list[int]]:
    """host -> the indexes of its handles: one command per host."""
    groups: dict[str, list[int]] = {}
    for i, h in enumerate(handles):
        groups.setdefault(h["host"], []).append(i)
    return groups


def poll_word(word: str, handle: dict[str, Any]) -> PollState:
    """The poll script's word for one trial (runners/trialdir.py, POLL_FN), as a poll state."""
    if word == "nopid":     # crashed between lease and submit, or the wrapper is just starting
        fresh = time.time() - handle.get("submitted", 0) < defaults.STARTING_GRACE_S
        return PollState.RUNNING if fresh else PollState.LOST
    return {"done": PollState.DONE, "missing": PollState.MISSING, "running": PollState.RUNNING,
            "dead": PollState.LOST}.get(word, PollState.UNREACHABLE)


def read_files_many(sh: Shell, dirs: list[str], names: list[str]) -> list[dict[str, bytes]]:
    """Read small files of several trial directories in one round trip: the shell picks the ones
    that exist (builtins only) and one `tar` streams them all back."""
    q = shlex.quote
    rels = [d.strip("/") for d in dirs]
    script = ("cd / && for f in " + " ".join(q(f"{r}/{n}") for r in rels for n in names) +
              "; do [ -f \"$f\" ] && printf '%s\\0' \"$f\"; done | tar -c --null -T - -f -")
    rc, out, err = sh.run(script, timeout=120)
    if rc != 0:
        raise RuntimeError(f"reading trial files on {sh.name} failed: {whole_tail(err) or f'exit {rc}'}")
    res: list[dict[str, bytes]] = [{} for _ in dirs]
    where = {r: k for k, r in enumerate(rels)}
    with tarfile.open(fileobj=io.BytesIO(out)) as tf:
        for m in tf:
            d, _, name = m.name.rpartition("/")
            if m.isreg() and d in where:
                res[where[d]][name] = tf.extractfile(m).read()
    return res


def disk_hint(sh: Shell, d: str) -> str | None:
    """Why the wrapper could not even write the run's exit code: most often a full disk."""
    try:
        _, out, _ = sh.run(f"df -Pk {shlex.quote(d)} | tail -n 1", timeout=30)
        avail = int(out.split()[3])
    except Exception:  # noqa: BLE001 - only a hint
        return None
    if avail >= 1024:
        return None
    return f"the disk holding {d} on {sh.name} is full ({avail} kB free); free space there"


def read_many(runner, handles: list[dict], metric: str) -> list[list[Point] | None]:
    """Each trial's curve so far, by its handle (None where its host could not be read): one command
    per host, hosts at once (runner.map), as ShellRunner polls."""
    out: list[list[Point] | None] = [None] * len(handles)
    groups = by_host(handles)

    def one(host: str) -> None:
        idx = groups[host]
        rc, res, _ = runner.shell_for(host).run(reader_script([handles[i]["dir"] for i in idx]), timeout=60)
        raw = decode_lines(res, len(idx)) if rc == 0 else None
        for i, data in zip(idx, raw or []):
            out[i] = parse(data, metric)
    runner.map(one, list(groups))
    return out
