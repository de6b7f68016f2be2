"""The lessons scratchpad: a short "what worked, what failed and why" block, rewritten by the LLM every
`policy.lessons_every` new results and shown in every ideation prompt (best_of_n excepted: it shows
nothing by design).

A prompt shows at most `max_parents` ideas (and, with `prompt_token_budget`, fewer), so without it the
model forgets every result it is not shown. The scratchpad carries them: each update is one LLM call
(purpose `lessons`, billed like any call and carried onto the next proposal's cost) that reads the
previous lessons and the results finished since, and answers with the new lessons. Which results are
condensed already is kept with the text, so a restarted daemon neither repeats nor skips any.

Where it is kept is the store's business, given to the policy when it is built (`lessons_store=`):
`MemoryStore` here (the default), `daemon/store/lessons.py` keeps it in git (a JSON blob under
refs/autoresearch/lessons; the daemon's app.make_policy passes it). A failed lessons call keeps the
old lessons and the search goes on; it is tried again at the next proposal.
"""

from __future__ import annotations

import logging

from autoresearchd import defaults
from autoresearchd.llm.base import BudgetExhausted, LLMError
from autoresearchd.store.lessons import Lessons

from .prompting import Listing, history

log = logging.getLogger("autoresearchd")


class MemoryStore:
    """Lessons kept in this process only (the simulator; a policy built without a store)."""

    def __init__(self):
        self.lessons = Lessons()

    def load(self) -> Lessons:
        return self.lessons

    def save(self, lessons: Lessons) -> None:
        self.lessons = lessons


def clean(text: str) -> str:
    """The model's answer as a block: no code fences, no blank runs, cut at LESSONS_MAX_CHARS."""
    lines = [ln.rstrip() for ln in text.replace("\r\n", "\n").split("\n") if not ln.strip().startswith("```")]
    out = "\n".join(ln for ln in lines if ln.strip()).strip()
    if len(out) > defaults.LESSONS_MAX_CHARS:
        out = out[:defaults.LESSONS_MAX_CHARS].rsplit("\n", 1)[0]
    return out


def pending(population, lessons: Lessons) -> list:
    """Finished results not condensed yet, newest first."""
    done = set(lessons.covered)
    new = [i for i in history(population) if i.idea_id not in done]
    return sorted(new, key=lambda i: (-i.committed_at, i.idea_id))


def update(store, prompts, population, env, llm, every: int):
    """Rewrite the lessons when `every` new results are in. Returns the Completion of the call (its cost
    is for the caller to bill), or None when nothing was due or the call failed."""
    cur = store.load()
    new = pending(population, cur)
    if every <= 0 or len(new) < every:
        return None
    prompt = prompts.page("lessons", population, env, 0, previous=cur.text or "(none yet)",
                          results=Listing.ideas(new, population, env), lessons="")
    try:
        c = llm.complete([{"role": "user", "content": prompt}], purpose="lessons",
                         max_tokens=defaults.LESSONS_MAX_TOKENS)
    except BudgetExhausted:
        raise
    except LLMError as e:
        log.warning("lessons not updated (kept the previous ones): %s", e)
        return e.completion
    text = clean(c.text)
    if not text:
        return c
    store.save(Lessons(text=text, covered=cur.covered + [i.idea_id for i in new], updates=cur.updates + 1,
                       cost_usd=cur.cost_usd + c.cost_usd, model=c.model))
    return c
