"""A local HTTP server standing in for the Anthropic and OpenAI APIs, for tests.

It speaks `POST /v1/messages` (Anthropic Messages) and `POST /v1/chat/completions` (OpenAI chat)
and answers from a script: a queue of items, one per request, in order.

    Reply(text, input_tokens, output_tokens, stop_reason, thinking)   a normal answer
    Status(code, retry_after, message)                                an HTTP error (429, 500, 529, ...)
    Delay(seconds, then)                                              sleep (to trip a client timeout),
                                                                      then answer `then`
    Garbage(body, content_type)                                       a 200 with an unparsable body
    Empty()                                                           a 200 answer with empty text
    callable(request) -> item                                         computed per request

Every request is recorded (path, headers, JSON body), and the server tracks how many requests
were in flight at once, so tests can assert on what the real SDKs sent. An empty script answers
HTTP 400 "script exhausted" so that a test asking for more than it scripted fails loudly.

Use the `fake_llm` pytest fixture (`from fake_llm import fake_llm`), or `FakeLLM()` as a context
manager from other test modules.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class Reply:
    text: str = "ok"
    input_tokens: int = 10
    output_tokens: int = 5
    stop_reason: str = "end_turn"       # anthropic names; mapped to OpenAI's finish_reason
    thinking: str | None = None         # adds an anthropic thinking block before the text


@dataclass
class Status:
    code: int = 500
    retry_after: float | None = None
    message: str = "scripted error"


@dataclass
class Delay:
    seconds: float
    then: Any = field(default_factory=Reply)


@dataclass
class Garbage:
    body: bytes = b"<html>502 bad gateway</html> {not json"
    content_type: str = "application/json"


@dataclass
class Empty:
    input_tokens: int = 10


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: Any


_FINISH = {"end_turn": "stop", "max_tokens": "length", "stop_sequence": "stop"}
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 429: "rate_limit_error", 529: "overloaded_error"}


def _anthropic_body(item: Reply | Empty, model: str) -> dict:
    content: list[dict] = []
    if isinstance(item, Reply):
        if item.thinking:
            content.append({"type": "thinking", "thinking": item.thinking, "signature": "sig"})
        content.append({"type": "text", "text": item.text})
    out_tokens = item.output_tokens if isinstance(item, Reply) else 0
    stop = item.stop_reason if isinstance(item, Reply) else "end_turn"
    return {"id": "msg_fake", "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": item.input_tokens, "output_tokens": out_tokens}}


def _openai_body(item: Reply | Empty, model: str) -> dict:
    text = item.text if isinstance(item, Reply) else ""
    out_tokens = item.output_tokens if isinstance(item, Reply) else 0
    stop = item.stop_reason if isinstance(item, Reply) else "end_turn"
    return {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "finish_reason": _FINISH.get(stop, stop),
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": item.input_tokens, "completion_tokens": out_tokens,
                      "total_tokens": item.input_tokens + out_tokens}}


class FakeLLM:
    """The server. `script(...)` queues answers; `requests` lists what arrived; `close()` stops it."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._queue: deque = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """Base URL for the anthropic SDK (it appends /v1/messages)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def openai_url(self) -> str:
        """Base URL for the openai SDK (it appends /chat/completions)."""
        return self.url + "/v1"

    def script(self, *items: Any) -> "FakeLLM":
        with self._lock:
            self._queue.extend(items)
        return self

    @property
    def count(self) -> int:
        return len(self.requests)

    def close(self) -> None:
        self._stop.set()          # cut pending Delays short
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "FakeLLM":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _next(self, req: Request) -> Any:
        with self._lock:
            self.requests.append(req)
            item = self._queue.popleft() if self._queue else Status(400, message="fake_llm: script exhausted")
        return item(req) if callable(item) and not isinstance(item, type) else item

    def _handler_class(self) -> type:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(n)
                try:
                    body = json.loads(raw or b"null")
                except ValueError:
                    body = raw.decode(errors="replace")
                req = Request(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with fake._lock:
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                try:
                    self._answer(fake._next(req), req)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test): nothing to answer
                finally:
                    with fake._lock:
                        fake.in_flight -= 1

            def _answer(self, item: Any, req: Request) -> None:
                while isinstance(item, Delay):
                    if fake._stop.wait(item.seconds):
                        self.close_connection = True    # closing: hang up, or the client waits out its time-out
                        return
                    item = item.then
                openai = req.path.rstrip("/").endswith("/chat/completions")
                if not (openai or req.path.rstrip("/").endswith("/messages")):
                    item = Status(404, message=f"fake_llm: no route {req.path}")
                model = req.body.get("model", "") if isinstance(req.body, dict) else ""
                if isinstance(item, (Reply, Empty)):
                    self._send(200, json.dumps((_openai_body if openai else _anthropic_body)(item, model)))
                elif isinstance(item, Garbage):
                    self._send(200, item.body, item.content_type)
                elif isinstance(item, Status):
                    if openai:
                        err = {"error": {"message": item.message, "type": "fake", "code": item.code}}
                    else:
                        err = {"type": "error", "error": {"type": _ERROR_TYPES.get(item.code, "api_error"),
                                                          "message": item.message}}
                    extra = {"retry-after": f"{item.retry_after:g}"} if item.retry_after is not None else {}
                    self._send(item.code, json.dumps(err), headers=extra)
                else:
                    raise TypeError(f"fake_llm: unknown script item {item!r}")

            def _send(self, code: int, body: str | bytes, ctype: str = "application/json",
                      headers: dict | None = None) -> None:
                data = body.encode() if isinstance(body, str) else body
                self.send_response(code)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        return Handler


@pytest.fixture
def fake_llm():
    """A running FakeLLM, closed after the test."""
    with FakeLLM() as f:
        yield f


__all__ = ["FakeLLM", "Reply", "Status", "Delay", "Garbage", "Empty", "Request", "fake_llm"]
