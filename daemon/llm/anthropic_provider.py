"""The `anthropic` provider: Claude through the official SDK's Messages API.

The SDK's own retries are off (`max_retries=0`): `Provider.complete` retries with our backoff, so
every provider counts attempts and spends budget the same way. Extended thinking is turned on by
`llm.thinking_budget`; only the text blocks of the answer are returned.
"""

from __future__ import annotations

import anthropic

from . import _sdk
from .base import Completion, LLMError, Provider

from autoresearchd import defaults

DEFAULT_KEY_ENV = "ANTHROPIC_API_KEY"


class AnthropicProvider(Provider):
    name = "anthropic"

    def __init__(self, cfg, budget=None):
        super().__init__(cfg, budget)
        self.key_env = cfg.api_key_env or DEFAULT_KEY_ENV
        key = _sdk.read_key(self.key_env, what="anthropic provider", base_url=cfg.base_url, allow_dummy=False)
        # The client holds the key; we keep no copy of it.
        self._client = anthropic.Anthropic(api_key=key, base_url=cfg.base_url, max_retries=0,
                                           timeout=cfg.timeout_s)

    def default_model(self) -> str:
        return defaults.LLM_MODELS["anthropic"]

    def __repr__(self) -> str:
        return f"AnthropicProvider(model={self.model!r}, base_url={self.cfg.base_url!r})"

    def _request(self, messages: list[dict], system: str | None, max_tokens: int) -> dict:
        req: dict = {"model": self.model, "messages": messages, "max_tokens": max_tokens}
        if system:
            req["system"] = system
        if self.cfg.thinking_budget:
            # Thinking tokens count against max_tokens, which must exceed the budget: give the
            # answer its full max_tokens on top. The API requires the default temperature here.
            req["thinking"] = {"type": "enabled", "budget_tokens": self.cfg.thinking_budget}
            req["max_tokens"] = max_tokens + self.cfg.thinking_budget
        elif self.cfg.temperature is not None:
            # This SDK release no longer lists sampling parameters; older models still take it.
            req["extra_body"] = {"temperature": self.cfg.temperature}
        return req

    def _call(self, messages: list[dict], system: str | None, max_tokens: int, meta: dict) -> Completion:
        what = f"anthropic ({self.model})"
        try:
            resp = self._client.messages.create(**self._request(messages, system, max_tokens))
        except (anthropic.AnthropicError, ValueError) as e:  # ValueError: a body that is not JSON
            raise _sdk.map_error(anthropic, e, what=what, model=self.model, key_env=self.key_env,
                                 base_url=self.cfg.base_url, timeout_s=self.cfg.timeout_s) from None
        if not isinstance(resp, anthropic.types.Message):
            raise _sdk.unusable(what, self.cfg.base_url, resp)
        if resp.stop_reason == "refusal":
            raise LLMError(f"{what}: the model refused to answer", retryable=False)
        text = "".join(b.text for b in resp.content if getattr(b, "type", None) == "text")
        u = resp.usage
        inp = (u.input_tokens or 0) + (u.cache_creation_input_tokens or 0) + (u.cache_read_input_tokens or 0)
        out = u.output_tokens or 0
        return Completion(text=text, model=self.model, input_tokens=inp, output_tokens=out,
                          cost_usd=self.cost(self.model, inp, out) or self.cost(resp.model, inp, out),
                          stop_reason=resp.stop_reason)
