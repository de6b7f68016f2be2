"""`autoresearchd serve`: a read-only live dashboard over HTTP (Starlette on uvicorn).

Git stays the only state: one shared watcher compares the notes refs (and, less often, every idea
ref) once a second and, when they moved, reads only what changed (livepop.LivePopulation) and
builds a new `dashboard.Snapshot` from the same readers `status` and `ideas` use; browsers hold one
server-sent-events stream and refetch the view they show when told the version changed. No request
writes anything: only GET and HEAD are served.

Security: binds 127.0.0.1 by default. Any other address needs a token (--token or --token-file),
checked on every request (Authorization: Bearer, or a cookie set from `?token=` once); without one
it refuses to start. On loopback without a token, the Host header must name loopback (a hostile web
page cannot rebind its own name to 127.0.0.1 and read the dashboard). The page is static HTML and JS
that writes every value as text (never as markup) under a strict Content-Security-Policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import ipaddress
import json
import logging
import socket
import sys
import threading
import time
from http.cookies import SimpleCookie
from importlib import resources
from pathlib import Path
from urllib.parse import parse_qsl, urlencode

from autoresearchd import defaults
from autoresearchd.config import ConfigError
from autoresearchd.research import open_research
from autoresearchd.store.gitrepo import state_dir
from autoresearchd.store.notes import Status
from autoresearchd.store.livepop import LivePopulation
from autoresearchd.views.dashboard import Snapshot, secrets_in_env

log = logging.getLogger("autoresearchd")
COOKIE = "autoresearchd_token"
LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}
HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff", "referrer-policy": "no-referrer", "x-frame-options": "DENY",
    "cache-control": "no-store",
}


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def resolve_token(host: str, token: str | None, token_file: str | None) -> str | None:
    """The token to require, or None on loopback without one. Raises ConfigError when one is needed."""
    if token_file:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as e:
            raise ConfigError(f"--token-file {token_file}: {e.strerror}") from None
    if token is not None and len(token) < 16:
        raise ConfigError("the dashboard token must be at least 16 characters (try: openssl rand -hex 16)")
    if not token and not is_loopback(host):
        raise ConfigError(f"refusing to serve on {host} without a token: pass --token or --token-file "
                          f"(or bind 127.0.0.1 and use an SSH tunnel)")
    return token or None


class Live:
    """The current snapshot and its version, shared by every request and event stream."""

    def __init__(self, cfg, research):
        self.cfg, self.research = cfg, research
        self.secrets = secrets_in_env()
        self.version = 0
        self.state_key = ""
        self.snapshot: Snapshot | None = None
        self._lock = threading.Lock()
        self._polls = 0
        self._packed = -1
        self.population = LivePopulation(research.repo, research.baseline_ref)
        self.changed: asyncio.Event | None = None
        self.last_kind = "data"

    def _read(self):
        """The population if git moved since the last poll, else None. Notes, proposals and the baseline
        are compared every poll; every idea ref every SERVE_FULL_SCAN_EVERY polls, and at once when
        packed-refs was rewritten (a deleted packed branch leaves no loose file to notice)."""
        self._polls += 1
        try:
            packed = (self.research.repo.git_dir / "packed-refs").stat().st_mtime_ns
        except OSError:
            packed = 0
        scan = self._polls % defaults.SERVE_FULL_SCAN_EVERY == 1 or packed != self._packed
        self._packed = packed
        return self.population.refresh(scan=scan)

    def _state_key(self) -> str:
        """The daemon's heartbeat file minus the heartbeat itself: slots, budget, what is implementing."""
        try:
            st = json.loads((state_dir(self.research.repo) / "daemon.json").read_text())
        except (OSError, ValueError):
            return ""
        st.pop("heartbeat", None)
        return hashlib.sha1(json.dumps(st, sort_keys=True, default=str).encode()).hexdigest()

    def poll(self) -> str | None:
        """Compare git and the heartbeat file with what is served; rebuild on change. Returns the change
        kind ("data": refs moved, "state": only the daemon's slots/budget changed) or None."""
        with self._lock:
            pop, sk = self._read(), self._state_key()
            kind = None
            if pop is not None or self.snapshot is None:
                pop = pop or self.population.pop
                self.version += 1
                snap = Snapshot(self.cfg, self.research, pop, str(self.version), self.secrets,
                                prev=self.snapshot)
                snap.overview()             # computed here, before browsers are told to fetch it
                self.snapshot = snap
                kind = "data"
            if sk != self.state_key:
                self.state_key = sk
                if kind is None:
                    self.snapshot.overview()
                    kind = "state"
            return kind

    def current(self) -> Snapshot:
        if self.snapshot is None:
            self.poll()
        return self.snapshot

    async def watch(self) -> None:
        """One watcher for every client: a light poll of refs, never one per browser."""
        self.changed = asyncio.Event()
        while True:
            await asyncio.sleep(defaults.SERVE_POLL_S)
            try:
                kind = await asyncio.to_thread(self.poll)
            except Exception:  # noqa: BLE001 - a bad read is retried next second; the server stays up
                log.exception("dashboard: reading the research repo failed")
                continue
            if kind:
                self.last_kind = kind
                ev, self.changed = self.changed, asyncio.Event()
                ev.set()


