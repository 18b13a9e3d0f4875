"""HTTP endpoints: /metrics, /healthz, /readyz, /api/v1/status, /api/v1/comparisons,
/api/v1/drift, /api/v1/slos.

Every handler reads what the daemon published; nothing here computes statistics or
touches engine state. Requests are routed by a dict of path -> handler, so a new endpoint
is one entry (``routes=``).

Why not ``ThreadingHTTPServer``: it performs the TLS handshake inside ``accept()`` on its
only serving thread (one silent client froze every probe) and starts one thread per
connection, forever (500 idle connections -> 500 threads). Here, in the spirit of
event-driven servers (Kegel, "The C10K problem"):

- one *loop* thread accepts, drives TLS handshakes and reads request heads without
  blocking (a selector); an idle or slow connection costs a file descriptor, never a
  thread: silent ones are closed after ``idle_timeout``, a handshake or request head that
  has started must complete within ``request_timeout``;
- probes (/healthz, /readyz) and small error answers are written by a *front* pool, so
  they never queue behind scrapes;
- every other endpoint runs on a bounded *worker* pool (``workers`` threads, a bounded
  queue; beyond it 503 + Retry-After);
- at most ``max_connections`` connections are kept; the oldest idle one is closed first.
"""

from __future__ import annotations

import base64
import contextlib
import hmac
import logging
import re
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["HttpLimits", "HttpServer", "Request", "Response", "Route", "json_response"]

log = logging.getLogger("monitor.http")

PROBES = frozenset({"/healthz", "/readyz"})
_FRONT_THREADS = 4  # probes and error answers
_MAX_HEAD = 64 * 1024
_TEXT = "text/plain; charset=utf-8"


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: str
    headers: Mapping[str, str]  # names lower-cased

    def accepts_gzip(self) -> bool:
        """Whether Accept-Encoding lists gzip with a non-zero quality (RFC 9110 §12.5.3)."""
        for part in self.headers.get("accept-encoding", "").split(","):
            coding, _, params = part.strip().partition(";")
            if coding.strip().lower() in ("gzip", "*"):
                q = params.strip().removeprefix("q=").strip()
                try:
                    return not q or float(q) > 0
                except ValueError:
                    return True
        return False


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes
    content_type: str = _TEXT
    headers: tuple[tuple[str, str], ...] = ()


Route = Callable[[Request], Response]


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(
        status, orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY), "application/json"
    )


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """Bounds of the server (config ``[http]``; docs/operations.md)."""

    max_connections: int = 256
    workers: int = 4
    max_queue: int = 256
    idle_timeout: float = 90.0
    request_timeout: float = 10.0
    write_timeout: float = 30.0
    # answers in a row to requests a client sent before reading the previous answer; the
    # last one closes the connection, so one client cannot keep the server busy forever
    max_pipeline: int = 32


@dataclass(eq=False, slots=True)
class _Conn:
    sock: socket.socket
    handshaken: bool = True
    buf: bytearray = field(default_factory=bytearray)
    out: list[memoryview] = field(default_factory=list)  # the answer not yet written
    keep: bool = False  # keep the connection after the answer
    events: int = 0  # what the selector watches it for (0: not registered)
    pipelined: int = 0  # answers in a row to requests that were already waiting


