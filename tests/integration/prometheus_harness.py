"""A real Prometheus server for integration tests (Debian package ``prometheus``).

``PrometheusServer`` writes a temporary ``prometheus.yml`` (scrape interval 1 s, the given
targets with optional basic auth, optional rule files and an optional Alertmanager), starts
the real ``prometheus`` binary on a free loopback port with its own TSDB directory, waits
for ``/-/ready`` and answers PromQL through ``/api/v1/query``. Its log goes to a file whose
tail is put into every assertion message, so a CI failure says what Prometheus was doing.

Usage::

    prom = PrometheusServer(tmp_path / "prom", [daemon.url]).start()
    try:
        prom.wait_for_target_up()
        series = prom.query('mlmon_accuracy{slice="all"}')
    finally:
        prom.stop()

The binary is found with ``require_binary("prometheus")`` from ``tests/conftest.py``: a
missing binary skips the test locally and fails it under ``CI=true``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from monitor.localbroker import free_port

from .server_harness import LoggedServer

__all__ = ["PrometheusError", "PrometheusServer", "ScrapeTarget"]


class PrometheusError(AssertionError):
    """Prometheus did something a test did not expect (carries the log tail)."""


@dataclass(frozen=True)
class ScrapeTarget:
    """One scrape target. ``address`` is ``host:port`` (or a URL, see ``from_url``)."""

    address: str
    job: str = "model-monitor"
    metrics_path: str = "/metrics"
    scheme: str = "http"
    basic_auth: tuple[str, str] | None = None  # (username, password)

    @classmethod
    def from_url(
        cls, url: str, job: str = "model-monitor", basic_auth: tuple[str, str] | None = None
    ) -> ScrapeTarget:
        """``http://127.0.0.1:9108`` or ``http://127.0.0.1:9108/metrics`` → target."""
        parts = urllib.parse.urlsplit(url)
        if not parts.scheme or not parts.netloc:
            raise ValueError(f"not a URL: {url!r}")
        path = parts.path if parts.path not in ("", "/") else "/metrics"
        return cls(parts.netloc, job, path, parts.scheme, basic_auth)


def _as_target(target: ScrapeTarget | str) -> ScrapeTarget:
    if isinstance(target, ScrapeTarget):
        return target
    if "://" in target:
        return ScrapeTarget.from_url(target)
    return ScrapeTarget(target)


