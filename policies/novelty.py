"""The novelty gate: a proposal too close to a past idea or to one in flight is sent back for a
different idea before anything is implemented or run.

"Too close" is looser than a duplicate (policies/dedupe.py): content-word Jaccard >= NOVELTY_MIN_JACCARD
and rapidfuzz token_set_ratio >= `policy.novelty_threshold`. Such pairs are borderline by design
(rewordings, the same change with another constant, a subset of a longer idea), so with
`policy.novelty_judge = true` one short LLM call (purpose `novelty`) decides each: the proposal is
kept when the judge says the two experiments differ. A judge that fails or answers something else
keeps the gate's verdict, so a flaky model never lets more through than the gate alone.
"""

from __future__ import annotations

from autoresearchd import defaults
from autoresearchd.llm.base import LLMError

from .dedupe import PENDING, DuplicateIndex

JUDGE_PROMPT = """Two proposed machine-learning experiments follow. Do they test the same change (the
same technique, possibly reworded or with slightly different settings)?
Answer with one word: SAME or DIFFERENT.

Experiment A:
{a}

Experiment B:
{b}
"""


def gate_index(threshold: float) -> DuplicateIndex:
    return DuplicateIndex(threshold, min_jaccard=defaults.NOVELTY_MIN_JACCARD, lsh_threshold=0.3)


def too_close(index: DuplicateIndex, text: str, population, pending, llm, judge: bool,
              spent: list | None = None) -> str | None:
    """The key of a stored idea (or pending proposal) the text is too close to, or None. Each judge
    call's Completion is appended to `spent`, so its cost can be billed to the proposal."""
    for key, _score in index.matches(text):
        if not judge or llm is None:
            return key
        if key.startswith(PENDING):
            other = next((p.title for p in pending if p.key == key), "")
        else:
            idea = population.by_id.get(key)
            other = f"{idea.title}\n{idea.text}" if idea else ""
        if not other or _same(llm, text, other, spent):
            return key
    return None


def _same(llm, a: str, b: str, spent: list | None) -> bool:
    try:
        c = llm.complete([{"role": "user", "content": JUDGE_PROMPT.format(a=a[:1500], b=b[:1500])}],
                         purpose="novelty", max_tokens=16)
    except LLMError as e:
        if getattr(e, "completion", None) is not None and spent is not None:
            spent.append(e.completion)
        return True
    if spent is not None:
        spent.append(c)
    return "DIFFERENT" not in c.text.upper()
