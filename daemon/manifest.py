"""The environment contract: the `[env]` manifest that turns any repo into a research environment.

The manifest is read from the baseline commit (never from a work tree that a trial could edit),
out of `.autoresearch.toml`'s `[env]` table.
"""

from __future__ import annotations

import fnmatch
import math
import re
import tomllib
from enum import Enum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from autoresearchd import defaults
from autoresearchd.goal import better
from autoresearchd.keyerrors import format_validation_error

MANIFEST_FILE = ".autoresearch.toml"
# the files `adopt` writes beside the manifest (research.py names them when they are not committed)
EVAL_FILE = "autoresearch_eval.py"       # the trusted scorer (the manifest's `evaluate`)
MODEL_FILE = "autoresearch_model.py"     # the model runner: the only process that loads the model (`model`)
EXPORT_FILE = "autoresearch_export.py"
KNOB_ENV_PREFIX = "AUTORESEARCH_KNOB_"         # a knob `lr` reaches the run as AUTORESEARCH_KNOB_LR
_KNOB_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
# a categorical choice is a variable's value: printable ASCII, no control character (a NUL or a newline
# would not survive the trial's environment), and short; an idea's declaration may hold one (tune/knobs.py)
_KNOB_CHOICE = re.compile(r"^[\x20-\x7e]{1,64}$")
KNOB_MAX_CHOICES = 64


class KnobType(str, Enum):
    FLOAT = "float"
    INT = "int"
    CATEGORICAL = "categorical"


class Knob(BaseModel):
    """A number (or choice) the run reads from `AUTORESEARCH_KNOB_<NAME>`, that a tuner may set
    (docs/environment.md, "Knobs"). `baseline` is the value the code uses when the variable is absent."""
    model_config = ConfigDict(extra="forbid")
    name: str
    type: KnobType = KnobType.FLOAT
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None                  # int knobs: the grid (e.g. width in steps of 32)
    choices: list[str | int | float] = Field(default_factory=list)   # categorical knobs only
    baseline: str | int | float

    @property
    def env(self) -> str:
        return KNOB_ENV_PREFIX + self.name.upper()

    @model_validator(mode="after")
    def _valid(self):
        n = self.name
        if not _KNOB_NAME.match(n):
            raise ValueError(f"knob name {n!r}: lower-case letters, digits and _, starting with a letter")
        if any(isinstance(v, float) and not math.isfinite(v) for v in (self.low, self.high, self.step, self.baseline,
                                                                      *self.choices)):
            raise ValueError(f"knob {n}: low, high, step, baseline and choices must be finite numbers")
        if self.type == KnobType.CATEGORICAL:
            if len(self.choices) > KNOB_MAX_CHOICES or any(isinstance(c, str) and not _KNOB_CHOICE.match(c)
                                                           for c in self.choices):
                raise ValueError(f"knob {n}: at most {KNOB_MAX_CHOICES} choices, each text of 1 to 64 printable "
                                 "ASCII characters or a number")
            if len(self.choices) < 2 or self.low is not None or self.high is not None or self.log:
                raise ValueError(f"knob {n}: a categorical knob has `choices` (two or more) and no low/high/log")
            if self.baseline not in self.choices:
                raise ValueError(f"knob {n}: baseline {self.baseline!r} is not one of choices {self.choices}")
            return self
        if self.choices:
            raise ValueError(f"knob {n}: `choices` is for categorical knobs only")
        if self.low is None or self.high is None or not self.low < self.high:
            raise ValueError(f"knob {n}: needs low < high")
        if self.log and self.low <= 0:
            raise ValueError(f"knob {n}: a log-scale knob needs low > 0")
        if isinstance(self.baseline, str):
            raise ValueError(f"knob {n}: baseline must be a number")
        if not self.low <= self.baseline <= self.high:
            raise ValueError(f"knob {n}: baseline {self.baseline} is outside [{self.low}, {self.high}]")
        if self.type == KnobType.INT:
            if any(v is not None and float(v) != int(v) for v in (self.low, self.high, self.baseline, self.step)):
                raise ValueError(f"knob {n}: an int knob needs whole low, high, baseline and step")
            if self.step is not None and (self.step <= 0 or self.log
                                          or (self.baseline - self.low) % self.step or (self.high - self.low) % self.step):
                raise ValueError(f"knob {n}: step must be > 0, without log, with baseline and high on the grid from low")
        elif self.step is not None:
            raise ValueError(f"knob {n}: `step` is for int knobs only")
        return self

    def check(self, v) -> str | None:
        """Why `v` is not a valid value of this knob (None: it is)."""
        if self.type == KnobType.CATEGORICAL:
            return None if v in self.choices else f"{self.name}={v!r} is not one of {self.choices}"
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
            return f"{self.name}={v!r} is not a number"
        if self.type == KnobType.INT and float(v) != int(v):
            return f"{self.name}={v!r} is not a whole number"
        if not self.low <= v <= self.high:
            return f"{self.name}={v} is outside [{self.low:g}, {self.high:g}]"
        return None

    def text(self, v) -> str:
        """The value as the run's variable holds it: exact (repr) for floats, so the baseline's value
        reads back bit-identical."""
        if self.type == KnobType.INT:
            return str(int(v))
        if self.type == KnobType.FLOAT:
            return repr(float(v))
        return str(v)


