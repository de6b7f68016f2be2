"""LLM faults through the whole daemon (real openai SDK against tests/fake_llm.py, real git, local
runner): 429s, 500s, time-outs, empty, garbage, refused and truncated answers. The daemon keeps going,
every failed idea gets an implement_failed record whose note says why, and the budgets (llm.max_calls,
llm.budget_usd) hold exactly, also across a restart.
"""

from __future__ import annotations

import time

import pytest
from fake_llm import Delay, Empty, FakeLLM, Garbage, Reply, Status as HTTP

from autoresearchd.app import build_daemon
from autoresearchd.config import load_config
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.notes import Status

from conftest import run_until_settled
from fixtures_reliability import ToyLLM, invariants, llm_config, toy_diff, write_cfg


def run_daemon(cfg, until, timeout=90):
    """The daemon of cfg, run until `until(d, pop)`; past `timeout` the test fails (conftest)."""
    d = build_daemon(load_config(cfg))

    def reached(pop):
        return until(d, pop)
    reached.__name__ = until.__name__       # the failure names what was waited for
    return d, run_until_settled(daemon=d, timeout=timeout, until=reached)


# fault per idea number k: a list of answers, one per attempt (llm.max_retries = 1: two attempts)
TRUNCATED = toy_diff(0.0).split("+x =")[0]
FAULTS = {
    0: [HTTP(429, retry_after=0.1), "ok"],                 # rate limited once, then fine
    1: [HTTP(500), HTTP(500)],                              # server error twice: give up
    2: [Delay(4, "ok"), Delay(4, "ok")],                   # no answer within timeout_s twice
    3: [Empty()],                                           # a 200 with no text
    4: [Reply(TRUNCATED, stop_reason="max_tokens")],        # cut at max tokens in the middle of the diff
    5: [Reply("I can't help with that.")],                 # refusal as plain text
    6: [Garbage(), Garbage()],                              # not JSON at all
    7: ["ok"],
}
REASONS = {1: "HTTP 500", 2: "no answer within", 3: "empty response", 4: "truncated", 5: "no unified diff",
           6: "not valid API JSON"}


def test_llm_faults_daemon_keeps_going_and_notes_say_why(toy_env, tmp_path):
    attempts: dict[int, int] = {}

    def implement(req, value):
        k = round((value - 0.5) * 1000)
        n = attempts.get(k, 0)
        attempts[k] = n + 1
        plan = FAULTS.get(k, ["ok"])
        item = plan[min(n, len(plan) - 1)]
        if item == "ok":
            return Reply(toy_diff(value), input_tokens=2000, output_tokens=100)
        if isinstance(item, Delay) and item.then == "ok":
            return Delay(item.seconds, Reply(toy_diff(value)))
        return item

    propose_calls = []

    def propose(req, n):
        propose_calls.append(n)
        # the first proposing call fails for good (503 on both attempts); the daemon must ask again
        return HTTP(503, message="overloaded") if len(propose_calls) <= 2 else None

    with FakeLLM() as fake:
        fake.script(*[ToyLLM(implement=implement, propose_reply=propose)] * 200)
        cfg = write_cfg(tmp_path / "cfg", toy_env, rest="",
                        llm=llm_config(fake.openai_url, max_ideas=8).replace("timeout_s = 5", "timeout_s = 1.5"))
        d, pop = run_daemon(cfg, lambda d, pop: d.idle(pop), timeout=120)
    assert len(propose_calls) >= 3, "the daemon stopped proposing after a failed call"
    notes = invariants(d.repo, allow=("succeeded",))
    assert len(notes) >= 2                  # k0 (after a 429) and k7 ran
    records = [i for i in pop.ideas if not i.branch and i.origin != "human"]
    failed = {i.title: i.note for i in records if i.status != Status.DUPLICATE}
    assert all(n is not None and n.status in (Status.IMPLEMENT_FAILED, Status.REJECTED) for n in failed.values()), \
        {t: (n.status, n.error) for t, n in failed.items() if n is not None}
    texts = {t: (n.error or "") for t, n in failed.items()}
    for k, reason in REASONS.items():
        hit = [e for t, e in texts.items() if t.startswith(f"Idea {k} ")]
        assert hit, f"idea {k} has no implement_failed record: {sorted(texts)}"
        assert reason in hit[0], f"idea {k}: note error {hit[0]!r} does not say {reason!r}"
        assert hit[0].strip(), f"idea {k}: empty reason"


@pytest.mark.parametrize("limit", ["max_calls", "budget_usd"])
def test_budgets_hold_exactly_across_a_restart(toy_env, tmp_path, limit):
    prices = '[llm.prices."fake-model"]\ninput = 1.0\noutput = 1.0\n'
    extra = "max_calls = 7\n" if limit == "max_calls" else "budget_usd = 0.012\n"
    with FakeLLM() as fake:
        toy = ToyLLM(implement_delay=0.05)
        fake.script(*[toy] * 200)
        llm = llm_config(fake.openai_url, max_ideas=50, extra=extra)
        cfg = write_cfg(tmp_path / "cfg", toy_env, llm=llm + prices, rest="")
        d, pop = run_daemon(cfg, lambda d, pop: d.llm.budget.exhausted and not pop.running()
                            and not d._implementing and not d._proposing, timeout=120)
        served = fake.count
        b = d.llm.budget
        if limit == "max_calls":
            assert b.calls == 7 and served == 7, (b.calls, served)
        else:
            # each call costs 2.6-3.2 thousandths: the budget stops the next call, never overshoots by more
            assert b.usd >= 0.012 and b.usd < 0.012 + 0.0032 * d.cfg.implementer.concurrency, b.usd
        # a restart spends nothing more: the spend so far is restored from git
        def quiet_for_2s(d, pop):           # nothing running, then 2 s in which a call would show
            return not pop.running() and time.sleep(2) is None
        d2, _ = run_daemon(cfg, quiet_for_2s, timeout=60)
        assert fake.count == served, f"the restarted daemon made {fake.count - served} more LLM calls"
        assert d2.llm.budget.exhausted
    invariants(GitRepo(toy_env), proposals_ok=True)    # the budget stop keeps unimplemented proposals
