"""The typed, versioned trailers of an idea commit: what the daemon records about an idea's
provenance and spend (Idea-Id, Origin, Parents, Epoch, Model, costs, the transcript blob...).

Text in git, a frozen model in memory: `parse_trailers` reads the `Key: value` lines with the reader
of their `Trailer-Version` (1 when absent, which is every commit written before versions existed),
and `Trailers.lines()` writes them back in a fixed order. A malformed number reads as absent, never as
an error: trailers are believed only on commits the daemon wrote (population.py), but an old or
hand-edited message must still load.
"""

from __future__ import annotations

from typing import Annotated, Any, Callable

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from autoresearchd import defaults
from autoresearchd.store.notes import reader_for, version_of

TRAILER_VERSION = defaults.TRAILER_VERSION


def _lenient(cast: Callable[[Any], Any]):
    def read(v):
        if v is None or v == "":
            return None
        try:
            return cast(v)
        except (TypeError, ValueError):
            return None
    return BeforeValidator(read)


def _names(v) -> tuple[str, ...]:
    if isinstance(v, str):
        return tuple(p.strip() for p in v.split(",") if p.strip())
    return tuple(v or ())


Int = Annotated[int | None, _lenient(int)]
Float = Annotated[float | None, _lenient(float)]


class Trailers(BaseModel):
    """One idea commit's trailers. Field names are Python's; aliases are the keys written in git."""
    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")
    idea_id: str | None = Field(None, alias="Idea-Id")
    origin: str | None = Field(None, alias="Origin")
    # a tuple: a frozen model whose list could still be appended to would not be immutable (ideas are
    # cached process-wide by the population reader)
    parents: Annotated[tuple[str, ...], BeforeValidator(_names)] = Field((), alias="Parents")
    epoch: Int = Field(None, alias="Epoch")
    model: str | None = Field(None, alias="Model")
    idea_model: str | None = Field(None, alias="Idea-Model")        # who proposed it (the bandit's arm)
    implementer: str | None = Field(None, alias="Implementer")      # an agent CLI's kind, if one wrote it
    attempts: Int = Field(None, alias="Attempts")
    tokens: Int = Field(None, alias="Tokens")
    idea_tokens: Int = Field(None, alias="Idea-Tokens")
    cost_usd: Float = Field(None, alias="Cost-USD")
    idea_cost_usd: Float = Field(None, alias="Idea-Cost-USD")
    implement_cost_usd: Float = Field(None, alias="Implement-Cost-USD")
    prompt_hash: str | None = Field(None, alias="Prompt-Hash")
    transcript: str | None = Field(None, alias="Transcript")        # blob id of the implementer's transcript
    duplicate_of: str | None = Field(None, alias="Duplicate-Of")
    base: str | None = Field(None, alias="Base")                    # the commit the proposal builds on
    # a tuned commit (daemon/tune/): its study (the tuned idea's id, or "baseline"), the Optuna sampler,
    # its trial number in the study, and the knob values it sets (JSON, one line; also in its knobs file)
    tune_study: str | None = Field(None, alias="Tune-Study")
    tune_sampler: str | None = Field(None, alias="Tune-Sampler")
    tune_trial: Int = Field(None, alias="Tune-Trial")
    knobs: str | None = Field(None, alias="Knobs")
    # a screened commit (engine/screening.py, on refs/autoresearch/screens/): the commit it screens, the
    # fidelity knob it shortens and the fraction of the knob's baseline value it runs at
    screen_of: str | None = Field(None, alias="Screen-Of")
    screen_knob: str | None = Field(None, alias="Screen-Knob")
    screen_fraction: Float = Field(None, alias="Screen-Fraction")
    version: int = Field(TRAILER_VERSION, alias="Trailer-Version")

    def lines(self) -> list[str]:
        """`Key: value` lines, in field order, absent ones left out; the version line only when there
        is anything to version. It names the version written (this daemon's), not the one read: keys of
        a newer version that this daemon does not know were dropped on reading."""
        out = []
        for name, f in type(self).model_fields.items():
            v = getattr(self, name)
            if v is None or v == () or v == "" or name == "version":
                continue
            if isinstance(v, float):
                v = f"{v:.6f}"
            text = ", ".join(v) if isinstance(v, tuple) else " ".join(str(v).split())   # one line each
            out.append(f"{f.alias}: {text}")
        return out + [f"Trailer-Version: {TRAILER_VERSION}"] if out else out

    def as_text(self) -> dict[str, str]:
        """The trailers as git shows them (key -> value text), for views."""
        return dict(line.split(": ", 1) for line in self.lines())


TRAILER_KEYS = frozenset(f.alias for f in Trailers.model_fields.values())


def _read_v1(raw: dict[str, Any]) -> Trailers:
    return Trailers.model_validate(raw)     # the version is already an int (parse_trailers)


# One reader per version; a newer version than this daemon knows is read by the newest reader (a
# version only ever adds keys), as notes are.
TRAILER_READERS = {1: _read_v1}


def parse_trailers(raw: dict[str, Any]) -> Trailers:
    """Typed trailers of a commit's raw `Key: value` lines. Any commit is read this way, a pushed one
    too (before its trailers are set aside), so nothing in them may raise: an unreadable version
    (`Trailer-Version: x`) is version 1."""
    version = version_of(raw.get("Trailer-Version"))
    return reader_for(TRAILER_READERS, version)({**raw, "Trailer-Version": version})
