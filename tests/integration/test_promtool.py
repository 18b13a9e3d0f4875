"""The daemon's /metrics, with real data behind every family, passes `promtool check metrics`."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import numpy as np
import orjson
import pytest

from monitor.drift.reference import ReferenceProfile
from monitor.localbroker import LocalBroker
from monitor.synthetic import binary_traffic

from .daemon_harness import DaemonProcess, base_config, encode, produce, write_config

pytestmark = pytest.mark.integration


def test_metrics_pass_promtool(broker: LocalBroker, tmp_path: Path, promtool: str) -> None:
    now_ms = int(time.time() * 1000)
    traffic = binary_traffic(
        800, seed=3, start_ms=now_ms - 15 * 60_000, rate_per_s=2.0, delay_mean_s=60.0
    )
    canary = binary_traffic(
        200, seed=4, start_ms=now_ms - 15 * 60_000, rate_per_s=0.5, version="v2", id_prefix="c"
    )
    preds = traffic.predictions + canary.predictions
    labels = traffic.labels + canary.labels
    assert max(lab["ts"] for lab in labels) < now_ms
    messages = [("predictions", (str(p["id"]).encode(), encode(p))) for p in preds]
    messages += [("labels", (str(lab["id"]).encode(), encode(lab))) for lab in labels]
    # A multiclass and a regression model (per-class families, confusion matrix, losses).
    rng = np.random.default_rng(5)
    for i in range(300):
        ts = now_ms - 10 * 60_000 + i * 1000
        p = rng.dirichlet(np.ones(3))
        y = ["a", "b", "c"][int(rng.integers(3))]
        target = 0.0 if i % 30 == 0 else float(rng.normal(10, 3))
        for rec, lab in (
            ({"id": f"t{i}", "ts": ts, "model": "topic", "version": "v1",
              "scores": dict(zip("abc", p.tolist(), strict=True))}, y),
            ({"id": f"d{i}", "ts": ts, "model": "demand", "version": "v1",
              "prediction": target + float(rng.normal()), "lower": target - 2,
              "upper": target + 2}, target),
        ):  # fmt: skip
            messages.append(("predictions", (rec["id"].encode(), encode(rec))))
            label = {"id": rec["id"], "ts": ts + 500, "label": lab}
            messages.append(("labels", (rec["id"].encode(), encode(label))))
    # Bad records, so the invalid-record counters have samples, and a duplicate.
    messages += [
        ("predictions", (b"k", b"not json")),
        ("predictions", (b"k", None)),
        ("labels", (b"k", b'{"id": "zz", "ts": "never", "label": 1}')),
        ("predictions", (str(preds[0]["id"]).encode(), encode(preds[0]))),
    ]

    broker.create_topics(["predictions", "labels"])
    # A drift reference and a comparison, so their families are on the page too.
    rng = np.random.default_rng(8)
    reference = tmp_path / "baseline.json"
    profile = ReferenceProfile.from_columns(
        numeric={"amount": rng.lognormal(3, 1, 5000), "x": rng.normal(0, 1, 5000)},
        categorical={"country": list(rng.choice(["US", "DE", "BR"], 5000))},
        score=rng.random(5000),
        labels=[str(v) for v in (rng.random(5000) < 0.2).astype(int)],
    )
    reference.write_bytes(orjson.dumps(profile.to_json()))
    config = base_config(
        broker.bootstrap,
        tmp_path / "state",
        windows=[{"size": "1h"}, {"size": "10m", "delay": "2m"}, {"size": "30d"}],
        state={"checkpoint_interval": "1s"},
        model={"drift": {"reference": str(reference), "min_samples": 100},
               "costs": {"tp": 10.0, "fp": -1.0, "fn": -20.0, "tn": 0.0}},
    )  # fmt: skip
    config["models"] += [
        {"name": "topic", "task": "multiclass", "classes": ["a", "b", "c"],
         "windows": [{"size": "1h"}]},
        {"name": "demand", "task": "regression", "windows": [{"size": "1h"}]},
    ]  # fmt: skip
    config["comparisons"] = [
        {"name": "canary", "model": "fraud", "control": "v1", "treatment": "v2",
         "min_samples": 50, "traffic_split": [4, 1]}
    ]  # fmt: skip
    cfg = write_config(tmp_path / "monitor.toml", config)
    daemon = DaemonProcess(cfg, tmp_path / "daemon.log")
    try:
        daemon.start()
        daemon.wait_ready()
        produce(broker.bootstrap, messages)
        n_pred = sum(1 for t, _ in messages if t == "predictions")
        n_lab = sum(1 for t, _ in messages if t == "labels")
        m, _ = daemon.wait_consumed({"predictions": n_pred, "labels": n_lab})
        # Wait for a checkpoint so its age gauge is exported too.
        deadline = time.monotonic() + 10
        while m.get("mlmon_checkpoint_age_seconds") is None and time.monotonic() < deadline:
            time.sleep(0.3)
            m = daemon.scrape()
        text = daemon.metrics_text()
        ctx = daemon.log_tail()
    finally:
        daemon.close()

    # Every family the product exports right now is in the page that promtool checks.
    for family in (
        "mlmon_accuracy",
        "mlmon_f1_ci_upper",
        "mlmon_window_samples",
        "mlmon_label_coverage",
        "mlmon_records_total",
        "mlmon_invalid_records_total",
        "mlmon_join_events_total",
        "mlmon_label_delay_seconds_bucket",
        "mlmon_pending_predictions",
        "mlmon_last_evaluation_timestamp_seconds",
        "mlmon_checkpoint_age_seconds",
        "mlmon_roc_auc",
        "mlmon_mcc_ci_lower",
        "mlmon_reliability_observed",
        "mlmon_expected_value",
        "mlmon_best_threshold",
        "mlmon_drift_statistic",
        "mlmon_drift_detected",
        "mlmon_comparison_decision",
        "mlmon_comparison_p_value",
        "mlmon_class_precision",
        "mlmon_class_recall_ci_lower",
        "mlmon_confusion_matrix",
        "mlmon_cohen_kappa_quadratic",
        "mlmon_f1_macro",
        "mlmon_rmse",
        "mlmon_r2",
        "mlmon_mae_ci_upper",  # r2/rmse intervals are withheld by default (heavy tails)
        "mlmon_pinball_q0_9",
        "mlmon_interval_coverage",
        "mlmon_excluded_rows",
        "mlmon_labeled_predictions_total",
        "mlmon_prediction_errors_total",
    ):
        assert f"\n{family}{{" in text or f"\n{family} " in text, f"{family} missing\n{ctx}"
    assert 'reason="not_json"' in text and 'reason="tombstone"' in text
    assert 'window="10m_delay2m"' in text

    done = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    problems = (done.stdout + done.stderr).strip()
    assert done.returncode == 0 and problems == "", (
        f"promtool exit {done.returncode}:\n{problems}\n--- metrics ---\n{text}"
    )
