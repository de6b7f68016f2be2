"""The `openai` provider: the official SDK's chat.completions, for OpenAI itself and for any
OpenAI-compatible server reached through `llm.base_url` (vLLM, Together, DeepSeek, ...).

The key comes from the variable named by `llm.api_key_env` (default OPENAI_API_KEY). A local
server that needs no key gets a dummy one, but only when `llm.base_url` is set. The SDK's own
retries are off: `Provider.complete` retries with our backoff.
"""

from __future__ import annotations

import openai

from . import _sdk
from .base import Completion, LLMError, Provider

from autoresearchd import defaults

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
# OpenAI's finish reasons, in the anthropic words the rest of the daemon checks for.
_STOP = {"length": "max_tokens", "stop": "end_turn"}


class OpenAIProvider(Provider):
    name = "openai"

    def __init__(self, cfg, budget=None):
        super().__init__(cfg, budget)
        self.key_env = cfg.api_key_env or DEFAULT_KEY_ENV
        key = _sdk.read_key(self.key_env, what="openai provider", base_url=cfg.base_url, allow_dummy=True)
        # The client holds the key; we keep no copy of it.
        self._client = openai.OpenAI(api_key=key, base_url=cfg.base_url, max_retries=0, timeout=cfg.timeout_s)

    def default_model(self) -> str:
        return defaults.LLM_MODELS["openai"]

    def __repr__(self) -> str:
        return f"OpenAIProvider(model={self.model!r}, base_url={self.cfg.base_url!r})"

    def _request(self, messages: list[dict], system: str | None, max_tokens: int) -> dict:
        msgs = ([{"role": "system", "content": system}] if system else []) + list(messages)
        req: dict = {"model": self.model, "messages": msgs}
        # OpenAI's current models take only max_completion_tokens; compatible servers (vLLM,
        # DeepSeek, Together) all know the older max_tokens.
        req["max_tokens" if self.cfg.base_url else "max_completion_tokens"] = max_tokens
        if self.cfg.temperature is not None:
            req["temperature"] = self.cfg.temperature
        return req

    def _call(self, messages: list[dict], system: str | None, max_tokens: int, meta: dict) -> Completion:
        what = f"openai ({self.model})"
        try:
            resp = self._client.chat.completions.create(**self._request(messages, system, max_tokens))
        except (openai.OpenAIError, ValueError) as e:  # ValueError: a body that is not JSON
            raise _sdk.map_error(openai, e, what=what, model=self.model, key_env=self.key_env,
                                 base_url=self.cfg.base_url, timeout_s=self.cfg.timeout_s) from None
        if not isinstance(resp, openai.types.chat.ChatCompletion) or not resp.choices:
            raise _sdk.unusable(what, self.cfg.base_url, resp)
        choice = resp.choices[0]
        if getattr(choice.message, "refusal", None):
            raise LLMError(f"{what}: the model refused: {choice.message.refusal}", retryable=False)
        u = resp.usage
        inp, out = (u.prompt_tokens or 0, u.completion_tokens or 0) if u else (0, 0)
        return Completion(text=choice.message.content or "", model=self.model, input_tokens=inp,
                          output_tokens=out,
                          cost_usd=self.cost(self.model, inp, out) or self.cost(resp.model, inp, out),
                          stop_reason=_STOP.get(choice.finish_reason, choice.finish_reason))
