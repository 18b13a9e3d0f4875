"""Regression: the share of predictions within a tolerance of the target — "how often is
the forecast good enough?" — and, per prediction, the loss 1[|prediction − target| >
tolerance], so a version comparison can ask which version misses less often.

Statistic: [predictions, within tolerance], summed by addition. Wilson interval (Wilson
1927). Option ``tolerance`` (target units, default 1.0).
"""

from __future__ import annotations

import numpy as np

from monitor.plugins import Direction, Metric, MetricValue, RegressionRows, wilson_interval


class WithinTolerance(Metric):
    name = "within_tolerance"
    tasks = frozenset({"regression"})
    help = "Share of predictions within the configured tolerance of the target"
    unit = "ratio"
    direction = Direction.HIGHER
    loss_bound = 1.0  # a 0/1 loss: comparisons may use the exact bounded-loss sequence

    def __init__(self, tolerance: float = 1.0) -> None:
        super().__init__(tolerance=tolerance)
        if not tolerance > 0:
            raise ValueError(f"tolerance must be positive, got {tolerance}")
        self.tolerance = float(tolerance)

    def width(self) -> int:
        return 2

    def update(self, matrix: np.ndarray, rows: np.ndarray, batch: RegressionRows) -> None:
        miss = self.loss(batch)
        ok = ~np.isnan(miss)
        np.add.at(matrix, (rows[ok], 0), 1.0)
        np.add.at(matrix, (rows[ok], 1), 1.0 - miss[ok])

    def compute(self, stats: np.ndarray, confidence: float) -> list[list[MetricValue]]:
        n, hits = stats[:, 0], stats[:, 1]
        lo, hi = wilson_interval(hits, n, confidence)
        with np.errstate(invalid="ignore", divide="ignore"):
            value = np.where(n > 0, hits / np.maximum(n, 1), np.nan)
        return [
            [MetricValue(self.name, float(v), float(a), float(b), int(k), "wilson")]
            for v, a, b, k in zip(value, lo, hi, n, strict=True)
        ]

    def loss(self, batch: RegressionRows) -> np.ndarray:
        err = np.abs(batch.y_pred - batch.y_true)
        return np.where(np.isnan(err), np.nan, (err > self.tolerance).astype(np.float64))
