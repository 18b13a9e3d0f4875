"""Every series on /metrics says what it is: no family's help text is just its name.

A page of a fleet with one model of each task (binary with every opt-in metric, costs,
slices and CBPE estimation; multiclass with estimation; regression with intervals;
ranking), evaluated and rendered by the daemon itself, is read back with the Prometheus
text parser; each family's help must be a sentence of its own.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from prometheus_client.parser import text_string_to_metric_families

from monitor.app import Daemon
from monitor.config import settings_from_mapping
from monitor.ingest.deadletter import FileDeadLetter
from monitor.ingest.pipeline import RawRecord
from monitor.wiring import build_pipeline

from .ranking_data import traffic as ranking_traffic

N = 600
CLASSES = ["a", "b", "c"]


def _records(start: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rng = np.random.default_rng(5)
    preds: list[dict[str, Any]] = []
    labels: list[dict[str, Any]] = []
    for i in range(N):
        ts = start + i * 1000
        base = {"ts": ts, "version": "v1", "segments": {"region": ("EU", "US")[i % 2]}}
        score = float(rng.random())
        preds.append({**base, "id": f"b{i}", "model": "fraud", "score": score})
        p = rng.dirichlet([1.0] * 3)
        scores = {c: float(v) for c, v in zip(CLASSES, p, strict=True)}
        preds.append({**base, "id": f"m{i}", "model": "topic", "scores": scores})
        y = float(rng.normal(10, 2))
        pred = y + float(rng.normal(0, 1))
        preds.append({**base, "id": f"r{i}", "model": "demand", "prediction": pred,
                      "lower": pred - 2, "upper": pred + 2})  # fmt: skip
        if i % 3:  # some predictions stay unlabeled: estimation has something to estimate
            labels.append({"id": f"b{i}", "ts": ts + 500, "label": int(rng.random() < score)})
            labels.append({"id": f"m{i}", "ts": ts + 500, "label": CLASSES[i % 3]})
            labels.append({"id": f"r{i}", "ts": ts + 500, "label": y})
    return preds, labels


def test_every_exported_family_has_a_help_text(tmp_path: Path) -> None:
    windows = [{"size": "1d"}]
    binary_metrics = ["accuracy", "f1", "fbeta", "roc_auc", "ece", "ks_statistic", "gini",
                      "gain", "precision", "recall", "log_loss", "calibration_p_value"]  # fmt: skip
    models = [
        {"name": "fraud", "metrics": binary_metrics, "windows": windows,
         "costs": {"tp": 10, "fp": -1}, "estimation": {},
         "slices": [{"dimensions": ["region"], "min_samples": 10}]},
        {"name": "topic", "task": "multiclass", "classes": CLASSES, "windows": windows,
         "estimation": {}},
        {"name": "demand", "task": "regression", "windows": windows, "mase_scale": 1.0},
        {"name": "search", "task": "ranking", "windows": windows, "k": [3, 5]},
    ]  # fmt: skip
    settings = settings_from_mapping(
        {"http": {"port": 0}, "state": {"dir": str(tmp_path / "state")}, "models": models}
    )
    daemon = Daemon(settings)
    pipe = build_pipeline(settings, daemon.engine, FileDeadLetter(tmp_path / "dl.jsonl"))
    start = int(time.time() * 1000) - 2 * 3_600_000
    preds, labels = _records(start)
    rank_preds, rank_labels, _ = ranking_traffic(300, start)
    for kind, records in (("predictions", preds + rank_preds), ("labels", labels + rank_labels)):
        pipe.process(kind, [RawRecord(orjson.dumps(r), kind) for r in records])
    assert daemon.evaluate_now() is not None
    page = daemon.exposition.page().decode()

    families = {f.name: f.documentation for f in text_string_to_metric_families(page)}
    names = set(families)
    for expected in ("mlmon_estimated_accuracy", "mlmon_estimated_f1_macro", "mlmon_f2",
                     "mlmon_ndcg_at_3", "mlmon_mase", "mlmon_pinball_q0_1", "mlmon_gain_at_10",
                     "mlmon_class_precision", "mlmon_expected_value"):  # fmt: skip
        assert expected in names, sorted(names)
    trivial = {
        name: doc
        for name, doc in families.items()
        if len(doc.split()) < 3 or doc.removeprefix("mlmon_") in name
    }
    assert not trivial, "\n".join(f"{n}: {d!r}" for n, d in sorted(trivial.items()))
