"""Mirror finished trials to Weights & Biases: one W&B run per result note (an observer of
the lifecycle writer, store/lifecycle.py: results, linked, rejected and backfilled notes, each told
once it is in git). makelifecycle.make_lifecycle builds it (`make_mirror`) before the writer and
gives the writer `mirror.written` as an observer, so no write path can skip it; a backfilled
decision updates the run of the same note (`resume="allow"`).

Runs are grouped by epoch (`group`), typed by origin (`job_type`) and tagged with origin, status and
decision. The config is built from an explicit allow-list (idea id, title, origin, parents, epoch,
seeds, host, accelerator, metric, goal, model, branch, commit); the summary holds the result
(value, per-seed values, std, delta, decision, status, wall_s, gpu_s, cost); the idea text and its
diff are logged as one wandb.Html panel.

What is never sent: environment variables, the command line, the code, git metadata, machine
info, system metrics and console output. wandb would capture these by default; the Settings below
turn each of them off (x_disable_meta, x_disable_machine_info, x_disable_stats, disable_code,
disable_git, save_code, x_save_requirements, console="off", a fixed program name).

W&B calls run on one background thread, so a slow or offline W&B never holds up a reconcile;
`flush()` waits for the queue, and `make_mirror()` registers `close()` at exit.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import re
import threading
from pathlib import Path

from autoresearchd import defaults
from autoresearchd.store.diffbase import diff_base
from autoresearchd.store.gitrepo import state_dir
from autoresearchd.vocab import Change
from autoresearchd.store.notes import Origin, Status, delta_kind, mean_delta
from autoresearchd.store.refs import branch_name
from autoresearchd.views.safe import html_text

log = logging.getLogger("autoresearchd")

# the lifecycle changes mirrored: each writes an idea's (or the baseline's) result note, a stopped idea's
# partial run included (every failure is data); dropped and failed proposals are records, not runs, and
# a cancelled old baseline's seeds were never a result
MIRRORED = (Change.RESULT, Change.LINKED, Change.REJECTED, Change.BACKFILLED, Change.STOPPED)

CONFIG_KEYS = ("idea_id", "title", "origin", "parents", "epoch", "seeds", "host", "accelerator", "metric", "goal",
               "model", "branch", "commit")
SUMMARY_KEYS = ("value", "suspect_value", "values", "std", "delta", "baseline", "decision", "status", "wall_s", "gpu_s",
                "cpu_s", "cost_usd", "tokens", "error", "delta_kind", "delta_mean", "baseline_commit")


def wandb_settings(program: str = "autoresearchd"):
    """Settings that keep wandb from collecting anything but what we log explicitly."""
    import wandb    # lazy: the [wandb] extra, loaded only with [wandb] enabled
    wanted = {"x_disable_meta": True, "x_disable_machine_info": True, "x_disable_stats": True,
              "disable_code": True, "disable_git": True, "save_code": False, "x_save_requirements": False,
              "console": "off", "program": program, "silent": True}
    known = set(getattr(wandb.Settings, "model_fields", {})) or set(wanted)
    return wandb.Settings(**{k: v for k, v in wanted.items() if k in known})


def _run_id(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text)[:64]


def _word(v):
    """A vocabulary member as its plain word (W&B would store the member's name); other values as given."""
    return getattr(v, "value", v)


class WandbMirror:
    """Callable observer: mirror(commit, idea_or_None, note)."""

    def __init__(self, wcfg, manifest, *, repo=None, dir: str | Path | None = None, background: bool = True,
                 baseline_ref: str | None = None):
        self.cfg, self.manifest, self.repo = wcfg, manifest, repo
        self.baseline_ref = baseline_ref      # a pushed idea's diff is against its merge-base with it
        self.dir = Path(dir) if dir else None
        self.enabled = bool(wcfg.enabled) and wcfg.mode != "disabled"
        self.background = background
        self.logged = 0
        self.failed = 0
        self._q: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # -- what is sent ------------------------------------------------------------------------------
    def payload(self, commit: str, idea, note) -> dict:
        """Everything one W&B run receives, from the allow-lists only."""
        m = self.manifest
        epoch = idea.epoch if idea is not None else None
        origin = idea.origin if idea is not None else Origin.BASELINE
        first = note.trials[0] if note.trials else None
        cfg = {"idea_id": idea.idea_id if idea is not None else "baseline",
               "title": idea.title if idea is not None else "baseline", "origin": _word(origin),
               "parents": list(idea.parents) if idea is not None else [], "epoch": epoch,
               "seeds": list(note.seeds), "host": note.host or (first.host if first else None),
               "accelerator": note.accelerator, "metric": m.metric, "goal": m.goal,
               "model": idea.model if idea is not None else None,
               "branch": branch_name(idea.branch) if idea is not None else None,
               "commit": commit}
        # a suspicious (tampered or implausible) value is kept as `suspect_value`, never under the metric's
        # own name or `value`, so no W&B chart or sort ever ranks it as a best result
        trusted = note.status == Status.SUCCEEDED
        summary = {"value": note.value if trusted else None, "suspect_value": None if trusted else note.value,
                   "values": list(note.values), "std": note.std, "delta": note.delta,
                   "baseline": note.baseline, "decision": _word(note.decision), "status": note.status.value,
                   "wall_s": note.wall_s, "gpu_s": note.gpu_s, "cpu_s": note.cpu_s, "cost_usd": note.cost_usd, "tokens": note.tokens,
                   "error": (note.error or "")[:2000] or None,
                   # what `delta` is and which baseline it is against (docs/notes.md, "Which delta a view shows")
                   "delta_kind": kind.value if (kind := delta_kind(note)) is not None else None,
                   "delta_mean": mean_delta(note), "baseline_commit": note.baseline_commit}
        if note.value is not None and trusted:
            summary[m.metric] = note.value
        tags = [t for t in (origin, note.status.value, note.decision,
                            f"epoch-{epoch}" if epoch is not None else None) if t]
        if len(note.trials) > 1 and idea is not None:
            tags.append("multi-seed")
        return {"config": {k: cfg[k] for k in CONFIG_KEYS},
                "summary": {k: v for k, v in summary.items() if k in SUMMARY_KEYS or k == m.metric},
                "group": f"epoch-{epoch:03d}" if epoch is not None else "baseline",
                "job_type": origin, "tags": tags[:20],
                "name": cfg["idea_id"],
                "id": _run_id(f"{cfg['idea_id']}-{commit[:8]}-n{len(note.trials)}"),
                "text": (f"{idea.title}\n\n{idea.text}" if idea is not None else "baseline")}

    def _diff(self, commit: str, idea) -> str:
        if self.repo is None or idea is None or not idea.base_commit or not idea.branch:
            return ""
        try:
            base = diff_base(self.repo, idea, self.baseline_ref)
            return self.repo.diff(base, commit)[:defaults.WANDB_MAX_DIFF]
        except Exception:  # noqa: BLE001 - a missing diff must not lose the run
            return ""

    # -- observer ----------------------------------------------------------------------------------
    def written(self, event) -> None:
        """The lifecycle writer's observer: a result note written (a re-judged one logs the run again)."""
        if event.change in MIRRORED and event.note is not None:
            self(event.commit, event.idea, event.note)

    def __call__(self, commit: str, idea, note) -> None:
        if not self.enabled:
            return
        item = (self.payload(commit, idea, note), self._diff(commit, idea))
        if not self.background:
            self._log(*item)
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._worker, name="wandb-mirror", daemon=True)
                self._thread.start()
        self._q.put(item)

    def _worker(self) -> None:
        while True:
            item = self._q.get()
            try:
                if item is None:
                    return
                self._log(*item)
            finally:
                self._q.task_done()

    def _log(self, p: dict, diff: str) -> None:
        try:
            import wandb    # lazy: the [wandb] extra, loaded only with [wandb] enabled
            run = wandb.init(project=self.cfg.project, entity=self.cfg.entity, mode=self.cfg.mode,
                             dir=str(self.dir) if self.dir else None, name=p["name"], id=p["id"],
                             resume="allow",      # the same note again (backfilled): its run is updated
                             group=p["group"], job_type=p["job_type"], tags=p["tags"], config=p["config"],
                             settings=wandb_settings(), reinit="create_new")
            try:
                run.summary.update(p["summary"])
                body = (f"<h3>{html_text(p['config']['title'])}</h3><pre>{html_text(p['text'])}</pre>"
                        + (f"<h4>diff</h4><pre>{html_text(diff)}</pre>" if diff else ""))
                run.log({"idea": wandb.Html(body)})
            finally:
                run.finish()
            self.logged += 1
        except Exception as e:  # noqa: BLE001 - W&B trouble must never touch the research
            self.failed += 1
            log.warning("W&B mirror: could not log %s: %s", p.get("name"), e)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued run is logged; False if the timeout passed first."""
        if self._thread is None:
            return True
        done = threading.Event()
        threading.Thread(target=lambda: (self._q.join(), done.set()), daemon=True).start()
        return done.wait(timeout)

    def close(self, timeout: float = 60.0) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._q.put(None)
            self._thread.join(timeout)


def make_mirror(cfg, research) -> WandbMirror | None:
    """The mirror when [wandb] enabled = true (and wandb is installed), for makelifecycle.py to give the
    lifecycle writer as an observer (`mirror.written`) when it builds it; None otherwise. W&B files go
    to the state dir (inside the research repo's git dir) unless WANDB_DIR says otherwise."""
    if not cfg.wandb.enabled or cfg.wandb.mode == "disabled":
        return None
    try:
        import wandb  # noqa: F401  # lazy: the [wandb] extra, only with [wandb] enabled
    except ImportError:
        log.warning("[wandb] enabled = true but wandb is not installed (pip install wandb); not mirroring")
        return None
    wdir = os.environ.get("WANDB_DIR") or str(state_dir(research.repo))
    mirror = WandbMirror(cfg.wandb, research.manifest, repo=research.repo, dir=wdir,
                         baseline_ref=research.baseline_ref)
    atexit.register(mirror.close)
    log.info("mirroring results to W&B project %s (%s mode)", cfg.wandb.project, cfg.wandb.mode)
    return mirror
