"""The daemon's vocabulary: every status, decision, lease state, origin, trial purpose, host and slot
state, as enums.

One module, so a decision is spelled once. Each enum is a `str` enum: a member equals its value
(`Decision.PROMOTED == "promoted"`), so notes written before this module read back unchanged, a
note's text holds the plain value, and JSON payloads (daemon.json, the dashboard's /api) carry the
value. A leaf module: it imports nothing from the project, so anything may import it.
"""

from __future__ import annotations

from enum import Enum, StrEnum


class Status(str, Enum):
    """Where an idea stands. The first three are derived (never written as a result note)."""
    QUEUED = "queued"
    IMPLEMENTING = "implementing"
    RUNNING = "running"
    # terminal states, each written as a result note
    SUCCEEDED = "succeeded"
    FAILED = "failed"                      # non-zero exit, or no metric reported
    TIMED_OUT = "timed_out"
    IMPLEMENT_FAILED = "implement_failed"  # diff never applied / never passed its checks
    REJECTED = "rejected"                  # unsafe or frozen-touching code, unrelated branch
    LOST = "lost"                          # host vanished more often than max_retries
    DUPLICATE = "duplicate"                # same idea text or identical tree as an earlier idea
    CANCELLED = "cancelled"
    REFUSED = "refused"                    # evaluation harness differs from the baseline's
    SUSPICIOUS = "suspicious"              # measured, but tampered with or outside the plausible range
    OVER_BUDGET = "over_budget"            # measured, but it used more compute than the cap allows
    STOPPED = "stopped"                    # stopped early by its learning curve (engine/stopping.py)
    SCREENED_OUT = "screened_out"          # its short screened run lost: never ran full length (engine/screening.py)

    # no __str__: notes and views write `.value` (a status's str() has always been `Status.X`)
    @property
    def terminal(self) -> bool:
        return self not in (Status.QUEUED, Status.IMPLEMENTING, Status.RUNNING)


class Decision(str, Enum):
    """What engine/judge.py decided about a measured idea (docs/notes.md, "The vocabulary")."""
    PROMOTED = "promoted"          # beats the best so far beyond noise (after confirmation, if asked)
    PENDING = "pending"            # looked like a new best: confirmation seeds are running
    CONFIRMED = "confirmed"        # its confirmation seeds held up
    DEMOTED = "demoted"            # its confirmation seeds did not
    IMPROVED = "improved"          # beats the baseline beyond noise, not the best
    WITHIN_NOISE = "within_noise"
    WORSE = "worse"

    def __str__(self) -> str:
        return self.value


class LeaseState(str, Enum):
    """A trial's state in its lease note (store/notes.py Lease)."""
    RUNNING = "running"
    DONE = "done"                  # its result is kept until the note is written
    LOST = "lost"                  # failed on a healthy host: spends a retry
    REQUEUED = "requeued"          # a host fault: placed again, no retry spent
    STALE = "stale"                # a host fault; the trial may live on its host
    SUPERSEDED = "superseded"      # a twin's result counted

    def __str__(self) -> str:
        return self.value


class Origin(str, Enum):
    """Who an idea came from, as the daemon decided it (never a pushed commit's trailer)."""
    SEED = "seed"                  # the evolutionary policy's first epoch
    EXPLOIT = "exploit"
    EXPLORE = "explore"
    GREEDY = "greedy"
    BEST_OF_N = "best_of_n"
    HUMAN = "human"                # a pushed branch or `autoresearchd queue`
    TUNE = "tune"                  # a tuned commit (daemon/tune/)
    BASELINE = "baseline"

    def __str__(self) -> str:
        return self.value


class Purpose(str, Enum):
    """Why a trial runs."""
    BASELINE = "baseline"
    IDEA = "idea"
    CONFIRM = "confirm"
    SCREEN = "screen"              # a short run at the fidelity knob's baseline x fraction (engine/screening.py)

    def __str__(self) -> str:
        return self.value


