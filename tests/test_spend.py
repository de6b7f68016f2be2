"""Budgets that hold: the spend recorded in git (Cost-USD trailers and notes, as `status` sums them)
equals the sum of the calls the LLM server billed, including calls whose answers were unusable (a
proposing answer with no idea in it, an empty implementing answer). The real openai SDK talks to
tests/fake_llm.py; the daemon runs in-process on the local runner."""

from __future__ import annotations

import threading

import pytest
from fake_llm import Empty, FakeLLM, Reply

from autoresearchd.app import build_daemon
from autoresearchd.config import load_config
from autoresearchd.views.summary import summary

from conftest import run_until_settled
from fixtures_reliability import ToyLLM, is_propose, llm_config, write_cfg


PRICE_IN, PRICE_OUT = 3.0, 15.0     # USD per million tokens of "fake-model"


class Billing:
    """Wraps a script item callable and adds up what each answered request costs."""

    def __init__(self, inner):
        self.inner, self.usd, self.calls = inner, 0.0, 0
        self._lock = threading.Lock()
        self.proposals = 0

    def __call__(self, req):
        item = self.inner(req)
        if is_propose(req):
            with self._lock:
                self.proposals += 1
                first = self.proposals == 1
            if first:      # the first proposing answer holds no idea at all: billed, yields nothing
                item = Reply("I would rather discuss the weather.", input_tokens=900, output_tokens=40)
        if isinstance(item, (Reply, Empty)):
            out = item.output_tokens if isinstance(item, Reply) else 0
            with self._lock:
                self.calls += 1
                self.usd += (item.input_tokens * PRICE_IN + out * PRICE_OUT) / 1e6
        return item


def test_spend_recorded_equals_the_sum_of_the_calls(toy_env, tmp_path):
    seen = []

    def implement(req, value):
        seen.append(value)
        if len(seen) == 1:                   # the first implementing answer is empty (but billed)
            return Empty(input_tokens=1500)
        return Reply(f"```diff\n--- a/run.py\n+++ b/run.py\n@@ -1,3 +1,3 @@\n import os, random\n"
                     f" random.seed(int(os.environ.get(\"AUTORESEARCH_SEED\", \"0\")))\n-x = 1.0\n"
                     f"+x = {value:.4f}\n```\n", input_tokens=2000, output_tokens=100)

    prices = f'[llm.prices."fake-model"]\ninput = {PRICE_IN}\noutput = {PRICE_OUT}\n'
    with FakeLLM() as fake:
        bill = Billing(ToyLLM(implement=implement))
        fake.script(*[bill] * 100)
        cfg = write_cfg(tmp_path / "cfg", toy_env, rest="",
                        llm=llm_config(fake.openai_url, max_ideas=4, extra="budget_usd = 5.0") + prices)
        d = build_daemon(load_config(cfg))
        pop = run_until_settled(daemon=d, timeout=120, until=d.idle)
    assert bill.calls >= 4 and bill.proposals >= 2, (bill.calls, bill.proposals)
    assert any(i.note is not None and "empty response" in (i.note.error or "") for i in pop.ideas)
    s = summary(load_config(cfg))
    # every call is in the ledger, and git (trailers and notes) holds the same total
    assert d.llm.budget.calls == bill.calls
    assert d.llm.budget.usd == pytest.approx(bill.usd, abs=1e-9)
    assert s["spend"]["usd"] == pytest.approx(bill.usd, abs=1e-5), (s["spend"]["usd"], bill.usd)
