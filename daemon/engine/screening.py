"""Screening at low fidelity: each new idea first runs short, and only the best share goes on to full
length (docs/policies.md "Screening at low fidelity"; [screening] in the config, [env.screening] in the
manifest).

A screened run is a commit the daemon makes, like a tuned commit: the idea's tree with its knobs file
(tune/knobs.py) setting the fidelity knob to its baseline value x fraction, and nothing else changed;
its parent is the idea's commit, its message says `Screen-Of: <idea commit>`, and it lives on
`refs/autoresearch/screens/<key>` (the idea's id, or `baseline-<commit>` for the baseline), a prefix the
population never lists as an idea: a screen is never an idea of its own, never in the leaderboard. The
population carries the screens beside its ideas (Population.screens, store/screens.py), read from the
same listings. Its result note (on the screened commit, `screened` holding the value) is what the
decision reads, so a restarted daemon rebuilds every screen and every decision from git alone; its
compute counts in the one spend rule (store/spend.py).

The decision, for an idea whose screen has a value and whose baseline's screened seeds all have theirs:
- screened out when its value is worse than the baseline's screened mean by more than margin = k x
  spread (their standard deviation, at least defaults.SCREENING_MIN_SPREAD x |mean|), or when, with at
  least `min_peers` ideas screened against the same baseline, it is outside the best `keep` share of
  them (a plain empirical quantile, its own value included: with every screen's value known when the
  decision is made, that is what ASHA's rung promotion computes, without a study to keep in memory);
- it continues otherwise (its full-length first seed, then confirmation, as without screening): it
  must pass both rules.

A screened value is the run's own short measurement: it never enters a note's `value`, never makes a
decision of promoted/confirmed, never a best. A screened-out idea's note has no value and no decision.
Full-length runs start from scratch: the env contract has no checkpoint hand-over.
"""

from __future__ import annotations

import math
import statistics

from autoresearchd import defaults
from autoresearchd.manifest import EnvManifest, screened_value
from autoresearchd.store.ideas import parse_message
from autoresearchd.store.lifecycle import Made
from autoresearchd.store.refs import SCREENS_PREFIX
from autoresearchd.store.screens import screen_key  # noqa: F401  (the screener names screens by it)
from autoresearchd.store.trailers import parse_trailers
from autoresearchd.tune.knobs import KNOBS_FILE, commit_values, values_file

SCREEN_TRAILER = "Screen-Of"


def screen_message(key: str, of: str, knob: str, value, fraction: float) -> str:
    return (f"screen {key}: {knob}={value} ({fraction:g} of its baseline)\n\n"
            f"{SCREEN_TRAILER}: {of}\nScreen-Knob: {knob}\nScreen-Fraction: {fraction!r}\n")


def make_screen(repo, lifecycle, manifest: EnvManifest, of: str, key: str) -> str:
    """The screened commit of `of` (made once: an existing screens/<key> that screens `of` is reused)."""
    have = repo.refs(SCREENS_PREFIX + key).get(SCREENS_PREFIX + key)
    if have and screen_of(repo, have) == of:
        return have
    sc = manifest.screening
    k = manifest.knob(sc.knob)
    v = screened_value(k, sc.fraction)
    values = {**commit_values(repo, of, manifest), sc.knob: v}
    tree = repo.tree_with_files(of, {KNOBS_FILE: values_file(values)})
    return lifecycle.screen(key, Made((of,), screen_message(key, of, sc.knob, v, sc.fraction), tree))


def screen_of(repo, commit: str) -> str | None:
    """The commit a screened commit screens: its `Screen-Of` trailer (store/trailers.py; None: not a
    screen). The population reads it the same way, from the commits it parses (store/screens.py)."""
    return parse_trailers(parse_message(repo.commit_message(commit) or "")[2]).screen_of


def worse(a: float, b: float, goal: str) -> bool:
    return a > b if goal == "min" else a < b


def cutoff(values: list[float], keep: float, goal: str) -> float:
    """The worst value still within the best `keep` share of `values` (ceil(keep x n) kept, at least 1)."""
    ranked = sorted(values, reverse=(goal == "max"))
    return ranked[max(1, math.ceil(keep * len(ranked) - 1e-9)) - 1]


def decide(value: float, peers: list[float], base: list[float], cfg, goal: str) -> dict | None:
    """The evidence for screening `value` out, or None to let it continue. `peers`: the screened values
    of the ideas screened against the same baseline (its own included); `base`: the baseline's screened
    seeds' values; `cfg`: [screening]."""
    if not base:
        return None
    mean = statistics.fmean(base)
    sd = statistics.stdev(base) if len(base) > 1 else 0.0
    spread = max(sd, defaults.SCREENING_MIN_SPREAD * abs(mean))
    margin = cfg.margin * spread
    limit = mean + margin if goal == "min" else mean - margin
    by_margin = worse(value, limit, goal)
    cut = cutoff(peers, cfg.keep, goal) if len(peers) >= cfg.min_peers else None
    by_rank = cut is not None and worse(value, cut, goal)
    if not (by_margin or by_rank):
        return None
    return {"value": round(value, 6), "cutoff": None if cut is None else round(cut, 6), "keep": cfg.keep,
            "peers": len(peers), "baseline_mean": round(mean, 6), "baseline_std": round(sd, 6),
            "baseline_seeds": len(base), "k": cfg.margin, "margin": round(margin, 6),
            "rule": "margin" if by_margin and not by_rank else "quantile" if not by_margin else "both"}


def saved(base_trials, fraction: float, gpus: int) -> tuple[float | None, str]:
    """Compute saved by not running full length: (1 - fraction) x the baseline's mean trial seconds,
    GPU seconds with GPUs, else CPU seconds (as engine/stopping.py counts it)."""
    unit = "gpu" if gpus else "cpu"
    vals = [x for t in base_trials if (x := (t.gpu_s if unit == "gpu" else t.cpu_s)) is not None]
    return ((1 - fraction) * statistics.fmean(vals) if vals else None), unit