class HttpServer:
    def __init__(
        self,
        host: str,
        port: int,
        registry: CollectorRegistry | Callable[[Request], Response],
        readiness: Callable[[], tuple[bool, list[str]]],
        status: Callable[[], dict[str, Any]],
        comparisons: Callable[[], dict[str, Any]],
        comparison: Callable[[str], dict[str, Any] | None] | None = None,
        drift: Callable[[], dict[str, Any]] | None = None,
        basic_auth: tuple[str, str] | None = None,
        auth_probes: bool = False,
        tls: tuple[str, str] | None = None,
        slos: Callable[[], dict[str, Any]] | None = None,
        routes: Mapping[str, Route] | None = None,
        limits: HttpLimits = HttpLimits(),
        actions: Mapping[str, Route] | None = None,
    ) -> None:
        """``registry`` is either a registry rendered on every scrape or the /metrics
        route itself (the daemon's cached page); ``basic_auth`` = (user, password) protects
        every endpoint (the probes only with ``auth_probes``); ``tls`` = (certfile,
        keyfile) serves HTTPS; ``routes`` adds or replaces endpoints by exact path.

        ``actions`` are the endpoints that change something (``POST``, arguments in the
        query, no body). They answer only with basic auth configured and given, and only
        to a request carrying ``X-Monitor-Request`` (a header a browser sends cross-site
        only after a CORS preflight this server never grants: no request forgery)."""
        self.limits = limits
        self._auth_probes = auth_probes
        self._expected: bytes | None = None
        if basic_auth is not None:
            self._expected = base64.b64encode(f"{basic_auth[0]}:{basic_auth[1]}".encode())

        def ready(_: Request) -> Response:
            ok, reasons = readiness()
            body = b"ready\n" if ok else ("\n".join(reasons) + "\n").encode()
            return Response(200 if ok else 503, body)

        if isinstance(registry, CollectorRegistry):
            reg = registry

            def metrics(_: Request) -> Response:
                return Response(200, generate_latest(reg), CONTENT_TYPE_LATEST)

        else:
            metrics = registry
        self.routes: dict[str, Route] = {
            "/metrics": metrics,
            "/healthz": lambda _: Response(200, b"ok\n"),
            "/readyz": ready,
            "/api/v1/status": lambda _: json_response(status()),
            "/api/v1/comparisons": lambda _: json_response(comparisons()),
        }
        if drift is not None:
            self.routes["/api/v1/drift"] = lambda _: json_response(drift())
        if slos is not None:
            self.routes["/api/v1/slos"] = lambda _: json_response(slos())
        self.prefix_routes: dict[str, Route] = {}
        if comparison is not None:

            def one(req: Request) -> Response:
                name = req.path.removeprefix("/api/v1/comparisons/")
                item = comparison(name)
                if item is None:
                    return json_response({"error": f"no comparison named {name!r}"}, 404)
                return json_response(item)

            self.prefix_routes["/api/v1/comparisons/"] = one
        self.routes.update(routes or {})
        self.actions: dict[str, Route] = dict(actions or {})

        self._listen = socket.create_server((host, port), reuse_port=False)
        self._listen.setblocking(False)
        self.scheme = "http"
        self._tls: ssl.SSLContext | None = None
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.load_cert_chain(tls[0], tls[1])
            self._tls = context
            self.scheme = "https"
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._answered: list[_Conn] = []  # answers computed by a pool, to be written
        self._idle: dict[_Conn, float] = {}  # reading a request: its deadline
        self._writing: dict[_Conn, float] = {}  # writing an answer: its deadline
        self._busy = 0  # connections whose answer a pool thread is computing
        self._queued = 0  # requests waiting for or running on a worker
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._front = ThreadPoolExecutor(_FRONT_THREADS, thread_name_prefix="http-front")
        self._workers = ThreadPoolExecutor(limits.workers, thread_name_prefix="http-worker")
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._listen.getsockname()[1])

    @property
    def url(self) -> str:
        host = self._listen.getsockname()[0]
        return f"{self.scheme}://{host}:{self.port}"

    def start(self) -> None:
        self._selector.register(self._listen, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread = threading.Thread(target=self._loop, name="http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake()
        if self._thread:
            self._thread.join(timeout=5)
        self._front.shutdown(wait=False, cancel_futures=True)
        self._workers.shutdown(wait=False, cancel_futures=True)
        for conn in [*self._idle, *self._writing]:
            _close(conn)
        self._idle.clear()
        self._writing.clear()
        self._listen.close()
        self._wake_r.close()
        self._wake_w.close()

    # -- the loop thread: every socket operation, never blocking ---------------------
    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _loop(self) -> None:
        last_sweep = 0.0
        while not self._stopping.is_set():
            writable = []
            for key, _ in self._selector.select(0.1):
                if key.data == "accept":
                    self._accept()
                elif key.data == "wake":
                    with contextlib.suppress(OSError):
                        while self._wake_r.recv(4096):
                            pass
                elif key.data in self._writing:
                    writable.append(key.data)
                else:
                    self._readable(key.data)
            with self._lock:
                answered, self._answered = self._answered, []
            for conn in answered:  # new answers first: a probe's is one chunk
                self._writing[conn] = time.monotonic() + self.limits.write_timeout
                self._write(conn)
            for conn in writable:
                if conn in self._writing:
                    self._write(conn)
            now = time.monotonic()
            if now - last_sweep >= 0.1:
                last_sweep = now
                for table in (self._idle, self._writing):
                    for conn in [c for c, deadline in table.items() if deadline <= now]:
                        self._drop(conn)
        for conn in [*self._idle, *self._writing]:
            self._drop(conn)
        self._selector.close()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listen.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:  # EMFILE and friends: keep serving what we have
                log.warning("http: accept failed: %s", err)
                return
            with self._lock:
                busy = self._busy
            if len(self._idle) + len(self._writing) + busy >= self.limits.max_connections:
                # make room: the oldest idle connection, else the answer started longest
                # ago (a slow reader's), never the new one — a probe must get in
                table = self._idle or self._writing
                if not table:
                    sock.close()  # every connection is being answered: refuse this one
                    continue
                self._drop(min(table.items(), key=lambda item: item[1])[0])
            sock.setblocking(False)
            conn = _Conn(sock)
            if self._tls is not None:
                # the handshake is driven by the selector below, never blocking a thread
                conn.sock = self._tls.wrap_socket(
                    sock, server_side=True, do_handshake_on_connect=False
                )
                conn.handshaken = False
            self._park(conn)

    def _watch(self, conn: _Conn, events: int) -> bool:
        """Have the selector watch ``conn`` for ``events`` (0: not at all); False when the
        socket is gone."""
        if events == conn.events:
            return True
        try:
            if not events:
                self._selector.unregister(conn.sock)
            elif conn.events:
                self._selector.modify(conn.sock, events, conn)
            else:
                self._selector.register(conn.sock, events, conn)
        except (KeyError, ValueError, OSError):
            conn.events = 0
            return False
        conn.events = events
        return True

    def _park(self, conn: _Conn) -> None:
        """Wait (on the selector, not a thread) for the connection's next request; one
        already buffered (pipelined) is dispatched at once."""
        if b"\r\n\r\n" in conn.buf:
            conn.pipelined += 1
            self._watch(conn, 0)
            self._dispatch(conn)
            return
        conn.pipelined = 0
        timeout = self.limits.request_timeout if conn.buf else self.limits.idle_timeout
        self._idle[conn] = time.monotonic() + timeout
        if not self._watch(conn, selectors.EVENT_READ):
            self._drop(conn)

    def _drop(self, conn: _Conn) -> None:
        self._idle.pop(conn, None)
        self._writing.pop(conn, None)
        self._watch(conn, 0)
        _close(conn)

    def _readable(self, conn: _Conn) -> None:
        """Advance the handshake and read what is there, without blocking; a complete
        request head is dispatched. The first byte starts the ``request_timeout`` clock,
        so a slow sender is bounded as tightly as a silent one."""
        first = not conn.buf and conn.handshaken
        try:
            if not conn.handshaken:
                assert isinstance(conn.sock, ssl.SSLSocket)
                conn.sock.do_handshake()
                conn.handshaken = True
            while len(conn.buf) <= _MAX_HEAD:
                chunk = conn.sock.recv(65536)
                if not chunk:
                    self._drop(conn)
                    return
                conn.buf += chunk
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            pass
        except (OSError, ValueError):
            self._drop(conn)
            return
        if b"\r\n\r\n" in conn.buf or len(conn.buf) > _MAX_HEAD:
            self._idle.pop(conn, None)
            self._watch(conn, 0)
            self._dispatch(conn)
        elif first or not conn.handshaken:
            deadline = time.monotonic() + self.limits.request_timeout
            self._idle[conn] = min(self._idle.get(conn, deadline), deadline)

    def _dispatch(self, conn: _Conn) -> None:
        """A complete request head: probes and errors to the front pool, everything else
        to the bounded worker pool. The pools only compute answers; this thread writes
        them, so no client can hold a thread by not reading."""
        with self._lock:
            self._busy += 1
        req, keep, error = _parse_head(conn)
        if req is None:
            self._submit(self._front, conn, None, Response(error, b""), False)
            return
        if conn.pipelined >= self.limits.max_pipeline:
            keep = False  # enough answered without the client reading: this one closes
        probe = req.path in PROBES
        if not self._authorized(req, probe):
            unauthorized = Response(
                401, b"", headers=(("WWW-Authenticate", 'Basic realm="model-monitor"'),)
            )
            self._submit(self._front, conn, req, unauthorized, keep)
            return
        route = self._route(req)
        if isinstance(route, Response):  # refused: a method the path does not take
            self._submit(self._front, conn, req, route, False)
            return
        if route is None or probe:
            resp = Response(404, b"not found\n") if route is None else route
            self._submit(self._front, conn, req, resp, keep)
            return
        with self._lock:
            full = self._queued >= self.limits.max_queue
            if not full:
                self._queued += 1
        if full:
            busy = Response(503, b"busy, retry\n", headers=(("Retry-After", "1"),))
            self._submit(self._front, conn, req, busy, False)
            return
        self._submit(self._workers, conn, req, route, keep, queued=True)

    def _submit(
        self,
        pool: ThreadPoolExecutor,
        conn: _Conn,
        req: Request | None,
        resp: Response | Route,
        keep: bool,
        queued: bool = False,
    ) -> None:
        try:
            pool.submit(self._work, conn, req, resp, keep, queued)
        except RuntimeError:  # shutting down
            with self._lock:
                self._busy -= 1
                if queued:
                    self._queued -= 1
            _close(conn)

    def _write(self, conn: _Conn) -> None:
        """Send one chunk of the answer (the rest when the selector says the socket is
        writable again: every writer gets a turn per round, so a big answer to a fast
        reader delays a probe's by one chunk at most). A finished answer parks the
        connection for its next request, or closes it."""
        try:
            if conn.out:
                # a TLS write that wants to be retried must be retried with the same bytes
                sent = conn.sock.send(conn.out[0][:_WRITE_CHUNK])
                if sent < len(conn.out[0]):
                    conn.out[0] = conn.out[0][sent:]
                else:
                    conn.out.pop(0)
        except (BlockingIOError, ssl.SSLWantWriteError):
            pass
        except ssl.SSLWantReadError:  # the TLS layer must read first (rare)
            if not self._watch(conn, selectors.EVENT_READ | selectors.EVENT_WRITE):
                self._drop(conn)
            return
        except (OSError, ValueError):
            self._drop(conn)
            return
        if conn.out:
            if not self._watch(conn, selectors.EVENT_WRITE):
                self._drop(conn)
            return
        self._writing.pop(conn, None)
        if conn.keep and not self._stopping.is_set():
            self._park(conn)
        else:
            self._drop(conn)

    # -- pool threads: compute the answer, hand it to the loop ---------------------------
    def _work(
        self,
        conn: _Conn,
        req: Request | None,
        resp: Response | Route,
        keep: bool,
        queued: bool,
    ) -> None:
        try:
            if not isinstance(resp, Response):
                assert req is not None
                resp = _call(resp, req)
        finally:
            if queued:
                with self._lock:
                    self._queued -= 1
        try:
            head = _head(resp, keep)
        except Exception:  # a malformed response must still release the connection
            log.exception("http: answering %s failed", req.path if req else "?")
            head, resp, keep = _head(Response(500, b""), False), Response(500, b""), False
        body = b"" if req is not None and req.method == "HEAD" else resp.body
        if len(body) < 65536:  # small answers go out in one segment
            conn.out = [memoryview(head + body)]
        else:  # a large body is sent from the (shared, cached) bytes, never copied
            conn.out = [memoryview(head), memoryview(body)]
        conn.keep = keep
        with self._lock:
            self._busy -= 1
            self._answered.append(conn)
        self._wake()

    def _route(self, req: Request) -> Route | Response | None:
        """The handler of ``req``, or the answer refusing it (an action)."""
        path = req.path
        if (req.method == "POST") != (path in self.actions):
            return Response(405, b"method not allowed\n", headers=(("Allow", _allowed(req)),))
        if req.method == "POST":
            if self._expected is None:
                return Response(403, b"actions need http.basic_auth_user and a password\n")
            if "x-monitor-request" not in req.headers:
                return Response(403, b"actions need the X-Monitor-Request header\n")
            return self.actions[path]
        route = self.routes.get(path)
        if route is None:
            for prefix, handler in self.prefix_routes.items():
                if path.startswith(prefix):
                    return handler
        return route

    def _authorized(self, req: Request, probe: bool) -> bool:
        if self._expected is None or (probe and not self._auth_probes):
            return True
        scheme, _, token = req.headers.get("authorization", "").strip().partition(" ")
        # the scheme word is case-insensitive (RFC 7235 §2.1)
        return scheme.lower() == "basic" and hmac.compare_digest(
            token.strip().encode(), self._expected
        )


_WRITE_CHUNK = 256 * 1024
# a field name is a token (RFC 9110 §5.6.2): no whitespace, no separators, no controls
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
# fields that say how to read the message or who sends it: one occurrence at most, or a
# server and a proxy in front of it may read two different requests (RFC 9112 §6.3, §3.2)
_SINGLE = frozenset({"content-length", "transfer-encoding", "host", "authorization"})


def _allowed(req: Request) -> str:
    return "GET, HEAD" if req.method == "POST" else "POST"


def _head(resp: Response, keep: bool) -> bytes:
    lines = [
        f"HTTP/1.1 {resp.status} {HTTPStatus(resp.status).phrase}",
        f"Content-Type: {resp.content_type}",
        f"Content-Length: {len(resp.body)}",
        *(f"{k}: {v}" for k, v in resp.headers),
    ]
    if not keep:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _parse_head(conn: _Conn) -> tuple[Request | None, bool, int]:
    """One request head (RFC 9112 §2-3) off the connection's buffer: (request,
    keep-alive, error status). Bodies are not accepted (GET, HEAD, bodiless POST), and anything a
    proxy in front could read differently — repeated or listed lengths, a transfer
    coding, a missing or repeated Host, folded or malformed fields — is refused with 400
    and the connection closed, so no byte after it is ever read as a request."""
    if b"\r\n\r\n" not in conn.buf:
        return None, False, 431
    head, _, rest = bytes(conn.buf).partition(b"\r\n\r\n")
    conn.buf = bytearray(rest)
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0") or not _TOKEN.match(parts[0]):
        return None, False, 400
    method, target, version = parts
    if not target.startswith("/") or any(c in target for c in "\r\n\t\x00"):
        return None, False, 400
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not _TOKEN.match(name) or "\n" in value or "\r" in value:
            return None, False, 400  # also obs-fold: a line that starts with whitespace
        name = name.lower()
        if name in headers and name in _SINGLE:
            return None, False, 400
        headers[name] = value.strip(" \t")
    if version == "HTTP/1.1" and "host" not in headers:
        return None, False, 400
    if method not in ("GET", "HEAD", "POST"):
        return None, False, 405
    if headers.get("content-length", "0") != "0" or "transfer-encoding" in headers:
        return None, False, 400  # a body: actions take their arguments in the query
    connection = headers.get("connection", "").lower()
    keep = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    path, _, query = target.partition("?")
    return Request(method, path, query, headers), keep, 0


def _call(route: Route, req: Request) -> Response:
    try:
        return route(req)
    except Exception as err:  # a broken view must not kill the server
        log.exception("http: %s failed", req.path)
        return Response(500, f"internal error: {err}\n".encode())


def _close(conn: _Conn) -> None:
    with contextlib.suppress(OSError):
        conn.sock.close()