class Screening(BaseModel):
    """[env.screening]: the fidelity knob that sets the training length (steps, tokens, epochs) and the
    share of its baseline value a screened run uses (engine/screening.py, docs/policies.md "Screening at
    low fidelity"). Checked against [[env.knobs]] by EnvManifest."""
    model_config = ConfigDict(extra="forbid")
    knob: str
    fraction: float = Field(gt=0, lt=1)

    @field_validator("fraction")
    @classmethod
    def _finite(cls, v):
        if v != v or v in (float("inf"), float("-inf")):
            raise ValueError("fraction must be a finite number in (0, 1)")
        return v


def screened_value(k: Knob, fraction: float):
    """The fidelity knob's value for a screened run: its baseline x fraction (an int knob rounded down
    to its grid from `low`; below `low` it is invalid, and the manifest is refused)."""
    v = float(k.baseline) * fraction
    if k.type == KnobType.INT:
        step, lo = int(k.step or 1), int(k.low)
        return lo + math.floor((v - lo) / step) * step
    return v


class Trust(str, Enum):
    """How far the metric of record can be trusted against the idea's own code (a note's `trust`)."""
    SPLIT = "split"              # `model` set: the idea's artifact runs in its own sandbox, the scorer apart
    MODEL_CODE = "model-code"    # no `model`: the evaluator runs the idea's code beside its targets
    SELF_REPORTED = "run"        # no `evaluate`: the metric is what `run` itself reported


class EnvManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = "env"
    description: str = ""
    run: str                                   # shell command; metrics via the protocol below
    evaluate: str | None = None                # frozen; its metrics are the metric of record
    # the split evaluation (docs/environment.md "The model runner"): with `model`, `evaluate` is the
    # trusted scorer (phases `inputs` and `score`) and `model` the untrusted model runner, run once per
    # input group in a sandbox of its own that holds no targets and no eval_data
    model: str | None = None
    model_output_mb: int = Field(defaults.MODEL_OUTPUT_MB, ge=1)   # what one model-runner group may write
    check: str | None = None                   # quick CPU check of an implemented idea
    metric: str
    goal: Literal["min", "max"] = "min"
    time_budget_s: int = 600
    eval_budget_s: int = 600
    gpus: int = 0
    frozen: list[str] = Field(default_factory=list)   # globs; the manifest file is always frozen
    hidden: list[str] = Field(default_factory=list)   # globs left out of the LLM's view
    artifacts: list[str] = Field(default_factory=list)  # what run leaves for evaluate
    setup: str | None = None                   # runs on the host before prepare, run and evaluate
    prepare: str | None = None                 # once per host and input hash (data download, preprocessing)
    prepare_inputs: list[str] = Field(default_factory=list)  # globs its hash covers; implicitly frozen
    prepare_budget_s: int = defaults.PREPARE_BUDGET_S
    deterministic: bool = False                # run gives the same value for every seed: one baseline seed
    data: dict[str, str] = Field(default_factory=dict)  # env variables such as DATA_DIR
    # env variables only the evaluator sees (validation split, held-out seeds). A relative value names
    # a baseline file withheld from run's code/ and from the LLM (shipped only in the evaluator's
    # dir); an absolute one a host path bound read-only into the evaluator's sandbox only.
    eval_data: dict[str, str] = Field(default_factory=dict)
    network: bool = False                      # run may reach the network (the evaluator never does)
    baseline: str = "main"
    editable: list[str] = Field(default_factory=list)  # globs shown to the LLM (default: all text files)
    context: str = ""                          # free text for the ideator: the task, the rules
    # [lo, hi]: a metric of record outside it is a reward hack until shown otherwise (note: suspicious)
    plausible: tuple[float, float] | None = None
    # Compute and resources (docs/environment.md, docs/security.md). compute_cap: an idea's trial
    # may use at most this many times the baseline's median CPU (GPU where gpus > 0) seconds; 0: off.
    compute_cap: float = Field(defaults.COMPUTE_CAP, ge=0)
    # run-reported counts (steps, tokens) that an idea may not raise above the baseline's
    budget_metrics: list[str] = Field(default_factory=list)
    # per-trial limits the kernel enforces; None: derived from the host's size and its slots
    mem_mb: int | None = Field(None, ge=1)
    max_pids: int | None = Field(None, ge=1)
    max_open_files: int | None = Field(None, ge=1)
    knobs: list[Knob] = Field(default_factory=list)   # [[env.knobs]]: what a tuner may set (docs/environment.md)
    screening: Screening | None = None        # [env.screening]: the fidelity knob (engine/screening.py)

    @field_validator("knobs")
    @classmethod
    def _unique(cls, v):
        seen = set()
        for k in v:
            if k.name in seen:
                raise ValueError(f"knob {k.name!r} is declared twice")
            seen.add(k.name)
        return v

    def knob(self, name: str) -> Knob | None:
        return next((k for k in self.knobs if k.name == name), None)

    @field_validator("plausible")
    @classmethod
    def _range(cls, v):
        if v is not None and not v[0] < v[1]:
            raise ValueError("plausible must be [lo, hi] with lo < hi")
        return v

    @model_validator(mode="after")
    def _model_needs_scorer(self):
        if self.model and not self.evaluate:
            raise ValueError("`model` (the model runner) needs `evaluate` (the scorer that reads its outputs)")
        return self

    @model_validator(mode="after")
    def _fidelity_knob(self):
        sc = self.screening
        if sc is None:
            return self
        k = self.knob(sc.knob)
        if k is None:
            known = ", ".join(k.name for k in self.knobs) or "none"
            raise ValueError(f"[env.screening] knob {sc.knob!r} is not one of [[env.knobs]] (declared: {known})")
        if k.type == KnobType.CATEGORICAL:
            raise ValueError(f"[env.screening] knob {sc.knob!r} is categorical: the fidelity knob is an int or "
                             "float that sets the training length (steps, tokens, epochs)")
        v = screened_value(k, sc.fraction)
        if why := k.check(v):
            raise ValueError(f"[env.screening] {sc.knob} x fraction {sc.fraction:g} = {v!r} is not a valid value "
                             f"of the knob ({why}): lower its `low` or raise the fraction")
        if not v < float(k.baseline):
            raise ValueError(f"[env.screening] {sc.knob} x fraction {sc.fraction:g} = {v!r} is not shorter than "
                             f"its baseline {k.baseline!r}: nothing would be saved")
        return self

    def is_frozen(self, path: str) -> bool:
        return path == MANIFEST_FILE or match_globs(path, self.frozen) or match_globs(path, self.prepare_inputs) \
            or match_globs(path, self.heldout())

    def is_hidden(self, path: str) -> bool:
        return match_globs(path, self.hidden) or match_globs(path, self.heldout())

    def heldout(self) -> list[str]:
        """Repo paths only the evaluator sees: the relative values of `eval_data`."""
        return [v.strip("/") for v in self.eval_data.values() if not v.startswith(("/", "~/"))]

    def trust(self) -> Trust:
        """What the metric of record rests on: a split evaluation, an evaluator that runs the idea's
        code beside its targets, or run's own report."""
        if not self.evaluate:
            return Trust.SELF_REPORTED
        return Trust.SPLIT if self.model else Trust.MODEL_CODE

    def better(self, a: float, b: float) -> bool:
        """True if a is strictly better than b under the goal."""
        return better(a, b, self.goal)

    def delta(self, value: float, ref: float) -> float:
        return value - ref


def match_globs(path: str, globs: list[str]) -> bool:
    for g in globs:
        g = g.rstrip("/")
        if fnmatch.fnmatchcase(path, g) or path.startswith(g + "/"):
            return True
    return False


class ManifestError(ValueError):
    pass


def parse_manifest(text: str, source: str = MANIFEST_FILE) -> EnvManifest:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ManifestError(f"{source}: invalid TOML: {e}") from None
    if "env" not in data:
        raise ManifestError(f"{source}: no [env] table; see docs/environment.md")
    try:
        return EnvManifest.model_validate(data["env"])
    except ValidationError as e:
        raise ManifestError(format_validation_error(e, EnvManifest, source + " [env]")) from None
