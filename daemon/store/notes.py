"""The versioned note schema: result notes (refs/notes/autoresearch) and run leases (-runs).

A result note is a one-line human summary, a blank line, then `key: value` lines. Scalars are
written raw, strings with newlines, quotes or control characters as JSON strings, lists and dicts as
compact JSON.
Parsing is tolerant (git-appraise style): unknown keys and unparsable lines are kept aside, never
fatal, so older daemons can read newer notes and the other way round.
"""

from __future__ import annotations

import json
import json.scanner
import math
import time
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autoresearchd import defaults
# notes are read by plain `git log` (notes.displayRef), which prints them as they are: no character a
# terminal would obey may reach a note's text (docs/security.md, "Every byte from an idea is data")
from autoresearchd.inert import needs_escaping, one_line
# the vocabulary lives in one module (daemon/vocab.py); re-exported for the note schema's readers
from autoresearchd.vocab import (BAD_DECISIONS, BEST_DECISIONS, FAILURES, GOOD_DECISIONS, Decision,  # noqa: F401
                                 LeaseState, Origin, Purpose, Status)

# A word this daemon knows reads as its enum member; an unknown one (a newer daemon's) stays a plain str,
# so reading never fails on it and writing it back keeps it (left to right: a member first, else the str)
KNOWN_OR_STR = {"union_mode": "left_to_right"}


class Trial(BaseModel):
    """One execution of a commit with one seed."""
    model_config = ConfigDict(extra="allow")
    trial_id: str
    seed: int
    status: Status
    value: float | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    exit_code: int | None = None
    host: str | None = None
    # compute of run + evaluation (docs/notes.md "Compute fields"): wall and CPU seconds of the same
    # steps, the evaluation's share, busy GPU seconds (0.0 without GPUs); older notes: wall_s only
    wall_s: float | None = None
    cpu_s: float | None = None
    gpu_s: float | None = None
    eval_wall_s: float | None = None
    eval_cpu_s: float | None = None
    limit: str | None = None        # the per-trial limit it hit: memory | pids | open_files
    run_metrics: dict[str, float] = Field(default_factory=dict)   # run's own report of budget_metrics
    gpus: int = 0
    log: str | None = None          # blob sha, anchored under refs/autoresearch/logs/<trial_id>
    curve: str | None = None        # its learning curve (runners/progress.py), a blob under logs/<trial_id>.curve
    error: str | None = None
    tamper: list[str] = Field(default_factory=list)
    harness: str | None = None      # hash of the evaluation harness blobs
    accelerator: str | None = None
    software: str | None = None
    sandbox: str | None = None      # what isolated run and evaluate: bwrap | apptainer | none
    trust: str | None = None        # what the metric rests on: split | model-code | run (manifest.Trust)
    faults: list[str] = Field(default_factory=list)   # host faults met before this run ("host: reason")


# the idea_id of the baseline's notes (its result, its screen, its cancelled seeds): an idea's note
# names the idea; a commit whose note names the baseline is one (an old one) and never an idea
BASELINE_NOTE_ID = "baseline"