def _web_dir() -> Path:
    return Path(str(resources.files("autoresearchd.views").joinpath("web")))


def build_app(cfg, token: str | None = None, loopback_only_hosts: bool = True):
    # lazy: starlette is the [serve] extra; the rest of the CLI runs without it
    from starlette.applications import Starlette
    from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, StreamingResponse
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    research = open_research(cfg, create=False)
    live = Live(cfg, research)
    live.poll()             # read and index the population before the URL is printed: the first page is warm
    web = _web_dir()

    def snap():
        return live.current()

    async def index(request):
        return FileResponse(web / "index.html", media_type="text/html; charset=utf-8")

    async def api_overview(request):
        s = await asyncio.to_thread(snap)
        return JSONResponse(s.overview())

    def _int(request, key, default=None, lo=0, hi=10**9):
        try:
            v = request.query_params.get(key)
            return default if v in (None, "") else max(lo, min(hi, int(v)))
        except ValueError:
            return default

    async def api_ideas(request):
        q = request.query_params
        status = q.get("status") or None
        if status and status not in {s.value for s in Status}:
            return JSONResponse({"error": f"unknown status {status!r}"}, status_code=400)
        s = await asyncio.to_thread(snap)
        return JSONResponse(s.ideas(status=status, origin=q.get("origin") or None,
                                    epoch=_int(request, "epoch", None, -1), decision=q.get("decision") or None,
                                    q=(q.get("q") or "")[:200] or None, sort=q.get("sort") or "rank",
                                    desc=q.get("desc") in ("1", "true"), offset=_int(request, "offset", 0),
                                    limit=_int(request, "limit", defaults.SERVE_PAGE_ROWS, 1, 1000)))

    async def api_lineage(request):
        s = await asyncio.to_thread(snap)
        out = s.lineage(request.query_params.get("root") or "baseline", _int(request, "depth", 2, 0, 6),
                        _int(request, "limit", 50, 1, 500))
        return JSONResponse(out) if out else JSONResponse({"error": "no such idea"}, status_code=404)

    async def api_failures(request):
        s = await asyncio.to_thread(snap)
        return JSONResponse(s.failures())

    async def api_idea(request):
        s = await asyncio.to_thread(snap)
        out = await asyncio.to_thread(s.idea, request.path_params["ref"])
        return JSONResponse(out) if out else JSONResponse({"error": "no such idea"}, status_code=404)

    async def events(request):
        async def stream():
            yield f"event: hello\ndata: {json.dumps({'version': live.current().version})}\n\n"
            while True:
                ev = live.changed
                if ev is None:
                    await asyncio.sleep(0.2)
                    continue
                try:
                    await asyncio.wait_for(ev.wait(), defaults.SERVE_SSE_PING_S)
                except asyncio.TimeoutError:
                    if await request.is_disconnected():
                        return
                    yield ": ping\n\n"
                    continue
                yield f"event: change\ndata: {json.dumps({'version': live.version, 'kind': live.last_kind})}\n\n"
        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"x-accel-buffering": "no"})

    async def healthz(request):
        return PlainTextResponse("ok")

    @contextlib.asynccontextmanager
    async def lifespan(app):
        task = asyncio.create_task(live.watch())
        yield
        task.cancel()

    routes = [Route("/", index), Route("/api/overview", api_overview), Route("/api/ideas", api_ideas),
              Route("/api/lineage", api_lineage), Route("/api/failures", api_failures),
              Route("/api/idea/{ref:path}", api_idea), Route("/api/events", events), Route("/healthz", healthz),
              Mount("/static", StaticFiles(directory=str(web)), name="static")]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.live = live
    return Guard(app, token, loopback_only_hosts and token is None)


