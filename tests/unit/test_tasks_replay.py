"""Multiclass and regression models through the whole pipeline (decode, join, buckets,
slices, evaluation, report) against scikit-learn and direct NumPy formulas."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import orjson
import pytest
from sklearn.metrics import (
    accuracy_score,
    cohen_kappa_score,
    confusion_matrix,
    f1_score,
    log_loss,
    matthews_corrcoef,
    mean_absolute_error,
    mean_absolute_percentage_error,
    mean_pinball_loss,
    mean_squared_error,
    precision_score,
    r2_score,
    recall_score,
)

from monitor.config import ConfigError, settings_from_mapping
from monitor.replay import replay

CLASSES = [f"c{k}" for k in range(10)]
QUANTILES = (0.1, 0.9)
HUBER = 2.0
MASE_SCALE = 7.5


def _stream(n: int, seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict]:
    """10-class and heavy-tailed regression traffic with duplicates, labels-first order
    and invalid records mixed in; returns predictions, labels and the clean truth."""
    rng = np.random.default_rng(seed)
    start = int(time.time() * 1000) - 3_600_000
    preds: list[dict[str, Any]] = []
    labels: list[dict[str, Any]] = []
    truth: dict[str, list] = {"mc": [], "rg": []}
    for i in range(n):
        ts = start + i * 100
        y = int(rng.integers(10))
        logits = rng.normal(size=10)
        logits[y] += 1.5
        p = np.exp(logits) / np.exp(logits).sum()
        scores = {c: float(v) for c, v in zip(CLASSES, p, strict=True)}
        pid = f"m{i}"
        preds.append({"id": pid, "ts": ts, "model": "topic", "version": "v1", "scores": scores})
        labels.append({"id": pid, "ts": ts + 500, "label": CLASSES[y]})
        truth["mc"].append((y, p))
        # heavy-tailed targets (Student t, 2 dof), some exact zeros for MAPE
        target = 0.0 if i % 50 == 0 else float(10 * rng.standard_t(2))
        pred = target + float(rng.normal(scale=3.0))
        half = float(abs(rng.normal(scale=4.0)))
        region = "north" if i % 3 else "south"
        rid = f"r{i}"
        preds.append(
            {"id": rid, "ts": ts, "model": "demand", "version": "v1", "prediction": pred,
             "lower": pred - half, "upper": pred + half, "segments": {"region": region}}
        )  # fmt: skip
        labels.append({"id": rid, "ts": ts + 700, "label": target})
        truth["rg"].append((target, pred, pred - half, pred + half, region))
    # duplicates (first wins) and invalid records
    preds += preds[:40]
    labels += labels[:40]
    bad = [
        {"id": "x1", "ts": start, "model": "topic", "version": "v1",
         "scores": {"c0": 0.5, "c1": 0.2}},  # sums to 0.7
        {"id": "x2", "ts": start, "model": "topic", "version": "v1",
         "scores": {"c0": 0.5, "nope": 0.5}},  # unknown class
        {"id": "x3", "ts": start, "model": "demand", "version": "v1", "prediction": "7"},
        {"id": "x4", "ts": start, "model": "demand", "version": "v1", "prediction": 1.0,
         "lower": 2.0, "upper": 1.0},  # inverted interval
        {"id": "x5", "ts": start, "model": "demand", "version": "v1", "prediction": 1.0,
         "lower": 0.5},  # half an interval
    ]  # fmt: skip
    preds += bad
    # shuffled: many labels reach the join before their prediction and wait as orphans
    preds = [preds[i] for i in rng.permutation(len(preds))]
    labels = [labels[i] for i in rng.permutation(len(labels))]
    return preds, labels, truth


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    tmp = tmp_path_factory.mktemp("tasks")
    preds, labels, truth = _stream(3000, seed=11)
    pf, lf = tmp / "p.jsonl", tmp / "l.jsonl"
    pf.write_bytes(b"".join(orjson.dumps(p) + b"\n" for p in preds))
    lf.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in labels))
    settings = settings_from_mapping(
        {
            "state": {"dir": str(tmp / "state")},
            "models": [
                {"name": "topic", "task": "multiclass", "classes": CLASSES},
                {
                    "name": "demand",
                    "task": "regression",
                    "huber_delta": HUBER,
                    "quantiles": list(QUANTILES),
                    "mase_scale": MASE_SCALE,
                    "slices": [{"dimensions": ["region"], "min_samples": 10}],
                },
            ],
        }
    )
    return replay(settings, pf, lf, progress=None), truth


def _result(report: dict, model: str, slice_: str = "all") -> dict:
    (res,) = [
        r
        for r in report["results"]
        if r["model"] == model and r["window"] == "all" and r["slice"] == slice_
    ]
    return res


def _check(res: dict, expected: dict[str, float]) -> None:
    for name, value in expected.items():
        m = res["metrics"][name]
        assert m["value"] == pytest.approx(value, rel=1e-9, abs=1e-9), name
        if "interval_note" in m:  # withheld (heavy tails, small counts): no bounds, a reason
            assert m["ci_lower"] is None and m["ci_upper"] is None, name
            assert "withheld" in m["interval_note"], name
        else:
            assert m["ci_lower"] <= m["value"] <= m["ci_upper"], name


def test_multiclass_catalog_equals_sklearn(report: tuple[dict, dict]) -> None:
    rep, truth = report
    y = np.array([t[0] for t in truth["mc"]])
    proba = np.array([t[1] for t in truth["mc"]])
    yp = proba.argmax(axis=1)
    res = _result(rep, "topic")
    assert res["labeled"] == len(y) and res["predictions"] == len(y)
    expected = {
        "accuracy": accuracy_score(y, yp),
        "error_rate": 1 - accuracy_score(y, yp),
        "mcc": matthews_corrcoef(y, yp),
        "cohen_kappa": cohen_kappa_score(y, yp),
        "cohen_kappa_linear": cohen_kappa_score(y, yp, weights="linear"),
        "cohen_kappa_quadratic": cohen_kappa_score(y, yp, weights="quadratic"),
        "log_loss": log_loss(y, proba, labels=list(range(10))),
        "brier": float(np.mean(np.sum((proba - np.eye(10)[y]) ** 2, axis=1))),
    }
    for avg in ("macro", "micro", "weighted"):
        expected[f"precision_{avg}"] = precision_score(y, yp, average=avg, zero_division=0)
        expected[f"recall_{avg}"] = recall_score(y, yp, average=avg, zero_division=0)
        expected[f"f1_{avg}"] = f1_score(y, yp, average=avg, zero_division=0)
    per_p = precision_score(y, yp, average=None, zero_division=0)
    per_r = recall_score(y, yp, average=None, zero_division=0)
    for k, c in enumerate(CLASSES):
        expected[f"precision[{c}]"] = per_p[k]
        expected[f"recall[{c}]"] = per_r[k]
    # top-label ECE, 10 equal-width bins (Guo et al. 2017)
    conf = proba.max(axis=1)
    correct = (yp == y).astype(float)
    bins = np.clip(np.ceil(conf * 10).astype(int) - 1, 0, 9)
    ece = sum(
        abs(conf[bins == b].mean() - correct[bins == b].mean()) * np.mean(bins == b)
        for b in range(10)
        if (bins == b).any()
    )
    expected["ece"] = ece
    _check(res, expected)
    cm = res["confusion_matrix"]
    assert cm["classes"] == CLASSES
    assert cm["counts"] == confusion_matrix(y, yp, labels=list(range(10))).tolist()


def _regression_expected(rows: list[tuple]) -> dict[str, float]:
    y = np.array([r[0] for r in rows])
    f = np.array([r[1] for r in rows])
    lo = np.array([r[2] for r in rows])
    hi = np.array([r[3] for r in rows])
    e = f - y
    nz = y != 0
    den = np.abs(y) + np.abs(f)
    dom = (y > -1) & (f > -1)
    out = {
        "mae": mean_absolute_error(y, f),
        "mse": mean_squared_error(y, f),
        "rmse": math.sqrt(mean_squared_error(y, f)),
        "r2": r2_score(y, f),
        "mean_error": float(e.mean()),
        "mape": mean_absolute_percentage_error(y[nz], f[nz]),
        "smape": float(np.mean(2 * np.abs(e[den > 0]) / den[den > 0])),
        "male": float(np.mean(np.abs(np.log1p(f[dom]) - np.log1p(y[dom])))),
        "huber": float(
            np.mean(np.where(np.abs(e) <= HUBER, 0.5 * e**2, HUBER * (np.abs(e) - HUBER / 2)))
        ),
        "interval_coverage": float(np.mean((lo <= y) & (y <= hi))),
        "interval_width": float(np.mean(hi - lo)),
        "mase": float(np.mean(np.abs(e))) / MASE_SCALE,
    }
    for q in QUANTILES:
        out["pinball_q" + f"{q:g}".replace(".", "_")] = mean_pinball_loss(y, f, alpha=q)
    return out


def test_regression_catalog_equals_sklearn_overall_and_per_slice(
    report: tuple[dict, dict],
) -> None:
    rep, truth = report
    rows = truth["rg"]
    res = _result(rep, "demand")
    assert res["labeled"] == len(rows)
    _check(res, _regression_expected(rows))
    assert res["excluded_rows"]["mape"] == sum(1 for r in rows if r[0] == 0) == 60
    for region in ("north", "south"):
        part = [r for r in rows if r[4] == region]
        sliced = _result(rep, "demand", f"region={region}")
        assert sliced["labeled"] == len(part)
        _check(sliced, _regression_expected(part))


def test_invalid_task_records_are_rejected_with_reasons(report: tuple[dict, dict]) -> None:
    rep, _ = report
    reasons = {i["reason"]: i["count"] for i in rep["operations"]["invalid_records"]}
    # sum 0.7 and the inverted interval: out_of_range; unknown class key; "7" is a string;
    # half an interval: missing_field
    assert reasons == {"out_of_range": 2, "unknown_class": 1, "wrong_type": 1, "missing_field": 1}
    assert rep["operations"]["join"]["duplicate_prediction"] == 40
    assert rep["operations"]["join"]["duplicate_label"] == 40


def test_task_config_errors_name_the_key() -> None:
    with pytest.raises(ConfigError) as err:
        settings_from_mapping(
            {
                "models": [
                    {"name": "a", "task": "regression", "metrics": ["accuracy"]},
                    {"name": "b", "task": "binary", "classes": ["x", "y", "z"]},
                ]
            }
        )
    text = str(err.value)
    assert "models[0]" in text and "not regression metrics" in text
    assert "models[1]" in text and "exactly two classes" in text
    with pytest.raises(ConfigError) as err:
        settings_from_mapping(
            {
                "models": [{"name": "a", "task": "regression"}],
                "comparisons": [
                    {"name": "c", "model": "a", "control": "v1", "treatment": "v2",
                     "loss": "error_rate"}
                ],
            }
        )  # fmt: skip
    text = str(err.value)
    assert "comparisons[0].loss" in text and "does not apply to regression" in text