class Note(BaseModel):
    """A result note. `value` is the mean over successful seeds; every seed is kept in `trials`."""
    # unknown keys are kept as extras; `schema` is the field's alias, `schema_` its name
    model_config = ConfigDict(extra="allow", use_enum_values=False, populate_by_name=True)
    schema_: int = Field(defaults.NOTE_SCHEMA, alias="schema")
    status: Status
    idea_id: str | None = None
    origin: Origin | str | None = Field(None, **KNOWN_OR_STR)   # as the daemon decided it (never a pushed trailer)
    epoch: int | None = None
    metric: str | None = None
    goal: str | None = None
    value: float | None = None
    std: float | None = None
    seeds: list[int] = Field(default_factory=list)
    values: list[float] = Field(default_factory=list)
    baseline: float | None = None
    baseline_std: float | None = None
    baseline_commit: str | None = None   # the baseline commit the result was judged against
    delta: float | None = None      # paired by seed where the baseline has the idea's seeds, else delta_mean
    delta_mean: float | None = None   # value - baseline (the baseline's mean over its seeds)
    parent_delta: float | None = None
    decision: Decision | str | None = Field(None, **KNOWN_OR_STR)
    host: str | None = None
    # totals over every trial in `trials` (every seed), each of run + evaluation (docs/notes.md)
    wall_s: float | None = None
    gpu_s: float | None = None      # busy GPU seconds; 0.0 when the env has no GPUs
    cpu_s: float | None = None      # CPU seconds from the kernel, every process of the trials
    limit: str | None = None        # a limit a trial hit (memory | pids | open_files), the first seed's
    budget: dict[str, Any] = Field(default_factory=dict)   # over_budget: the figures it was judged by
    exit_code: int | None = None
    seed: int | None = None
    error: str | None = None
    log: str | None = None
    duplicate_of: str | None = None
    linked: str | None = None       # identical tree measured on this commit
    seeds_planned: int | None = None  # baseline: seeds it will have (written at seed 0, amended per seed)
    accelerator: str | None = None
    software: str | None = None
    harness: str | None = None
    sandbox: str | None = None      # bwrap | apptainer | none (an unsandboxed result says so)
    trust: str | None = None        # split | model-code | run: the weakest of its trials (docs/notes.md)
    tamper: list[str] = Field(default_factory=list)
    superseded: list[str] = Field(default_factory=list)   # trials of this commit run twice; not counted
    flags: list[str] = Field(default_factory=list)   # e.g. cross_accelerator: compared across hardware
    tokens: int | None = None
    cost_usd: float | None = None
    cost: dict[str, float] = Field(default_factory=dict)
    trials: list[Trial] = Field(default_factory=list)
    finished_at: float | None = None
    # a tuned commit's trial: {"study", "sampler", "trial", "knobs": {name: value}} (docs/notes.md)
    tune: dict[str, Any] = Field(default_factory=dict)
    stopped: dict[str, Any] = Field(default_factory=dict)   # status stopped: the evidence (engine/stopping.py)
    screened: dict[str, Any] = Field(default_factory=dict)  # a screen's result, or screened_out's evidence (engine/screening.py)


_LIST_OR_DICT = {name for name, f in Note.model_fields.items()
                 if getattr(f.annotation, "__origin__", None) in (list, dict)}


def _fmt_duration(s: float | None) -> str:
    if s is None:
        return ""
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class DeltaKind(str, Enum):
    """What a note's `delta` is: paired by seed (the idea's seeds minus the baseline's at the same
    seeds), or the plain difference of means (no seed in common, or every baseline seed paired)."""
    PAIRED = "paired by seed"
    MEAN = "vs baseline mean"


def mean_delta(n: Note) -> float | None:
    """value - baseline mean: `delta_mean` where the note has it, else computed (older notes)."""
    if n.delta_mean is not None:
        return n.delta_mean
    return n.value - n.baseline if n.value is not None and n.baseline is not None else None


def delta_kind(n: Note) -> DeltaKind | None:
    """Which delta `delta` is; where the paired and the mean delta agree, both names are true and it
    is read as the mean (the figure a reader can check by subtracting)."""
    if n.delta is None:
        return None
    m = mean_delta(n)
    if m is None or abs(n.delta - m) <= 1e-9 * max(1.0, abs(m)):
        return DeltaKind.MEAN
    return DeltaKind.PAIRED


def deltas_differ(n: Note, kind: DeltaKind | None = None) -> bool:
    """The paired and the mean delta differ by more than the noise, so a view shows both. The noise is
    the baseline's seed std (`baseline_std`); with no noise known (one seed, or identical seeds) any
    difference visible at 4 decimals counts. `kind`: delta_kind(n), when the caller has it."""
    m = mean_delta(n)
    if (kind or delta_kind(n)) != DeltaKind.PAIRED or m is None:
        return False
    gap = abs(n.delta - m)
    return gap > n.baseline_std if n.baseline_std else gap >= 0.5e-4


def delta_words(n: Note, kind: DeltaKind | None = None) -> str:
    """A note's delta with what it is: `+0.0257 vs baseline, paired by seed (+0.0075 vs baseline
    mean)`, `+0.0075 vs baseline mean`; empty without one."""
    kind = kind or delta_kind(n)
    if kind is None:
        return ""
    if kind == DeltaKind.MEAN:
        return f"{n.delta:+.4f} vs baseline mean"
    text = f"{n.delta:+.4f} vs baseline, paired by seed"
    return text + (f" ({mean_delta(n):+.4f} vs baseline mean)" if deltas_differ(n, kind) else "")


