"""What still has to run, pure and without I/O: the jobs (a commit at a seed, for a purpose), the
seeds each purpose needs, which of them lack a result and a live lease, and the order they run in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autoresearchd.store.ideas import Idea
from autoresearchd.store.notes import Lease, Note, Status
from autoresearchd.store.population import Population
from autoresearchd.vocab import Decision, LeaseState, Origin, Purpose


@dataclass
class Job:
    commit: str
    seed: int
    purpose: Purpose
    idea: Idea | None = None
    retries: int = 0                # failures that count against the idea (max_retries)
    priority: tuple = field(default_factory=tuple)
    attempt: int = 0                # placements so far, whoever failed: names the trial (-rN)
    faults: list[str] = field(default_factory=list)   # host faults met so far ("host: reason")

    @property
    def trial_id(self) -> str:
        tag = self.idea.idea_id if self.idea else "baseline"
        n = max(self.attempt, self.retries)
        return f"{tag}-{self.commit[:8]}-s{self.seed}" + (f"-r{n}" if n else "")


def baseline_seeds(k: int) -> list[int]:
    return list(range(max(1, k)))


def confirm_seeds(k: int) -> list[int]:
    return list(range(1, k + 1))


def seeds_needed(note: Note | None, purpose: Purpose, k_baseline: int, k_confirm: int) -> list[int]:
    if purpose == Purpose.BASELINE:
        return baseline_seeds(k_baseline)
    if note is not None and note.decision == Decision.PENDING:
        return [0] + confirm_seeds(k_confirm)
    return [0]


def baseline_complete(note: Note | None) -> bool:
    """The baseline is final: each of its planned seeds has a result, or one failed (no more run).
    The baseline note is written as soon as seed 0 is in and amended by the later seeds; ideas get
    a decision only against a complete baseline, since the noise margin needs every seed's value."""
    if note is None:
        return False
    if any(t.status != Status.SUCCEEDED for t in note.trials) or not note.seeds_planned:
        return True
    have = {t.seed for t in note.trials}
    return all(s in have for s in baseline_seeds(note.seeds_planned))


def baseline_jobs_open(note: Note | None) -> bool:
    """More baseline seeds may run: none yet, or every seed so far succeeded (after a failed or
    timed-out seed the others would only repeat it)."""
    return note is None or all(t.status == Status.SUCCEEDED for t in note.trials)


@dataclass
class Missing:
    """A seed to (re)run: what its earlier attempts leave it with."""
    seed: int
    retries: int = 0
    attempt: int = 0
    faults: list[str] = field(default_factory=list)


def attempt_of(lz: Lease) -> int:
    a = getattr(lz, "attempt", None)
    return lz.retries if a is None else a


def missing_seeds(needed: list[int], note: Note | None, leases: list[Lease]) -> list[Missing]:
    """Every needed seed that has neither a result nor a live lease. A `lost` lease (the trial failed
    on a healthy host) spends one of the idea's retries; a `requeued` or `stale` one (a host fault)
    does not, it only adds to the seed's host faults."""
    have = {t.seed for t in (note.trials if note else [])}
    out = []
    for s in needed:
        if s in have:
            continue
        mine = [lz for lz in leases if lz.seed == s]
        if any(getattr(lz, "state", LeaseState.RUNNING) in (LeaseState.RUNNING, LeaseState.DONE) for lz in mine):
            continue
        retries = max((lz.retries + (lz.state == LeaseState.LOST) for lz in mine), default=0)
        attempt = max((attempt_of(lz) + 1 for lz in mine), default=0)
        faults = max((list(getattr(lz, "faults", None) or []) for lz in mine), key=len, default=[])
        out.append(Missing(s, retries, attempt, faults))
    return out


def order_key(job: Job, human_priority: bool) -> tuple:
    """Baseline first (everything is measured against it), then humans (if prioritised), then LLM
    ideas oldest first. Confirmations run behind human ideas but ahead of new LLM ideas, so the
    policy does not build on a lucky run for long."""
    rank = {Purpose.BASELINE: 0, Purpose.CONFIRM: 2, Purpose.IDEA: 3, Purpose.SCREEN: 3}[job.purpose]
    if job.purpose == Purpose.IDEA and job.idea is not None and job.idea.origin == Origin.HUMAN and human_priority:
        rank = 1
    idea = job.idea
    return (rank, idea.epoch if idea else 0, idea.committed_at if idea else 0, job.commit, job.seed)


def plan_jobs(pop: Population, p, human_priority: bool, hold_new: bool = False) -> list[Job]:
    """Every job still to run, in order: the baseline's missing seeds, then each branch's (its first
    seed, or the confirmation seeds of a pending idea), sorted by order_key. `p`: the [policy] config.
    `hold_new` (the compute budget is spent: stopwhen.budget_spent): no idea's first trial; the
    baseline's seeds and confirmations only."""
    jobs: list[Job] = []
    if pop.baseline_commit and baseline_jobs_open(pop.baseline_note):
        for m in missing_seeds(seeds_needed(None, Purpose.BASELINE, p.baseline_seeds, 0), pop.baseline_note,
                               pop.baseline_leases):
            jobs.append(Job(pop.baseline_commit, m.seed, Purpose.BASELINE, None, m.retries, attempt=m.attempt,
                            faults=m.faults))
    for idea in pop.ideas:
        if not idea.branch or idea.proposal:
            continue
        if idea.note is not None and (idea.note.decision != Decision.PENDING or pop.stale(idea)):
            continue        # pending against an old baseline: kept apart, not confirmed (docs/policies.md)
        purpose = Purpose.CONFIRM if idea.note is not None else Purpose.IDEA
        if hold_new and purpose == Purpose.IDEA and not idea.leases:
            continue        # held: queued, never started (a started one may retry its seed)
        needed = seeds_needed(idea.note, Purpose.IDEA, p.baseline_seeds, p.confirm_seeds)
        for m in missing_seeds(needed, idea.note, idea.leases):
            jobs.append(Job(idea.commit, m.seed, purpose, idea, m.retries, attempt=m.attempt, faults=m.faults))
    jobs.sort(key=lambda j: order_key(j, human_priority))
    return jobs


def held(pop: Population) -> list[Idea]:
    """The queued ideas plan_jobs(hold_new=True) does not start: never leased."""
    return [i for i in pop.queued() if not i.leases]


def settled(pop: Population, hold_new: bool = False) -> bool:
    """Nothing queued, implementing or running: useful for `--until idle` and tests. With `hold_new`
    (the compute budget is spent) a held idea waits for nothing: it runs only if the budget is raised."""
    # a measured idea whose note came before the baseline's last seed is decided by the next tick's
    # backfill (it may then need confirmation seeds): until then the search is not settled
    # (results measured against an old baseline are kept apart: they wait for nothing)
    undecided = pop.baseline_value is not None and any(
        i.note is not None and i.note.status == Status.SUCCEEDED and i.note.decision is None and not pop.stale(i)
        for i in pop.ideas)
    return (baseline_complete(pop.baseline_note) and not pop.running()
            and not pop.implementing()
            and all(i.note is None or i.note.decision != Decision.PENDING or pop.stale(i) for i in pop.ideas)
            and len(pop.queued()) == (len(held(pop)) if hold_new else 0) and not undecided)
