"""Every ref name the daemon reads or writes, in one place. People push branches under
IDEA_BRANCHES; everything under refs/autoresearch/ and the two notes refs is the daemon's alone (the
pre-receive hook refuses a push to them), so a push can neither forge a result nor an origin.
"""

from __future__ import annotations

HEADS = "refs/heads/"
IDEA_BRANCHES = HEADS + "idea/"                    # idea branches, the daemon's and people's

# the groups of the idea branches the daemon creates (store/ideas.branch_for: idea/e000/..., idea/human/...),
# as an extended regex: a push may not create a branch named like one, nor a new one below one
DAEMON_GROUPS = r"^(e[0-9]{3,}|human)$"

NOTES_NAMESPACE = "refs/notes/"
NOTES_REF = NOTES_NAMESPACE + "autoresearch"       # result notes
RUNS_REF = NOTES_REF + "-runs"                     # leases: what runs where, with heartbeats

DAEMON_PREFIX = "refs/autoresearch/"               # the daemon's own refs, below:
RECORDS_PREFIX = DAEMON_PREFIX + "records/"        # ideas that never became runnable (rejected, failed)
IDEAS_PREFIX = DAEMON_PREFIX + "ideas/"            # commits the daemon wrote: their trailers are believed
PROPOSALS_PREFIX = DAEMON_PREFIX + "proposals/"    # proposed, not yet implemented
LOGS_PREFIX = DAEMON_PREFIX + "logs/"              # run logs, anchored so gc never drops them
# every idea commit that got a note is kept here too, so a force-pushed or deleted branch never takes
# a measured commit (and its result) out of the population, nor leaves a child's Parents dangling
ARCHIVE_PREFIX = DAEMON_PREFIX + "archive/"
REPLAY_REF = DAEMON_PREFIX + "replay"              # how far a replay file was served (replaypos.py)
# screened runs (engine/screening.py): screens/<idea id> -> the idea's tree at the fidelity knob's
# baseline x fraction; never an idea of its own (the population does not list this prefix)
SCREENS_PREFIX = DAEMON_PREFIX + "screens/"
LESSONS_REF = DAEMON_PREFIX + "lessons"            # the lessons scratchpad, a JSON blob (store/lessons.py)


def branch_ref(name: str) -> str:
    """The full ref of a branch given by name ("main") or by ref ("refs/heads/main")."""
    return name if name.startswith("refs/") else HEADS + name


def branch_name(ref: str | None) -> str:
    """A branch ref as people write it: "refs/heads/idea/x" -> "idea/x" ("" for None)."""
    return (ref or "").removeprefix(HEADS)