def summary_line(n: Note) -> str:
    parts = [n.status.value]
    if n.value is not None and n.metric:
        v = f"{n.metric}={n.value:.4f}"
        if len(n.values) > 1 and n.std is not None:
            v += f"±{n.std:.4f}"
        parts.append(v)
        if n.seeds_planned and len(n.seeds) < n.seeds_planned:
            parts.append(f"({len(n.seeds)} of {n.seeds_planned} seeds so far)")
        if n.delta is not None:
            parts.append(f"({delta_words(n)})")
    if n.decision:
        parts.append(f"[{n.decision}]")
    if n.host:
        parts.append(n.host)
    if n.wall_s is not None:
        parts.append(_fmt_duration(n.wall_s))
    if n.error and n.status != Status.SUCCEEDED:
        parts.append("— " + one_line(n.error.splitlines()[0][:120]))
    if n.duplicate_of:
        parts.append(f"duplicate of {n.duplicate_of}")
    return " ".join(parts)


def _fmt_value(v: Any) -> str:
    if isinstance(v, Enum):
        return str(v.value)
    if isinstance(v, (list, dict)):
        return json.dumps(v, separators=(",", ":"), sort_keys=True, default=str)
    if isinstance(v, str):
        # a JSON string (ASCII only) where the text holds a control or format character: the note
        # reads back the raw text, and `git log` shows `\u001b`, never an escape sequence
        if "\n" in v or v.startswith('"') or v != v.strip() or v == "" or needs_escaping(v, keep=""):
            return json.dumps(v)
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return str(v)


SIG_DIGITS = 12     # a note keeps 12 significant digits: measurements, never binary float noise


def tidy(v: Any, key: str = "") -> Any:
    """Floats rounded to SIG_DIGITS significant digits (3.1450319999999996 -> 3.145032), in lists
    and dicts too; durations (keys ending in `_s`) to the millisecond, since a clock reading has no
    more meaning than that; non-finite values are left alone."""
    if isinstance(v, float):
        if not math.isfinite(v):
            return v
        return round(v, 3) if key.endswith("_s") else float(f"{v:.{SIG_DIGITS}g}")
    if isinstance(v, list):
        return [tidy(x, key) for x in v]
    if isinstance(v, dict):
        return {k: tidy(x, k) for k, x in v.items()}
    return v


def format_note(n: Note) -> str:
    data = tidy(n.model_dump(mode="json", by_alias=True, exclude_none=True))
    lines = [summary_line(n), ""]
    order = ["schema", "status"] + [k for k in data if k not in ("schema", "status")]
    for k in order:
        v = data.get(k)
        if v in (None, [], {}) and k not in ("schema", "status"):
            continue
        lines.append(f"{k}: {_fmt_value(v)}")
    return "\n".join(lines) + "\n"


_JSON_KEYS = frozenset(_LIST_OR_DICT | {"trials"})
# json's own scanner, called on each value: json.loads wraps it in a decoder call and a regex for the
# whitespace around the value, most of the time of a value as short as `seeds: [0]` (a cold read of
# 100k notes decodes 300k of them)
_scan = json.scanner.make_scanner(json.JSONDecoder())


def _note_fields(text: str) -> dict[str, Any]:
    """The `key: value` lines of a note, values decoded (JSON where it is JSON: the whole value, as
    json.loads reads it; a value that is not is kept as its text)."""
    fields: dict[str, Any] = {}
    for line in text.splitlines()[1:]:
        key, sep, raw = line.partition(": ")
        if not sep or not key or " " in key:
            continue
        raw = raw.strip()
        if key in _JSON_KEYS or raw.startswith(("{", "[", '"')):
            try:
                value, end = _scan(raw, 0)
                fields[key] = value if end == len(raw) else raw
            except (StopIteration, ValueError):
                fields[key] = raw
        else:
            fields[key] = raw
    return fields


