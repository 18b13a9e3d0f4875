"""Intervals for metrics without a closed form: the streaming Poisson bootstrap.

Each event enters the statistic once as itself and once per replicate with a Poisson(1)
weight (Oza & Russell 2001; Chamandy et al. 2012, "Estimating uncertainty for massive
data streams"): a replicate is a bootstrap resample of the stream that, unlike one drawn
from a finished sample, can be kept as a running sum — so it merges by ``+`` across
buckets, windows, partitions and restarts like every other statistic. The interval is
the percentile interval of the metric over the replicates (Efron & Tibshirani 1993,
§13.3). Measured coverage at a nominal 0.95: 0.925 over 400 windows of 400 events (a
ratio of means, 200 replicates; tests/unit/test_metric_protocol.py), 0.935 ± 0.006 over
2,000 such windows, 0.928 ± 0.006 for a mean of Poisson counts with 100 replicates — a
little short, as percentile intervals run at moderate n.

The weights come from a generator seeded per family, so a replay of the same input
gives the same intervals.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..stats.results import MetricValue

__all__ = ["PoissonBootstrap", "bucket_bootstrap"]


class PoissonBootstrap:
    """A statistic of ``width`` sums kept with ``replicates`` Poisson-weighted copies:
    ``total_width`` columns, the plain sums first."""

    def __init__(self, width: int, replicates: int = 200, seed: int = 20260101) -> None:
        self.width, self.replicates = int(width), int(replicates)
        self._rng = np.random.default_rng(seed)

    @property
    def total_width(self) -> int:
        return self.width * (self.replicates + 1)

    def update(self, matrix: np.ndarray, rows: np.ndarray, parts: np.ndarray) -> None:
        """Add event ``i``'s sums ``parts[i]`` (shape (n, width)) into ``matrix[rows[i]]``
        and, Poisson(1)-weighted, into each replicate."""
        parts = np.asarray(parts, np.float64).reshape(-1, self.width)
        weights = self._rng.poisson(1.0, (parts.shape[0], self.replicates)).astype(np.float64)
        reps = (weights[:, :, np.newaxis] * parts[:, np.newaxis, :]).reshape(parts.shape[0], -1)
        np.add.at(matrix, rows, np.concatenate([parts, reps], axis=1))

    def interval(
        self,
        name: str,
        vec: np.ndarray,
        value: Callable[[np.ndarray], float],
        n: int,
        confidence: float,
    ) -> MetricValue:
        """``value`` of the plain sums, with the percentile interval over the replicates
        (NaN where a replicate's value is undefined in more than half of them)."""
        return bucket_bootstrap(name, vec, self.width, value, n, confidence)


def bucket_bootstrap(
    name: str,
    vec: np.ndarray,
    width: int,
    value: Callable[[np.ndarray], float],
    n: int,
    confidence: float,
) -> MetricValue:
    """The metric ``value`` of ``vec[:width]`` and its Poisson-bootstrap percentile
    interval over the replicates ``vec[width:]`` (a :class:`PoissonBootstrap` layout)."""
    point = float(value(vec[:width]))
    reps = vec[width:].reshape(-1, width)
    values = np.array([value(r) for r in reps], np.float64)
    finite = values[np.isfinite(values)]
    if finite.shape[0] * 2 <= values.shape[0] or not np.isfinite(point):
        return MetricValue(name, point, float("nan"), float("nan"), n, "poisson_bootstrap",
                           "interval withheld: too few defined bootstrap replicates")  # fmt: skip
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(finite, [alpha, 1.0 - alpha])
    return MetricValue(name, point, float(lo), float(hi), n, "poisson_bootstrap")