class PrometheusServer(LoggedServer):
    """The real ``prometheus`` binary on ``127.0.0.1:<free port>``.

    ``targets``: ``ScrapeTarget`` objects, ``host:port`` strings or URLs (the daemon
    harness's ``DaemonProcess.url`` works as is). Targets sharing a ``job`` and the same
    path/scheme/auth are scraped by one job. ``rule_files`` are copied by path into the
    config (evaluated every ``evaluation_interval``); ``alertmanager`` is ``host:port``
    of an Alertmanager to send alerts to.
    """

    name = "prometheus"
    error = PrometheusError

    def __init__(
        self,
        workdir: Path,
        targets: Sequence[ScrapeTarget | str] = (),
        *,
        rule_files: Sequence[Path] = (),
        alertmanager: str | None = None,
        scrape_interval: str = "1s",
        evaluation_interval: str = "1s",
        binary: str | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        super().__init__(workdir, "prometheus.log")
        self.targets = [_as_target(t) for t in targets]
        self.rule_files = [Path(p).resolve() for p in rule_files]
        self.alertmanager = alertmanager
        self.scrape_interval = scrape_interval
        self.evaluation_interval = evaluation_interval
        self.binary = binary
        self.extra_args = list(extra_args)
        self.config_path = workdir / "prometheus.yml"
        self.storage_path = workdir / "data"

    # -- configuration ------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """The ``prometheus.yml`` this server runs with, as data."""
        jobs: dict[tuple[str, str, str, tuple[str, str] | None], list[str]] = {}
        for t in self.targets:
            jobs.setdefault((t.job, t.metrics_path, t.scheme, t.basic_auth), []).append(t.address)
        names = [key[0] for key in jobs]
        scrape_configs = []
        for (job, path, scheme, auth), addresses in jobs.items():
            # Two groups of one job with different settings need distinct job names.
            name = job if names.count(job) == 1 else f"{job}-{len(scrape_configs)}"
            sc: dict[str, Any] = {
                "job_name": name,
                "metrics_path": path,
                "scheme": scheme,
                "scrape_interval": self.scrape_interval,
                "scrape_timeout": self.scrape_interval,
                "static_configs": [{"targets": addresses}],
            }
            if auth is not None:
                sc["basic_auth"] = {"username": auth[0], "password": auth[1]}
            scrape_configs.append(sc)
        cfg: dict[str, Any] = {
            "global": {
                "scrape_interval": self.scrape_interval,
                "evaluation_interval": self.evaluation_interval,
            },
            "scrape_configs": scrape_configs,
        }
        if self.rule_files:
            cfg["rule_files"] = [str(p) for p in self.rule_files]
        if self.alertmanager:
            cfg["alerting"] = {
                "alertmanagers": [
                    {"api_version": "v2", "static_configs": [{"targets": [self.alertmanager]}]}
                ]
            }
        return cfg

    # -- lifecycle ----------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> PrometheusServer:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        binary = self.binary
        if binary is None:
            from conftest import require_binary

            binary = require_binary("prometheus", hint="apt-get install prometheus")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.storage_path.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(self.config(), sort_keys=False), "utf-8")
        self.port = free_port()
        args = [
            binary,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.storage_path}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--web.enable-lifecycle",
            "--storage.tsdb.retention.time=1d",
            "--log.level=info",
            *self.extra_args,
        ]
        self._spawn(args, timeout)
        return self

    def reload(self) -> None:
        """Rewrite the config from the current attributes and ask Prometheus to reload."""
        self.config_path.write_text(yaml.safe_dump(self.config(), sort_keys=False), "utf-8")
        code, body = self._request("/-/reload", method="POST")
        if code != 200:
            raise PrometheusError(f"reload answered {code}: {body!r}\n{self.log_tail()}")

    def __enter__(self) -> PrometheusServer:
        return self.start()

    # -- observation --------------------------------------------------------------------
    def api(self, path: str, **params: str) -> Any:
        """GET ``/api/v1/<path>`` and return its ``data`` (PrometheusError otherwise)."""
        query = urllib.parse.urlencode(params)
        full = f"/api/v1/{path}" + (f"?{query}" if query else "")
        code, body = self._get(full)
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        if code != 200 or not isinstance(doc, dict) or doc.get("status") != "success":
            raise PrometheusError(f"GET {full} answered {code}: {body[:2000]!r}\n{self.log_tail()}")
        return doc["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query. Returns the result as a list of ``{"metric": {...}, "value":
        [ts, "v"]}`` (a scalar or string result becomes one item with empty labels)."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.api("query", **params)
        kind, result = data["resultType"], data["result"]
        if kind in ("vector", "matrix"):
            return list(result)
        return [{"metric": {}, "value": result}]

    def query_range(
        self, expr: str, start: float, end: float, step: str = "1s"
    ) -> list[dict[str, Any]]:
        """Range query: a list of ``{"metric": {...}, "values": [[ts, "v"], ...]}``."""
        data = self.api(
            "query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=step
        )
        return list(data["result"])

    def targets_status(self) -> list[dict[str, Any]]:
        """The active targets (``/api/v1/targets``) with ``health`` and ``lastError``."""
        return list(self.api("targets")["activeTargets"])

    def alerts(self) -> list[dict[str, Any]]:
        """Pending and firing alerts (``/api/v1/alerts``)."""
        return list(self.api("alerts")["alerts"])

    def rules(self) -> list[dict[str, Any]]:
        """Loaded rule groups (``/api/v1/rules``)."""
        return list(self.api("rules")["groups"])

    def wait_for_target_up(self, timeout: float = 30.0, job: str | None = None) -> None:
        """Wait until every configured target (of ``job``, if given) has been scraped
        successfully (``health == "up"``) and ``up == 1`` is queryable for it."""
        last: list[dict[str, Any]] = []
        want = sum(1 for t in self.targets if job is None or t.job == job)
        assert want > 0, "no scrape targets configured"

        def up() -> bool:
            nonlocal last
            self.assert_alive()
            last = [
                t
                for t in self.targets_status()
                if job is None or t["labels"].get("job", "").startswith(job)
            ]
            if len(last) < want or any(t["health"] != "up" for t in last):
                return False
            selector = f'up{{job=~"{job}.*"}}' if job else "up"
            values = self.query(selector)
            return len(values) >= want and all(v["value"][1] == "1" for v in values)

        self.wait_until(
            up,
            timeout,
            lambda: (
                "targets not up: "
                + json.dumps(
                    [{k: t.get(k) for k in ("scrapeUrl", "health", "lastError")} for t in last]
                )
            ),
        )

    def wait_for_series(
        self, expr: str, timeout: float = 30.0, minimum: int = 1
    ) -> list[dict[str, Any]]:
        """Poll ``expr`` until it returns at least ``minimum`` series; return them."""
        result: list[dict[str, Any]] = []

        def enough() -> bool:
            nonlocal result
            self.assert_alive()
            result = self.query(expr)
            return len(result) >= minimum

        self.wait_until(enough, timeout, lambda: f"{expr!r} returned {result}")
        return result

    def assert_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise PrometheusError(
                f"prometheus exited with {self.proc.returncode}\n{self.log_tail()}"
            )