def _read_v1(fields: dict[str, Any]) -> Note | None:
    """Schema 1 (today's): tolerant, git-appraise style: a field that does not validate is dropped,
    the rest kept; None only without a readable status."""
    if "status" not in fields:
        return None
    for _ in range(len(fields) + 1):
        try:
            return Note.model_validate(fields)
        except ValidationError as e:
            # Tolerate a newer or damaged note: drop the fields we cannot read, keep the rest.
            bad = {err["loc"][0] for err in e.errors() if err["loc"]}
            if "status" in bad or not bad:
                return None
            for k in bad:
                fields.pop(k, None)
    return None


# One reader per schema version a note may carry. A note of a newer schema than this daemon knows is
# read by the newest reader (the format only ever adds keys); one without a `schema` line is version 1.
NOTE_READERS = {1: _read_v1}


def version_of(raw: Any) -> int:
    """A version field as written (notes' `schema`, leases' and trailers' version): absent,
    unreadable or below 1 is version 1."""
    try:
        return max(1, int(raw if raw is not None else 1))
    except (TypeError, ValueError):
        return 1


def reader_for(readers: dict[int, Any], version: int):
    """The reader of a version; a newer one than this daemon knows goes to the newest reader (a
    version only ever adds keys). Notes, leases and trailers are all read this way."""
    return readers.get(version, readers[max(readers)])


def note_schema(fields: dict[str, Any]) -> int:
    return version_of(fields.get("schema"))


def parse_note(text: str) -> Note | None:
    """Parse a note with the reader of its schema version; None if it has no status line we
    understand. Unknown keys are kept as extras."""
    fields = _note_fields(text)
    return reader_for(NOTE_READERS, note_schema(fields))(fields)


# -- leases -------------------------------------------------------------------------------------
LEASE_VERSION = defaults.LEASE_VERSION


class Lease(BaseModel):
    """What runs where. One lease note per commit holds every live trial of that commit."""
    model_config = ConfigDict(extra="allow")
    version: int = LEASE_VERSION    # absent in leases written before versions: 1
    trial_id: str
    seed: int
    runner: str
    host: str
    slot: str
    handle: dict[str, Any] = Field(default_factory=dict)
    started: float = Field(default_factory=time.time)      # dispatched (placed on the host)
    began: float | None = None      # its run started on the host (None: waiting for its slot, or unknown)
    heartbeat: float = Field(default_factory=time.time)
    retries: int = 0                # failures of this seed on healthy hosts so far (max_retries)
    attempt: int | None = None      # placements of this seed so far (None: older leases, = retries)
    faults: list[str] = Field(default_factory=list)   # host faults met so far: "host: reason"
    purpose: Purpose | str = Field(Purpose.IDEA, **KNOWN_OR_STR)
    # running | done (result kept until the note is written) | lost (failed on a healthy host: a retry)
    # | requeued (a host fault: no retry) | stale (a host fault; the trial may live on its host: it is
    # cancelled and removed, or its result kept, when the host answers) | superseded (a twin counted)
    state: LeaseState | str = Field(LeaseState.RUNNING, **KNOWN_OR_STR)
    result: Trial | None = None
    error: str | None = None


def format_leases(leases: list[Lease]) -> str:
    body = json.dumps([lz.model_dump(mode="json") for lz in leases], separators=(",", ":"), sort_keys=True)
    head = ", ".join(f"{lz.trial_id} on {lz.host}/{lz.slot}" for lz in leases) or "no live trials"
    return f"running: {head}\n\nleases: {body}\n"


def _lease_v1(x: dict[str, Any]) -> Lease:
    return Lease.model_validate(x)


# One reader per lease version, as for notes: a newer version than this daemon knows is read by the
# newest reader (a version only ever adds keys; unknown keys are kept as extras).
LEASE_READERS = {1: _lease_v1}


def _read_lease(x: dict[str, Any]) -> Lease:
    return reader_for(LEASE_READERS, version_of(x.get("version")))(x)


def parse_leases(text: str) -> list[Lease]:
    for line in text.splitlines():
        if line.startswith("leases: "):
            try:
                return [_read_lease(x) for x in json.loads(line[8:])]
            except (json.JSONDecodeError, ValidationError, AttributeError):
                return []
    return []
