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
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from monitor.localbroker import free_port

__all__ = ["AlertmanagerError", "AlertmanagerServer"]


class AlertmanagerError(AssertionError):
    """Alertmanager did something a test did not expect (carries the log tail)."""


class AlertmanagerServer:
    def __init__(
        self,
        workdir: Path,
        *,
        webhook_url: str | None = None,
        binary: str | None = None,
        group_by: tuple[str, ...] = ("alertname", "slo"),
    ) -> None:
        self.workdir = workdir
        self.webhook_url = webhook_url
        self.binary = binary
        self.group_by = group_by
        self.config_path = workdir / "alertmanager.yml"
        self.storage_path = workdir / "data"
        self.log_path = workdir / "alertmanager.log"
        self.port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None

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
    def url(self) -> str:
        assert self.port is not None, "alertmanager not started"
        return f"http://127.0.0.1:{self.port}"

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
        with self.log_path.open("ab") as log:
            log.write(f"\n===== {' '.join(args)} =====\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AlertmanagerError(
                    f"alertmanager exited with {self.proc.returncode} during startup\n"
                    f"{self.log_tail()}"
                )
            try:
                code, _ = self._get("/-/ready", timeout=1.0)
                if code == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise AlertmanagerError(f"alertmanager not ready within {timeout}s\n{self.log_tail()}")

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, then SIGKILL if it does not exit within ``timeout``."""
        if not self.running():
            return
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def restart(self, timeout: float = 30.0) -> AlertmanagerServer:
        self.stop()
        return self.start(timeout)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __enter__(self) -> AlertmanagerServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- observation --------------------------------------------------------------------
    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text("utf-8", "replace")
        except FileNotFoundError:
            return "(no alertmanager log)"
        tail = "\n".join(text.splitlines()[-lines:])
        return f"--- alertmanager log tail ({self.log_path}) ---\n{tail}"

    def _get(self, path: str, timeout: float = 10.0) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    def alerts(self, active: bool = True, **labels: str) -> list[dict[str, Any]]:
        """``GET /api/v2/alerts`` (alerts not yet ended), filtered by exact label values."""
        params = [("active", "true" if active else "false")]
        params += [("filter", f'{k}="{v}"') for k, v in labels.items()]
        code, body = self._get("/api/v2/alerts?" + urllib.parse.urlencode(params))
        if code != 200:
            raise AlertmanagerError(f"GET /api/v2/alerts answered {code}: {body[:500]!r}")
        return list(json.loads(body))

    def wait_until(
        self,
        predicate: Callable[[], bool],
        timeout: float,
        message: Callable[[], str] | str = "condition",
        interval: float = 0.25,
    ) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if predicate():
                return
            if time.monotonic() >= deadline:
                msg = message() if callable(message) else message
                raise AlertmanagerError(
                    f"timed out after {timeout}s waiting: {msg}\n{self.log_tail()}"
                )
            time.sleep(interval)

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
