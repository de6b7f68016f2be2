"""A local HTTP server that stands in for the model API behind the coding-agent CLIs, for tests.

It speaks the two streaming APIs the real binaries use when pointed at a custom base URL:
- Claude Code: `POST /v1/messages?beta=true` with `"stream": true` (Anthropic Messages SSE:
  message_start, content_block_start/delta/stop, message_delta, message_stop), tool use included;
- Codex: `POST /v1/responses` with `"stream": true` (OpenAI Responses SSE: response.created,
  response.output_item.added/done, response.completed), function calls included.

A session is scripted as a list of turns, one per model request that offers tools (auxiliary
requests without tools, if a CLI sends any, get a one-word answer and use no turn):

    Shell(cmd)            run a shell command (claude: the Bash tool; codex: exec_command)
    Read(path)            read a file (claude: the Read tool, which its Edit tool requires first)
    Write(path, text)     write a file (a shell heredoc: claude's minimal mode has no Write tool)
    Edit(path, old, new)  replace text in a file (claude: the Edit tool; codex: a python one-liner)
    Done(text)            the final answer: the session ends
    Hang()                accept the request and never answer (until the server closes)

Each turn reports `input_tokens`/`output_tokens`, so a test can drive the session past a USD cap.
Every request is recorded; `tool_results()` returns what the CLI sent back for each tool call.
"""

from __future__ import annotations

import json
import shlex
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Shell:
    cmd: str
    input_tokens: int = 100
    output_tokens: int = 20


@dataclass
class Write:
    path: str
    text: str
    input_tokens: int = 100
    output_tokens: int = 20


@dataclass
class Read:
    path: str
    input_tokens: int = 100
    output_tokens: int = 20


@dataclass
class Edit:
    path: str
    old: str
    new: str
    input_tokens: int = 100
    output_tokens: int = 20


@dataclass
class Done:
    text: str = "Done."
    input_tokens: int = 100
    output_tokens: int = 20


@dataclass
class Hang:
    input_tokens: int = 0
    output_tokens: int = 0


def _tool_call(turn, flavour: str, cwd: str) -> tuple[str, dict]:
    """(tool name, arguments) for a turn, in the CLI's own tool vocabulary."""
    if flavour == "claude" and isinstance(turn, Read):
        return "Read", {"file_path": f"{cwd}/{turn.path}"}
    if flavour == "claude" and isinstance(turn, Edit):
        return "Edit", {"file_path": f"{cwd}/{turn.path}", "old_string": turn.old, "new_string": turn.new}
    if isinstance(turn, Shell):
        cmd = turn.cmd
    elif isinstance(turn, Read):
        cmd = f"cat {shlex.quote(turn.path)}"
    elif isinstance(turn, Write):      # claude's minimal mode offers no Write tool: a heredoc for both
        cmd = f"cat > {shlex.quote(turn.path)} <<'EOF_FAKE'\n{turn.text}EOF_FAKE"
    else:
        script = ("import sys;p,o,n=sys.argv[1:];s=open(p).read();assert o in s,'old text not found';"
                  "open(p,'w').write(s.replace(o,n,1))")
        cmd = " ".join(shlex.quote(a) for a in ["python3", "-c", script, turn.path, turn.old, turn.new])
    if flavour == "claude":
        return "Bash", {"command": cmd, "description": "run a command"}
    return "exec_command", {"cmd": cmd, "workdir": cwd, "yield_time_ms": 10000}


def _sse(events: list[tuple[str, dict]]) -> bytes:
    return b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events)


def _claude_events(turn, n: int, model: str, cwd: str) -> bytes:
    msg = {"id": f"msg_{n}", "type": "message", "role": "assistant", "model": model, "content": [],
           "stop_reason": None, "stop_sequence": None,
           "usage": {"input_tokens": turn.input_tokens, "output_tokens": 1}}
    ev = [("message_start", {"type": "message_start", "message": msg})]
    if isinstance(turn, Done):
        ev += [("content_block_start", {"type": "content_block_start", "index": 0,
                                        "content_block": {"type": "text", "text": ""}}),
               ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                        "delta": {"type": "text_delta", "text": turn.text}})]
        stop = "end_turn"
    else:
        name, args = _tool_call(turn, "claude", cwd)
        ev += [("content_block_start", {"type": "content_block_start", "index": 0, "content_block":
                                        {"type": "tool_use", "id": f"toolu_{n}", "name": name, "input": {}}}),
               ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                        "delta": {"type": "input_json_delta", "partial_json": json.dumps(args)}})]
        stop = "tool_use"
    ev += [("content_block_stop", {"type": "content_block_stop", "index": 0}),
           ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                              "usage": {"output_tokens": turn.output_tokens}}),
           ("message_stop", {"type": "message_stop"})]
    return _sse(ev)


