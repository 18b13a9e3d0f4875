"""Top-k accuracy of a multiclass model: the share of labelled predictions whose true
class is among the k most probable, one value per configured ``k``.

Its statistic is the histogram of the true class's rank among the class probabilities
(width K): rank = number of classes ranked above it, ties broken as scikit-learn's
``top_k_accuracy_score`` does (a stable descending sort: of equal probabilities the
higher class index ranks first). Every k reads the same histogram (hits at k = the
first k cells), so it merges by ``+`` and k can change without losing history. Rows
without probabilities are not counted. Wilson interval (Wilson 1927).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..stats.common import ratio
from ..stats.results import MetricValue
from .protocol import Definition, Direction, Metric, ModelParams, MulticlassRows, Stat

__all__ = ["TopKAccuracy"]


class TopKAccuracy(Metric):
    name = "top_k_accuracy"
    tasks = frozenset({"multiclass"})
    definitions: ClassVar[tuple[Definition, ...]] = (
        Definition("top_k_accuracy", frozenset({"multiclass"}), "Share of labeled "
                   "predictions whose true class is among the {k} most probable",
                   "ratio", Direction.HIGHER, opt_in=True, per_k=True),
    )  # fmt: skip

    def __init__(self, n_classes: int, ks: tuple[int, ...]) -> None:
        super().__init__()
        self.n_classes, self.ks = n_classes, ks

    @classmethod
    def for_model(cls, params: ModelParams) -> TopKAccuracy:
        return cls(len(params.classes), params.ks)

    @property
    def stat(self) -> Stat:
        return Stat("top_k")

    def width(self) -> int:
        return self.n_classes

    def update(self, matrix: np.ndarray, rows: np.ndarray, batch: MulticlassRows) -> None:
        p = batch.proba
        has = ~np.isnan(p[:, 0])
        if not has.any():
            return
        p, y = p[has], batch.y_true[has].astype(np.intp)
        true_p = p[np.arange(p.shape[0]), y][:, np.newaxis]
        cls = np.arange(p.shape[1])[np.newaxis, :]
        rank = ((p > true_p) | ((p == true_p) & (cls > y[:, np.newaxis]))).sum(axis=1)
        np.add.at(matrix, (rows[has], rank), 1.0)

    def compute(self, stats: np.ndarray, confidence: float) -> list[list[MetricValue]]:
        hits = np.cumsum(stats, axis=1)
        n = hits[:, -1] if stats.shape[1] else np.zeros(stats.shape[0])
        k_max = stats.shape[1]
        return [
            [
                ratio(f"top_k_accuracy_at_{k}", float(hits[i, min(k, k_max) - 1]), float(n[i]),
                      confidence)
                for k in self.ks
            ]
            for i in range(stats.shape[0])
        ]  # fmt: skip
