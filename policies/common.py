"""What the LLM policies share: the epoch cursor, the batch loop, and duplicate filtering.

The cursor: an epoch is `cfg.ideas_per_epoch` proposals. The current epoch and how far into it we
are come from the population (ideas of the policies' origins, dropped duplicates not counted), so a
restarted daemon continues an epoch instead of repeating or skipping it. Proposals handed out by this
process but not yet committed are remembered in memory, so two quick calls do not fill one slot twice.

The batch loop: a subclass's `plan()` says what one batch asks for (origin, size, prompt, how to
pick parents); `propose()` asks for whole batches until it has at least `n` ideas. Each answer is
parsed; ideas that duplicate an existing idea (any status, human ones included) or an earlier
proposal are returned with `dropped_reason`, and the model is asked for replacements, at most
`defaults.MAX_FOLLOWUPS` more calls per batch, which also covers answers with too few ideas.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from autoresearchd import defaults
from autoresearchd.llm.base import LLMError
from autoresearchd.store.notes import Status
from autoresearchd.vocab import POLICY_ORIGINS, Origin

from . import bandit, lessons, novelty
from .base import Policy, Proposal
from .dedupe import PENDING, DuplicateIndex
from .prompting import ParsedIdea, Prompts, parse_ideas, render


@dataclass
class BatchPlan:
    origin: Origin
    epoch: int
    batch: int                     # batch number inside the epoch
    k: int                         # ideas wanted
    prompt: str
    system: str
    prompt_hash: str
    # parsed idea -> (parents, base_commit); default: no parents, the baseline
    lineage: Callable[[ParsedIdea], tuple[list[str], str | None]] = field(
        default=lambda p: ([], None))


@dataclass
class _Pending:
    key: str
    title: str
    epoch: int
    model: str | None = None


class LLMPolicy(Policy):
    """Base of the LLM-driven policies. Subclasses implement `plan(population, env, epoch, done)`."""
    shows_lessons = True           # its prompts carry the lessons scratchpad (policy.lessons_every)

    def __init__(self, cfg, prompts_dir=None, lessons_store=None, tuning=None):
        super().__init__(cfg, prompts_dir, lessons_store, tuning)
        # the daemon passes one kept in git (store/lessons.py); the simulator keeps them in memory
        self.lessons_store = lessons_store if lessons_store is not None else lessons.MemoryStore()
        # the prompts read the lessons from the store when they are rendered (its load is cached, and
        # save updates the cache), so an update is in the next prompt with nothing set afterwards
        shown = self.shows_lessons and cfg.lessons_every > 0
        self.prompts = Prompts(prompts_dir, cfg.prompt_token_budget, tuning,
                               lessons=(lambda: self.lessons_store.load().text) if shown else None)
        self._index: DuplicateIndex | None = None
        self._novel: DuplicateIndex | None = None      # the novelty gate's looser index
        self._llm = None                               # for the novelty judge
        self._pending: list[_Pending] = []
        self._floor: dict[int, int] = {}     # epoch -> position reached by this process
        self._seq = 0
        # spend of calls that yielded no idea: carried onto the next proposals, so the Cost-USD
        # trailers add up to every call made (the spend recorded equals the sum of the calls)
        self._unbilled = (0.0, 0)

    # -- where we are ---------------------------------------------------------------------------
    def _refresh(self, population) -> None:
        """Index new ideas; forget pending proposals that are ideas in git now."""
        if self._index is None:
            self._index = DuplicateIndex(self.cfg.duplicate_threshold)
        self._index.sync(population)
        if self.cfg.novelty_threshold is not None:
            if self._novel is None:
                self._novel = novelty.gate_index(self.cfg.novelty_threshold)
            self._novel.sync(population)
        titles = {i.title for i in population.ideas}
        for p in [p for p in self._pending if p.title in titles]:
            self._index.remove(p.key)
            if self._novel is not None and p.key in self._novel:
                self._novel.remove(p.key)
            self._pending.remove(p)

    def cursor(self, population) -> tuple[int, int]:
        """(current epoch, proposals already made in it)."""
        per = max(1, self.cfg.ideas_per_epoch)
        counts = Counter(i.epoch for i in population.ideas
                         if i.origin in POLICY_ORIGINS and i.status != Status.DUPLICATE)
        for e, pos in self._floor.items():
            counts[e] = max(counts[e], pos)
        epoch = max(counts, default=0)
        done = counts.get(epoch, 0)
        if done >= per:
            return epoch + 1, 0
        return epoch, done

    def epoch_titles(self, population, epoch: int) -> list[str]:
        """Titles already proposed in this epoch (in git or still pending)."""
        t = [i.title for i in population.ideas if i.epoch == epoch and i.origin in POLICY_ORIGINS
             and i.status != Status.DUPLICATE]
        return t + [p.title for p in self._pending if p.epoch == epoch]

    def pending_titles(self, population) -> list[str]:
        """Ideas waiting for a result: queued, running, or not committed yet."""
        return [i.title for i in population.ideas if i.note is None] + [p.title for p in self._pending]

    # -- proposing ------------------------------------------------------------------------------
    def plan(self, population, env, epoch: int, done: int) -> BatchPlan:
        raise NotImplementedError

    def propose(self, population, n: int, env, llm) -> list[Proposal]:
        """Whole batches until at least n ideas are accepted (dropped duplicates come along)."""
        if n <= 0:
            return []
        self._llm = llm
        self._refresh(population)
        if self.cfg.lessons_every > 0 and self.shows_lessons:
            self._lessons(population, env, llm)
        out: list[Proposal] = []
        accepted = 0
        while accepted < n:
            epoch, done = self.cursor(population)
            plan = self.plan(population, env, epoch, done)
            try:
                got = self._run_batch(plan, population, llm, self._pick_model(population, env, llm))
            except LLMError:
                if out:
                    break   # keep what earlier batches produced; the next call raises again
                raise
            ok = [p for p in got if p.dropped_reason is None]
            out += got
            accepted += len(ok)
            self._floor[epoch] = max(self._floor.get(epoch, 0), done + len(ok))
            if not ok:   # only duplicates or nothing readable, even after follow-ups
                if not out:
                    raise LLMError(f"no usable [Experiment] ... [End] blocks in the model's answers "
                                   f"({1 + defaults.MAX_FOLLOWUPS} calls for one batch)")
                break
        return out

    def _lessons(self, population, env, llm) -> None:
        """Bring the lessons scratchpad up to date (when due): the prompts read it from the store."""
        c = lessons.update(self.lessons_store, self.prompts, population, env, llm, self.cfg.lessons_every)
        if c is not None:          # billed like the judge's calls: onto the next proposal
            usd, tok = self._unbilled
            self._unbilled = (usd + c.cost_usd, tok + c.input_tokens + c.output_tokens)

    def _pick_model(self, population, env, llm) -> str | None:
        """With a model ensemble, the bandit's model for the next batch; else None (the one model)."""
        members = list(getattr(llm, "members", None) or [])
        if not members:
            return None
        pending = Counter(p.model for p in self._pending if p.model)
        return bandit.choose(members, population, env, pending, llm.cfg.ensemble_gpu_usd_per_hour)

    def _run_batch(self, plan: BatchPlan, population, llm, model: str | None = None) -> list[Proposal]:
        messages = [{"role": "user", "content": plan.prompt}]
        known = [i.title for i in population.ideas] + [p.title for p in self._pending]
        accepted: list[Proposal] = []
        dropped: list[Proposal] = []
        carry_usd, carry_tok = self._unbilled
        for call in range(1 + defaults.MAX_FOLLOWUPS):
            want = plan.k - len(accepted)
            meta = {"n": want, "known_titles": known + [p.title for p in accepted + dropped]}
            if model:
                meta["model"] = model
            try:
                c = llm.complete(messages, system=plan.system, purpose="propose", meta=meta)
            except LLMError as e:
                spent = getattr(e, "completion", None)    # answered (and billed), but unusable
                if spent is not None:
                    carry_usd += spent.cost_usd
                    carry_tok += spent.input_tokens + spent.output_tokens
                self._unbilled = (carry_usd, carry_tok)
                if call == 0:
                    raise
                break       # a failed follow-up: keep what this batch already has
            parsed = parse_ideas(c.text)[:want]
            if not parsed:
                carry_usd += c.cost_usd
                carry_tok += c.input_tokens + c.output_tokens
            share = len(parsed) or 1
            new_dups: list[Proposal] = []
            for idea in parsed:
                parents, base = plan.lineage(idea)
                prop = Proposal(title=idea.title, text=idea.text, origin=plan.origin, epoch=plan.epoch,
                                parents=parents, base_commit=base, batch=plan.batch,
                                cost_usd=c.cost_usd / share,
                                tokens=(c.input_tokens + c.output_tokens) // share,
                                model=c.model, prompt_hash=plan.prompt_hash)
                if carry_usd or carry_tok:           # the first idea after unusable answers pays for them
                    prop.cost_usd += carry_usd
                    prop.tokens += carry_tok
                    carry_usd, carry_tok = 0.0, 0
                self._check_duplicate(prop, population)
                if prop.dropped_reason:
                    new_dups.append(prop)
                else:
                    accepted.append(prop)
            dropped += new_dups
            self._unbilled = (carry_usd, carry_tok)
            if len(accepted) >= plan.k or call == defaults.MAX_FOLLOWUPS:
                break
            messages += [{"role": "assistant", "content": c.text},
                         {"role": "user", "content": self._followup(plan.k - len(accepted), len(parsed),
                                                                    want, new_dups)}]
        return accepted + dropped

    def _check_duplicate(self, prop: Proposal, population) -> None:
        text = f"{prop.title}\n{prop.text}"
        hits = [k for k, _ in self._index.matches(text)]
        # Name the original, not an earlier proposal that was itself recorded as its duplicate.
        hits.sort(key=lambda k: k in population.by_id and population.by_id[k].status == Status.DUPLICATE)
        hit = hits[0] if hits else None
        gated = False
        if hit is None and self._novel is not None:
            spent: list = []
            hit = novelty.too_close(self._novel, text, population, self._pending, self._llm,
                                    self.cfg.novelty_judge, spent)
            gated = hit is not None
            for c in spent:          # the judge's calls are billed to the proposal they judged
                prop.cost_usd += c.cost_usd
                prop.tokens += c.input_tokens + c.output_tokens
        if hit is None:
            self._seq += 1
            key = f"{PENDING}{prop.epoch}:{self._seq}"
            self._index.add(key, text)
            if self._novel is not None:
                self._novel.add(key, text)
            self._pending.append(_Pending(key, prop.title, prop.epoch, prop.model))
            return
        what = "too close to (novelty gate)" if gated else "duplicate of"
        if hit.startswith(PENDING):
            other = next((p.title for p in self._pending if p.key == hit), hit)
            prop.dropped_reason = f"{what} the earlier proposal '{other}'"
        else:
            other = population.by_id[hit].title if hit in population.by_id else ""
            prop.duplicate_of = hit
            prop.dropped_reason = f"{what} {hit}" + (f" ('{other}')" if other else "")

    def _followup(self, missing: int, parsed: int, asked: int, dups: list[Proposal]) -> str:
        problems = []
        if parsed < asked:
            problems.append(f"I could read only {parsed} of the {asked} experiments I asked for in the "
                            f"[Experiment] ... [Code Changes] ... [End] format.")
        if dups:
            lines = "\n".join(f"- '{p.title}': {p.dropped_reason}" for p in dups)
            problems.append(f"These were dropped because they repeat ideas that were already "
                            f"proposed:\n{lines}")
        return render(self.prompts.get("followup"), problem="\n\n".join(problems), n=missing).strip()

