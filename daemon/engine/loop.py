"""The clock: an idempotent reconcile, run by apscheduler: an interval job every `daemon.tick_s`,
and a one-shot job for every event that wants a tick now.

Every event (a push seen by the watcher, a finished trial, a finished implementation or proposal
round, a host whose probe passed) calls `poke`, which schedules the one-shot `wake` job to run at
once. Up to three wake runs exist at a time: one waiting on the tick lock, one in a pass, and one
that finished its pass but is still counted. A poke during a pass is served by the waiting run,
whose pass starts after the poke (so no event is lost), and further pokes meanwhile are absorbed by
it (docs/architecture.md, "Waking the loop").

One tick: read refs and notes; poll the runner and write notes for finished trials; dispatch
queued work into free slots; ask the policy for more ideas when the queue runs low. Killing the
daemon with -9 and starting it again is just another tick. The first SIGTERM/SIGINT stops
dispatching and exits after the current tick (detached runs keep going); the second exits at once.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from apscheduler.schedulers.background import BackgroundScheduler

from autoresearchd import defaults
from autoresearchd.engine.lock import hold_daemon_lock
from autoresearchd.engine.manifestwatch import ManifestWatch
from autoresearchd.engine.parts import build_engine
from autoresearchd.engine.plan import Job, held, plan_jobs, settled
from autoresearchd.engine.stopwhen import budget_spent, search_stop, stop_condition
from autoresearchd.engine.watch import start_watcher
from autoresearchd.llm import BudgetExhausted, LLMError
from autoresearchd.store import gitrepo, parsecache
from autoresearchd.store.lifecycle import Lifecycle
from autoresearchd.store.livepop import LivePopulation
from autoresearchd.store.population import Population
from autoresearchd.tune.split import split

log = logging.getLogger("autoresearchd")
logging.getLogger("apscheduler").setLevel(logging.ERROR)  # "skipped: max instances" is by design (poke)


class Daemon:
    def __init__(self, cfg, research, runner, llm=None, policy=None, implementer=None, console=None,
                 llm_note: str | None = None, *, lifecycle: Lifecycle, tuner=None, stopper=None,
                 screener=None):
        self.cfg, self.research, self.runner = cfg, research, runner
        self.repo = research.repo
        self.llm, self.policy, self.implementer = llm, policy, implementer
        self.llm_note = llm_note
        self.tuner = tuner                            # daemon/tune/tuner.py, with [tune] enabled
        self.stopper = stopper                        # engine/stopping.py, with [stopping] enabled
        self.lifecycle = lifecycle      # the one writer of idea state, with its observers (makelifecycle.py)
        engine = build_engine(cfg, research, runner, self.lifecycle, wake=self.poke, screener=screener)
        self.slots, self.recovery = engine.slots, engine.recovery
        self.collector, self.dispatcher = engine.collector, engine.dispatcher
        self.screener = screener                      # engine/screener.py, with [screening] enabled
        self.manifest_watch = ManifestWatch(cfg, research)    # a baseline commit that changes the manifest
        self.started = time.time()
        self.state_dir = gitrepo.state_dir(self.repo)
        self._tick_lock = threading.Lock()
        self._passes = 0                  # reconcile passes so far (run_forever re-reads git after one)
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._signals = 0
        self._pool = ThreadPoolExecutor(max(1, cfg.implementer.concurrency), thread_name_prefix="implement")
        self._implementing: set[str] = set()
        self._proposing = False
        self._stop_reason: str | None = None
        self._said_stop: str | None = None     # the stop condition last logged (said once)
        self._said_held = 0                      # ideas held at the budget, as last logged
        # the one clock and the one way to wake it (poke): see the module docstring
        self.scheduler = BackgroundScheduler(job_defaults={"coalesce": True, "misfire_grace_time": None})
        self.watcher = None
        self.last_pop: Population | None = None       # the latest tick's view, for the progress display
        # the population, read by its changes (store/livepop.py); refreshed only under the tick lock
        # between scans only its own writes: it wrote every note a pass reads back (docs/architecture.md)
        self.live = LivePopulation(self.repo, research.baseline_ref, own_writes=True)
        self._parsed = parsecache.load(self.repo)     # what an earlier daemon parsed: not parsed again
        self._save_due = False
        self.last_state: dict = {}

    # -- the reconcile -----------------------------------------------------------------------------
    def read(self, scan: bool = False) -> Population:
        """The population now. A scan lists every idea ref, notes ref and proposal (what other
        processes wrote); without one only this process's own ref and notes writes are read. Every
        defaults.POPULATION_FULL_READ_TICKS passes the whole population is read again."""
        full = scan and self._passes % defaults.POPULATION_FULL_READ_TICKS == 0
        if full:
            self.live.reset()
        pop = self.live.refresh(scan=scan) or self.live.pop
        if full and parsecache.size() - self._parsed >= defaults.PARSE_CACHE_SAVE_NEW:
            self._save_due = True           # at the end of the pass (save_parses): the trials wait for none of it
        return pop

    def save_parses(self) -> None:
        """Write the parse caches for the next start, if a full read asked for it: after the pass's
        dispatch, not within its read (at 100k ideas the save costs seconds of the first pass;
        docs/benchmarks.md)."""
        if not self._save_due:
            return
        self._save_due = False
        try:
            self._parsed = parsecache.save(self.repo)
        except OSError as e:            # only a faster next start is lost
            log.warning("could not save the parse cache: %s", e)

    def tick(self) -> Population:
        with self._tick_lock:
            while True:
                again = False
                pop = self.read(scan=True)
                if self.collector.harvest(pop):
                    pop = self.read()
                if self.stopper is not None and self.stopper.check(pop):    # stopped: the freed slots next pass
                    pop = self.read()
                    again = True
                if self.collector.backfill(pop):
                    pop = self.read()
                if self.screener is not None and self.screener.step(pop):     # screens made, decisions written
                    pop = self.read()
                on_hold = self.manifest_watch.check(pop.baseline_commit)     # the manifest moved: say so, wait
                if not self._stopping.is_set() and not on_hold:
                    self.dispatcher.dispatch(pop, self.jobs(pop))
                # after dispatch, so a burst of pushes does not delay the trials that can start now
                if self.dispatcher.reject_on_arrival(pop):
                    pop = self.read()
                if not self._stopping.is_set() and not on_hold:
                    self._resume_proposals(pop)
                    if self.tuner is not None and self._maybe_tune(pop):
                        pop = self.read(scan=True)
                        again = True                # another pass dispatches the tuned commits
                    self._maybe_refill(pop)
                self._write_state(pop)
                self.save_parses()
                self._passes += 1
                if not again or self._stopping.is_set():
                    return pop

    def jobs(self, pop: Population) -> list[Job]:
        """What still has to run, in order (engine/plan.py; a new idea's screen first, engine/screener.py);
        no new idea once the compute budget is spent (stopwhen.budget_spent: queued ideas are held)."""
        spent = budget_spent(pop, self.cfg, self.research.manifest)
        n = len(held(pop)) if spent is not None else 0
        if n and self._said_held != n:
            log.info("%s: %d queued idea(s) held, not started (raise daemon.max_gpu_hours to run them)", spent, n)
        self._said_held = n
        jobs = plan_jobs(pop, self.cfg.policy, self.cfg.daemon.human_priority, hold_new=spent is not None)
        return self.screener.jobs(pop, jobs) if self.screener is not None else jobs

    # -- ideas ---------------------------------------------------------------------------------------
    def settled(self, pop: Population) -> bool:
        """Nothing queued but ideas the spent compute budget holds, implementing, running or undecided
        (plan.settled, told whether the budget holds new ideas, as jobs() is)."""
        return settled(pop, budget_spent(pop, self.cfg, self.research.manifest) is not None)

    def idle(self, pop: Population) -> bool:
        """Done for now: settled and, with a policy, it will propose nothing more (else a batch that all
        failed to implement looks idle)."""
        return self.settled(pop) and (self.policy is None or self.stop_condition(pop) is not None)

    def stop_condition(self, pop: Population) -> str | None:
        """Why no more ideas are proposed (None: proposing goes on): engine/stopwhen.py."""
        return stop_condition(pop, self.cfg, self.research.manifest, self.llm, self.policy is not None,
                              self._stop_reason)

    def search_stop(self, pop: Population) -> str | None:
        """Why the whole search is over, tuning included: engine/stopwhen.py."""
        return search_stop(pop, self.cfg, self.research.manifest)

    def _resume_proposals(self, pop: Population) -> None:
        """Proposals recorded in git but not implemented (e.g. after a crash) are implemented now."""
        if self.implementer is None or (self.llm is not None and self.llm.budget.exhausted):
            return
        for idea in pop.implementing():
            if idea.idea_id not in self._implementing:
                self._submit_implementation(idea.idea_id)

    def _submit_implementation(self, idea_id: str) -> None:
        self._implementing.add(idea_id)

        def work():
            try:
                self.implementer.implement(idea_id)
            except BudgetExhausted as e:  # the proposal stays recorded; raise the budget to resume
                self._stop_reason = str(e)
                log.info("%s: %s stays proposed", e, idea_id)
            except Exception:  # noqa: BLE001 - a failed implementation must never kill the daemon
                log.exception("implementing %s failed", idea_id)
            finally:
                self._implementing.discard(idea_id)
                self.poke()
        self._pool.submit(work)

    def _maybe_refill(self, pop: Population) -> None:
        if self.policy is None or self.llm is None or self.implementer is None or self._proposing:
            return
        free = sum(1 for s in self.dispatcher.free_slots())
        # an implementation in flight is also a recorded proposal (pop.implementing()): count it once
        ready = len(pop.queued()) + len({i.idea_id for i in pop.implementing()} | set(self._implementing))
        want = free + self.cfg.policy.queue_buffer - ready
        if want <= 0:
            return
        reason = self.stop_condition(pop)
        if reason:
            if reason != self._said_stop:
                log.info("not proposing more ideas: %s", reason)
                self._said_stop = reason
            return
        if pop.baseline_note is None and pop.max_epoch() >= 0 and self.cfg.policy.name != "best_of_n":
            return  # epoch 0 is proposed once; later epochs need the measured baseline
        self._proposing = True
        n = max(want, self.cfg.policy.batch)

        def work():
            try:
                proposals = self.policy.propose(pop, n, self.research.manifest, self.llm)
                cap = self.cfg.daemon.max_epochs
                for prop in proposals:
                    if cap is not None and prop.epoch >= cap:
                        continue      # a batch that ran past the last epoch is not started
                    if self.tuner is not None and prop.dropped_reason is None and self.tuner.router.route(pop, prop):
                        continue      # a knobs-only idea: a tuned commit, no implementation
                    idea_id = self.implementer.record_proposal(prop)
                    if idea_id and prop.dropped_reason is None:
                        self._submit_implementation(idea_id)
            except BudgetExhausted as e:
                self._stop_reason = str(e)
                log.info("%s", e)
            except LLMError as e:
                log.warning("proposing failed: %s", e)
            except Exception:  # noqa: BLE001
                log.exception("proposing failed")
            finally:
                self._proposing = False
                self.poke()
        self._pool.submit(work)

    def budget_split(self, pop: Population):
        """Tuning's share of new trials (daemon/tune/split.py), or None when tuning is off."""
        if self.tuner is None:
            return None
        llm_on = self.policy is not None and self.llm is not None and self.stop_condition(pop) is None
        return split(pop, self.research.manifest.goal, self.cfg.tune.floor, llm_on)

    def _maybe_tune(self, pop: Population) -> bool:
        """Write tuned commits up to tuning's share of the trials in flight. True if it wrote any.
        Nothing once the compute budget or the target ends the search (tuned trials spend it too)."""
        if self.search_stop(pop) is not None:
            return False
        sp = self.budget_split(pop)
        room = len(self.slots.slots()) * self.slots.depth + self.cfg.policy.queue_buffer
        want = max(1, round(sp.tune * room)) - self.tuner.pending(pop)
        try:
            return bool(self.tuner.propose(pop, want))
        except Exception:  # noqa: BLE001 - a failed suggestion must never stop the loop
            log.exception("tuning failed")
            return False

    # -- running ------------------------------------------------------------------------------------
    def poke(self) -> None:
        """An event (new idea, finished trial or implementation, watcher, a host back) wants a tick now:
        the one-shot `wake` job, at once. At most three runs of it exist: one waiting on the tick lock
        (its pass begins after this poke, so a further poke is skipped as already served), one in a
        pass, and one that has finished its pass but is still counted by apscheduler (the count drops
        only after the run returns: with two, a poke in that gap was skipped while no run waited)."""
        if not self.scheduler.running or self._stopping.is_set():
            return
        try:
            self.scheduler.add_job(self._safe_tick, id="wake", replace_existing=True, max_instances=3)
        except Exception:  # noqa: BLE001 - shutting down: the interval tick was the safety net anyway
            pass

    def _start_event_waiters(self) -> None:
        """One thread per host blocks in the runner until a trial there finishes, then pokes: a freed
        slot is refilled at once instead of at the next clock tick."""
        try:
            hosts = self.runner.event_hosts()
        except Exception as e:  # noqa: BLE001 - events only make things faster
            log.warning("no trial events (%s); relying on the clock", e)
            return
        for host in hosts:
            threading.Thread(target=self._wait_events, args=(host,), daemon=True,
                             name=f"events-{host}").start()

    def _wait_events(self, host: str) -> None:
        while not self._stopping.is_set():
            t = time.monotonic()
            try:
                if self.runner.wait_event(host, 10.0):
                    self.poke()
                    continue
            except Exception as e:  # noqa: BLE001 - host down: the clock and the lease TTL handle it
                log.debug("events from %s: %s", host, e)
            if time.monotonic() - t < 1.0:          # failing fast: do not spin
                self._stopping.wait(self.cfg.daemon.tick_s)

    def _safe_tick(self) -> None:
        try:
            self.tick()
        except Exception:  # noqa: BLE001
            log.exception("reconcile failed; retrying on the next tick")

    def _write_state(self, pop: Population) -> None:
        slots = self.slots.table()
        state = {"pid": os.getpid(), "started": self.started, "heartbeat": time.time(),
                 "slots": slots, "hosts": self.slots.hosts(),   # health: degraded + reason (daemon/engine/health.py)
                 "implementing": sorted(self._implementing), "proposing": self._proposing,
                 # without a policy only tuning proposes: what ended it (the budget, the target)
                 "stop_reason": self.stop_condition(pop) if self.policy else self.search_stop(pop),
                 "held": self.manifest_watch.reason,
                 "llm": self.llm_note,
                 "split": (lambda s: s.as_dict() | {"line": s.line()} if s else None)(self.budget_split(pop)),
                 "budget": ({"usd": self.llm.budget.usd, "calls": self.llm.budget.calls,
                             "tokens": self.llm.budget.input_tokens + self.llm.budget.output_tokens,
                             "max_usd": self.llm.budget.max_usd} if self.llm else None)}
        self.last_pop, self.last_state = pop, state
        tmp = self.state_dir / "daemon.json.tmp"
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.state_dir / "daemon.json")

    def stop(self) -> None:
        """No new dispatch; run_forever returns after the pass in progress (the first SIGTERM, a test's
        deadline). Detached runs keep going."""
        self._stopping.set()
        self._stopped.set()

    def _on_signal(self, signum, frame) -> None:
        self._signals += 1
        if self._signals >= 2:
            log.warning("second signal: exiting now")
            os._exit(130)
        log.info("stopping: no new dispatches; detached runs keep going (signal again to exit at once)")
        self.stop()
        # the heartbeat stops with the scheduler, while implementations in flight may take minutes
        # (their checks train under load): say so in the state file, so `status` shows "stopping"
        try:
            p = self.state_dir / "daemon.json"
            state = json.loads(p.read_text())
            state["stopping_since"] = time.time()
            p.with_suffix(".stop.tmp").write_text(json.dumps(state))
            os.replace(p.with_suffix(".stop.tmp"), p)
        except (OSError, ValueError):
            pass

    def run_forever(self, install_signals: bool = True, until=None, progress=None) -> None:
        """Foreground loop. `until(pop)` (tests, `--until`) ends it when it returns True;
        `progress(pop, state)` is called about every second (the rich progress display)."""
        pidfile = self.state_dir / "daemon.pid"
        lock = hold_daemon_lock(self.state_dir, self.repo.path)     # before the pidfile: it names the holder
        if install_signals:
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        pidfile.write_text(str(os.getpid()))   # after the handlers: `stop` may signal as soon as it exists
        self.watcher = start_watcher(self.repo, self.poke)
        self.scheduler.add_job(self._safe_tick, "interval", seconds=self.cfg.daemon.tick_s, id="reconcile",
                               next_run_time=datetime.now(), max_instances=1)
        self.scheduler.start()
        self._start_event_waiters()
        watch = LivePopulation(self.repo, self.research.baseline_ref)   # this thread's own: not the tick's
        try:
            seen, pop, was_busy = -1, None, False
            while not self._stopped.wait(0.5):
                if progress is not None and self.last_pop is not None:
                    progress(self.last_pop, self.last_state)
                if until is not None:
                    # the workers' flags before git: a worker writes (a routed knobs-only idea's tuned
                    # commit, an implementation) outside a pass, then clears its flag; git read after
                    # seeing it idle holds what it wrote (a stale read once ended a test before its trial)
                    busy = bool(self._proposing or self._implementing)   # a bool, not the live set
                    if seen != self._passes or was_busy:     # git changes through a pass or a worker
                        # between ticks, not inside one: mid-tick, a harvested result may be in git
                        # before the tuned commit the same tick writes after it (a false "settled")
                        with self._tick_lock:
                            seen, pop = self._passes, watch.refresh() or watch.pop
                    was_busy = busy
                    if not busy and until(pop):
                        break
        finally:
            watch.close()
            self._stopping.set()
            self.scheduler.shutdown(wait=True)      # after the pass in progress
            if self.watcher is not None:
                self.watcher.stop()
            self._pool.shutdown(wait=False, cancel_futures=True)
            with self._tick_lock:  # let a tick in progress finish its writes
                pass
            self.runner.close()
            try:
                pidfile.unlink()
            except FileNotFoundError:
                pass
            os.close(lock)