def _codex_events(turn, n: int, model: str, cwd: str) -> bytes:
    rid = f"resp_{n}"
    if isinstance(turn, Done):
        item = {"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": turn.text, "annotations": []}]}
    else:
        name, args = _tool_call(turn, "codex", cwd)
        item = {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": name,
                "arguments": json.dumps(args), "status": "completed"}
    usage = {"input_tokens": turn.input_tokens, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": turn.output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": turn.input_tokens + turn.output_tokens}
    base = {"id": rid, "object": "response", "model": model, "status": "in_progress", "output": []}
    return _sse([("response.created", {"type": "response.created", "response": base}),
                 ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                                 "item": dict(item, status="in_progress")}),
                 ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0,
                                                "item": item}),
                 ("response.completed", {"type": "response.completed",
                                         "response": dict(base, status="completed", output=[item],
                                                          usage=usage)})])


class FakeAgentAPI:
    """`with FakeAgentAPI([turns...]) as api:`; `api.url` is the base URL (Claude Code:
    ANTHROPIC_BASE_URL=api.url; Codex: a provider with base_url=api.url + "/v1"). File paths in tool
    calls are made absolute with the working directory the CLI states in its request."""

    def __init__(self, turns: list | None = None):
        self.turns = list(turns or [])
        self.requests: list[dict[str, Any]] = []
        self.served = 0
        self._lock = threading.Lock()
        self._closing = threading.Event()
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_HEAD(self):
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_GET(self):
                self._json(404, {"error": "not found"})

            def _json(self, code: int, obj: dict) -> None:
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                n = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                path = self.path.split("?")[0]
                flavour = "claude" if path.endswith("/messages") else "codex" if path.endswith("/responses") else None
                with api._lock:
                    api.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                    scripted = flavour is not None and bool(body.get("tools"))
                    turn = None
                    if scripted and api.turns:
                        turn = api.turns.pop(0)
                        api.served += 1
                    idx = api.served
                if flavour is None:
                    return self._json(404, {"error": f"unknown path {self.path}"})
                if scripted and turn is None:
                    return self._json(400, {"type": "error", "error": {"type": "invalid_request_error",
                                                                       "message": "script exhausted"}})
                if isinstance(turn, Hang):
                    api._closing.wait(600)
                    return
                turn = turn or Done("ok", 5, 1)
                cwd = api.cwd_of(body)
                model = body.get("model", "model")
                data = (_claude_events if flavour == "claude" else _codex_events)(turn, idx, model, cwd)
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    @staticmethod
    def cwd_of(body: dict) -> str:
        """The session's working directory as the CLI told the model (absolute paths for claude's
        file tools; codex's exec_command workdir)."""
        import re
        text = json.dumps(body.get("system", "")) + json.dumps(body.get("messages", body.get("input", "")))
        m = re.search(r"CWD: (\S+?)(?:\\n|\s)", text) or re.search(r"working directory: (\S+?)(?:\\n|\s)", text) \
            or re.search(r"<cwd>([^<]+)</cwd>", text)
        return m.group(1) if m else "."

    def tool_results(self) -> list[str]:
        """Every tool result text the CLIs sent back, in order."""
        out: list[str] = []
        for r in self.requests:
            for m in r["body"].get("messages", []) or []:
                for c in m.get("content", []) if isinstance(m.get("content"), list) else []:
                    if c.get("type") == "tool_result":
                        parts = c.get("content")
                        out.append(parts if isinstance(parts, str) else
                                   "".join(p.get("text", "") for p in parts or [] if isinstance(p, dict)))
            for item in r["body"].get("input", []) if isinstance(r["body"].get("input"), list) else []:
                if item.get("type") == "function_call_output":
                    o = item.get("output")
                    out.append(o if isinstance(o, str) else json.dumps(o))
        return out

    def close(self) -> None:
        self._closing.set()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
