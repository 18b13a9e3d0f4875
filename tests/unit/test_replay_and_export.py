"""`monitor replay` and the Prometheus exposition against the scikit-learn oracle."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import orjson
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sklearn.metrics import (
    accuracy_score,
    average_precision_score,
    balanced_accuracy_score,
    brier_score_loss,
    cohen_kappa_score,
    f1_score,
    fbeta_score,
    log_loss,
    matthews_corrcoef,
    precision_score,
    recall_score,
    roc_auc_score,
)

from monitor.config import settings_from_mapping
from monitor.engine.evaluate import evaluate_all
from monitor.engine.snapshot import Snapshot
from monitor.export.prometheus import MonitorCollector
from monitor.export.published import Published, RuntimeStatus
from monitor.ingest.deadletter import FileDeadLetter
from monitor.ingest.pipeline import RawRecord
from monitor.synthetic import binary_traffic
from monitor.wiring import build_engine, build_pipeline


def oracle(preds: list[dict], labels: list[dict]) -> dict[str, float]:
    first_pred: dict[str, dict] = {}
    for p in preds:
        first_pred.setdefault(p["id"], p)
    first_label: dict[str, int] = {}
    for lab in labels:
        first_label.setdefault(lab["id"], int(lab["label"]))
    ids = [i for i in first_pred if i in first_label]
    y = [first_label[i] for i in ids]
    score = [first_pred[i]["score"] for i in ids]
    p = [int(s >= 0.5) for s in score]
    return {"n": len(ids), "accuracy": accuracy_score(y, p), "precision": precision_score(y, p),
            "recall": recall_score(y, p), "f1": f1_score(y, p), "f2": fbeta_score(y, p, beta=2),
            "mcc": matthews_corrcoef(y, p), "cohen_kappa": cohen_kappa_score(y, p),
            "balanced_accuracy": balanced_accuracy_score(y, p),
            "log_loss": log_loss(y, score), "brier": brier_score_loss(y, score),
            "roc_auc": roc_auc_score(y, score),
            "pr_auc": average_precision_score(y, score)}  # fmt: skip


@pytest.fixture
def stream() -> tuple[list[dict], list[dict]]:
    start = int(time.time() * 1000) - 2 * 3600_000
    t = binary_traffic(6000, seed=3, start_ms=start, rate_per_s=5, delay_mean_s=120)
    rng = random.Random(4)
    preds = list(t.predictions)
    labels = list(t.labels)
    preds += rng.sample(preds, 50)  # duplicate predictions
    labels += rng.sample(labels, 50)  # duplicate labels
    rng.shuffle(preds)
    return preds, labels


def test_replay_report_matches_sklearn(tmp_path: Path, stream: tuple[list, list]) -> None:
    preds, labels = stream
    pf, lf = tmp_path / "p.jsonl", tmp_path / "l.jsonl"
    pf.write_bytes(b"".join(orjson.dumps(p) + b"\n" for p in preds))
    lf.write_bytes(b"\n".join([b"not json", *(orjson.dumps(x) for x in labels)]) + b"\n")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[state]\ndir = "{tmp_path}/state"\n[[models]]\nname = "fraud"\n')
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "monitor", "replay", "-c", str(cfg), "--predictions", str(pf),
         "--labels", str(lf), "--report", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    expected = oracle(preds, labels)
    (res,) = [r for r in report["results"] if r["window"] == "all"]
    assert res["labeled"] == expected["n"]
    assert res["predictions"] == 6000
    for name in ("accuracy", "precision", "recall", "f1", "f2", "mcc", "cohen_kappa",
                 "balanced_accuracy", "log_loss", "brier"):  # fmt: skip
        m = res["metrics"][name]
        assert m["value"] == pytest.approx(expected[name], abs=1e-9), name
        assert m["ci_lower"] <= m["value"] <= m["ci_upper"]
    for name in ("roc_auc", "pr_auc"):  # from score histograms: within 0.002 of exact
        m = res["metrics"][name]
        assert abs(m["value"] - expected[name]) < 0.002, name
        assert m["ci_lower"] <= m["value"] <= m["ci_upper"]
    invalid = report["operations"]["invalid_records"]
    assert [(i["reason"], i["count"]) for i in invalid] == [("not_json", 1)]
    dead = [json.loads(line) for line in (tmp_path / "state/replay-dead-letter.jsonl").open()]
    assert [d["reason"] for d in dead] == ["not_json"]
    assert report["operations"]["join"]["duplicate_prediction"] == 50
    assert report["operations"]["join"]["duplicate_label"] == 50


def test_replay_rejects_missing_input(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[[models]]\nname = "fraud"\n')
    proc = subprocess.run(
        [sys.executable, "-m", "monitor", "replay", "-c", str(cfg), "--predictions",
         str(tmp_path / "none.jsonl"), "--labels", str(tmp_path / "none2.jsonl")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2 and "is not a file" in proc.stderr


def test_exposition_carries_metrics_intervals_and_operations(
    tmp_path: Path, stream: tuple[list, list]
) -> None:
    preds, labels = stream
    settings = settings_from_mapping({"models": [{"name": "fraud", "windows": [{"size": "1d"}]}]})
    engine = build_engine(settings)
    pipe = build_pipeline(settings, engine, FileDeadLetter(tmp_path / "dl.jsonl"))
    pipe.process("predictions", [RawRecord(orjson.dumps(p), "predictions") for p in preds])
    pipe.process("labels", [RawRecord(orjson.dumps(x), "labels") for x in labels])
    now = int(time.time() * 1000)
    results, _ = evaluate_all(engine.view(), engine.models, now)
    snap = Snapshot(now, results, engine.ops())
    pub = Published(snap, snap.ops, RuntimeStatus(topics=(("predictions", "preds-topic"),),
                                                  consumer_lag=(("preds-topic", 0, 7),),
                                                  last_checkpoint_at=time.time() - 5))  # fmt: skip
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MonitorCollector(lambda: pub))
    text = generate_latest(registry).decode()
    samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    key = (("model", "fraud"), ("slice", "all"), ("version", "v1"), ("window", "1d"))
    expected = oracle(preds, labels)
    for name in ("accuracy", "precision", "recall", "f1"):
        value = samples[(f"mlmon_{name}", key)]
        assert value == pytest.approx(expected[name], abs=1e-9)
        assert (
            samples[(f"mlmon_{name}_ci_lower", key)]
            < value
            < samples[(f"mlmon_{name}_ci_upper", key)]
        )
    assert samples[("mlmon_window_samples", key)] == expected["n"]
    assert (
        samples[("mlmon_records_total", (("outcome", "accepted"), ("topic", "preds-topic")))]
        == 6000
    )
    assert samples[("mlmon_consumer_lag", (("partition", "0"), ("topic", "preds-topic")))] == 7
    assert samples[("mlmon_pending_predictions", ())] == 6000 - expected["n"]
    assert samples[("mlmon_label_delay_seconds_count", ())] == expected["n"]
    assert 4 <= samples[("mlmon_checkpoint_age_seconds", ())] < 60


def test_threshold_economics_and_reliability(tmp_path: Path, stream: tuple[list, list]) -> None:
    preds, labels = stream
    pf, lf = tmp_path / "p.jsonl", tmp_path / "l.jsonl"
    pf.write_bytes(b"".join(orjson.dumps(p) + b"\n" for p in preds))
    lf.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in labels))
    from monitor.replay import replay

    costs = {"tp": 50.0, "fp": -5.0, "fn": -100.0, "tn": 0.0}
    settings = settings_from_mapping(
        {"state": {"dir": str(tmp_path)},
         "models": [{"name": "fraud", "windows": [{"size": "1d"}], "costs": costs}]}
    )  # fmt: skip
    report = replay(settings, pf, lf, progress=None)
    (res,) = [r for r in report["results"] if r["window"] == "all"]
    first_pred: dict[str, dict] = {}
    for p in preds:
        first_pred.setdefault(p["id"], p)
    first_label: dict[str, int] = {}
    for x in labels:
        first_label.setdefault(x["id"], int(x["label"]))
    ids = [i for i in first_pred if i in first_label]
    y = np.array([first_label[i] for i in ids])
    s = np.array([first_pred[i]["score"] for i in ids])

    def ev(threshold: float) -> float:
        d = s >= threshold
        v = np.where(d & (y == 1), 50.0, np.where(d, -5.0, np.where(y == 1, -100.0, 0.0)))
        return float(v.mean())

    econ = res["economics"]
    assert econ["expected_value_deployed"]["value"] == pytest.approx(ev(0.5), abs=1e-9)
    best = econ["best_threshold"]
    assert econ["expected_value_best"]["value"] == pytest.approx(ev(best), abs=1e-6)
    grid = np.linspace(0.01, 0.99, 99)
    assert econ["expected_value_best"]["value"] >= max(ev(t) for t in grid) - 0.05
    rel = res["reliability"]
    assert len(rel) == 10 and sum(b["count"] for b in rel) == len(ids)
    for b in rel:
        if b["count"]:
            inside = (s > b["lower"]) & (s <= b["upper"]) if b["lower"] > 0 else s <= b["upper"]
            assert b["observed"] == pytest.approx(y[inside].mean(), abs=1e-9)
