"""The example plugins of every task through the daemon with a real broker (tansu): each
plugin metric on ``/metrics`` equals its oracle computed from the input; a plugin metric
in an ``[[slos]]`` fires when the data breach it (and one that holds stays quiet); a
plugin's per-prediction loss drives a version comparison whose arm statistics equal the
oracle's and which rolls the worse version back."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from monitor.localbroker import LocalBroker
from tests.unit.plugin_data import PluginTraffic, traffic
from tests.unit.ranking_data import traffic as ranking_traffic

from .daemon_harness import DaemonProcess, Metrics, base_config, produce, wait_until, write_config

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
N = 600
WINDOW = "6h"
TOLERANCE = 1.5
THRESHOLD = 0.7
CLASSES = ["a", "b", "c"]


def _traffic(start: int) -> tuple[PluginTraffic, list[Any], list[Any], list[Any]]:
    """Regression (v1 and a noisier v2, v2 first in event time), multiclass and ranking
    records, with what the oracles need."""
    data = traffic(N, start, 1000, seed=11, classes=CLASSES, canary=True)
    rank_preds, rank_labels, truth = ranking_traffic(N // 2, start, seed=3)
    return data, data.preds + rank_preds, data.labels + rank_labels, truth


def _config(bootstrap: str, state: Path) -> dict[str, Any]:
    cfg = base_config(bootstrap, state, windows=[{"size": WINDOW}])
    window = [{"size": WINDOW}]
    cfg["models"] = [
        {"name": "demand", "task": "regression", "windows": window},
        {"name": "topic", "task": "multiclass", "classes": CLASSES, "windows": window},
        {"name": "search", "task": "ranking", "k": [3], "max_items": 10, "windows": window},
    ]
    files = ("within_tolerance", "confident_accuracy", "relevant_listed")
    cfg["plugins"] = {
        "paths": [str(REPO / "plugins" / f"{f}.py") for f in files],
        "entry_points": False,
        "options": {"within_tolerance": {"tolerance": TOLERANCE},
                    "confident_accuracy": {"threshold": THRESHOLD}},
    }  # fmt: skip
    cfg["comparisons"] = [
        {"name": "tolerance-canary", "model": "demand", "control": "v1", "treatment": "v2",
         "loss": "within_tolerance", "min_samples": 100, "horizon": 1000,
         "traffic_split": [1, 1]},
    ]  # fmt: skip
    slo = {"model": "topic", "window": WINDOW, "direction": "above", "confidence": "point",
           "min_samples": 50}  # fmt: skip
    cfg["slos"] = [
        # confident accuracy is about 0.85 here: an objective of 0.99 is breached
        {"name": "confident-accuracy", "metric": "confident_accuracy", "objective": 0.99, **slo},
        {"name": "confident-share", "metric": "confident_share", "objective": 0.05, **slo},
    ]
    return cfg


def _value(m: Metrics, name: str, model: str, version: str = "v1") -> tuple[float, ...]:
    labels = {"model": model, "version": version, "window": WINDOW, "slice": "all"}
    got = tuple(
        m.get(f"mlmon_{name}{suffix}", **labels) for suffix in ("", "_ci_lower", "_ci_upper")
    )
    assert all(v is not None for v in got), (name, model, got)
    return got  # type: ignore[return-value]


def test_example_plugins_metrics_slo_and_loss_through_the_daemon(
    broker: LocalBroker, tmp_path: Path
) -> None:
    start = int(time.time() * 1000) - 3_600_000
    data, preds, labels, truth = _traffic(start)
    broker.create_topics(["predictions", "labels"])
    cfg = write_config(tmp_path / "monitor.toml", _config(broker.bootstrap, tmp_path / "state"))
    daemon = DaemonProcess(cfg, tmp_path / "daemon.log")
    try:
        daemon.start()
        daemon.wait_ready()
        msgs = [("predictions", (None, orjson.dumps(r))) for r in preds]
        msgs += [("labels", (None, orjson.dumps(r))) for r in labels]
        produce(broker.bootstrap, msgs)
        n_preds, n_labels = len(preds), len(labels)
        m, _ = daemon.wait_consumed({"predictions": n_preds, "labels": n_labels}, timeout=120)
        ctx = daemon.log_tail()
        assert m.total("mlmon_plugin_errors_total") == 0, ctx

        # regression: share of predictions within the tolerance, per version
        y, yhat, is_b = data.y, data.yhat, data.is_b
        miss = np.abs(yhat - y) > TOLERANCE
        for version, sel in (("v1", ~is_b), ("v2", is_b)):
            value, lo, hi = _value(m, "within_tolerance", "demand", version)
            assert abs(value - np.mean(~miss[sel])) <= 1e-9 and lo < value < hi, ctx
        # multiclass: accuracy among confident predictions and their share
        p, y_m = data.p, data.y_m
        sure = p.max(axis=1) >= THRESHOLD
        value, lo, hi = _value(m, "confident_accuracy", "topic")
        assert abs(value - np.mean(p[sure].argmax(axis=1) == y_m[sure])) <= 1e-9, ctx
        assert lo < value < hi, ctx
        assert abs(_value(m, "confident_share", "topic")[0] - sure.mean()) <= 1e-9, ctx
        # ranking: mean relevant items per listed query, Poisson-bootstrap interval
        relevant = [float(np.sum(np.asarray(t["grades"]) > 0)) for t in truth]
        value, lo, hi = _value(m, "relevant_listed", "search")
        assert abs(value - np.mean(relevant)) <= 1e-9 and lo < value < hi, ctx

        # the plugin metric in an SLO: the breached one fires, the other stays inactive
        def slo_states() -> dict[str, str]:
            status, body = daemon.get("/api/v1/slos")
            assert status == 200, body
            return {s["name"]: s["state"] for s in json.loads(body)["slos"]}

        wait_until(lambda: slo_states().get("confident-accuracy") == "firing", 60,
                   lambda: f"{slo_states()}\n{daemon.log_tail()}")  # fmt: skip
        assert slo_states()["confident-share"] == "inactive", ctx
        m = daemon.scrape()
        assert m.get("mlmon_slo_breached", slo="confident-accuracy", version="v1") == 1
        assert m.get("mlmon_slo_breached", slo="confident-share", version="v1") == 0

        # the plugin's loss as the comparison's: arm statistics equal the oracle's
        status, body = daemon.get("/api/v1/comparisons/tolerance-canary")
        assert status == 200, body
        c = json.loads(body)
        assert c["loss"] == "within_tolerance", c
        assert c["samples"] == {"control": (~is_b).sum(), "treatment": is_b.sum()}, c
        assert abs(c["effect"] - (miss[is_b].mean() - miss[~is_b].mean())) <= 1e-9, c
        assert c["decision"] == "rollback", c  # v2 misses the tolerance far more often
    finally:
        daemon.close()
