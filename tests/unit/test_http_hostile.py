"""The HTTP server against hostile clients: slow readers and pipelining clients must never
starve the probes (a liveness probe that times out restarts the pod), and request
smuggling through conflicting lengths or hosts is refused (RFC 9112).

A real server on a loopback port, real sockets; probes must answer within a generous
bound — the failures were probes blocked for the whole write timeout (30 s), so
``PROBE_BOUND_S`` separates them clearly even on a machine at load 10 — a correctness
check, not a benchmark."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import self_signed_cert

from monitor.export.http import HttpLimits, HttpServer, Request, Response

BIG = b"x" * (1 << 20)  # a /metrics page worth a slow reader's while
PROBE_BOUND_S = 5.0


def _server(tls: tuple[str, str] | None = None, body: bytes = BIG, **limits: float) -> HttpServer:
    server = HttpServer(
        "127.0.0.1",
        0,
        lambda _req: Response(200, body),
        lambda: (True, []),
        lambda: {"ok": 1},
        lambda: {"comparisons": []},
        tls=tls,
        limits=HttpLimits(**limits),  # type: ignore[arg-type]
    )
    server.start()
    return server


@pytest.fixture
def server() -> Iterator[HttpServer]:
    s = _server()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    cert, key = self_signed_cert(tmp_path_factory.mktemp("tls"))
    return str(cert), str(key)


def _connect(
    server: HttpServer, context: ssl.SSLContext | None = None, rcvbuf: int | None = None
) -> socket.socket:
    """A client connection; ``rcvbuf``: a small receive window, as a client that reads
    slowly (or never) advertises."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(5)
    sock.connect(("127.0.0.1", server.port))
    if context is not None:
        sock = context.wrap_socket(sock, server_hostname="127.0.0.1")
    return sock


def _answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def _raw(server: HttpServer, request: bytes) -> bytes:
    with _connect(server) as sock:
        sock.sendall(request)
        return _answer(sock)


def _probe_latency(server: HttpServer, context: ssl.SSLContext | None = None) -> float:
    """One /healthz on a new connection, answered 200 within the bound, or the test fails."""
    started = time.monotonic()
    with _connect(server, context) as sock:
        sock.settimeout(PROBE_BOUND_S)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = _answer(sock)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:100]
    return time.monotonic() - started


class _Pipeliners:
    """Clients that pipeline probe requests without ever reading an answer, for as long
    as the test runs: each sends until its own sends block (the server stopped reading
    it) or the server closes it, then opens a new connection and goes on."""

    def __init__(self, server: HttpServer, n: int, context: ssl.SSLContext | None) -> None:
        self.server, self.context = server, context
        self.stop = threading.Event()
        self.connections = 0
        self.held: list[socket.socket] = []
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(n)]

    def _run(self) -> None:
        request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 2000
        while not self.stop.is_set():
            try:
                sock = _connect(self.server, self.context, rcvbuf=4096)
            except OSError:
                continue
            self.connections += 1
            self.held.append(sock)  # never read, closed at the end
            sock.settimeout(None)  # wait as long as the server does not read
            try:
                while not self.stop.is_set():
                    sock.sendall(request)
            except (OSError, ValueError):
                pass  # blocked past the timeout, or closed by the server

    def __enter__(self) -> _Pipeliners:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for s in list(self.held):
            s.close()
        for t in self.threads:
            t.join(timeout=10)


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_pipelining_clients_that_never_read_do_not_block_probes(
    scheme: str, cert: tuple[str, str]
) -> None:
    """Reported: four such connections blocked the four probe threads in their writes for
    write_timeout (30 s); probes timed out for as long."""
    tls = cert if scheme == "https" else None
    server = _server(tls=tls)
    # accepted sockets inherit the listener's send buffer: a small one blocks a writer
    # after a few hundred answers instead of after ~4 MB of them (18 s here)
    server._listen.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    context = ssl.create_default_context(cafile=cert[0]) if tls else None
    try:
        with _Pipeliners(server, 8, context) as attack:
            time.sleep(2.0)  # their answers fill every socket buffer
            latencies = [_probe_latency(server, context) for _ in range(10)]
            assert attack.connections >= 8
        assert max(latencies) < PROBE_BOUND_S, latencies
    finally:
        server.stop()


