"""The shipped Alertmanager configuration pages once per SLO breach: a real Alertmanager
inhibits the Prometheus rule's copy of ``ModelSloBreached`` while the daemon's own alert
for the same SLO instance fires, and lets it through when the daemon sends nothing."""

from __future__ import annotations

import json
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from .alertmanager_harness import AlertmanagerServer

pytestmark = pytest.mark.integration

SHIPPED = Path(__file__).resolve().parents[2] / "deploy/alertmanager/alertmanager.yml"
INSTANCE = {"slo": "fraud-accuracy", "model": "fraud", "version": "v2", "window": "1h",
            "slice": "all", "metric": "accuracy", "severity": "page"}  # fmt: skip


class ShippedAlertmanager(AlertmanagerServer):
    def config_text(self) -> str:
        cfg = yaml.safe_load(SHIPPED.read_text())
        for r in cfg["receivers"]:  # nowhere to deliver in a test: a closed local port
            for hook in r.get("webhook_configs", []):
                hook["url"] = "http://127.0.0.1:9/"
        return json.dumps(cfg)


def _post(am: AlertmanagerServer, alerts: list[dict[str, Any]]) -> None:
    now = datetime.now(UTC).isoformat()
    body = json.dumps([{"labels": a, "startsAt": now} for a in alerts]).encode()
    req = urllib.request.Request(am.url + "/api/v2/alerts", body, method="POST",
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200


def _states(am: AlertmanagerServer) -> dict[str, str]:
    """Alert state by sender: the daemon's (no job) and Prometheus's (job label)."""
    out = {}
    for a in am.alerts(alertname="ModelSloBreached"):
        out["prometheus" if "job" in a["labels"] else "daemon"] = a["status"]["state"]
    return out


def test_an_slo_breach_pages_once(tmp_path: Path) -> None:
    daemon = {"alertname": "ModelSloBreached", **INSTANCE}
    rule_copy = {**daemon, "job": "model-monitor", "instance": "10.0.0.7:9108"}
    other_slice = {**rule_copy, "slice": "country=US"}
    with ShippedAlertmanager(tmp_path / "am") as am:
        _post(am, [rule_copy])
        deadline = time.monotonic() + 20
        while _states(am) != {"prometheus": "active"}:  # alone, the rule's copy pages
            assert time.monotonic() < deadline, _states(am)
            time.sleep(0.2)
        _post(am, [daemon, rule_copy, other_slice])
        deadline = time.monotonic() + 20
        while True:
            alerts = am.alerts(alertname="ModelSloBreached")
            by_slice = {(a["labels"]["slice"], "job" in a["labels"]): a["status"] for a in alerts}
            if by_slice.get(("all", True), {}).get("state") == "suppressed":
                break
            assert time.monotonic() < deadline, alerts
            time.sleep(0.2)
        assert by_slice[("all", False)]["state"] == "active"  # the daemon's alert pages
        assert by_slice[("all", True)]["inhibitedBy"]  # its copy is inhibited
        # another SLO instance (a different slice) is not the same breach: it still pages
        assert by_slice[("country=US", True)]["state"] == "active"