class HostState(StrEnum):
    """A host as this daemon sees it now (engine/health.py's breaker, the runner's connection): daemon.json's
    `hosts`, read by `status`. In memory only, never in git. A StrEnum: it prints as its value."""
    OK = "ok"
    DEGRADED = "degraded"          # its breaker is open (a host fault): no new trial until a probe passes
    UNREACHABLE = "unreachable"    # the runner cannot reach it (the connection error is the reason)


class SlotState(StrEnum):
    """A runner slot in daemon.json's `slots` (engine/slots.py), read by `status`, the progress line and
    the dashboard's slot table."""
    FREE = "free"
    BUSY = "busy"                  # a trial runs there (more may be staged behind it)
    DEGRADED = "degraded"          # its host's breaker is open
    UNREACHABLE = "unreachable"    # its host does not answer


# The best results, and the good ones (a dashboard colour, a policy's parent pool).
BEST_DECISIONS = (Decision.PROMOTED, Decision.CONFIRMED)
class Change(str, Enum):
    """The state changes the lifecycle writer makes (store/lifecycle.py: one method each), as its observers hear them."""
    PROPOSED = "proposed"          # a proposal ref: recorded before anything is spent on it
    DROPPED = "dropped"            # a proposal the policy dropped (a duplicate): a record with its note
    IMPLEMENTED = "implemented"    # the mark and the idea branch; the proposal goes
    FAILED = "failed"              # implementation failed or was rejected: a record with its note
    TUNED = "tuned"                # a tuned commit (daemon/tune/): the mark and its branch
    LEASED = "leased"              # lease notes written or rewritten (the dispatcher's and the harvest's)
    RESULT = "result"              # a result note from measured trials
    REJECTED = "rejected"          # the gate refused a commit before it ran
    LINKED = "linked"              # identical tree: another commit's result, linked
    CANCELLED = "cancelled"        # trials cancelled (e.g. the baseline moved)
    BACKFILLED = "backfilled"      # a note gets its baseline, delta and decision after the fact
    STOPPED = "stopped"            # stopped early by its learning curve (engine/stopping.py)
    SCREEN = "screen"              # a screened commit (engine/screening.py): its ref under screens/
    SCREEN_RESULT = "screen_result"  # a screened run's note, on the screened commit (never an idea's result)
    SCREENED_OUT = "screened_out"  # an idea whose screened run lost: its note with the evidence

    def __str__(self) -> str:
        return self.value


GOOD_DECISIONS = (Decision.PROMOTED, Decision.CONFIRMED, Decision.IMPROVED)
BAD_DECISIONS = (Decision.WORSE, Decision.DEMOTED)
# Results that measured the idea's code (a run finished, with or without a value).
MEASURED = (Status.SUCCEEDED, Status.FAILED, Status.TIMED_OUT)
FAILURES = frozenset({Status.FAILED, Status.TIMED_OUT, Status.IMPLEMENT_FAILED, Status.REJECTED,
                      Status.LOST, Status.CANCELLED, Status.REFUSED, Status.SUSPICIOUS, Status.OVER_BUDGET,
                      Status.STOPPED, Status.SCREENED_OUT})
# The origins a policy proposes (counted toward its epochs and max_ideas).
POLICY_ORIGINS = frozenset({Origin.SEED, Origin.EXPLOIT, Origin.EXPLORE, Origin.GREEDY, Origin.BEST_OF_N})
# Lease states whose trials are polled each harvest, and that outlive their commit's result note.
POLLED = (LeaseState.RUNNING, LeaseState.STALE)


def known(enum: type[Enum], value):
    """`value` as a member of `enum`, or `value` itself where this daemon does not know it (a newer
    daemon's word in a note, a lease or a commit's trailer): reading never fails on an unknown word,
    and the unknown word is kept as it was written."""
    try:
        return enum._value2member_map_.get(value, value)
    except TypeError:           # unhashable: not a word at all, kept for the caller to judge
        return value


class Level(StrEnum):
    """How a finding of the checks counts (validate.py for `start` and `doctor`, runners/isolation.py
    for a host's interpreter): an error stops `start`, a warning is printed, ok is a passed check. A
    StrEnum: it prints as its value, as the plain strings it replaced did."""
    ERROR = "error"
    WARN = "warn"
    OK = "ok"
