"""HTTP endpoints: /metrics, /healthz, /readyz, /api/v1/status, /api/v1/comparisons,
/api/v1/drift, /api/v1/slos.

A stdlib ThreadingHTTPServer: every handler reads the latest ``Published`` and
renders it; nothing here computes statistics or touches engine state.
"""

from __future__ import annotations

import base64
import hmac
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["HttpServer"]


class HttpServer:
    def __init__(
        self,
        host: str,
        port: int,
        registry: CollectorRegistry,
        readiness: Callable[[], tuple[bool, list[str]]],
        status: Callable[[], dict[str, Any]],
        comparisons: Callable[[], dict[str, Any]],
        comparison: Callable[[str], dict[str, Any] | None] | None = None,
        drift: Callable[[], dict[str, Any]] | None = None,
        basic_auth: tuple[str, str] | None = None,
        auth_probes: bool = False,
        tls: tuple[str, str] | None = None,
        slos: Callable[[], dict[str, Any]] | None = None,
        page: Callable[[], bytes] | None = None,
    ) -> None:
        """``basic_auth`` = (user, password) protects every endpoint (the probes only with
        ``auth_probes``); ``tls`` = (certfile, keyfile) serves HTTPS."""
        server = self
        expected = None
        if basic_auth is not None:
            token = base64.b64encode(f"{basic_auth[0]}:{basic_auth[1]}".encode()).decode()
            expected = f"Basic {token}"

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return  # access logs are noise for a scrape target

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                probe = path in ("/healthz", "/readyz")
                if expected is not None and (auth_probes or not probe):
                    given = self.headers.get("Authorization", "")
                    if not hmac.compare_digest(given.encode(), expected.encode()):
                        self.send_response(401)
                        self.send_header("WWW-Authenticate", 'Basic realm="model-monitor"')
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                try:
                    if path == "/metrics":
                        self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
                    elif path == "/healthz":
                        self._send(200, b"ok\n", "text/plain; charset=utf-8")
                    elif path == "/readyz":
                        ok, reasons = readiness()
                        body = b"ready\n" if ok else ("\n".join(reasons) + "\n").encode()
                        self._send(200 if ok else 503, body, "text/plain; charset=utf-8")
                    elif path == "/" and page is not None:
                        self._send(200, page(), "text/html; charset=utf-8")
                    elif path == "/api/v1/status":
                        self._json(status())
                    elif path == "/api/v1/drift" and drift is not None:
                        self._json(drift())
                    elif path == "/api/v1/slos" and slos is not None:
                        self._json(slos())
                    elif path == "/api/v1/comparisons":
                        self._json(comparisons())
                    elif path.startswith("/api/v1/comparisons/") and comparison is not None:
                        name = path.removeprefix("/api/v1/comparisons/")
                        item = comparison(name)
                        if item is None:
                            body = orjson.dumps({"error": f"no comparison named {name!r}"})
                            self._send(404, body, "application/json")
                        else:
                            self._json(item)
                    else:
                        self._send(404, b"not found\n", "text/plain; charset=utf-8")
                except Exception as err:  # a broken view must not kill the server
                    self._send(500, f"internal error: {err}\n".encode(), "text/plain")

            def _json(self, obj: dict[str, Any]) -> None:
                self._send(
                    200, orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY), "application/json"
                )

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._httpd = ThreadingHTTPServer((host, port), Handler)
        self._httpd.daemon_threads = True
        self.scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.load_cert_chain(tls[0], tls[1])
            self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
            self.scheme = "https"
        self._thread: threading.Thread | None = None
        del server

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        host = self._httpd.server_address[0]
        return f"{self.scheme}://{host}:{self.port}"

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            name="http",
            kwargs={"poll_interval": 0.2},
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread:
            self._thread.join(timeout=5)
