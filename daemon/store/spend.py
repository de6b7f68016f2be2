"""The one spend rule: what an idea cost in LLM calls (USD and tokens, split into ideation and
implementation) and in compute, and the totals over a population. Every reader of spend uses it: the
budget a restarted daemon restores (app.restore_spend), `status`, the report, the dashboard's running
totals and curves, the ensemble's bandit, and the loop's GPU-hour stop.

Precedence, as for every idea fact (docs/notes.md "One source for each fact"): the daemon's result
note first (`tokens`, `cost_usd`, `cost: {ideation, implementation}`), then the daemon's own trailers
(`Tokens`, `Cost-USD`, `Idea-Tokens`, `Idea-Cost-USD`, `Implement-Cost-USD`); a pushed commit has no
trailers the daemon believes (store/ideas.as_pushed), so it spent nothing the daemon did not record.
An idea only proposed (no implementation yet) has spent its proposal: `Idea-Cost-USD`/`Idea-Tokens`.

Compute: a note's CPU or GPU seconds (`compute_s`), each run counted once, by the note on the commit
it ran: every result note in git counts. An idea's note (its seeds, confirmations, a tuned commit's
trials, a stopped run's partial seed), the baseline's note (its seeds), every screened run's note
(Population.screens: an idea's screen and the baseline's screened seeds, on refs/autoresearch/screens/;
a continued idea's full-length note holds only its full-length seeds), and the notes on commits no ref
shows any more (Population.unlisted: an old baseline's seeds after the baseline moved). Two notes
carry figures of runs they did not make, and count 0: a result linked from an identical tree (its
figures are the other commit's), and a `screened_out` idea's note, which copies its screen's
wall_s/cpu_s/gpu_s so the idea's own page shows what it cost. The screen's note is the one counted, not
the copy, because the screens of continued ideas and of the baseline have no idea note to copy them
into: counting by the commit a run ran on is the one rule that reaches them all. The compute budget
(`daemon.max_gpu_hours`) reads the total in the env's unit (`budget_hours`): CPU-hours on a CPU env.
docs/notes.md "Every kind of run counts once" lists every kind of run.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

from autoresearchd.store.screens import screen_key
from autoresearchd.vocab import Status


class Spend(NamedTuple):
    """LLM spend of one idea, or of many (`total`)."""
    usd: float = 0.0
    tokens: int = 0
    ideation_usd: float = 0.0         # the proposing call's share (and judge/lessons calls billed to it)
    implementation_usd: float = 0.0


def _first(*vals):
    return next((v for v in vals if v is not None), None)


def idea_spend(i) -> Spend:
    """One idea's LLM spend: note > own trailers > the proposal's trailers > nothing."""
    n, tr = i.note, i.trailers
    split = n.cost if n is not None else {}
    ideation = _first(split.get("ideation"), tr.idea_cost_usd) or 0.0
    implementation = _first(split.get("implementation"), tr.implement_cost_usd) or 0.0
    usd = _first(i.cost_usd, tr.idea_cost_usd) or 0.0           # i.cost_usd: note, else Cost-USD
    tokens = _first(i.tokens, tr.idea_tokens) or 0
    return Spend(float(usd), int(tokens), float(ideation), float(implementation))


def total(ideas: Iterable) -> Spend:
    """The LLM spend of many ideas (a population's `ideas`: every idea, proposals and records too)."""
    usd = ideation = implementation = 0.0
    tokens = 0
    for i in ideas:
        s = idea_spend(i)
        usd += s.usd
        tokens += s.tokens
        ideation += s.ideation_usd
        implementation += s.implementation_usd
    return Spend(usd, tokens, ideation, implementation)


def compute_s(note, gpus: int) -> float:
    """Compute time a note measured: GPU-seconds for a GPU env; for a CPU env (gpus = 0) its CPU
    time (`cpu_s` where the note has it, else the run time older notes filed as gpu_s). A result
    linked from an identical tree cost nothing; a screened-out idea's note copies its screen's figures,
    counted on the screen's own note (`screens_s`)."""
    if note is None or note.linked or note.status == Status.SCREENED_OUT:
        return 0.0
    if gpus:
        return float(note.gpu_s or 0)
    return float(getattr(note, "cpu_s", None) or note.gpu_s or 0)


def screens_s(pop, gpus: int) -> float:
    """Compute seconds of the runs that are no idea's: every screened run of a population (its
    `screens`: ideas' and baselines') and the notes no ref shows (`unlisted`: old baselines')."""
    return sum(compute_s(s.note, gpus) for s in pop.screens.values()) + \
        sum(compute_s(n, gpus) for n in pop.unlisted.values())


def _screen_s(pop, key: str, of: str | None, gpus: int) -> float:
    s = pop.screens.get(key)
    return compute_s(s.note, gpus) if s is not None and s.of == of else 0.0


def idea_compute_s(i, pop, gpus: int) -> float:
    """An idea's compute: its note's and its screen's (the compute axis of the curves, by idea)."""
    return compute_s(i.note, gpus) + _screen_s(pop, i.idea_id, i.commit, gpus)


def baseline_compute_s(pop, gpus: int) -> float:
    """The current baseline's compute: its seeds' note and its screened seeds' (the curves' start)."""
    c = pop.baseline_commit
    return compute_s(pop.baseline_note, gpus) + (_screen_s(pop, screen_key(None, c), c, gpus) if c else 0.0)


def compute_total(pop, gpus: int) -> float:
    """Compute seconds of a population, in the env's unit: GPU-seconds for a GPU env, CPU-seconds for a
    CPU env: its ideas' notes, the baseline's, every screened run's and the unlisted notes' (old
    baselines'): every result note in git, once (docs/notes.md "Compute fields")."""
    # kept on the population: a pass asks for it several times (the budget hold, the stop conditions,
    # the state file), each a walk of every note (100k at scale); a Population is one read's snapshot,
    # built anew by each read and never changed after (store/population.py, store/livepop.py)
    memo = pop.__dict__.setdefault("_compute_s", {})
    if gpus not in memo:
        notes = [i.note for i in pop.ideas if i.note is not None]
        if pop.baseline_note is not None:
            notes.append(pop.baseline_note)
        memo[gpus] = sum(compute_s(n, gpus) for n in notes) + screens_s(pop, gpus)
    return memo[gpus]


def budget_hours(pop, gpus: int) -> float:
    """Compute-hours that `daemon.max_gpu_hours` is held to: busy GPU-hours for a GPU env, CPU-hours for
    a CPU env (gpus = 0), the unit of every compute view. Reading GPU-hours there, which are 0 on a CPU
    env, let a budget set on tinygpt run forever."""
    return compute_total(pop, gpus) / 3600


def saved_s(note) -> float:
    """Compute seconds that not running to full length saved, in the env's unit (GPU seconds for a GPU
    env, CPU seconds for a CPU env): an early stop's (engine/stopping.py: the baseline's mean per trial
    x (1 - t)) and a screen-out's (engine/screening.saved: x (1 - fraction)); 0 for any other note.
    Both kinds, since `status` and the dashboard report what the two mechanisms save together."""
    if note is None:
        return 0.0
    if note.status == Status.STOPPED:
        v = (note.stopped or {}).get("saved_s")
    elif note.status == Status.SCREENED_OUT:
        v = (note.screened or {}).get("saved_s")
    else:
        return 0.0
    return float(v) if isinstance(v, (int, float)) and v == v and v >= 0 else 0.0