class Guard:
    """ASGI middleware: read-only methods, the token, the Host check, security headers, Server-Timing."""

    def __init__(self, app, token: str | None, check_host: bool):
        self.app, self.token, self.check_host = app, token, check_host

    async def _reply(self, send, status: int, text: str, extra: list | None = None) -> None:
        body = text.encode()
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
            *[(k.encode(), v.encode()) for k, v in HEADERS.items()], *(extra or [])]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        headers = {k.decode().lower(): v.decode(errors="replace") for k, v in scope.get("headers", [])}
        if scope["method"] not in ("GET", "HEAD"):
            return await self._reply(send, 405, "read-only: only GET and HEAD", [(b"allow", b"GET, HEAD")])
        if self.check_host:
            host = headers.get("host", "").rsplit(":", 1)[0] if not headers.get("host", "").startswith("[") \
                else headers.get("host", "").split("]")[0] + "]"
            if not is_loopback(host.strip("[]")):
                return await self._reply(send, 403, "this dashboard answers only to a loopback Host")
        if self.token is not None:
            query = dict(parse_qsl(scope.get("query_string", b"").decode(errors="replace")))
            if "token" in query and hmac.compare_digest(query["token"].encode(), self.token.encode()):
                rest = urlencode({k: v for k, v in query.items() if k != "token"})
                loc = scope["path"] + ("?" + rest if rest else "")
                cookie = f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/"
                return await self._reply(send, 303, "authenticated", [(b"location", loc.encode()),
                                                                       (b"set-cookie", cookie.encode())])
            given = headers.get("authorization", "").removeprefix("Bearer ").strip()
            if not given:
                c = SimpleCookie()
                try:
                    c.load(headers.get("cookie", ""))
                except Exception:  # noqa: BLE001 - a malformed cookie header is just no token
                    pass
                given = c[COOKIE].value if COOKIE in c else ""
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                return await self._reply(send, 401, "a token is required: open the URL with ?token=...",
                                         [(b"www-authenticate", b"Bearer")])

        async def send_wrapped(msg):
            if msg["type"] == "http.response.start":
                hs = [h for h in msg.get("headers", []) if h[0].decode().lower() not in HEADERS]
                hs += [(k.encode(), v.encode()) for k, v in HEADERS.items()]
                hs.append((b"server-timing", f"app;dur={(time.perf_counter() - t0) * 1000:.1f}".encode()))
                msg = dict(msg, headers=hs)
            await send(msg)
        return await self.app(scope, receive, send_wrapped)


def serve(cfg, host: str = defaults.SERVE_HOST, port: int = defaults.SERVE_PORT, token: str | None = None,
          token_file: str | None = None, out=None) -> int:
    """Run the dashboard until interrupted. Prints the URL (with the actual port) once listening."""
    try:
        import uvicorn      # lazy: the [serve] extra
    except ImportError:
        raise ConfigError("serve needs the 'serve' extra: pip install 'autoresearchd[serve]'") from None
    token = resolve_token(host, token, token_file)
    app = build_app(cfg, token)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    (out or sys.stdout).write(f"serving the dashboard on http://{shown}:{bound}/"
                              + (" (token required: append ?token=...)" if token else "") + "\n")
    (out or sys.stdout).flush()
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1, access_log=False, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])
    return 0
