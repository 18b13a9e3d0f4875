"""Multiclass CBPE through `monitor replay` while most labels have not arrived: the estimated
accuracy equals the top-label formula over every prediction's decided-class confidence,
sits near the accuracy all labels would show, a miscalibrated model is flagged, and SLOs
may opt into it."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import orjson
import pytest

from monitor.config import ConfigError, settings_from_mapping
from monitor.replay import replay
from monitor.stats.estimation import cbpe_top_label

N, LABELED, BINS, K = 6_000, 1_500, 64, 3
CLASSES = ["a", "b", "c"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    tmp = tmp_path_factory.mktemp("cbpe-mc")
    rng = np.random.default_rng(31)
    start = int(time.time() * 1000) - 3_600_000
    preds, labels = [], []
    truth: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for model, power in (("calibrated", 1.0), ("overconfident", 4.0)):
        p = np.round(rng.dirichlet([0.6] * K, N), 6)
        p[:, -1] = 1.0 - p[:, :-1].sum(axis=1)
        # labels drawn from the probabilities (calibrated) or from sharpened ones
        q = p**power / (p**power).sum(axis=1, keepdims=True)
        y = np.array([rng.choice(K, p=row) for row in q])
        truth[model] = (p, y)
        for i in range(N):
            rid = f"{model}-{i}"
            scores = {c: float(v) for c, v in zip(CLASSES, p[i], strict=True)}
            preds.append({"id": rid, "ts": start + i * 400, "model": model, "version": "v1",
                          "scores": scores})  # fmt: skip
            if i < LABELED:
                labels.append({"id": rid, "ts": start + i * 400 + 900, "label": CLASSES[y[i]]})
    pf, lf = tmp / "p.jsonl", tmp / "l.jsonl"
    pf.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in preds))
    lf.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in labels))
    models = [
        {"name": name, "task": "multiclass", "classes": CLASSES,
         "estimation": {"max_ece": 0.03, "bins": BINS}}
        for name in ("calibrated", "overconfident")
    ]  # fmt: skip
    settings = settings_from_mapping({"state": {"dir": str(tmp / "state")}, "models": models})
    return replay(settings, pf, lf, progress=None), truth


def _metrics(report: dict, model: str) -> dict:
    (res,) = [
        r
        for r in report["results"]
        if r["model"] == model and r["window"] == "all" and r["slice"] == "all"
    ]
    assert res["predictions"] == N and res["labeled"] == LABELED
    return res["metrics"]


def test_estimated_accuracy_covers_every_prediction_before_its_label(run: tuple) -> None:
    report, truth = run
    m = _metrics(report, "calibrated")
    p, y = truth["calibrated"]
    conf = p.max(axis=1)  # the decision is the argmax
    b = np.minimum((conf * BINS).astype(int), BINS - 1)
    count = np.bincount(b, minlength=BINS).astype(float)
    total = np.bincount(b, weights=conf, minlength=BINS)
    want = cbpe_top_label(count, total, ece=0.0).metrics[0]
    got = m["estimated_accuracy"]
    assert got["value"] == pytest.approx(want.value, rel=1e-12)
    assert got["ci_lower"] == pytest.approx(want.lower, rel=1e-12)
    assert got["n"] == N
    assert m["estimate_reliable"]["value"] == 1.0
    realized = float(np.mean(p.argmax(axis=1) == y))  # what all the labels will show
    assert got["ci_lower"] <= realized <= got["ci_upper"]
    assert "estimated_roc_auc" not in m  # top-label accuracy is the multiclass estimate


def test_a_miscalibrated_multiclass_model_is_flagged(run: tuple) -> None:
    report, truth = run
    m = _metrics(report, "overconfident")
    assert m["estimate_reliable"]["value"] == 0.0
    assert "max_ece 0.03" in m["estimated_accuracy"]["interval_note"]
    p, y = truth["overconfident"]
    realized = float(np.mean(p.argmax(axis=1) == y))
    assert realized > m["estimated_accuracy"]["ci_upper"]  # why the flag matters


def test_multiclass_slos_may_opt_into_estimated_accuracy(tmp_path: Path) -> None:
    model = {"name": "m", "task": "multiclass", "classes": CLASSES,
             "windows": [{"size": "1h"}], "estimation": {}}  # fmt: skip
    slo = {"name": "est", "model": "m", "window": "1h", "objective": 0.8,
           "direction": "above", "confidence": "point"}  # fmt: skip
    settings_from_mapping({"models": [model], "slos": [{**slo, "metric": "estimated_accuracy"}]})
    with pytest.raises(ConfigError, match="estimated_roc_auc"):
        settings_from_mapping({"models": [model], "slos": [{**slo, "metric": "estimated_roc_auc"}]})
    with pytest.raises(ConfigError, match="binary and multiclass"):
        settings_from_mapping({"models": [{"name": "r", "task": "regression", "estimation": {}}]})
