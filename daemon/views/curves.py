"""The search's curves as plain lists, computed from a population: best-so-far (raw and confirmed)
against ideas finished, cumulative GPU-hours and LLM USD, and per epoch with the execution rate.
The best-so-far values compare like with like: results measured against an old baseline count for
spend and the execution rate, never for "best" (Population.stale).

Both `report` (matplotlib figures) and `serve` (the live dashboard's charts) draw from these.
"""

from __future__ import annotations

from autoresearchd.goal import better
from autoresearchd.store.notes import Status
from autoresearchd.store.spend import baseline_compute_s, idea_compute_s
from autoresearchd.views.summary import idea_usd

NOT_ATTEMPTED = {Status.DUPLICATE, Status.CANCELLED}   # never ran: left out of the execution rate


def finish_key(i) -> tuple:
    """Where an idea with a result note stands in the order results arrived."""
    return (i.note.finished_at or i.committed_at, i.idea_id)


def _finished(pop):
    """Ideas with a result note, in the order their results arrived."""
    return sorted((i for i in pop.ideas if i.note is not None), key=finish_key)


def series(pop, goal: str, gpus: int = 1) -> dict:
    """Every curve the figures draw, as plain lists (tests and other tools can use them).
    `gpu_hours` is the compute axis: GPU-hours for a GPU env, CPU-hours when gpus = 0; it starts at the
    baseline's (its seeds and its screened seeds), and each idea adds its own and its screen's."""
    gpu_h = baseline_compute_s(pop, gpus) / 3600
    usd = 0.0
    raw = conf = None
    by_time = {"gpu_hours": [], "usd": [], "raw": [], "confirmed": [], "n": []}
    for k, i in enumerate(_finished(pop), 1):
        gpu_h += idea_compute_s(i, pop, gpus) / 3600
        usd += idea_usd(i)
        if i.value is not None and not pop.stale(i):   # like with like: only results on the current baseline
            raw = i.value if raw is None or better(i.value, raw, goal) else raw
            if i.confirmed:
                conf = i.value if conf is None or better(i.value, conf, goal) else conf
        for key, v in (("gpu_hours", gpu_h), ("usd", usd), ("raw", raw), ("confirmed", conf), ("n", k)):
            by_time[key].append(v)
    epochs = sorted({i.epoch for i in pop.ideas})
    by_epoch = {"epoch": epochs, "raw": [], "confirmed": [], "executed": [], "attempted": [], "rate": []}
    raw = conf = None
    grouped: dict[int, list] = {}
    for i in pop.ideas:                 # one pass, not one per epoch: thousands of ideas over many epochs
        grouped.setdefault(i.epoch, []).append(i)
    for e in epochs:
        here = grouped[e]
        for i in here:
            if i.value is not None and not pop.stale(i):
                raw = i.value if raw is None or better(i.value, raw, goal) else raw
                if i.confirmed:
                    conf = i.value if conf is None or better(i.value, conf, goal) else conf
        attempted = [i for i in here if i.note is not None and i.note.status not in NOT_ATTEMPTED]
        executed = [i for i in attempted if i.value is not None]
        by_epoch["raw"].append(raw)
        by_epoch["confirmed"].append(conf)
        by_epoch["executed"].append(len(executed))
        by_epoch["attempted"].append(len(attempted))
        by_epoch["rate"].append(len(executed) / len(attempted) if attempted else None)
    return {"by_time": by_time, "by_epoch": by_epoch}
