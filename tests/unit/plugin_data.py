"""Records of regression and multiclass models for the example plugins' oracle tests
(replay and daemon), with the arrays the oracles read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

Record = dict[str, Any]


def multiclass_records(
    model: str, classes: list[str], proba: np.ndarray, y: np.ndarray, start: int, step: int
) -> tuple[list[Record], list[Record]]:
    """Prediction ``i`` (ids ``<model>-i``) carries the class probabilities ``proba[i]``,
    its label the class ``y[i]``, 10 ms later."""
    preds, labels = [], []
    for i in range(y.shape[0]):
        ts = start + i * step
        preds.append(
            {
                "id": f"{model}-{i}",
                "ts": ts,
                "model": model,
                "version": "v1",
                "scores": {c: float(v) for c, v in zip(classes, proba[i], strict=True)},
            }
        )
        labels.append({"id": f"{model}-{i}", "ts": ts + 10, "label": classes[y[i]]})  # fmt: skip
    return preds, labels


@dataclass(frozen=True)
class PluginTraffic:
    preds: list[Record]
    labels: list[Record]
    y: np.ndarray  # regression targets
    yhat: np.ndarray  # regression predictions
    is_b: np.ndarray  # the regression prediction came from version v2
    p: np.ndarray  # multiclass probabilities
    y_m: np.ndarray  # multiclass labels (class indices)


def traffic(
    n: int, start: int, step: int, seed: int, classes: list[str], canary: bool = False
) -> PluginTraffic:
    """``n`` predictions of a regression model ``demand`` (v1 errors N(0, 1.2); with
    ``canary``, about half from a noisier v2, the first one among them) and of a
    multiclass model ``topic`` (Dirichlet(0.6) probabilities, labels drawn from them)."""
    rng = np.random.default_rng(seed)
    y = rng.normal(10, 2, n)
    is_b = (rng.random(n) < 0.5) if canary else np.zeros(n, bool)
    if canary:
        is_b[0] = True  # the treatment's first prediction opens a comparison's counting
    yhat = y + rng.normal(0, np.where(is_b, 2.5, 1.2))
    p = rng.dirichlet([0.6] * len(classes), n)
    y_m = np.array([rng.choice(len(classes), p=row) for row in p])
    preds, labels = [], []
    for i in range(n):
        ts = start + i * step
        preds.append(
            {
                "id": f"demand-{i}",
                "ts": ts,
                "model": "demand",
                "version": "v2" if is_b[i] else "v1",
                "prediction": float(yhat[i]),
            }
        )
        labels.append({"id": f"demand-{i}", "ts": ts + 10, "label": float(y[i])})  # fmt: skip
    mc_preds, mc_labels = multiclass_records("topic", classes, p, y_m, start, step)
    return PluginTraffic(preds + mc_preds, labels + mc_labels, y, yhat, is_b, p, y_m)
