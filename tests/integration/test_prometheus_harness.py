"""The Prometheus harness itself: a real Prometheus scrapes the monitor's HTTP server with
and without basic auth, and answers PromQL through the harness."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Gauge

from monitor.export.http import HttpServer

from .prometheus_harness import PrometheusServer, ScrapeTarget

pytestmark = pytest.mark.integration


def test_scrapes_with_basic_auth_and_reports_wrong_credentials(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    Gauge("mlmon_harness_probe", "a probe series", ["kind"], registry=registry).labels(
        kind="x"
    ).set(42.5)
    server = HttpServer(
        "127.0.0.1",
        0,
        registry,
        lambda: (True, []),
        lambda: {},
        lambda: {"comparisons": []},
        basic_auth=("prom", "s3cret"),
    )
    server.start()
    good = ScrapeTarget.from_url(server.url, job="good", basic_auth=("prom", "s3cret"))
    bad = ScrapeTarget.from_url(server.url, job="bad", basic_auth=("prom", "wrong"))
    prom = PrometheusServer(tmp_path / "prom", [good, bad])
    try:
        prom.start()
        assert prom.config()["scrape_configs"][0]["basic_auth"]["username"] == "prom"
        prom.wait_for_target_up(job="good")
        series = prom.query('mlmon_harness_probe{job="good"}')
        assert [(s["metric"]["kind"], float(s["value"][1])) for s in series] == [("x", 42.5)], (
            f"{series}\n{prom.log_tail()}"
        )
        assert prom.query('mlmon_harness_probe{job="bad"}') == []

        def bad_is_down() -> bool:
            return any(
                t["labels"]["job"] == "bad" and t["health"] == "down" and "401" in t["lastError"]
                for t in prom.targets_status()
            )

        prom.wait_until(bad_is_down, 15, lambda: f"targets: {prom.targets_status()}")
        # scalar results come back as one unlabelled item
        (scalar,) = prom.query("scalar(vector(3))")
        assert scalar["metric"] == {} and scalar["value"][1] == "3", scalar
    finally:
        prom.stop()
        server.stop()
    assert prom.proc is not None and prom.proc.poll() is not None, "prometheus still running"
