"""What the tuning found, in a few lines: each study's best tuned values and its response surface
(per knob, the best value measured in the low, middle and high third of its range), for `status`,
the dashboard and the LLM's prompt, which also learns how to hand a knobs-only idea to the tuner.

A study's knobs are the manifest's plus the ones its tuned idea's tree declares
(`.autoresearch-knobs.toml`, knobs.declared_knobs): given the repo, each study shows those knobs'
ranges and surface lines too, so the next ideas build on a tuned parent's own numbers."""

from __future__ import annotations

import math

from autoresearchd.manifest import EnvManifest, KnobType
from autoresearchd.store.notes import Status
from autoresearchd.tune.knobs import declared_knobs
from autoresearchd.tune.tuner import BASELINE_STUDY

MAX_STUDIES_SHOWN = 3


def _measured(pop, study: str) -> list[tuple[dict, float]]:
    out = []
    for i in pop.ideas:
        if i.trailers.tune_study != study or i.note is None or i.note.status != Status.SUCCEEDED:
            continue
        if i.value is None or pop.stale(i) or not i.note.tune.get("knobs"):
            continue
        out.append((dict(i.note.tune["knobs"]), i.value))
    return out


def study_root(pop, study: str) -> str | None:
    """The commit a study tunes: the baseline's, or its idea's (a study is named by its idea's id;
    None when that idea is not in the population)."""
    if study == BASELINE_STUDY:
        return pop.baseline_commit
    root = pop.by_id.get(study)
    return root.commit if root is not None else None


def studies(pop, m: EnvManifest, repo=None, limit: int | None = None) -> list[dict]:
    """Each study with a tuned result, best first (the first `limit`): its trials, best value, best
    knob values, surface lines and the knobs its idea declares (`own`: [] without `repo`, whose trees
    hold the declarations; read only for the studies returned)."""
    names = sorted({i.trailers.tune_study for i in pop.ideas if i.trailers.tune_study})
    sign = 1 if m.goal == "min" else -1
    found = []
    for s in names:
        pts = _measured(pop, s)
        if pts:
            found.append((s, pts, min(pts, key=lambda p: sign * p[1])))
    found.sort(key=lambda f: sign * f[2][1])
    out = []
    for s, pts, (knobs, value) in found[:limit]:
        root = study_root(pop, s) if repo is not None else None
        own = declared_knobs(repo, root, m) if root else []
        sm = m.model_copy(update={"knobs": [*m.knobs, *own]}) if own else m
        out.append({"study": s, "trials": len(pts), "best": value, "knobs": knobs,
                    "own": [k.name for k in own], "own_ranges": [knob_range(k) for k in own],
                    "surface": surface_lines(sm, pts)})
    return out


def surface_lines(m: EnvManifest, pts: list[tuple[dict, float]]) -> list[str]:
    """One line per knob: the best value in each third of its range (log thirds for a log knob),
    or per choice of a categorical knob; a third no trial fell in is left out."""
    sign = 1 if m.goal == "min" else -1
    lines = []
    for k in m.knobs:
        bins: dict[str, float] = {}
        for knobs, v in pts:
            x = knobs.get(k.name)
            if x is None:
                continue
            label = str(x) if k.type == KnobType.CATEGORICAL else _third(k, x)
            if label not in bins or sign * v < sign * bins[label]:
                bins[label] = v
        if bins:
            order = list(k.choices) if k.type == KnobType.CATEGORICAL else ["low", "mid", "high"]
            cells = [f"{b} {bins[b]:.4g}" for b in map(str, order) if b in bins]
            lines.append(f"{k.name}: " + " | ".join(cells))
    return lines


def _third(k, x: float) -> str:
    lo, hi, v = (math.log(k.low), math.log(k.high), math.log(x)) if k.log else (k.low, k.high, x)
    f = (v - lo) / (hi - lo) if hi > lo else 0.5
    return "low" if f < 1 / 3 else "mid" if f < 2 / 3 else "high"


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def knob_range(k) -> str:
    """`name in [low, high] (baseline b)`: a knob's range as the prompt and the views show it."""
    if k.type == KnobType.CATEGORICAL:
        return f"{k.name} in {list(k.choices)} (baseline {k.baseline})"
    return f"{k.name} in [{k.low:g}, {k.high:g}]{' log' if k.log else ''} (baseline {k.baseline})"


def prompt_block(pop, m: EnvManifest, repo=None) -> str:
    """The prompt's tuning section: the knobs, how to ask for a knobs-only run, and what tuning found
    (the studies of ideas that declare knobs of their own too, with a manifest that declares none).
    With `repo`, a study of an idea that declares knobs shows their ranges and surface lines."""
    found = studies(pop, m, repo, limit=MAX_STUDIES_SHOWN)
    if not m.knobs and not found:
        return ""
    lines = ["## Tuned knobs", ""]
    if m.knobs:
        lines += ["A tuner sets these numbers; the code reads them from AUTORESEARCH_KNOB_<NAME>: "
                  + "; ".join(knob_range(k) for k in m.knobs) + "."]
    else:
        lines += ["A tuner sets the numbers that ideas declared as knobs of their own (AUTORESEARCH_KNOB_<NAME>)."]
    if m.knobs or any(s["own"] for s in found):     # an idea's own knobs may be set the same way
        lines += ["An experiment that only changes knob values needs no code: write its [Code Changes] as the one "
                  "line `Knobs: name=value, name=value` and it runs at once, without an implementation. "
                  "Spend code ideas on what a tuner cannot find."]
    if found:
        lines += ["", "What tuning measured so far (best value per third of each knob's range):"]
        for s in found:
            vals = ", ".join(f"{k}={_fmt(v)}" for k, v in sorted(s["knobs"].items()))
            lines.append(f"- {s['study']}: {s['trials']} tuned runs, best {s['best']:.4g} at {vals}")
            if s["own_ranges"]:
                lines.append("    its own knobs (its code reads them; a knobs-only idea built on it may set them): "
                             + "; ".join(s["own_ranges"]))
            lines += [f"    {ln}" for ln in s["surface"]]
    return "\n".join(lines) + "\n"
