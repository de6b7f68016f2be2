"""Slurm's view of a job, read: the query script (squeue, then scontrol, then sacct, in one round
trip), the parsers of each answer, and how a job's Slurm state maps onto the daemon's poll states
and outcomes (the sbatch side, and the runner itself, are runners/slurm.py).

How a job's Slurm state maps onto the daemon's poll states (a `done` file always means DONE):

| Slurm state (squeue, else scontrol, else sacct)          | poll    | outcome                          |
|-----------------------------------------------------------|---------|----------------------------------|
| PENDING CONFIGURING SUSPENDED RESIZING REQUEUE_HOLD ...     | RUNNING | (still queued)                   |
| RUNNING COMPLETING STAGE_OUT SIGNALING                     | RUNNING |                                  |
| COMPLETED                                                 | DONE    | read from the trial's files      |
| FAILED OUT_OF_MEMORY BOOT_FAIL DEADLINE SPECIAL_EXIT      | DONE    | error names the Slurm state      |
| TIMEOUT                                                   | DONE    | timed_out, "Slurm time limit"    |
| CANCELLED                                                 | DONE    | "cancelled by scancel"           |
| NODE_FAIL PREEMPTED REQUEUED                              | LOST    | requeue=True (the daemon reruns) |
| job unknown to all three                                  | LOST    |                                  |
| controller does not answer                                | UNREACHABLE                                |
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from .protocol import PollState, TrialOutcome


QUEUED = {"PENDING", "CONFIGURING", "SUSPENDED", "RESIZING", "REQUEUE_HOLD", "REQUEUE_FED",
          "RESV_DEL_HOLD", "STOPPED", "POWER_UP_NODE"}
ACTIVE = {"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING", "UPDATE_DB"}
FINISHED = {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
            "SPECIAL_EXIT"}
RERUN = {"NODE_FAIL", "PREEMPTED", "REQUEUED"}


def poll_state(slurm_state: str | None) -> PollState:
    """The state table above, as code. None = Slurm no longer knows the job."""
    if slurm_state in QUEUED or slurm_state in ACTIVE:
        return PollState.RUNNING
    if slurm_state in FINISHED:
        return PollState.DONE
    if slurm_state in RERUN or slurm_state is None:
        return PollState.LOST
    return PollState.RUNNING          # a state this table does not know yet: wait, do not guess


@dataclass
class JobInfo:
    state: str | None                  # normalised Slurm state; None when no source knows the job
    source: str = ""                   # squeue | scontrol | sacct
    exit_code: str | None = None       # Slurm's "rc:signal"
    reason: str | None = None
    reachable: bool = True             # False: the controller did not answer


def _norm(state: str) -> str:
    """`CANCELLED by 0` (sacct), `CANCELLED+` -> CANCELLED."""
    word = state.strip().split()[0] if state.strip() else ""
    return word.rstrip("+").upper()


def parse_squeue(text: str) -> str | None:
    """`squeue -h -j ID -o %T`: one state word, or nothing once the job left the queue."""
    for line in text.splitlines():
        if line.strip():
            return _norm(line)
    return None


_KV = re.compile(r"(?:^|\s)([A-Za-z][\w/:]*)=(\S*)")


def parse_scontrol(text: str) -> dict[str, str]:
    """`scontrol show job -o ID`: the record's key=value fields (empty dict if none)."""
    return {k: v for k, v in _KV.findall(text)}


def parse_sacct(text: str, job_id: str) -> dict[str, str]:
    """`sacct [-c] -n -P -o JobID,State,ExitCode`: the last row of this job's allocation."""
    row: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 3 and parts[0] == str(job_id):
            row = {"JobID": parts[0], "State": _norm(parts[1]), "ExitCode": parts[2]}
    return row


def _unknown_job(err: str) -> bool:
    return "Invalid job id" in err


def query_script(job_id: str) -> str:
    """One round trip: squeue, then scontrol, then sacct (slurmdbd, else the jobcomp file via -c),
    stopping at the first that knows the job. Each section is `@@ard NAME RC` then its output."""
    j = shlex.quote(str(job_id))
    return (
        f"s=$(squeue -h -j {j} -o %T 2>&1); r=$?; printf '@@ard squeue %s\\n%s\\n' $r \"$s\"; "
        f"if [ $r = 0 ] && [ -n \"$s\" ]; then exit 0; fi; "
        f"s=$(scontrol show job -o {j} 2>&1); r=$?; printf '@@ard scontrol %s\\n%s\\n' $r \"$s\"; "
        f"case \"$s\" in *JobState=*) exit 0;; esac; "
        f"s=$(sacct -n -P -X -j {j} -o JobID,State,ExitCode 2>/dev/null || "
        f"sacct -c -n -P -j {j} -o JobID,State,ExitCode 2>&1); r=$?; printf '@@ard sacct %s\\n%s\\n' $r \"$s\"; "
        f"true")


def parse_query(out: str, job_id: str) -> JobInfo:
    """Read query_script's output. A non-zero squeue that is not "Invalid job id" means the
    controller did not answer: the job may be fine, so the caller must not call it lost."""
    sections: dict[str, tuple[int, str]] = {}
    name, rc, buf = None, 0, []
    for line in out.splitlines() + ["@@ard end 0"]:
        if line.startswith("@@ard "):
            if name:
                sections[name] = (rc, "\n".join(buf))
            _, name, rc_s = line.split(" ", 2)
            rc, buf = int(rc_s) if rc_s.strip().lstrip("-").isdigit() else 1, []
        else:
            buf.append(line)
    rc, text = sections.get("squeue", (1, ""))
    if rc == 0 and parse_squeue(text):
        return JobInfo(parse_squeue(text), "squeue")
    if rc != 0 and not _unknown_job(text):
        return JobInfo(None, "squeue", reason=text.strip()[-300:], reachable=False)
    rc, text = sections.get("scontrol", (1, ""))
    rec = parse_scontrol(text) if rc == 0 else {}
    if rec.get("JobState"):
        return JobInfo(_norm(rec["JobState"]), "scontrol", rec.get("ExitCode"), rec.get("Reason"))
    row = parse_sacct(sections.get("sacct", (1, ""))[1], job_id)
    if row:
        return JobInfo(row["State"], "sacct", row["ExitCode"])
    return JobInfo(None)



def explain(out: TrialOutcome, info: JobInfo, job: str, slurm_out: bytes) -> TrialOutcome:
    """Add what Slurm knows to the outcome read from the trial's files."""
    st = info.state
    where = f"Slurm job {job}: {st or 'unknown'}" + (f", exit {info.exit_code}" if info.exit_code else "") + \
        (f", reason {info.reason}" if info.reason and info.reason != "None" else "")
    if st == "TIMEOUT":
        out.timed_out = True
        out.error = "Slurm time limit (TIMEOUT): the job ran past its --time; raise time_margin_s or the budget"
    elif st == "CANCELLED":
        out.error = "cancelled by scancel (Slurm state CANCELLED)"
    elif st in RERUN:
        out.requeue = True
        out.error = f"Slurm {st}: the job did not finish through no fault of its own; it will run again"
    elif st in FINISHED and st != "COMPLETED" and out.exit_code is None:
        out.error = f"Slurm state {st}" + (f" (exit {info.exit_code})" if info.exit_code else "")
    if slurm_out.strip():
        out.log += f"\n===== slurm ({where}) =====\n".encode() + slurm_out
    elif st:
        out.log += f"\n===== slurm ({where}) =====\n".encode()
    return out
