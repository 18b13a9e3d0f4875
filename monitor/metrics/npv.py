"""Negative predictive value: TN / (TN + FN), the share of predicted negatives that are
negative — what a "cleared" decision is worth (screening, fraud: the cases let through).

A view over the confusion counts every binary slice already keeps (one writer, the light
counts), so it costs no state: a built-in metric that is one class. Wilson interval on
the predicted negatives (Wilson 1927), withheld below ``MIN_TRIALS`` of them.
"""

from __future__ import annotations

import numpy as np

from ..stats.common import ratio
from ..stats.results import MetricValue
from .catalog import CONFUSION
from .protocol import Definition, Direction, Metric

__all__ = ["NegativePredictiveValue"]


class NegativePredictiveValue(Metric):
    name = "npv"
    tasks = frozenset({"binary"})
    reads = CONFUSION
    definitions = (
        Definition("npv", frozenset({"binary"}), "TN / (TN + FN): share of predicted "
                   "negatives that are negative (negative predictive value)", "ratio",
                   Direction.HIGHER, opt_in=True),
    )  # fmt: skip

    def compute(self, stats: np.ndarray, confidence: float) -> list[list[MetricValue]]:
        c = np.asarray(stats, np.float64).reshape(-1, 4)  # TN, FP, FN, TP
        return [
            [ratio("npv", tn, tn + fn, confidence)] for tn, fn in zip(c[:, 0], c[:, 2], strict=True)
        ]
