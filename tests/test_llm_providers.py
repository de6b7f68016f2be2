"""The anthropic and openai providers, through the real SDKs and real HTTP to a local fake server:
usage and cost, retries on 429/5xx/timeouts, unusable bodies, budgets checked before a request,
the concurrency limit, extended thinking, and keys that never leak into messages."""

from __future__ import annotations

import threading
import time

import pytest
from fake_llm import Delay, Empty, FakeLLM, Garbage, Reply, Status, fake_llm  # noqa: F401

from autoresearchd import llm
from autoresearchd.config import LLMCfg, Price
from autoresearchd.llm import BudgetExhausted, LLMError
from autoresearchd.llm.anthropic_provider import AnthropicProvider
from autoresearchd.llm.openai_provider import OpenAIProvider

KEY = "sk-test-SECRET-0123456789"
USER = [{"role": "user", "content": "propose one idea"}]


@pytest.fixture(autouse=True)
def keys(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


def make(kind: str, fake: FakeLLM, **kw):
    """A provider of `kind` pointed at the fake server, with fast backoff."""
    base = {"backoff_s": 0.01, "max_retries": 2, "timeout_s": 5.0, "model": "test-model",
            "base_url": fake.url if kind == "anthropic" else fake.openai_url}
    cfg = LLMCfg(provider=kind, **{**base, **kw})
    return (AnthropicProvider if kind == "anthropic" else OpenAIProvider)(cfg)


BOTH = pytest.mark.parametrize("kind", ["anthropic", "openai"])


def test_registry_resolves_both_providers():
    assert llm.get("anthropic") is AnthropicProvider
    assert llm.get("openai") is OpenAIProvider
    with pytest.raises(KeyError, match="valid providers: anthropic, openai, replay"):
        llm.get("gemini")


@BOTH
def test_success_reports_usage_and_cost(kind, fake_llm):
    fake_llm.script(Reply("an idea", input_tokens=1000, output_tokens=2000))
    p = make(kind, fake_llm, prices={"test-model": Price(input=3.0, output=15.0)})
    c = p.complete(USER, system="you are a researcher", purpose="propose")
    assert (c.text, c.input_tokens, c.output_tokens, c.attempts) == ("an idea", 1000, 2000, 1)
    assert c.cost_usd == pytest.approx((1000 * 3.0 + 2000 * 15.0) / 1e6)
    assert c.model == "test-model" and c.stop_reason == "end_turn"
    assert p.budget.calls == 1 and p.budget.usd == pytest.approx(c.cost_usd)
    assert p.budget.by_purpose["propose"] == pytest.approx(c.cost_usd)
    (req,) = fake_llm.requests
    assert req.body["model"] == "test-model"
    if kind == "anthropic":
        assert req.path == "/v1/messages"
        assert req.body["system"] == "you are a researcher" and req.body["messages"] == USER
        assert req.body["max_tokens"] == p.cfg.max_tokens
    else:
        assert req.path == "/v1/chat/completions"
        assert req.body["messages"] == [{"role": "system", "content": "you are a researcher"}, *USER]
        assert req.body["max_tokens"] == p.cfg.max_tokens  # a compatible server: the classic field
    assert KEY in (req.headers.get("authorization", "") + req.headers.get("x-api-key", ""))


@BOTH
@pytest.mark.parametrize("first", [Status(500), Status(429, retry_after=0), Status(529),
                                   Garbage(), Garbage(content_type="text/html")],
                         ids=["500", "429", "529", "garbage-json", "garbage-html"])
def test_transient_failure_then_success(kind, first, fake_llm):
    fake_llm.script(first, Reply("second time lucky"))
    c = make(kind, fake_llm).complete(USER)
    assert c.text == "second time lucky" and c.attempts == 2
    assert fake_llm.count == 2


@BOTH
def test_timeout_then_success(kind, fake_llm):
    fake_llm.script(Delay(2.0), Reply("fast now"))
    c = make(kind, fake_llm, timeout_s=0.3).complete(USER)
    assert c.text == "fast now" and c.attempts == 2 and fake_llm.count == 2


@BOTH
def test_persistent_server_errors_give_up_after_max_retries(kind, fake_llm):
    fake_llm.script(*[Status(503)] * 3)
    with pytest.raises(LLMError, match="HTTP 503") as ei:
        make(kind, fake_llm, max_retries=2).complete(USER)
    assert ei.value.retryable and ei.value.status == 503 and fake_llm.count == 3


@BOTH
def test_garbage_body_is_an_llm_error(kind, fake_llm):
    fake_llm.script(Garbage(), Garbage(content_type="text/html"))
    with pytest.raises(LLMError, match="base_url"):
        make(kind, fake_llm, max_retries=1).complete(USER)
    assert fake_llm.count == 2


@BOTH
def test_empty_text_is_an_llm_error(kind, fake_llm):
    fake_llm.script(Empty())
    with pytest.raises(LLMError, match="empty"):
        make(kind, fake_llm).complete(USER)
    assert fake_llm.count == 1


@BOTH
@pytest.mark.parametrize("code,hint", [(400, "llm.model"), (404, "llm.model"), (401, "API_KEY")])
def test_client_errors_are_not_retried_and_say_what_to_fix(kind, code, hint, fake_llm):
    fake_llm.script(Status(code, message="model 'test-model' does not exist"))
    with pytest.raises(LLMError, match=hint) as ei:
        make(kind, fake_llm).complete(USER)
    assert not ei.value.retryable and ei.value.status == code and fake_llm.count == 1


@BOTH
def test_max_tokens_cut_keeps_text_and_says_so(kind, fake_llm):
    fake_llm.script(Reply("half an ide", stop_reason="max_tokens"))
    c = make(kind, fake_llm).complete(USER)
    assert c.text == "half an ide" and c.stop_reason == "max_tokens"


@BOTH
def test_call_budget_stops_before_sending(kind, fake_llm):
    fake_llm.script(Reply("one"), Reply("two"), Reply("three"))
    p = make(kind, fake_llm, max_calls=2)
    p.complete(USER)
    p.complete(USER)
    with pytest.raises(BudgetExhausted, match="2/2 calls"):
        p.complete(USER)
    assert fake_llm.count == 2


@BOTH
def test_usd_budget_stops_before_sending(kind, fake_llm):
    fake_llm.script(Reply("pricey", input_tokens=1_000_000, output_tokens=0), Reply("never"))
    p = make(kind, fake_llm, budget_usd=1.0, prices={"test-model": Price(input=2.0, output=0.0)})
    assert p.complete(USER).cost_usd == pytest.approx(2.0)
    with pytest.raises(BudgetExhausted, match="spend budget"):
        p.complete(USER)
    assert fake_llm.count == 1


@BOTH
def test_concurrency_limit_is_honoured(kind, fake_llm):
    fake_llm.script(*[Delay(0.15, Reply(f"r{i}")) for i in range(4)])
    p = make(kind, fake_llm, concurrency=1)
    out: list[str] = []
    threads = [threading.Thread(target=lambda: out.append(p.complete(USER).text)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(out) == ["r0", "r1", "r2", "r3"]
    assert fake_llm.max_in_flight == 1


def test_extended_thinking_request_and_answer(fake_llm):
    fake_llm.script(Reply("the answer", thinking="private reasoning"))
    p = make("anthropic", fake_llm, thinking_budget=2048, max_tokens=1000, temperature=0.7)
    c = p.complete(USER)
    assert c.text == "the answer"
    body = fake_llm.requests[0].body
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["max_tokens"] == 1000 + 2048 and "temperature" not in body


def test_temperature_is_sent_when_set(fake_llm):
    fake_llm.script(Reply(), Reply())
    make("anthropic", fake_llm, temperature=0.3).complete(USER)
    make("openai", fake_llm, temperature=0.3).complete(USER)
    assert [r.body["temperature"] for r in fake_llm.requests] == [0.3, 0.3]


def test_openai_keyless_local_server_gets_a_dummy_key(fake_llm, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    fake_llm.script(Reply("from vllm"))
    assert make("openai", fake_llm).complete(USER).text == "from vllm"
    assert fake_llm.requests[0].headers["authorization"] == "Bearer not-needed"


def test_openai_custom_key_env(fake_llm, monkeypatch):
    monkeypatch.setenv("TOGETHER_API_KEY", "tg-key-42")
    fake_llm.script(Reply())
    make("openai", fake_llm, api_key_env="TOGETHER_API_KEY").complete(USER)
    assert fake_llm.requests[0].headers["authorization"] == "Bearer tg-key-42"


def test_missing_key_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(LLMError, match="ANTHROPIC_API_KEY is not set"):
        AnthropicProvider(LLMCfg(provider="anthropic"))
    with pytest.raises(LLMError, match="OPENAI_API_KEY is not set"):
        OpenAIProvider(LLMCfg(provider="openai"))  # no base_url: no dummy key for api.openai.com


@BOTH
def test_key_never_appears_in_errors_or_repr(kind, fake_llm):
    fake_llm.script(Status(401, message=f"invalid x-api-key {KEY}"), Delay(2.0), Status(500, message=KEY))
    p = make(kind, fake_llm, timeout_s=0.3, max_retries=0)
    seen = [repr(p), str(p.__dict__), repr(p.cfg)]
    for _ in range(3):
        with pytest.raises(LLMError) as ei:
            p.complete(USER)
        seen += [str(ei.value), repr(ei.value)]
    assert not any(KEY in s for s in seen), [s for s in seen if KEY in s]
    assert any("***" in s for s in seen)


@BOTH
def test_retry_after_is_honoured(kind, fake_llm):
    fake_llm.script(Status(429, retry_after=0.4), Reply("after the wait"))
    t0 = time.monotonic()
    c = make(kind, fake_llm).complete(USER)
    assert c.text == "after the wait" and c.attempts == 2
    assert time.monotonic() - t0 >= 0.4  # a lower bound only: sleeping never ends early
