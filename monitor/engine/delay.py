"""The label delay histogram: how long labels take to arrive after their prediction."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .accumulator import LabeledRows, StateParts
from .snapshot import DelayHistogram

__all__ = ["DELAY_BOUNDS_S", "LabelDelay"]

# Label delay histogram bounds, seconds: 1 s .. 30 d.
DELAY_BOUNDS_S: tuple[float, ...] = (
    1,
    5,
    15,
    60,
    300,
    900,
    3600,
    3 * 3600,
    6 * 3600,
    12 * 3600,
    86400,
    3 * 86400,
    7 * 86400,
    14 * 86400,
    30 * 86400,
)


class LabelDelay:
    """Counts per delay bucket (a Prometheus histogram's cells, ``le`` inclusive) and the
    sum of delays in seconds; a label before its prediction counts as 0 s.

    Sums, so the delays of two disjoint streams add (``+``: commutative, associative up
    to float rounding of the sum, identity ``LabelDelay()``)."""

    def __init__(self) -> None:
        self.counts = np.zeros(len(DELAY_BOUNDS_S) + 1, np.int64)
        self.sum_s = 0.0

    def __add__(self, other: LabelDelay) -> LabelDelay:
        out = LabelDelay()
        out.counts = self.counts + other.counts
        out.sum_s = self.sum_s + other.sum_s
        return out

    def histogram(self) -> DelayHistogram:
        """The immutable histogram a snapshot carries."""
        return DelayHistogram(DELAY_BOUNDS_S, tuple(int(c) for c in self.counts), self.sum_s)

    @classmethod
    def of(cls, histogram: DelayHistogram) -> LabelDelay:
        """The accumulator a snapshot's histogram was taken from (ValueError when it has
        other bounds)."""
        if tuple(histogram.bounds) != DELAY_BOUNDS_S:
            raise ValueError("label delay histogram has other bounds")
        out = cls()
        out.load({"delay_sum_s": histogram.total}, {"delay_counts": np.asarray(histogram.counts)})
        return out

    def add(self, rows: LabeledRows) -> None:
        j = rows.joined
        delay_s = np.maximum(j.label_ts - j.pred_ts, 0) / 1000.0
        np.add.at(self.counts, np.searchsorted(DELAY_BOUNDS_S, delay_s, "left"), 1)
        self.sum_s += float(delay_s.sum())

    def state(self) -> StateParts:
        return {"delay_sum_s": self.sum_s}, {"delay_counts": self.counts.copy()}

    def load(self, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        """ValueError when the saved histogram has other bounds."""
        counts = np.asarray(arrays["delay_counts"], np.int64).copy()
        if counts.shape != (len(DELAY_BOUNDS_S) + 1,):
            raise ValueError("label delay histogram has a different shape")
        self.counts = counts
        self.sum_s = float(meta["delay_sum_s"])
