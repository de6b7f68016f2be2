"""FROZEN. The tinygpt corpus: a deterministic synthetic language generated from a small
probabilistic grammar, so nothing is downloaded and every machine sees the same tokens.

Structure a model can learn, from easy to hard:
  - word classes and sentence templates (determiner, adjectives, noun, verb, object, preposition);
  - per-document topics that skew which nouns, verbs and adjectives appear (infer from context);
  - verb-object preferences (a skip-gram dependency across determiners and adjectives);
  - subject-verb number agreement, also across a relative clause ("the dog that sees cats runs");
  - per-document names that recur (copy from context);
  - whole sentences that repeat earlier in the same document (induction / copying).

The train and validation splits come from different generator seeds, so they are disjoint
documents of the same language. Training code must use `train_tokens()` only; the validation
split belongs to evaluate.py: its seed is held out (heldout/val_seed, the manifest's `eval_data`),
so the daemon gives it to the evaluator's sandbox only and a trial's code/ does not hold it.
"""

from __future__ import annotations

import bisect
import itertools
import os
import random

VOCAB_SIZE = 256
SEQ_LEN = 128            # the context length evaluate.py scores at (and the baseline's block size)

# token layout
DOC, STOP, COMMA, AND, DET_SG, DET_PL, DET_A, THAT = range(8)
PREPS = list(range(8, 16))
N_NOUN = N_VERB = N_ADJ = 40
NOUN0, VERB0, ADJ0, ADV0, NAME0 = 16, 96, 176, 216, 240     # noun/verb lemma i: base + 2i (+1 plural)
N_ADV, N_NAME = 24, 16
N_TOPIC = 8

_TRAIN_SEED = 1234
VAL_SEED_VAR = "TINYGPT_VAL_SEED_FILE"      # set for evaluate.py only (manifest eval_data)
TRAIN_TOKENS, VAL_TOKENS = 1_000_000, 129 * 512     # val: 512 windows of SEQ_LEN + 1


def _cum(weights):
    return list(itertools.accumulate(weights))


class _Grammar:
    """Fixed tables (topics, preferences) drawn once from a fixed seed, shared by both splits."""

    def __init__(self):
        r = random.Random(7)
        zipf = [1.0 / (k + 1) ** 1.1 for k in range(N_NOUN)]
        self.topics = []
        for _ in range(N_TOPIC):
            tables = []
            for n in (N_NOUN, N_VERB, N_ADJ):
                perm = list(range(n))
                r.shuffle(perm)
                w = [0.0] * n
                for rank, lemma in enumerate(perm):
                    w[lemma] = zipf[rank]
                tables.append(_cum(w))
            self.topics.append(tables)
        # each verb prefers a few object nouns; a third of the verbs are intransitive
        self.prefs = [r.sample(range(N_NOUN), 4) for _ in range(N_VERB)]
        self.transitive = [v % 3 != 0 for v in range(N_VERB)]
        self.adv_cum = _cum([1.0 / (k + 1) for k in range(N_ADV)])


_G = _Grammar()


def _pick(r: random.Random, cum: list[float]) -> int:
    return bisect.bisect_right(cum, r.random() * cum[-1])


class _Doc:
    def __init__(self, r: random.Random):
        self.r = r
        self.nouns, self.verbs, self.adjs = _G.topics[r.randrange(N_TOPIC)]
        self.names = r.sample(range(N_NAME), 3)

    def noun_phrase(self, out: list[int], obj_of: int | None = None) -> bool:
        """Append a noun phrase; return True if it is plural."""
        r = self.r
        if obj_of is None and r.random() < 0.25:
            out.append(NAME0 + self.names[min(2, int(r.random() * 3.6))])   # the first name dominates
            return False
        plural = r.random() < 0.4
        out.append(DET_PL if plural else (DET_A if r.random() < 0.3 else DET_SG))
        while r.random() < 0.35:
            out.append(ADJ0 + _pick(r, self.adjs))
        if obj_of is not None and r.random() < 0.7:
            lemma = _G.prefs[obj_of][int(r.random() * 4)]
        else:
            lemma = _pick(r, self.nouns)
        out.append(NOUN0 + 2 * lemma + plural)
        return plural

    def verb_phrase(self, out: list[int], plural: bool, depth: int = 0) -> None:
        r = self.r
        if r.random() < 0.15:
            out.append(ADV0 + _pick(r, _G.adv_cum))
        lemma = _pick(r, self.verbs)
        out.append(VERB0 + 2 * lemma + plural)
        if _G.transitive[lemma]:
            self.noun_phrase(out, obj_of=lemma)
        if depth == 0 and r.random() < 0.25:
            out.append(PREPS[int(r.random() * len(PREPS))])
            self.noun_phrase(out, obj_of=None if r.random() < 0.5 else lemma)

    def sentence(self) -> list[int]:
        out: list[int] = []
        plural = self.noun_phrase(out)
        if self.r.random() < 0.2:               # relative clause: agreement must skip over it
            out.append(THAT)
            self.verb_phrase(out, plural, depth=1)
        self.verb_phrase(out, plural)
        if self.r.random() < 0.15:
            out.append(AND)
            self.verb_phrase(out, plural, depth=1)
        out.append(STOP)
        return out


def _generate(seed: int, n_tokens: int) -> list[int]:
    r = random.Random(seed)
    toks: list[int] = []
    while len(toks) < n_tokens:
        doc = _Doc(r)
        toks.append(DOC)
        sents: list[list[int]] = []
        for _ in range(5 + r.randrange(16)):
            if sents and r.random() < 0.15:
                s = sents[r.randrange(len(sents))]   # a sentence repeated verbatim
            else:
                s = doc.sentence()
                sents.append(s)
            toks.extend(s)
    return toks[:n_tokens]


_cache: dict[str, list[int]] = {}


def train_tokens() -> list[int]:
    """The training split (TRAIN_TOKENS ints in [0, VOCAB_SIZE))."""
    if "train" not in _cache:
        _cache["train"] = _generate(_TRAIN_SEED, TRAIN_TOKENS)
    return _cache["train"]


def _val_seed() -> int:
    """The held-out seed of the validation split: from $TINYGPT_VAL_SEED_FILE (the evaluator's), or
    heldout/val_seed beside this file in a full checkout (local debugging)."""
    path = os.environ.get(VAL_SEED_VAR) or os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                         "heldout", "val_seed")
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        raise SystemExit("tinygpt: the validation split is for evaluate.py only (no held-out seed here)") from None


def val_tokens() -> list[int]:
    """The validation split. For evaluate.py only: training on it is against the rules."""
    if "val" not in _cache:
        _cache["val"] = _generate(_val_seed(), VAL_TOKENS)
    return _cache["val"]
