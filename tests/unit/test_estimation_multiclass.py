"""Multiclass CBPE through `monitor replay` while most labels have not arrived: the estimated
accuracy equals the top-label formula over every prediction's decided-class confidence, the
estimated macro precision/recall/F1 equal those of the expected confusion matrix computed
directly from the probability vectors, both sit near what all labels would show, a
miscalibrated model is flagged, SLOs may opt into them, and a checkpoint written before the
expected-matrix store existed still loads."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import orjson
import pytest

from monitor.config import ConfigError, settings_from_mapping
from monitor.engine import state_codec
from monitor.ingest.deadletter import FileDeadLetter
from monitor.ingest.files import JsonlReader
from monitor.metrics.catalog import ESTIMATION, EXPECTED_CONFUSION
from monitor.replay import replay
from monitor.stats.estimation import cbpe_top_label
from monitor.wiring import build_engine, build_pipeline
from tests.unit.replay_reports import overall_metrics

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
    return overall_metrics(report, model, N, LABELED)


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


def _expected_macro(p: np.ndarray) -> dict[str, float]:
    """Macro P/R/F1 of E[C] (rows true, columns decided), straight from the vectors."""
    d = p.argmax(axis=1)
    cm = np.zeros((K, K))
    for j in range(K):  # E[C[true j, decided i]] = Σ over rows decided i of p_j
        cm[j] = np.bincount(d, weights=p[:, j], minlength=K)
    tp, true_k, pred_k = np.diag(cm), cm.sum(axis=1), cm.sum(axis=0)
    present = (true_k + pred_k) > 0
    return {
        "precision": float((tp / pred_k)[present].mean()),
        "recall": float((tp / true_k)[present].mean()),
        "f1": float((2 * tp / (true_k + pred_k))[present].mean()),
    }


def test_estimated_macro_metrics_are_the_expected_confusion_matrix(run: tuple) -> None:
    report, truth = run
    m = _metrics(report, "calibrated")
    p, y = truth["calibrated"]
    want = _expected_macro(p)
    d = p.argmax(axis=1)
    for kind in ("precision", "recall", "f1"):
        got = m[f"estimated_{kind}_macro"]
        assert got["value"] == pytest.approx(want[kind], rel=1e-12, abs=1e-12)
        assert got["n"] == N
        assert got["ci_lower"] < got["value"] < got["ci_upper"]
        # the realized value all labels will show (sklearn's macro over present classes)
        cm = np.zeros((K, K))
        np.add.at(cm, (y, d), 1.0)
        tp, t, q = np.diag(cm), cm.sum(axis=1), cm.sum(axis=0)
        realized = {"precision": tp / q, "recall": tp / t, "f1": 2 * tp / (t + q)}[kind].mean()
        assert got["ci_lower"] <= realized <= got["ci_upper"]


def test_a_miscalibrated_multiclass_model_is_flagged(run: tuple) -> None:
    report, truth = run
    m = _metrics(report, "overconfident")
    assert m["estimate_reliable"]["value"] == 0.0
    assert "max_ece 0.03" in m["estimated_accuracy"]["interval_note"]
    p, y = truth["overconfident"]
    realized = float(np.mean(p.argmax(axis=1) == y))
    assert realized > m["estimated_accuracy"]["ci_upper"]  # why the flag matters
    for kind in ("precision", "recall", "f1"):
        assert "max_ece 0.03" in m[f"estimated_{kind}_macro"]["interval_note"]


def test_multiclass_slos_may_opt_into_estimated_accuracy(tmp_path: Path) -> None:
    model = {"name": "m", "task": "multiclass", "classes": CLASSES,
             "windows": [{"size": "1h"}], "estimation": {}}  # fmt: skip
    slo = {"name": "est", "model": "m", "window": "1h", "objective": 0.8,
           "direction": "above", "confidence": "point"}  # fmt: skip
    for metric in ("estimated_accuracy", "estimated_f1_macro", "estimated_recall_macro"):
        settings_from_mapping({"models": [model], "slos": [{**slo, "metric": metric}]})
    with pytest.raises(ConfigError, match="estimated_roc_auc"):
        settings_from_mapping({"models": [model], "slos": [{**slo, "metric": "estimated_roc_auc"}]})
    with pytest.raises(ConfigError, match="binary and multiclass"):
        settings_from_mapping({"models": [{"name": "r", "task": "regression", "estimation": {}}]})


def test_a_checkpoint_without_the_expected_matrix_loads_with_zeros(tmp_path: Path) -> None:
    """States written before the expected confusion matrix existed restore; the new store
    starts at zero and fills from the next predictions (older buckets keep only the
    top-label bins)."""
    models = [{"name": "m", "task": "multiclass", "classes": CLASSES, "estimation": {}}]
    settings = settings_from_mapping({"state": {"dir": str(tmp_path)}, "models": models})
    p = np.random.default_rng(5).dirichlet([1.0] * K, 200)
    start = int(time.time() * 1000) - 600_000
    pf = tmp_path / "p.jsonl"
    pf.write_bytes(
        b"".join(
            orjson.dumps({"id": f"r{i}", "ts": start + i, "model": "m", "version": "v1",
                          "scores": dict(zip(CLASSES, map(float, row), strict=True))}) + b"\n"
            for i, row in enumerate(p)
        )
    )  # fmt: skip
    reader = JsonlReader(pf, "p", batch_size=100)
    engine = build_engine(settings)
    build_pipeline(settings, engine, FileDeadLetter(tmp_path / "dl.jsonl")).process(
        "predictions", reader.next_batch()
    )
    meta, arrays = state_codec.encode(engine)
    key = f"wide/m/{EXPECTED_CONFUSION.key}"
    assert arrays[key].sum() == pytest.approx(100.0)  # every vector sums to 1
    again = build_engine(settings)
    state_codec.decode(again, meta, {k: v for k, v in arrays.items() if k != key})
    assert again.wide[0].state()[EXPECTED_CONFUSION.key].sum() == 0.0
    est = ESTIMATION.key
    assert again.wide[0].state()[est].tolist() == engine.wide[0].state()[est].tolist()
    build_pipeline(settings, again, FileDeadLetter(tmp_path / "dl.jsonl")).process(
        "predictions", reader.next_batch()
    )
    assert again.wide[0].state()[EXPECTED_CONFUSION.key].sum() == pytest.approx(100.0)
