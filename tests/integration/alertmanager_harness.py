"""A real Alertmanager for integration tests (Debian package ``prometheus-alertmanager``).

``AlertmanagerServer`` writes a small ``alertmanager.yml`` (one route, optionally a webhook
receiver with ``send_resolved`` so a test can watch Alertmanager's own notifications),
starts the real binary on a free loopback port with clustering disabled and its own
storage directory, waits for ``/-/ready`` and reads alerts through the v2 API. ``stop`` and
``start`` again (``restart``) keep the port, as a real Alertmanager restart would. Its log
goes to a file whose tail is put into assertion messages.

Note (Alertmanager API v2): ``GET /api/v2/alerts`` lists only alerts whose ``endsAt`` is
still in the future — a resolved alert is simply absent — and Alertmanager keeps alerts in
memory only: after a restart it knows nothing until senders re-send.

Usage::

    am = AlertmanagerServer(tmp_path / "am", webhook_url=hook.url).start()
    try:
        am.wait_for_alert(alertname="ModelSloBreached", slo="fraud-accuracy")
    finally:
        am.stop()
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from monitor.localbroker import free_port

from .server_harness import LoggedServer

__all__ = ["AlertmanagerError", "AlertmanagerServer", "SenderProxy"]


class AlertmanagerError(AssertionError):
    """Alertmanager did something a test did not expect (carries the log tail)."""


class AlertmanagerServer(LoggedServer):
    name = "alertmanager"
    error = AlertmanagerError

    def __init__(
        self,
        workdir: Path,
        *,
        webhook_url: str | None = None,
        binary: str | None = None,
        group_by: tuple[str, ...] = ("alertname", "slo"),
    ) -> None:
        super().__init__(workdir, "alertmanager.log")
        self.webhook_url = webhook_url
        self.binary = binary
        self.group_by = group_by
        self.config_path = workdir / "alertmanager.yml"
        self.storage_path = workdir / "data"

    # -- configuration ------------------------------------------------------------------
    def config_text(self) -> str:
        """The configuration as YAML (JSON is YAML; no YAML library needed)."""
        receiver: dict[str, Any] = {"name": "test"}
        if self.webhook_url:
            receiver["webhook_configs"] = [{"url": self.webhook_url, "send_resolved": True}]
        cfg = {
            "route": {
                "receiver": "test",
                "group_by": list(self.group_by),
                "group_wait": "1s",
                "group_interval": "1s",
                "repeat_interval": "1h",
            },
            "receivers": [receiver],
        }
        return json.dumps(cfg, indent=2) + "\n"

    @property
    def address(self) -> str:
        """``host:port`` (what Prometheus's alerting config wants)."""
        return self.url.removeprefix("http://")

    # -- lifecycle ----------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> AlertmanagerServer:
        assert not self.running(), "already running"
        binary = self.binary
        if binary is None:
            from conftest import require_binary

            binary = require_binary(
                "prometheus-alertmanager", hint="apt-get install prometheus-alertmanager"
            )
            self.binary = binary
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.storage_path.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.config_text(), "utf-8")
        if self.port is None:
            self.port = free_port()
        args = [
            binary,
            f"--config.file={self.config_path}",
            f"--storage.path={self.storage_path}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--cluster.listen-address=",  # no gossip port: a single, isolated instance
            "--log.level=info",
        ]
        self._spawn(args, timeout)
        return self

    def restart(self, timeout: float = 30.0) -> AlertmanagerServer:
        self.stop()
        return self.start(timeout)

    def __enter__(self) -> AlertmanagerServer:
        return self.start()

    def alerts(self, active: bool = True, **labels: str) -> list[dict[str, Any]]:
        """``GET /api/v2/alerts`` (alerts not yet ended), filtered by exact label values."""
        params = [("active", "true" if active else "false")]
        params += [("filter", f'{k}="{v}"') for k, v in labels.items()]
        code, body = self._get("/api/v2/alerts?" + urllib.parse.urlencode(params))
        if code != 200:
            raise AlertmanagerError(f"GET /api/v2/alerts answered {code}: {body[:500]!r}")
        return list(json.loads(body))

    def wait_for_alert(self, timeout: float = 30.0, **labels: str) -> dict[str, Any]:
        """Wait until exactly one alert with these labels is active; return it."""
        found: list[dict[str, Any]] = []

        def present() -> bool:
            nonlocal found
            found = self.alerts(**labels)
            return len(found) == 1

        self.wait_until(present, timeout, lambda: f"alerts matching {labels}: {found}")
        return found[0]

    def wait_for_absent(self, timeout: float = 30.0, **labels: str) -> None:
        """Wait until no alert with these labels is active (resolved or never sent)."""
        found: list[dict[str, Any]] = []

        def absent() -> bool:
            nonlocal found
            found = self.alerts(**labels)
            return not found

        self.wait_until(absent, timeout, lambda: f"still active: {found}")


class SenderProxy:
    """Stands in front of Alertmanager to tell its senders apart: a sender configured
    with ``url_for(name)`` posts to ``/<name>/api/v2/alerts``; each post is recorded as
    (name, ``time.monotonic()`` once its whole body has arrived) and passed on to
    Alertmanager, whose answer goes back to the sender."""

    def __init__(self, am: AlertmanagerServer) -> None:
        self.posts: list[tuple[str, float]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                name, _, rest = self.path.lstrip("/").partition("/")
                proxy.posts.append((name, time.monotonic()))
                request = urllib.request.Request(
                    f"{am.url}/{rest}", data=body, method="POST",
                    headers={"Content-Type": "application/json"},
                )  # fmt: skip
                try:
                    with urllib.request.urlopen(request, timeout=10) as resp:
                        code, answer = resp.status, resp.read()
                except urllib.error.HTTPError as err:
                    code, answer = err.code, err.read()
                except OSError:
                    code, answer = 502, b"alertmanager unreachable"
                self.send_response(code)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url_for(self, name: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/{name}"

    def posts_by(self, name: str, since: float = float("-inf")) -> int:
        """How many posts ``name`` made that arrived at ``since`` (monotonic) or later."""
        return sum(1 for who, at in list(self.posts) if who == name and at >= since)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
