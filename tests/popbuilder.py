"""A fast builder of realistic research populations in a real git repo, for tests and benchmarks.

`build_population(repo_path, n)` writes a baseline, n ideas across epochs (seed / exploit / explore /
human / greedy / best_of_n origins), their result notes (per-seed trials, deltas, decisions), logs,
implementer transcripts, and a few queued, running and implementing ideas, all in one
`git fast-import` stream, so 10,000 ideas take seconds. The same notes schema and trailers the
daemon writes are used (autoresearchd.store.notes / autoresearchd.store.ideas), so every reader sees real data.

Fixed points tests can rely on: the best confirmed idea is titled "Best confirmed idea", a luckier
unconfirmed one "Lucky single run" (decision pending), and the first idea of epoch 1 is a child of
an epoch-0 idea.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from pathlib import Path

from autoresearchd.engine.judge import decide
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.ideas import branch_for, format_message, make_idea_id
from autoresearchd.store.notes import Lease, Note, Status, Trial, format_leases, format_note
from autoresearchd.store.refs import IDEAS_PREFIX, NOTES_REF, PROPOSALS_PREFIX, RECORDS_PREFIX, RUNS_REF

MANIFEST = """[env]
name = "pop"
run = "python3 train.py"
metric = "val_loss"
goal = "min"
time_budget_s = 600
gpus = 1
context = "A synthetic population for observability tests."
"""
TRAIN = "lr = 0.001\nwidth = 256\nprint('---')\nprint('val_loss: 3.3')\n"
BASELINE_VALUES = [3.30, 3.31, 3.29]
T0 = 1_700_000_000


def blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class _Stream:
    """Accumulates a fast-import stream."""

    def __init__(self):
        self.parts: list[bytes] = []
        self.mark = 0

    def data(self, payload: bytes) -> None:
        self.parts.append(b"data %d\n" % len(payload) + payload + b"\n")

    def blob(self, payload: bytes) -> int:
        self.mark += 1
        self.parts.append(b"blob\nmark :%d\n" % self.mark)
        self.data(payload)
        return self.mark

    def commit(self, ref: str, ts: int, message: str, parent: str | None = None,
               files: dict[str, bytes] | None = None, notes: list[tuple[str, str]] | None = None) -> int:
        self.mark += 1
        self.parts.append(f"commit {ref}\nmark :{self.mark}\n"
                          f"committer autoresearchd <autoresearchd@localhost> {ts} +0000\n".encode())
        self.data(message.encode())
        if parent:
            self.parts.append(f"from {parent}\n".encode())
        for path, content in (files or {}).items():
            self.parts.append(f"M 100644 inline {path}\n".encode())
            self.data(content)
        for target, text in notes or []:
            self.parts.append(f"N inline {target}\n".encode())
            self.data(text.encode())
        return self.mark

    def reset(self, ref: str, frm: str) -> None:
        self.parts.append(f"reset {ref}\nfrom {frm}\n\n".encode())

    def bytes(self) -> bytes:
        return b"".join(self.parts) + b"done\n"


def _trial(tid: str, seed: int, status: Status, value: float | None, log: str | None, rng) -> Trial:
    return Trial(trial_id=tid, seed=seed, status=status, value=value, host="gpu-a", wall_s=rng.uniform(500, 620),
                 gpus=1, log=log, accelerator="H100", exit_code=0 if status == Status.SUCCEEDED else 1,
                 error=None if status == Status.SUCCEEDED else f"{status.value}: trial ended early")


def _origin(k: int, epoch: int, rng) -> str:
    if k % 37 == 5:
        return "human"
    if epoch == 0:
        return "seed"
    return rng.choices(["exploit", "explore", "greedy", "best_of_n"], [45, 45, 5, 5])[0]


def _pick_status(rng, with_failures: bool) -> Status:
    if not with_failures:
        return Status.SUCCEEDED
    return rng.choices([Status.SUCCEEDED, Status.IMPLEMENT_FAILED, Status.FAILED, Status.TIMED_OUT,
                        Status.REJECTED, Status.DUPLICATE, Status.LOST], [70, 10, 8, 4, 3, 3, 2])[0]


def _lines(title: str, body: str, idea_id: str, origin: str, parents: list[str], epoch: int, base: str,
           rng, extra: dict | None = None) -> str:
    tr = {"Idea-Id": idea_id if origin != "human" else None, "Origin": origin if origin != "human" else None,
          "Parents": parents, "Epoch": epoch if origin != "human" else None,
          "Model": "claude-test" if origin != "human" else None, "Base": base}
    if origin != "human":
        tok = rng.randint(2000, 9000)
        tr.update({"Attempts": rng.randint(1, 3), "Tokens": tok, "Cost-USD": f"{tok * 3e-6:.6f}"})
    tr.update(extra or {})
    return format_message(title, body, tr)


def build_population(repo_path, n: int, seed: int = 0, with_failures: bool = True,
                     per_epoch: int | None = None) -> GitRepo:
    """A research repo at repo_path holding n ideas with notes. Returns its GitRepo."""
    rng = random.Random(seed)
    path = Path(repo_path)
    repo = GitRepo.init(path)
    s = _Stream()
    baseline = s.commit("refs/heads/main", T0, "baseline: pop environment\n", None,
                       {".autoresearch.toml": MANIFEST.encode(), "train.py": TRAIN.encode()})
    base_ref = f":{baseline}"
    per_epoch = per_epoch or max(5, n // 10)
    bmean = sum(BASELINE_VALUES) / 3
    bstd = (sum((v - bmean) ** 2 for v in BASELINE_VALUES) / 2) ** 0.5
    notes: list[tuple[str, str]] = []       # (commit mark, note text)
    leases: list[tuple[str, str]] = []
    log_refs: list[tuple[str, str]] = []     # (ref, blob sha)
    blog = b"step 1 loss 4.0\nstep 2 loss 3.5\n---\nval_loss: 3.30\n"
    s.blob(blog)
    btrials = [Trial(trial_id=f"baseline-s{k}", seed=k, status=Status.SUCCEEDED, value=v, host="gpu-a",
                     wall_s=600.0, gpus=1, log=blob_sha(blog), accelerator="H100")
               for k, v in enumerate(BASELINE_VALUES)]
    notes.append((base_ref, format_note(Note(status=Status.SUCCEEDED, idea_id="baseline", metric="val_loss",
                                             goal="min", value=bmean, std=bstd, seeds=[0, 1, 2],
                                             values=BASELINE_VALUES, trials=btrials, gpu_s=1800.0, wall_s=600.0,
                                             host="gpu-a", accelerator="H100", finished_at=T0 + 1))))
    best: float | None = None
    by_epoch: dict[int, list[str]] = {}
    special = {n - 2: "Best confirmed idea", n - 1: "Lucky single run"} if n >= 4 else {}
    tail = {n - 3: "queued", n - 4: "running", n - 5: "implementing"} if with_failures and n >= 12 else {}
    for k in range(n):
        epoch = k // per_epoch
        ts = T0 + 10 + k * 60
        origin = _origin(k, epoch, rng)
        lr, width = rng.uniform(1e-4, 1e-2), rng.choice([128, 256, 384, 512])
        title = special.get(k) or f"Idea {k}: change lr to {lr:.5f} and width {width}"
        body = f"Hypothesis {k}: {title.lower()} improves {rng.choice(['stability', 'speed', 'loss'])}.\n\nDetails {k}."
        idea_id = make_idea_id(body, epoch, origin)
        prev = by_epoch.get(epoch - 1) or []
        parents = [rng.choice(prev)] if prev and origin in ("exploit", "greedy") else []
        if k == per_epoch and by_epoch.get(0):
            parents = [by_epoch[0][0]]
        status = Status.SUCCEEDED if k in special else _pick_status(rng, with_failures)
        if k in tail:
            status = tail[k]
        transcript = json.dumps([{"attempt": 1, "response": "```diff\n...\n```", "diff": "--- a/train.py",
                                  "method": "git-apply", "error": "patch does not apply at line 2"},
                                 {"attempt": 2, "response": "ok", "diff": "--- a/train.py", "method": "fuzzy",
                                  "error": None}]).encode()
        s.blob(transcript)
        tsha = blob_sha(transcript)
        log_refs.append((f"refs/autoresearch/logs/{idea_id}-implement", tsha))
        extra = {"Transcript": tsha} if origin != "human" else {}
        msg = _lines(title, body, idea_id, origin, parents, epoch, "", rng, extra)
        if status in (Status.IMPLEMENT_FAILED, Status.DUPLICATE, Status.IMPLEMENTING):
            prefix = PROPOSALS_PREFIX if status == Status.IMPLEMENTING else RECORDS_PREFIX
            mark = s.commit(prefix + idea_id, ts, msg, base_ref)
            if status != Status.IMPLEMENTING:
                err = ("the check command failed (exit 1)" if status == Status.IMPLEMENT_FAILED
                       else "duplicate of an earlier idea")
                notes.append((f":{mark}", format_note(Note(status=status, idea_id=idea_id, metric="val_loss",
                                                           error=err, log=tsha, tokens=5000, cost_usd=0.015,
                                                           finished_at=ts + 30))))
            by_epoch.setdefault(epoch, [])
            continue
        code = TRAIN.replace("0.001", f"{0.001 + k * 1e-6:.6f}").encode()
        branch = branch_for(idea_id, title, origin)
        mark = s.commit(branch, ts, msg, base_ref, {"train.py": code})
        if origin != "human":            # the daemon's mark: its own commits' trailers are believed
            s.reset(IDEAS_PREFIX + idea_id, f":{mark}")
        by_epoch.setdefault(epoch, []).append(idea_id)
        if status == Status.QUEUED:
            continue
        if status == Status.RUNNING:
            lz = Lease(trial_id=f"{idea_id}-s0", seed=0, runner="local", host="gpu-a", slot="0",
                       started=time.time() - 150, began=time.time() - 120, heartbeat=time.time())
            leases.append((f":{mark}", format_leases([lz])))
            continue
        logdata = f"run {k}\n".encode() * 50 + b"---\nval_loss: 3.2\n"
        s.blob(logdata)
        lsha = blob_sha(logdata)
        log_refs.append((f"refs/autoresearch/logs/{idea_id}-s0", lsha))
        if status == Status.SUCCEEDED:
            drift = 0.004 * epoch * rng.random()
            v0 = bmean - drift + rng.gauss(0, 0.01)
            if k in special:
                v0 = bmean - 0.2 if k == n - 2 else bmean - 0.35
            decision = decide(v0, "min", bmean, bstd, best, 2.0, True)
            seeds = [0]
            if decision == "pending" and k != n - 1:
                seeds = [0, 1, 2]
            if k == n - 2:
                decision, seeds = "pending", [0, 1, 2]
            if k == n - 1:
                decision = "pending"
            vals = [v0] + [v0 + rng.gauss(0, 0.01) for _ in seeds[1:]]
            mean = sum(vals) / len(vals)
            std = (sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) ** 0.5 if len(vals) > 1 else 0.0
            if len(seeds) > 1:
                decision = "confirmed" if (bmean - mean > 2 * bstd or k == n - 2) else "demoted"
            if decision in ("promoted", "confirmed"):
                best = mean if best is None else min(best, mean)
            trials = [_trial(f"{idea_id}-s{sd}", sd, Status.SUCCEEDED, v, lsha, rng) for sd, v in zip(seeds, vals)]
            note = Note(status=status, idea_id=idea_id, metric="val_loss", goal="min", value=mean, std=std,
                        seeds=seeds, values=vals, baseline=bmean, baseline_std=bstd, delta=mean - bmean,
                        decision=decision, trials=trials)
        else:
            trials = [_trial(f"{idea_id}-s0", 0, status, None, lsha, rng)]
            note = Note(status=status, idea_id=idea_id, metric="val_loss", goal="min", seeds=[0], trials=trials,
                        error=trials[0].error, baseline=bmean, baseline_std=bstd, exit_code=1)
        note.host, note.accelerator, note.log = "gpu-a", "H100", lsha
        note.wall_s = trials[0].wall_s
        note.gpu_s = sum(t.wall_s for t in trials)
        note.tokens, note.cost_usd = (None, None) if origin == "human" else (6000, 0.018)
        note.finished_at = ts + 50
        notes.append((f":{mark}", format_note(note)))
    s.commit(NOTES_REF, T0 + 10 + n * 60, "Notes added by autoresearchd\n", None, None, notes)
    if leases:
        s.commit(RUNS_REF, T0 + 10 + n * 60, "Leases\n", None, None, leases)
    repo.fast_import(s.bytes())
    if log_refs:
        repo.git("update-ref", "--stdin", input="".join(f"update {r} {sha}\n" for r, sha in log_refs).encode())
    repo.git("symbolic-ref", "HEAD", "refs/heads/main")
    repo.git("config", "notes.displayRef", NOTES_REF)
    return repo


def write_cfg(dir_path, repo_path, extra: str = "") -> Path:
    """A config file for the CLI pointing at the built repo, with no LLM."""
    p = Path(dir_path) / ".autoresearch.toml"
    p.write_text(f'[research]\nrepo = "{repo_path}"\n[llm]\nprovider = "none"\n{extra}')
    return p


def race_proposals_into_branches(repo, props: dict, commit_for, read):
    """The implementer's write order for each proposal (its mark, its branch, then the proposal's
    deletion), on a thread, while `read()` reads the population in a loop: every read must hold every
    idea, as a proposal or as a branch. Returns the number of reads and a last read after the writes."""
    import threading
    from autoresearchd.store.refs import IDEA_BRANCHES, IDEAS_PREFIX, PROPOSALS_PREFIX
    done = threading.Event()

    def implement():
        for idea_id in props:
            c = commit_for(idea_id)
            repo.update_ref(IDEAS_PREFIX + idea_id, c)
            repo.update_ref(f"{IDEA_BRANCHES}explore/{idea_id}", c)
            repo.delete_ref(PROPOSALS_PREFIX + idea_id)
        done.set()
    t = threading.Thread(target=implement)
    t.start()
    reads = 0
    try:
        while not done.is_set():
            pop = read()
            reads += 1
            assert set(props) <= set(pop.by_id), sorted(set(props) - set(pop.by_id))
    finally:
        t.join()
    return reads, read()