@pytest.mark.parametrize(("scheme", "n_conns"), [("http", 300), ("https", 60)])
def test_hundreds_of_unread_scrapes_do_not_reset_probes(
    scheme: str, n_conns: int, cert: tuple[str, str]
) -> None:
    """Reported: 300 unread /metrics answers held every connection slot (256) with a
    blocked writer, and new probe connections were reset for ~28 s; over HTTPS the
    writers blocked the probe threads too."""
    tls = cert if scheme == "https" else None
    server = _server(tls=tls)
    context = ssl.create_default_context(cafile=cert[0]) if tls else None
    held = []
    try:
        for _ in range(n_conns):
            sock = _connect(server, context)
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 4)
            held.append(sock)
        time.sleep(0.5)  # the answers are being written, and stall
        latencies = [_probe_latency(server, context) for _ in range(20)]
        assert max(latencies) < PROBE_BOUND_S, latencies
    finally:
        for s in held:
            s.close()
        server.stop()


def test_a_stalled_writer_is_closed_after_write_timeout() -> None:
    body = b"y" * (64 << 20)  # more than any socket buffers hold
    server = _server(body=body, write_timeout=1.0)
    try:
        with _connect(server) as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            time.sleep(2.5)  # never read: the server gives up on the answer
            sock.settimeout(5)
            got = _answer(sock)  # what was buffered, then the close
        assert got.startswith(b"HTTP/1.1 200 ") and len(got) < len(body), len(got)
        _probe_latency(server)
    finally:
        server.stop()


def test_pipelined_requests_are_answered_in_order_up_to_the_cap(server: HttpServer) -> None:
    """Pipelining works (answers in request order), but one connection gets at most
    ``max_pipeline`` answers in a row without waiting: the last one closes it."""
    cap = server.limits.max_pipeline
    with _connect(server) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * (cap + 5))
        got = _answer(sock)
    assert got.count(b"HTTP/1.1 200 OK") == cap + 1, got.count(b"HTTP/1.1 200 OK")
    assert got.count(b"Connection: close") == 1 and got.rstrip().endswith(b"ok")
    # a client that waits for each answer is never capped
    with _connect(server) as sock:
        for _ in range(cap + 5):
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = b""
            while not answer.endswith(b"\r\n\r\nok\n"):
                answer += sock.recv(65536)
            assert answer.startswith(b"HTTP/1.1 200 ") and b"Connection: close" not in answer


@pytest.mark.parametrize(
    "request_bytes",
    [
        # the reported smuggle: the last length won and the body became a second request
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 39\r\nContent-Length: 0\r\n\r\n"
        b"GET /api/v1/status HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0, 0\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length : 0\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\n\r\n",  # HTTP/1.1 without Host
        b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        b"GET /healthz HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n folded\r\n\r\n",  # obs-fold
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad\x00Name: 1\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: a\r\nAuthorization: b\r\n\r\n",
    ],
)
def test_ambiguous_requests_are_refused_and_the_connection_closed(
    server: HttpServer, request_bytes: bytes
) -> None:
    got = _raw(server, request_bytes)
    assert got.startswith(b"HTTP/1.1 400 "), got[:200]
    assert got.count(b"HTTP/1.1 ") == 1, got  # nothing after it was served as a request
    assert b"Connection: close" in got


def test_well_formed_requests_still_pass(server: HttpServer) -> None:
    ok = [
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        b"GET /healthz HTTP/1.0\r\n\r\n",  # HTTP/1.0 needs no Host
        b"HEAD /healthz HTTP/1.1\r\nhost: x\r\nConnection: close\r\n\r\n",
    ]
    for req in ok:
        got = _raw(server, req)
        assert got.startswith(b"HTTP/1.1 200 "), (req, got[:200])


def test_routes_still_see_the_request(tmp_path: Path) -> None:
    seen: list[Request] = []

    def route(req: Request) -> Response:
        seen.append(req)
        return Response(200, b"hi")

    server = HttpServer(
        "127.0.0.1", 0, route, lambda: (True, []), dict, lambda: {}, routes={"/x": route}
    )
    server.start()
    try:
        got = _raw(server, b"GET /x?a=1 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 200 ") and got.endswith(b"hi")
        assert seen[0].path == "/x" and seen[0].query == "a=1" and seen[0].headers["host"] == "h"
    finally:
        server.stop()
