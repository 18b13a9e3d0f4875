"""The daemon's own alerts: a failing checkpoint raises MonitorCheckpointFailing through the
configured receiver (a real local HTTP server) and the next good checkpoint resolves it;
drift and comparison decisions render as alerts when enabled."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor.alerting.alerts import ALERT_CHECKPOINT, comparison_alerts, drift_alerts
from monitor.app import Daemon
from monitor.config import settings_from_mapping
from monitor.drift.detector import DriftReport, FeatureDrift
from monitor.engine.comparisons import ComparisonResult
from monitor.engine.drift import DriftResult

from .test_alert_delivery import Receiver, wait_for


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def _daemon(state_dir: Path, url: str, **alerting: object) -> Daemon:
    settings = settings_from_mapping(
        {
            "state": {"dir": str(state_dir)},
            "models": [{"name": "fraud"}],
            "alerting": {"alertmanager_url": url, "resend_interval": "1m", **alerting},
        }
    )
    return Daemon(settings)


def test_checkpoint_failure_raises_and_recovery_resolves(
    tmp_path: Path, receiver: Receiver
) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("a file where the state directory should be")  # mkdir fails
    daemon = _daemon(blocker, receiver.url, labels={"team": "ml"})
    assert daemon.dispatcher is not None
    daemon.dispatcher.start()
    try:
        assert daemon.checkpoint(None, None) is False
        assert daemon.checkpoint(None, None) is False  # still failing: no second alert
        wait_for(lambda: len(receiver.requests) == 1)
        (fired,) = receiver.requests[0].json()
        assert fired["labels"] == {
            "alertname": ALERT_CHECKPOINT,
            "severity": "ticket",
            "team": "ml",
        }
        assert "cannot write its checkpoint" in fired["annotations"]["summary"]
        assert str(blocker) in fired["annotations"]["description"]
        blocker.unlink()  # the disk problem goes away
        assert daemon.checkpoint(None, None) is True
        wait_for(lambda: len(receiver.requests) == 2)
        (resolved,) = receiver.requests[1].json()
        assert resolved["labels"] == fired["labels"]
        assert resolved["startsAt"] == fired["startsAt"]
        assert time.time() - 5 < _ts(resolved["endsAt"]) <= time.time()
        assert daemon.checkpoint(None, None) is True
        time.sleep(0.2)
        assert len(receiver.requests) == 2  # nothing more to say
        # the SLO state rides in the checkpoint
        assert "slo" in json.dumps(daemon.store.load().meta)  # type: ignore[union-attr]
    finally:
        daemon.dispatcher.stop(1)


def test_checkpoint_alerts_can_be_turned_off(tmp_path: Path, receiver: Receiver) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("x")
    daemon = _daemon(blocker, receiver.url, checkpoint_alerts=False)
    assert daemon.dispatcher is not None
    daemon.dispatcher.start()
    try:
        assert daemon.checkpoint(None, None) is False
        time.sleep(0.3)
        assert receiver.requests == []
    finally:
        daemon.dispatcher.stop(1)


def _ts(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _feature(name: str, detected: bool) -> FeatureDrift:
    return FeatureDrift(
        feature=name, kind="numeric", test="ks", statistic=0.3, p_value=1e-6,
        p_adjusted=2e-6, effect=0.4, effect_threshold=0.1, psi=0.5, wasserstein=1.2,
        wasserstein_sd=0.4, js_distance=float("nan"), n=5000, n_missing=0,
        missing_rate=0.0, missing_rate_reference=0.0, missing_rate_change=0.0,
        missing_rate_p_value=1.0, out_of_range=0, unseen=0, unseen_values=(),
        tested=True, detected=detected, reason="",
    )  # fmt: skip


def test_drift_and_comparison_alerts() -> None:
    report = DriftReport(
        features=(_feature("amount", True), _feature("age", False)),
        any_detected=True,
        n_tested=2,
        alpha=0.05,
        correction="bh",
    )
    drift = (DriftResult("fraud", "v2", "1h", 0, 3_600_000, report),)
    (a,) = drift_alerts(drift, 100.0, extra_labels={"team": "ml"})
    assert dict(a.labels) == {
        "alertname": "ModelDriftDetected", "model": "fraud", "version": "v2", "window": "1h",
        "feature": "amount", "severity": "ticket", "team": "ml",
    }  # fmt: skip
    assert "amount drifted" in dict(a.annotations)["summary"]

    def comparison(decision: str) -> ComparisonResult:
        return ComparisonResult(
            name="canary", model="fraud", control="v1", treatment="v2", loss="error_rate",
            mode="split", decision=decision, superior=False, reason=f"because {decision}",
            p_value=0.001, cs_lower=0.01, cs_upper=0.03, effect=0.02, n_control=5000,
            n_treatment=5000, predictions_control=5000, predictions_treatment=5000,
            since_ms=50_000, at_ms=60_000, alpha=0.05, margin=0.0,
        )  # fmt: skip

    assert comparison_alerts((comparison("continue"), comparison("promote")), 1.0) == []
    rollback, invalid = comparison_alerts((comparison("rollback"), comparison("invalid")), 1.0)
    assert dict(rollback.labels)["severity"] == "page"
    assert dict(invalid.labels)["severity"] == "ticket"
    assert rollback.starts_at == 50.0 and dict(rollback.annotations)["description"] == (
        "because rollback"
    )
