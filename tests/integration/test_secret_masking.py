"""Credentials in a receiver URL never leave the process: not in ``/api/v1/slos``
(``delivery[].last_error``), not on the status page, not in the log — user-info and
``?token=`` alike — and the alerts still reach a real Alertmanager through that URL
(the user-info becomes a basic-auth header, the query is kept)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from monitor.localbroker import LocalBroker, free_port

from .alertmanager_harness import AlertmanagerServer
from .daemon_harness import DaemonProcess, wait_until
from .test_alerting_e2e import SLO_LABELS, Traffic, _config, _slo

pytestmark = pytest.mark.integration

PASSWORD = "pa55-Word-9f3"
TOKEN = "tok-5eCr3t-77"


def test_receiver_credentials_are_masked_everywhere(broker: LocalBroker, tmp_path: Path) -> None:
    broker.create_topics(["predictions", "labels"])
    am = AlertmanagerServer(tmp_path / "am")
    am.port = free_port()  # down for now: every delivery fails with the URL in the error
    # every prediction wrong: accuracy's interval is the exact one, [0, ≈ 3.7/n], wholly
    # below the objective, so the default interval SLO pages (docs/statistics.md)
    slo = _slo("fraud-accuracy", "accuracy", 0.9, min_samples=50)
    cfg = _config(broker, tmp_path, am, [slo])
    text = cfg.read_text().replace(
        f'alertmanager_url = "{am.url}"',
        f'alertmanager_url = "http://alice:{PASSWORD}@127.0.0.1:{am.port}/?token={TOKEN}"',
    )
    cfg.write_text(text)
    assert PASSWORD in cfg.read_text()
    daemon = DaemonProcess(cfg, tmp_path / "daemon.log")
    traffic = Traffic(broker.bootstrap)
    try:
        daemon.start()
        traffic.send(200, wrong=True)  # breaks the SLO at once

        def delivery() -> dict[str, object]:
            code, body = daemon.get("/api/v1/slos")
            assert code == 200, body
            receivers = json.loads(body)["delivery"]  # null until the first evaluation
            out = receivers[0] if receivers else {}
            assert isinstance(out, dict)
            return out

        def failed_delivery() -> bool:
            if delivery().get("last_error"):
                return True
            traffic.send(20, wrong=True)  # keep the short window broken until it fires
            return False

        wait_until(
            failed_delivery,
            60,
            lambda: daemon.get("/api/v1/slos")[1].decode()[-3000:] + daemon.log_tail(),
        )
        error = str(delivery()["last_error"])
        assert "127.0.0.1" in error and "token=***" in error, error
        code, page = daemon.get("/")
        assert code == 200
        wait_until(lambda: "delivery to alertmanager failed" in daemon._this_log(), 30)
        for where, text in (
            ("/api/v1/slos", daemon.get("/api/v1/slos")[1].decode()),
            ("status page", page.decode()),
            ("log", daemon._this_log()),
        ):
            assert PASSWORD not in text and TOKEN not in text, (where, text[-3000:])
        # Alertmanager comes up on that URL: the alert gets through with the credentials
        am.start()
        am.wait_for_alert(timeout=60, **SLO_LABELS)
        wait_until(lambda: delivery()["last_error"] is None, 30, daemon.log_tail)
        assert daemon.terminate() == 0, daemon.log_tail()
        assert PASSWORD not in daemon._this_log() and TOKEN not in daemon._this_log()
    finally:
        traffic.close()
        daemon.close()
        am.stop()
