"""Diversity for the exploit prompt: islands with migration, and inspiration sampling.

Islands (`policy.islands` > 1): the population is split into sub-populations that evolve apart, so
one early winner does not pull every exploit batch towards its variants. An idea's island is its
first parent's island (children stay home); an idea with no known parent is placed by a hash of its
id, so the split is read from git and survives restarts. Exploit batch b of an epoch works on
island b % islands and sees only that island's candidates, plus, in every epoch divisible by
`migration_epochs`, the confirmed winners (promoted/confirmed) of the other islands: migration.

Inspiration (`policy.inspiration = "top_diverse"`): instead of a uniform sample of the winners, the
exploit prompt shows the best winners, best first (half of `max_parents`), then a diverse sample of
the rest of the measured history (ideas that did not win and failures, with their results and
reasons), chosen so no two share a title word set too closely; the model sees what to avoid too.
"""

from __future__ import annotations

import hashlib

from autoresearchd.store.notes import BEST_DECISIONS

from .dedupe import jaccard, normalize


def island_of(idea, population, k: int, _memo: dict | None = None) -> int:
    """The island of an idea: its first known parent's, else a hash of its id."""
    memo = {} if _memo is None else _memo
    seen = []
    cur = idea
    while cur is not None and cur.idea_id not in memo and cur.idea_id not in seen:
        seen.append(cur.idea_id)
        parent = population.by_id.get(cur.parents[0]) if cur.parents else None
        if parent is None:
            memo[cur.idea_id] = int(hashlib.sha256(cur.idea_id.encode()).hexdigest()[:8], 16) % k
            break
        cur = parent
    for iid in reversed(seen):         # children inherit, root first
        if iid not in memo:
            p = population.by_id[iid].parents[0]
            memo[iid] = memo[p]
    return memo[idea.idea_id]


def island_candidates(cands: list, population, island: int, k: int, epoch: int,
                      migration_epochs: int) -> list:
    """The candidates of one island, plus the other islands' confirmed winners on migration epochs."""
    memo: dict = {}
    home = [i for i in cands if island_of(i, population, k, memo) == island]
    if migration_epochs > 0 and epoch % migration_epochs == 0:
        home += [i for i in cands if i not in home and i.note and i.note.decision in BEST_DECISIONS]
    return home


def diverse_sample(pool: list, m: int, rng, max_sim: float = 0.5) -> list:
    """Up to m ideas from pool, in random order, skipping any whose title words overlap an already
    chosen one's by more than max_sim (Jaccard); fills up with the skipped ones if short."""
    order = list(pool)
    rng.shuffle(order)
    chosen, words, skipped = [], [], []
    for i in order:
        if len(chosen) >= m:
            break
        w = set(normalize(i.title))
        if any(jaccard(w, x) > max_sim for x in words):
            skipped.append(i)
            continue
        chosen.append(i)
        words.append(w)
    return chosen + skipped[:m - len(chosen)]
