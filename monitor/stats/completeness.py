"""How complete a window's labels are expected to be, from the label-delay histogram.

Labels arrive after their prediction, by a delay whose distribution the engine keeps as a
histogram (``DelayHistogram``). For a prediction made ``a`` seconds ago, the chance that
its label — if it ever comes — is already in is ``F(a)``, the delay's cumulative
distribution. Over a span of prediction time ``[s, e)`` with predictions spread evenly
(the buckets' own resolution), the expected share of the span's eventual labels that are
in at ``now`` is the mean of ``F`` over the ages in the span:

    completeness = 1/(e − s) ∫_{now−e}^{now−s} F(a) da

``F`` is the histogram's CDF, linear within each cell (as Prometheus' ``histogram_quantile``
assumes); the cell beyond the last bound is spread evenly over one more such width. The
expected final coverage is then the ratio estimator ``observed coverage / completeness``
(at most 1): if a share ρ of predictions eventually gets a label, labeled ≈ ρ · predicted ·
completeness. A window is *provisional* while its completeness is below
:data:`PROVISIONAL_BELOW` — its numbers are still expected to move as labels land.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["PROVISIONAL_BELOW", "DelayCdf", "expected_coverage"]

PROVISIONAL_BELOW = 0.95  # a window with less of its expected labels in is provisional


class DelayCdf:
    """The piecewise-linear CDF of label delay (seconds) from histogram cells
    ``counts`` (``len(bounds) + 1``, the last beyond the last bound; a cell holds
    delays in ``(bounds[i-1], bounds[i]]``, the first from 0) and its integral."""

    __slots__ = ("_ints", "_x", "_y", "total")

    def __init__(self, bounds: Sequence[float], counts: Sequence[int]) -> None:
        b = [float(x) for x in bounds]
        c = np.asarray(counts, np.float64)
        if c.shape != (len(b) + 1,):
            raise ValueError("a delay histogram has one more cell than bounds")
        self.total = float(c.sum())
        x = np.array([0.0, *b, b[-1] * 2.0])
        y = np.concatenate([[0.0], np.cumsum(c)]) / self.total if self.total else np.zeros(x.size)
        self._x, self._y = x, y
        # ∫_0^x_k F, trapezoids (F is linear between knots)
        self._ints = np.concatenate([[0.0], np.cumsum(np.diff(x) * (y[1:] + y[:-1]) / 2)])

    @property
    def known(self) -> bool:
        """Whether any delay was observed (without one nothing can be expected)."""
        return self.total > 0

    def __call__(self, age_s: float | np.ndarray) -> np.ndarray:
        return np.interp(age_s, self._x, self._y, left=0.0, right=1.0)

    def integral(self, age_s: np.ndarray) -> np.ndarray:
        """∫_0^a F for each age ``a`` (0 for negative ages: the future)."""
        a = np.clip(np.asarray(age_s, np.float64), 0.0, None)
        k = np.clip(np.searchsorted(self._x, a, "right") - 1, 0, self._x.size - 1)
        x0, y0 = self._x[k], self._y[k]
        slope = np.zeros_like(a)
        inside = k < self._x.size - 1
        ki = k[inside]
        slope[inside] = (self._y[ki + 1] - self._y[ki]) / (self._x[ki + 1] - self._x[ki])
        dx = a - x0
        return self._ints[k] + dx * y0 + 0.5 * slope * dx * dx

    def completeness(self, start_ms: np.ndarray, end_ms: np.ndarray, now_ms: int) -> np.ndarray:
        """Expected share of the labels of each span ``[start, end)`` (prediction time,
        ms) already in at ``now_ms``; NaN without any observed delay."""
        s = np.asarray(start_ms, np.float64)
        e = np.asarray(end_ms, np.float64)
        if not self.known:
            return np.full(np.broadcast(s, e).shape, np.nan)
        young, old = (now_ms - e) / 1000.0, (now_ms - s) / 1000.0
        width = np.maximum(old - young, 1e-9)
        out = (self.integral(old) - self.integral(young)) / width
        return np.clip(out, 0.0, 1.0)


def expected_coverage(coverage: float, completeness: float) -> float:
    """The coverage a window is expected to end with: observed / completeness (≤ 1)."""
    if math.isnan(coverage) or math.isnan(completeness) or completeness <= 0:
        return math.nan
    return min(1.0, coverage / completeness)
