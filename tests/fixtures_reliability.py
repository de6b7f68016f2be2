"""Helpers for the fault-injection, security and scale suites (tests/test_faults_*.py, test_hostile.py,
test_secrets.py, test_scale.py) and bench/run_all.py.

- `ToyLLM`: a responder for tests/fake_llm.py that plays a model for the toy env: propose requests get
  fresh, mutually dissimilar ideas (so the duplicate filter keeps them), implement requests get a diff
  that sets `x` in run.py to the value named in the idea. Optional delays slow either kind.
- `Daemon`: `python -m autoresearchd.cli --config CFG start` as a real subprocess, to kill with -9.
- `invariants(repo)`: what must hold after any crash and restart (one result per trial, no stale
  lease, no idea lost or doubled, `git fsck` clean).
- `build_population(repo, n, ...)`: n idea branches (and optionally result notes) made in one
  `git fast-import`, for load tests and benches.
"""

from __future__ import annotations

import atexit
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from fake_llm import Delay, Reply

from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.ideas import parse_message
from autoresearchd.store.notes import parse_leases, parse_note

NOTES = "refs/notes/autoresearch"
RUNS = "refs/notes/autoresearch-runs"
IDEA_REFS = ("refs/heads/idea/", "refs/autoresearch/proposals/", "refs/autoresearch/records/")

_WORDS = ("amber basalt cobalt dune ember fjord garnet harbor indigo jasper kelp lumen mosaic nectar onyx "
          "prism quartz raven sierra tundra umber velvet willow xenon yarrow zephyr acorn bramble cinder "
          "delta falcon glacier heron iris juniper kestrel lotus meadow nimbus orchid pebble quill reef "
          "saffron thistle urchin vortex wren").split()


def idea_text(k: int, value: float) -> tuple[str, str]:
    """(title, text) of toy idea k: distinct words per idea, so no two look like duplicates."""
    rng = random.Random(k * 7919)
    words = rng.sample(_WORDS, 9)
    title = f"Idea {k} {words[0]} {words[1]}"
    body = (f"{title}: set x to XVAL={value:.4f} because {' '.join(words[2:])} matter{k}.\n"
            f"[Code Changes] In run.py change the constant x to {value:.4f} ({words[8]}).")
    return title, body


def toy_diff(value: float, old: str = "x = 1.0") -> str:
    return ("Set x as the idea says.\n```diff\n--- a/run.py\n+++ b/run.py\n@@ -1,3 +1,3 @@\n"
            " import os, random\n random.seed(int(os.environ.get(\"AUTORESEARCH_SEED\", \"0\")))\n"
            f"-{old}\n+x = {value:.4f}\n```\n")


def is_propose(req) -> bool:
    text = _last_user(req)
    return "experiments" in text and ("Write exactly" in text or "more experiments" in text)


def _last_user(req) -> str:
    msgs = req.body.get("messages", []) if isinstance(req.body, dict) else []
    users = [m for m in msgs if m.get("role") == "user"]
    c = users[-1]["content"] if users else ""
    return c if isinstance(c, str) else " ".join(b.get("text", "") for b in c if isinstance(b, dict))


def _all_text(req) -> str:
    msgs = req.body.get("messages", []) if isinstance(req.body, dict) else []
    return "\n".join(m["content"] for m in msgs if isinstance(m.get("content"), str))


