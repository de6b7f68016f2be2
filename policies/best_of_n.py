"""Best-of-N, the paper's control: independent samples with no feedback.

Every batch gets the same base prompt (the task and the format, no population, no avoid list), so
ideas are i.i.d. draws from the model; the daemon measures them all and the best is the result.
Duplicates are still dropped (and replaced) so that no run is spent twice on the same idea.
"""

from __future__ import annotations

from autoresearchd.vocab import Origin

from .common import BatchPlan, LLMPolicy


class BestOfNPolicy(LLMPolicy):
    name = "best_of_n"
    shows_lessons = False          # no feedback by design: no lessons are condensed or shown

    def plan(self, population, env, epoch: int, done: int) -> BatchPlan:
        bs = max(1, self.cfg.batch)
        k = min(bs, self.cfg.ideas_per_epoch - done)
        prompt = self.prompts.page("best_of_n", population, env, k, with_baseline=False)
        return BatchPlan(Origin.BEST_OF_N, epoch, done // bs, k, prompt, self.prompts.system(),
                         self.prompts.hash("system", "best_of_n", "task", "format"))
