"""The paper's evolutionary search: seed ideas, then each epoch a growing share of exploitation.

Epoch 0 asks for `ideas_per_epoch` seed ideas in batches of `batch`, each batch shown the titles
already proposed in the epoch. A later epoch splits into exploit batches first, then explore
batches, by `schedule()`: the exploit share is min(start + 0.1 * (epoch // 2), 0.8), rounded down to
whole batches; `start` is policy.exploit_start (the paper's 0.5).

- exploit: up to `max_parents` parents sampled uniformly from the ideas that beat the measured
  baseline (promoted/confirmed ones first; demoted ones only with `exploit_demoted`, by the mean of
  all their seeds); with no baseline yet, the best
  measured ideas. The model combines and refines them. Parents = the shown ids the idea cites,
  else the shown ones (at most defaults.MAX_PARENT_IDS); it branches off the baseline, except when it cites
  exactly one parent: then it builds on that parent's commit.
- explore: up to `max_parents` ideas sampled from the whole measured history, failures included
  with their reason; the model is asked for new directions that avoid what failed.
An exploit batch with nothing to exploit (no idea beats the baseline yet) runs as an explore batch.
"""

from __future__ import annotations

import re

from autoresearchd import defaults
from autoresearchd.store import ranking
from autoresearchd.vocab import BEST_DECISIONS, Decision, Origin

from .common import BatchPlan, LLMPolicy
from .diversity import diverse_sample, island_candidates
from .prompting import Listing, ParsedIdea, history


def exploit_share_tenths(epoch: int, start: float = 0.5) -> int:
    """min(start + 0.1 * (epoch // 2), max(0.8, start)) in tenths (integers: no float rounding); the
    paper's with start = 0.5 (policy.exploit_start)."""
    s = round(start * 10)
    return min(s + epoch // 2, max(8, s))


def schedule(epoch: int, ideas_per_epoch: int, batch: int, start: float = 0.5) -> tuple[int, int]:
    """(n_exploit, n_explore) for one epoch. Epoch 0 is all seed ideas: (0, ideas_per_epoch)."""
    if epoch <= 0:
        return 0, ideas_per_epoch
    batch = max(1, batch)
    n_exploit = ideas_per_epoch * exploit_share_tenths(epoch, start) // 10
    n_exploit = n_exploit // batch * batch
    return n_exploit, ideas_per_epoch - n_exploit


def exploit_candidates(population, env, demoted: bool = False) -> tuple[list, list]:
    """(preferred, others): ideas worth building on. Preferred = promoted/confirmed by the noise-aware
    loop. With a measured baseline, only ideas that beat it; without one, all measured ideas.
    Demoted ideas are among the others only with `demoted` (policy.exploit_demoted): their value is
    then the mean over all their seeds, so one that still beats the baseline gained something."""
    # like with like: a result measured against an old baseline is no parent (Population.stale)
    ok = [i for i in population.comparable() if demoted or not (i.note and i.note.decision == Decision.DEMOTED)]
    base = population.baseline_value
    if base is not None:
        ok = [i for i in ok if env.better(i.value, base)]
    ok = ranking.ranked(ok, env.goal)         # best first, in the one order of "best"
    preferred = [i for i in ok if i.note.decision in BEST_DECISIONS]
    return preferred, [i for i in ok if i.note.decision not in BEST_DECISIONS]


def cited_parents(idea: ParsedIdea, shown: dict) -> list[str]:
    """Ids of shown ideas that the model cites in its text, in the order cited."""
    found = []
    for m in re.finditer(r"[A-Za-z0-9][A-Za-z0-9-]{3,}", idea.text):
        w = m.group(0)
        if w in shown and w not in found:
            found.append(w)
    return found


class EvolutionaryPolicy(LLMPolicy):
    name = "evolutionary"

    def plan(self, population, env, epoch: int, done: int) -> BatchPlan:
        cfg = self.cfg
        bs = max(1, cfg.batch)
        batch_no = done // bs
        rng = self.rng(epoch, done)
        avoid = self.prompts.avoid(self.epoch_titles(population, epoch) + self.pending_titles(population))
        if epoch == 0:
            k = min(bs, cfg.ideas_per_epoch - done)
            prompt = self.prompts.page("seed", population, env, k, avoid=avoid)
            return BatchPlan(Origin.SEED, epoch, batch_no, k, prompt, self.prompts.system(),
                             self.prompts.hash("system", "seed", "task", "format", "avoid"))
        n_exploit, _ = schedule(epoch, cfg.ideas_per_epoch, bs, cfg.exploit_start)
        if done < n_exploit:
            k = min(bs, n_exploit - done)
            plan = self._exploit(population, env, epoch, batch_no, k, rng, avoid)
            if plan is not None:
                return plan
        else:
            k = min(bs, cfg.ideas_per_epoch - done)
        return self._explore(population, env, epoch, batch_no, k, rng, avoid)

    def _exploit(self, population, env, epoch, batch_no, k, rng, avoid) -> BatchPlan | None:
        cfg = self.cfg
        preferred, others = exploit_candidates(population, env, cfg.exploit_demoted)
        if cfg.islands > 1:
            island = batch_no % cfg.islands
            preferred, others = (island_candidates(c, population, island, cfg.islands, epoch,
                                                   cfg.migration_epochs) for c in (preferred, others))
        if not preferred and not others:
            return None
        m = max(1, cfg.max_parents)
        extra = []
        if population.baseline_value is None:
            shown = (preferred + others)[:m]          # no baseline: the best measured ideas
        elif cfg.inspiration == "top_diverse":
            shown = ranking.ranked(preferred + others, env.goal)[:max(1, m // 2)]
            rest = [i for i in history(population) if i not in shown
                    and not (i.note and i.note.decision == Decision.DEMOTED)]
            extra = diverse_sample(rest, m - len(shown), rng)
        else:
            shown = rng.sample(preferred, min(m, len(preferred)))
            shown += rng.sample(others, min(m - len(shown), len(others)))
        inspiration = Listing.ideas(extra, population, env, empty="", wrap=lambda body: (
            "## Other experiments, for inspiration\n\nA diverse sample of the other results (what did not "
            "beat the baseline, and why some failed):\n\n" + body + "\n") if body else "")
        prompt = self.prompts.page("exploit", population, env, k, avoid=avoid,
                                   parents=Listing.ideas(shown, population, env), inspiration=inspiration)
        by_id = {i.idea_id: i for i in shown + extra}

        def lineage(idea: ParsedIdea):
            cited = cited_parents(idea, by_id)[:defaults.MAX_PARENT_IDS]
            if len(cited) == 1:
                return cited, by_id[cited[0]].commit
            return cited or list(by_id)[:defaults.MAX_PARENT_IDS], None

        return BatchPlan(Origin.EXPLOIT, epoch, batch_no, k, prompt, self.prompts.system(),
                         self.prompts.hash("system", "exploit", "task", "format", "avoid"), lineage)

    def _explore(self, population, env, epoch, batch_no, k, rng, avoid) -> BatchPlan:
        hist = history(population)
        shown = rng.sample(hist, min(max(1, self.cfg.max_parents), len(hist)))
        prompt = self.prompts.page("explore", population, env, k, avoid=avoid,
                                   history=Listing.ideas(shown, population, env))
        return BatchPlan(Origin.EXPLORE, epoch, batch_no, k, prompt, self.prompts.system(),
                         self.prompts.hash("system", "explore", "task", "format", "avoid"))
