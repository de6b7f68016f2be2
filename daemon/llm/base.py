"""The provider contract, the shared retry/timeout/concurrency wrapper, and the budget ledger.

A provider subclass implements `_call(messages, system, max_tokens) -> Completion` for one attempt;
`complete()` adds the concurrency limit, retries (tenacity, one policy) with backoff on 429/5xx/timeouts, usage and cost
accounting, and budget checks, so every provider behaves the same.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import ClassVar

import tenacity


class LLMError(Exception):
    """A call failed for good (after retries), or the response was unusable. `retryable` tells why."""

    def __init__(self, msg: str, retryable: bool = False, status: int | None = None):
        super().__init__(msg)
        self.retryable, self.status = retryable, status
        self.completion: Completion | None = None    # set when an answer came back (and cost) but was unusable


class BudgetExhausted(LLMError):
    """A budget limit (USD or calls) was reached: stop proposing and implementing, cleanly."""


class ReplayExhausted(BudgetExhausted):
    """The replay file has no more recorded ideas: the offline demo is complete."""


@dataclass
class Completion:
    text: str
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    attempts: int = 1
    stop_reason: str | None = None


@dataclass
class Budget:
    """Thread-safe ledger of calls, tokens and USD, with optional limits. Restored from git on start."""
    max_usd: float | None = None
    max_calls: int | None = None
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    usd: float = 0.0
    by_purpose: dict[str, float] = field(default_factory=dict)
    ledger: str | None = None       # a file that gets one line per call, so a restart knows the spend
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _pending: int = field(default=0, repr=False)   # calls reserved and still in flight

    def _check_locked(self) -> None:
        if self.max_calls is not None and self.calls + self._pending >= self.max_calls:
            raise BudgetExhausted(f"LLM call budget reached ({self.calls}/{self.max_calls} calls)")
        if self.max_usd is not None and self.usd >= self.max_usd:
            raise BudgetExhausted(f"LLM spend budget reached (${self.usd:.4f} of ${self.max_usd:.2f})")

    def check(self) -> None:
        with self._lock:
            self._check_locked()

    def reserve(self) -> None:
        """Check and take one call slot atomically, so concurrent callers cannot overshoot max_calls."""
        with self._lock:
            self._check_locked()
            self._pending += 1

    def release(self) -> None:
        with self._lock:
            self._pending = max(0, self._pending - 1)

    def record(self, c: Completion, purpose: str) -> None:
        with self._lock:
            self.calls += 1
            self.input_tokens += c.input_tokens
            self.output_tokens += c.output_tokens
            self.usd += c.cost_usd
            self.by_purpose[purpose] = self.by_purpose.get(purpose, 0.0) + c.cost_usd
            if self.ledger:
                with open(self.ledger, "a") as f:
                    f.write(json.dumps({"purpose": purpose, "usd": c.cost_usd, "in": c.input_tokens,
                                        "out": c.output_tokens}) + "\n")

    def restore(self, path: str) -> None:
        """Count the calls (and spend) of earlier runs from the ledger file, then keep appending to it.
        USD and tokens only grow: they may already have been restored from the commit trailers."""
        calls, usd, inp, out = 0, 0.0, 0, 0
        try:
            with open(path) as f:
                for line in f:
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue        # a line cut by a crash
                    calls += 1
                    usd += float(rec.get("usd") or 0)
                    inp += int(rec.get("in") or 0)
                    out += int(rec.get("out") or 0)
        except FileNotFoundError:
            pass
        with self._lock:
            self.calls = max(self.calls, calls)
            self.usd = max(self.usd, usd)
            self.input_tokens, self.output_tokens = max(self.input_tokens, inp), max(self.output_tokens, out)
            self.ledger = path

    @property
    def exhausted(self) -> bool:
        try:
            self.check()
            return False
        except BudgetExhausted:
            return True


class Provider:
    """Base class. Subclasses set `name` and implement `_call`."""
    name: ClassVar[str] = "base"

    def __init__(self, cfg, budget: Budget | None = None):
        self.cfg = cfg
        self.budget = budget or Budget(cfg.budget_usd, cfg.max_calls)
        self._sem = threading.BoundedSemaphore(max(1, cfg.concurrency))
        self.model = cfg.model or self.default_model()

    def default_model(self) -> str:
        return "unknown"

    def cost(self, model: str, input_tokens: int, output_tokens: int) -> float:
        price = self.cfg.prices.get(model)
        if price is None:
            return 0.0
        return (input_tokens * price.input + output_tokens * price.output) / 1e6

    def _call(self, messages: list[dict], system: str | None, max_tokens: int, meta: dict) -> Completion:
        """One attempt. Raise LLMError(retryable=True) for 429/5xx/timeouts. `meta` carries hints that
        only the replay provider uses (purpose, n ideas wanted, idea title, attempt number)."""
        raise NotImplementedError

    def complete(self, messages: list[dict], *, system: str | None = None, purpose: str = "other",
                 max_tokens: int | None = None, meta: dict | None = None) -> Completion:
        """One logical call with retries. Raises BudgetExhausted before spending, LLMError on failure.
        purpose: "propose" | "implement" | "revise" | other; it keys the cost ledger."""
        meta = dict(meta or {}, purpose=purpose)
        self.budget.reserve()
        try:
            return self._complete(messages, system, purpose, max_tokens, meta)
        finally:
            self.budget.release()

    def _complete(self, messages, system, purpose, max_tokens, meta) -> Completion:
        # tenacity runs the one retry policy: retryable LLMErrors only (429, 5xx, time-outs), at most
        # max_retries more attempts, exponential backoff from backoff_s, and a server's retry-after
        # wins when it asks for longer. The SDKs' own retries are off so that no call retries twice.
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.cfg.max_retries + 1),
            retry=tenacity.retry_if_exception(lambda e: isinstance(e, LLMError) and e.retryable),
            wait=self._wait, sleep=time.sleep, reraise=True)
        for attempt in retrying:
            with attempt:
                return self._attempt(messages, system, max_tokens, meta, purpose,
                                     attempt.retry_state.attempt_number)
        raise AssertionError("unreachable: tenacity either returns or re-raises")

    def _wait(self, state: tenacity.RetryCallState) -> float:
        backoff = self.cfg.backoff_s * 2 ** (state.attempt_number - 1)
        exc = state.outcome.exception() if state.outcome else None
        return max(backoff, getattr(exc, "retry_after", None) or 0.0)

    def _attempt(self, messages, system, max_tokens, meta, purpose, number: int) -> Completion:
        t0 = time.monotonic()
        with self._sem:
            c = self._call(messages, system, max_tokens or self.cfg.max_tokens, meta)
        c.latency_s = time.monotonic() - t0
        c.attempts = number
        if not c.cost_usd:
            c.cost_usd = self.cost(c.model, c.input_tokens, c.output_tokens)
        self.budget.record(c, purpose)
        if not c.text.strip():
            e = LLMError("the model returned an empty response", retryable=False)
            e.completion = c        # billed all the same: the caller attributes its cost
            raise e
        return c
