"""What the two HTTP providers share: reading the key from the environment, building the SDK's
client arguments, and turning SDK exceptions into `LLMError`s that say what to fix.

Both official SDKs (anthropic, openai) come from the same generator and raise the same family of
exceptions (APIStatusError with `status_code`, APIConnectionError, APITimeoutError), so one
mapping serves both. The key is never stored by us, never logged, and scrubbed from any message.
"""

from __future__ import annotations

import os
from typing import Any

from .base import LLMError

from autoresearchd import defaults

# HTTP statuses worth another try: request timeout, conflict (lock), rate limit, server side.
_RETRYABLE = {408, 409, 429}
DUMMY_KEY = "not-needed"  # sent to a keyless local server; never a real secret


def read_key(env_name: str, *, what: str, base_url: str | None, allow_dummy: bool) -> str:
    """The API key from the environment variable `env_name`. With `allow_dummy` and a base_url,
    a missing key is fine (local vLLM and similar servers ignore it)."""
    key = os.environ.get(env_name, "").strip()
    if key:
        return key
    if allow_dummy and base_url:
        return DUMMY_KEY
    raise LLMError(f"{what}: the environment variable {env_name} is not set. Export your API key "
                   f"there (keys are read from the environment only, never from the config file), "
                   f"or choose another provider with llm.provider", retryable=False)


def scrub(text: str, env_name: str | None) -> str:
    """Remove the key (if any ends up in a server's message) from text we show or raise."""
    key = os.environ.get(env_name or "", "").strip()
    if key and len(key) >= 4:
        text = text.replace(key, "***")
    return text


def _server_message(e: Any) -> str:
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
    return str(getattr(e, "message", "") or e)


def _retry_after(e: Any) -> float | None:
    resp = getattr(e, "response", None)
    value = resp.headers.get("retry-after") if resp is not None else None
    try:
        return min(float(value), defaults.LLM_MAX_RETRY_AFTER_S) if value is not None else None
    except ValueError:
        return None


def map_error(sdk: Any, e: Exception, *, what: str, model: str, key_env: str,
              base_url: str | None, timeout_s: float) -> LLMError:
    """Turn one SDK exception into an LLMError with `retryable`, `status` and, for 429s and 5xx
    responses that carry one, a `retry_after` attribute (seconds)."""
    where = base_url or "the default endpoint"
    if isinstance(e, sdk.APITimeoutError):
        err = LLMError(f"{what}: no answer within llm.timeout_s={timeout_s:g}s from {where}", retryable=True)
    elif isinstance(e, sdk.APIConnectionError):
        err = LLMError(f"{what}: could not reach {where} ({e}); check llm.base_url and the network",
                       retryable=True)
    elif isinstance(e, sdk.APIStatusError):
        code = e.status_code
        msg = _server_message(e)
        if code in (401, 403):
            hint = f"authentication failed: check the API key in the environment variable {key_env}"
        elif code == 404:
            hint = f"not found: check llm.model (now '{model}') and llm.base_url (now {where})"
        elif code == 413:
            hint = "the prompt is too large for this model or endpoint"
        elif code == 429:
            hint = "rate limited"
        elif code >= 500:
            hint = "the server is overloaded" if code == 529 else "server error"
        else:
            hint = f"the request was rejected: check llm.model (now '{model}') and llm.max_tokens"
        err = LLMError(f"{what}: HTTP {code}, {hint}: {msg}", status=code,
                       retryable=code in _RETRYABLE or code >= 500)
        err.retry_after = _retry_after(e)
    elif isinstance(e, (sdk.APIResponseValidationError, ValueError)):
        # A 200 whose body is not the API's JSON: a gateway page or a truncated stream.
        err = LLMError(f"{what}: {where} returned a response that is not valid API JSON ({type(e).__name__}); "
                       f"check llm.base_url", retryable=True)
    else:
        err = LLMError(f"{what}: {type(e).__name__}: {e}", retryable=False)
    err.args = (scrub(str(err), key_env),)
    return err


def unusable(what: str, base_url: str | None, got: Any) -> LLMError:
    """A response object of the wrong type (the SDK hands back a str for a non-JSON body)."""
    return LLMError(f"{what}: {base_url or 'the default endpoint'} returned a non-JSON body "
                    f"({type(got).__name__}, {str(got)[:80]!r}); check llm.base_url", retryable=True)
