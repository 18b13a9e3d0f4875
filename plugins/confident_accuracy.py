"""Multiclass: accuracy among the confident predictions — those whose most probable class
has probability at least ``threshold`` (default 0.8) — and the share of predictions that
are confident. A model that is right when sure can automate those cases; this says
whether it still is.

Statistic: [predictions with probabilities, confident, confident and correct]. Wilson
intervals (Wilson 1927).
"""

from __future__ import annotations

import numpy as np

from monitor.plugins import (
    Definition,
    Direction,
    Metric,
    MetricValue,
    MulticlassRows,
    wilson_interval,
)

_M = frozenset({"multiclass"})


class ConfidentAccuracy(Metric):
    name = "confident_accuracy"
    tasks = _M
    definitions = (
        Definition("confident_accuracy", _M, "Accuracy among predictions whose top class "
                   "probability is at least the threshold", "ratio", Direction.HIGHER),
        Definition("confident_share", _M, "Share of predictions whose top class probability "
                   "is at least the threshold", "ratio", Direction.NEITHER),
    )  # fmt: skip

    def __init__(self, threshold: float = 0.8) -> None:
        super().__init__(threshold=threshold)
        if not 0 < threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        self.threshold = float(threshold)

    def width(self) -> int:
        return 3

    def update(self, matrix: np.ndarray, rows: np.ndarray, batch: MulticlassRows) -> None:
        has = ~np.isnan(batch.proba[:, 0])
        top = batch.proba[has].max(axis=1)
        sure = top >= self.threshold
        right = sure & (batch.y_pred[has] == batch.y_true[has])
        at = rows[has]
        np.add.at(matrix, (at, 0), 1.0)
        np.add.at(matrix, (at, 1), sure.astype(np.float64))
        np.add.at(matrix, (at, 2), right.astype(np.float64))

    def metrics(self, vec: np.ndarray, confidence: float) -> list[MetricValue]:
        out = []
        for name, k, n in (
            ("confident_accuracy", vec[2], vec[1]),
            ("confident_share", vec[1], vec[0]),
        ):
            lo, hi = wilson_interval(k, n, confidence)
            value = k / n if n > 0 else float("nan")
            out.append(MetricValue(name, float(value), float(lo), float(hi), int(n), "wilson"))
        return out
