"""Mergeable loss moments: the sufficient statistic behind a difference in mean loss.

``(n, Σx, Σx²)`` is all that a comparison of means with plug-in variances needs, and it
merges by plain addition (mergeable statistics, docs/design.md): buckets, windows and
instances combine without re-reading events, and ``merge(a, b)`` describes ``a ∪ b``.

Numerics: the variance is computed as ``(Σx² - n·mean²) / (n - 1)``, which loses relative
precision when the variance is tiny compared with ``mean²`` (cancellation). Losses are
non-negative and O(1) for the supported metrics (0/1 error, log loss, squared and absolute
error on sensibly scaled targets), so this costs nothing here; the pay-off is that the state
is three numbers that add, and merging is exact up to summation order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["LossMoments"]


@dataclass(slots=True)
class LossMoments:
    """Count, sum and sum of squares of a stream of per-prediction losses.

    Used once per arm (A/B, canary) and once for paired differences ``loss_B - loss_A``
    (shadow mode). One writer owns an instance; readers use :meth:`mean`/:meth:`variance`.
    """

    n: int = 0
    total: float = 0.0
    total_sq: float = 0.0

    @classmethod
    def of(cls, x: np.ndarray) -> LossMoments:
        """Moments of a batch of losses (convenience for tests and one-shot use)."""
        moments = cls()
        moments.update(x)
        return moments

    @classmethod
    def from_binary(cls, errors: int, n: int) -> LossMoments:
        """Moments of ``n`` 0/1 losses of which ``errors`` are 1 (Σx = Σx² = errors)."""
        if not 0 <= errors <= n:
            raise ValueError(f"need 0 <= errors <= n, got errors={errors}, n={n}")
        return cls(int(n), float(errors), float(errors))

    def update(self, x: np.ndarray) -> None:
        """Add a batch of losses (any shape; flattened). Non-finite losses are rejected.

        Rejecting rather than skipping keeps the statistic honest: a NaN loss is a
        validation bug upstream and must not silently shrink ``n``.
        """
        arr = np.asarray(x, dtype=np.float64).ravel()
        if arr.size == 0:
            return
        if not np.isfinite(arr).all():
            raise ValueError("losses must be finite")
        self.n += int(arr.size)
        self.total += float(arr.sum())
        self.total_sq += float(np.dot(arr, arr))

    def merge(self, other: LossMoments) -> LossMoments:
        """The moments of both streams together (neither operand is modified)."""
        return LossMoments(
            self.n + other.n, self.total + other.total, self.total_sq + other.total_sq
        )

    def __add__(self, other: LossMoments) -> LossMoments:
        return self.merge(other)

    def mean(self) -> float:
        """Mean loss; NaN when empty."""
        return self.total / self.n if self.n > 0 else math.nan

    def variance(self) -> float:
        """Unbiased sample variance (ddof=1), clipped at 0; NaN for fewer than 2 losses."""
        if self.n < 2:
            return math.nan
        ss = self.total_sq - self.total * (self.total / self.n)
        return max(ss, 0.0) / (self.n - 1)

    def state(self) -> dict[str, Any]:
        """JSON-able state; floats round-trip exactly through ``json``."""
        return {"n": self.n, "sum": self.total, "sum_sq": self.total_sq}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> LossMoments:
        n, total, total_sq = int(state["n"]), float(state["sum"]), float(state["sum_sq"])
        if n < 0 or not (math.isfinite(total) and math.isfinite(total_sq)) or total_sq < 0:
            raise ValueError(f"invalid LossMoments state: {state!r}")
        if n == 0 and (total != 0.0 or total_sq != 0.0):
            raise ValueError(f"empty LossMoments state with non-zero sums: {state!r}")
        return cls(n, total, total_sq)