@dataclass
class ToyLLM:
    """A callable script item for FakeLLM: `fake.script(*[toy] * 500)`. Thread-safe."""
    propose_delay: float = 0.0
    implement_delay: float = 0.0
    start: int = 0
    implement: object = None          # callable(req, value) -> script item, to inject faults
    propose_reply: object = None      # callable(req, n) -> script item, or None for the default
    counter: int = field(default=0, init=False)
    proposed: list = field(default_factory=list, init=False)
    implemented: list = field(default_factory=list, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def value(self, k: int) -> float:
        return round(0.5 + (k % 400) / 1000, 4)

    def __call__(self, req):
        if is_propose(req):
            m = re.search(r"(?:exactly|write) (\d+)", _last_user(req), re.I)
            n = int(m.group(1)) if m else 1
            if self.propose_reply is not None and (item := self.propose_reply(req, n)) is not None:
                return item
            with self._lock:
                ks = list(range(self.start + self.counter, self.start + self.counter + n))
                self.counter += n
                self.proposed += ks
            blocks = []
            for k in ks:
                _, body = idea_text(k, self.value(k))
                blocks.append(f"[Experiment] {body}\n[End]")
            item = Reply("\n\n".join(blocks), input_tokens=1000, output_tokens=200 * n)
            return Delay(self.propose_delay, item) if self.propose_delay else item
        m = re.search(r"XVAL=([0-9.]+)", _all_text(req))
        value = float(m.group(1)) if m else 0.999
        with self._lock:
            self.implemented.append(value)
        item = self.implement(req, value) if self.implement is not None else \
            Reply(toy_diff(value), input_tokens=2000, output_tokens=100)
        return Delay(self.implement_delay, item) if self.implement_delay else item


def llm_config(fake_url: str, *, max_ideas: int = 6, extra: str = "") -> str:
    """Config lines for the openai provider against the fake server, small evolutionary batches."""
    return (f'provider = "openai"\nbase_url = "{fake_url}"\nmodel = "fake-model"\ntimeout_s = 5\n'
            f'max_retries = 1\nbackoff_s = 0.05\n{extra}\n'
            f'[policy]\nname = "evolutionary"\nideas_per_epoch = 100\nbatch = 3\nbaseline_seeds = 1\n'
            f'confirm_seeds = 0\nqueue_buffer = 2\n[implementer]\nmax_revisions = 0\nconcurrency = 2\n'
            f'[daemon]\ntick_s = 0.3\nmax_ideas = {max_ideas}\n')


def write_cfg(path: Path, research: Path, llm: str = 'provider = "none"', runner: str = 'kind = "local"\nslots = 2',
              rest: str = "[daemon]\ntick_s = 0.3\n[policy]\nbaseline_seeds = 1\nconfirm_seeds = 0\n") -> Path:
    """A config file; sections given as text (rest may carry [daemon]/[policy]/... tables)."""
    path.mkdir(parents=True, exist_ok=True)
    cfg = path / ".autoresearch.toml"
    # sandbox = "none" unless the runner text picks one: these daemon tests count runs in files
    # outside the trial, which a sandboxed run cannot write (test_tamper picks bwrap)
    sandbox = "" if "sandbox =" in runner else 'sandbox = "none"\n'
    cfg.write_text(f'[research]\nrepo = "{research}"\n[runner]\n{sandbox}{runner}\n[llm]\n{llm}\n{rest}')
    return cfg


# -- the daemon as a process -------------------------------------------------------------------------
class Daemon:
    """`autoresearchd start` in its own session. `kill9()` kills the daemon (and, with group=True, the
    git/bash children it had in flight, as an OOM kill of a cgroup would)."""

    def __init__(self, cfg: Path, *args: str, env: dict | None = None, log: Path | None = None):
        self.log = log or cfg.parent / "daemon.out"
        self._out = open(self.log, "ab")
        self.log_start = self._out.tell()      # where this daemon's own output begins in a shared log
        self.env = dict(env or {})
        e = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        self.p = subprocess.Popen([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), "start", *args],
                                  env=e, stdout=self._out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True)
        atexit.register(self.kill9)      # a test that fails mid-cycle must not leave a daemon running

    @property
    def pid(self) -> int:
        return self.p.pid

    def kill9(self, group: bool = False) -> None:
        try:
            if group:
                os.killpg(self.p.pid, signal.SIGKILL)
            else:
                os.kill(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.p.wait()
        self._out.close()

    def wait(self, timeout: float) -> int:
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill9(group=True)
            raise AssertionError(f"daemon did not finish within {timeout}s; log tail:\n{self.tail()}") from None
        finally:
            self._out.close()

    def tail(self, n: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def rss_kb(self) -> tuple[int, int]:
        """(VmRSS, VmHWM) of the daemon process in kB."""
        vals = {}
        for line in Path(f"/proc/{self.p.pid}/status").read_text().splitlines():
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                vals[k] = int(v.split()[0])
        return vals.get("VmRSS", 0), vals.get("VmHWM", 0)


def run_until_idle(cfg: Path, timeout: float = 120, env: dict | None = None) -> Daemon:
    d = Daemon(cfg, "--until", "idle", env=env)
    rc = d.wait(timeout)
    assert rc == 0, f"daemon exited {rc}:\n{d.tail()}"
    return d


def wait_for(pred, timeout: float, step: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


# -- what must hold ---------------------------------------------------------------------------------
def idea_refs(repo: GitRepo) -> dict[str, dict[str, str]]:
    """kind (branch/proposal/record) -> {idea id: ref}; an idea id on two refs of a kind is an error."""
    out: dict[str, dict[str, str]] = {"branch": {}, "proposal": {}, "record": {}}
    kinds = dict(zip(IDEA_REFS, out))
    for prefix, kind in kinds.items():
        for ref, sha in repo.refs(prefix).items():
            _, _, tr = parse_message(repo.commit_message(sha))
            iid = tr.get("Idea-Id") or f"h-{sha[:10]}"
            assert iid not in out[kind], f"idea {iid} has two {kind} refs: {out[kind][iid]} and {ref}"
            out[kind][iid] = ref
    return out


def invariants(repo: GitRepo, baseline: str = "refs/heads/main", allow=("succeeded",),
               proposals_ok: bool = False) -> dict:
    """Checks after a restart ran until idle. Returns {commit: note} for the idea branches."""
    ok, out = repo.fsck()
    assert ok, f"git fsck failed:\n{out}"
    leases = repo.notes_read_all(RUNS)
    stale = {c: [lz.trial_id for lz in parse_leases(t)] for c, t in leases.items() if parse_leases(t)}
    assert not stale, f"stale leases after idle: {stale}"
    refs = idea_refs(repo)
    assert proposals_ok or not refs["proposal"], f"proposals never implemented: {sorted(refs['proposal'])}"
    both = set(refs["branch"]) & set(refs["record"])
    assert not both, f"ideas that are both a branch and a record: {both}"
    notes = {c: parse_note(t) for c, t in repo.notes_read_all(NOTES).items()}
    trial_ids: list[str] = []
    result = {}
    for ref, sha in repo.refs("refs/heads/idea/").items():
        n = notes.get(sha)
        assert n is not None, f"{ref} has no result note"
        assert n.status.value in allow, f"{ref}: {n.status.value} ({n.error})"
        seeds = [t.seed for t in n.trials]
        assert len(seeds) == len(set(seeds)), f"{ref}: a seed measured twice: {seeds}"
        if not n.linked:
            trial_ids += [t.trial_id for t in n.trials]
        result[sha] = n
    base = repo.rev_parse(baseline)
    bn = notes.get(base)
    assert bn is not None, "the baseline has no result note"
    trial_ids += [t.trial_id for t in bn.trials]
    assert len(trial_ids) == len(set(trial_ids)), "a trial id appears in two notes"
    return result


# -- big populations, fast ---------------------------------------------------------------------------
def build_population(repo_path: Path, n: int, *, prefix: str = "load", notes: bool = False,
                     value_file: str = "v.txt", baseline: str = "main") -> list[str]:
    """n idea branches idea/<prefix>/iNNNNNN off baseline, each adding `value_file` with a distinct value,
    in one `git fast-import`. With notes=True each gets a succeeded result note too. Returns the refs."""
    base = subprocess.run(["git", "-C", str(repo_path), "rev-parse", baseline], capture_output=True, text=True,
                          check=True).stdout.strip()
    ts = int(time.time()) - n - 10
    out: list[bytes] = []
    refs = []
    for k in range(n):
        ref = f"refs/heads/idea/{prefix}/i{k:06d}"
        refs.append(ref)
        value = f"{1 + k / 100000:.6f}\n".encode()
        msg = (f"Load idea {k}\n\nSynthetic idea number {k} for scale tests.\n\n"
               f"Idea-Id: {prefix}-{k:06d}\nOrigin: seed\nEpoch: {k // 100}\n").encode()
        out += [f"commit {ref}\n".encode(), f"mark :{k + 1}\n".encode(),
                f"committer t <t@t> {ts + k} +0000\n".encode(), f"data {len(msg)}\n".encode(), msg,
                f"from {base}\n".encode(), f"M 100644 inline {value_file}\n".encode(),
                f"data {len(value)}\n".encode(), value, b"\n",
                # the daemon's provenance mark: these stand for ideas the daemon wrote
                f"reset refs/autoresearch/ideas/{prefix}-{k:06d}\nfrom :{k + 1}\n\n".encode()]
    if notes:
        out += [f"commit {NOTES}\n".encode(), f"committer t <t@t> {ts + n} +0000\n".encode(), b"data 5\nnotes\n"]
        parent = subprocess.run(["git", "-C", str(repo_path), "rev-parse", "-q", "--verify", NOTES],
                                capture_output=True, text=True).stdout.strip()
        if parent:
            out.append(f"from {parent}\n".encode())
        for k in range(n):
            v = 1 + k / 100000
            note = (f"succeeded score={v:.4f}\n\nschema: 1\nstatus: succeeded\nidea_id: {prefix}-{k:06d}\n"
                    f"metric: score\nvalue: {v!r}\nvalues: [{v!r}]\nseeds: [0]\n").encode()
            out += [b"N inline :%d\n" % (k + 1), f"data {len(note)}\n".encode(), note]
        out.append(b"\n")
    subprocess.run(["git", "-C", str(repo_path), "fast-import", "--quiet", "--force"], input=b"".join(out),
                   check=True, capture_output=True)
    return refs
