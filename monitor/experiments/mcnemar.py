"""McNemar's exact test: paired error rates of two versions on the same predictions.

In shadow mode both versions score the same inputs, so their errors are paired and the
two error rates differ only through the *discordant* pairs: ``b`` (A wrong, B right) and
``c`` (A right, B wrong). Under H₀ (equal error rates) each discordant pair is equally
likely to go either way, so ``b | b + c ~ Binomial(b + c, 1/2)`` (McNemar 1947,
"Note on the sampling error of the difference between correlated proportions or
percentages", Psychometrika 12). We use the exact binomial form rather than the
chi-square approximation because discordant counts are small exactly when the question
matters (early in a shadow run, or in a thin slice); Fagerland, Lydersen & Laake (2013)
discuss the trade-offs. Two-sided p-value by ``scipy.stats.binomtest``.

This is a fixed-horizon test: use it for reports and as a cross-check of the paired
sequential test, not for decisions taken at every look.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

__all__ = ["McNemarResult", "discordant_counts", "mcnemar_exact"]

Direction = Literal["treatment_better", "treatment_worse", "no_difference"]


@dataclass(frozen=True, slots=True)
class McNemarResult:
    """``b`` = A wrong & B right, ``c`` = A right & B wrong; ``direction`` from c - b."""

    b: int
    c: int
    p_value: float
    direction: Direction

    @property
    def discordant(self) -> int:
        return self.b + self.c


def discordant_counts(errors_a: np.ndarray, errors_b: np.ndarray) -> tuple[int, int]:
    """``(b, c)`` from paired 0/1 error indicators of control A and treatment B."""
    ea = np.asarray(errors_a).astype(bool)
    eb = np.asarray(errors_b).astype(bool)
    if ea.shape != eb.shape:
        raise ValueError("paired error arrays must have the same shape")
    return int(np.count_nonzero(ea & ~eb)), int(np.count_nonzero(~ea & eb))


def mcnemar_exact(b: int, c: int) -> McNemarResult:
    """Exact two-sided McNemar test; with no discordant pairs p = 1."""
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be non-negative, got b={b}, c={c}")
    n = b + c
    direction: Direction
    if c > b:
        direction = "treatment_worse"
    elif b > c:
        direction = "treatment_better"
    else:
        direction = "no_difference"
    p_value = 1.0
    if n > 0:
        from scipy import stats  # (imported when first needed: a second of start-up)

        p_value = float(stats.binomtest(b, n, 0.5).pvalue)
    return McNemarResult(int(b), int(c), p_value, direction)
