"""Fixed-horizon comparison of two error rates — for dashboards, NOT for decisions.

These numbers are valid for one pre-planned look. Read after every batch, the z-test's
false-positive rate climbs far above α (the simulation test measures it); continuous
decisions use :mod:`.sequential`. They are here because a dashboard wants the familiar
"B - A with a 95% interval" and because they plan sample sizes.

* Interval: Newcombe (1998), "Interval estimation for the difference between independent
  proportions: comparison of eleven methods", Stat. Med. 17, method 10 — the hybrid score
  interval built from the two Wilson intervals. It keeps near-nominal coverage for small
  n and rates near 0, where the Wald interval fails, and needs no iteration.
* Test: the pooled two-proportion z-test (the score test for equal proportions).
* Sample size: Fleiss, Levin & Paik (2003), *Statistical Methods for Rates and
  Proportions*, eq. 4.14 without continuity correction (pooled variance under H₀).

The difference is ``p_B - p_A`` (treatment minus control) as in the rest of the package.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr, ndtri

from monitor.stats.intervals import wilson_interval, z_value

__all__ = [
    "ProportionDifference",
    "newcombe_interval",
    "proportion_difference",
    "sample_size_two_proportions",
    "two_proportion_z_test",
]


def newcombe_interval(
    k_a: np.ndarray | float,
    n_a: np.ndarray | float,
    k_b: np.ndarray | float,
    n_b: np.ndarray | float,
    confidence: float = 0.95,
) -> tuple[np.ndarray, np.ndarray]:
    """Newcombe's hybrid score interval for ``p_B - p_A``, vectorized.

    With Wilson limits ``(l_A, u_A)`` and ``(l_B, u_B)``::

        lower = d - sqrt((p_B - l_B)² + (u_A - p_A)²)
        upper = d + sqrt((u_B - p_B)² + (p_A - l_A)²)
    """
    ka, na = np.asarray(k_a, np.float64), np.asarray(n_a, np.float64)
    kb, nb = np.asarray(k_b, np.float64), np.asarray(n_b, np.float64)
    la, ua = wilson_interval(ka, na, confidence)
    lb, ub = wilson_interval(kb, nb, confidence)
    with np.errstate(divide="ignore", invalid="ignore"):
        pa, pb = ka / na, kb / nb
    d = pb - pa
    lower = d - np.sqrt((pb - lb) ** 2 + (ua - pa) ** 2)
    upper = d + np.sqrt((ub - pb) ** 2 + (pa - la) ** 2)
    return lower, upper


def two_proportion_z_test(
    k_a: np.ndarray | float,
    n_a: np.ndarray | float,
    k_b: np.ndarray | float,
    n_b: np.ndarray | float,
) -> tuple[np.ndarray, np.ndarray]:
    """Pooled two-proportion z statistic for ``p_B - p_A`` and its two-sided p-value.

    Vectorized. Where the pooled rate is 0 or 1 there is no variance and no evidence:
    z = 0, p = 1.
    """
    ka, na = np.asarray(k_a, np.float64), np.asarray(n_a, np.float64)
    kb, nb = np.asarray(k_b, np.float64), np.asarray(n_b, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        pooled = (ka + kb) / (na + nb)
        se = np.sqrt(pooled * (1.0 - pooled) * (1.0 / na + 1.0 / nb))
        z = (kb / nb - ka / na) / se
    z = np.where(se > 0, z, 0.0)
    p = 2.0 * ndtr(-np.abs(z))  # (scipy.stats.norm.sf)
    return z, p


def sample_size_two_proportions(
    p_a: float, p_b: float, alpha: float = 0.05, power: float = 0.8
) -> int:
    """Per-arm n for a two-sided pooled z-test to detect ``p_a`` vs ``p_b`` (balanced)."""
    if not (0 < p_a < 1 and 0 < p_b < 1) or p_a == p_b:
        raise ValueError("need two different proportions strictly inside (0, 1)")
    if not (0 < alpha < 1 and 0 < power < 1):
        raise ValueError("alpha and power must be in (0, 1)")
    z_a = z_value(1.0 - alpha)
    z_b = float(ndtri(power))  # (scipy.stats.norm.ppf)
    p_bar = (p_a + p_b) / 2.0
    num = z_a * math.sqrt(2 * p_bar * (1 - p_bar)) + z_b * math.sqrt(
        p_a * (1 - p_a) + p_b * (1 - p_b)
    )
    return math.ceil(num**2 / (p_a - p_b) ** 2)


@dataclass(frozen=True, slots=True)
class ProportionDifference:
    """Fixed-horizon ``p_B - p_A`` with Newcombe's interval and the pooled z-test.

    Single-look numbers for dashboards; ``method`` says so, so reports are self-describing.
    """

    p_a: float
    p_b: float
    difference: float
    lower: float
    upper: float
    z: float
    p_value: float
    n_a: int
    n_b: int
    confidence: float
    method: str = "newcombe-hybrid-score/pooled-z (fixed horizon; not for sequential use)"


def proportion_difference(
    k_a: int, n_a: int, k_b: int, n_b: int, confidence: float = 0.95
) -> ProportionDifference:
    """Error rate of B minus error rate of A with interval and p-value (one look)."""
    if not (0 <= k_a <= n_a and 0 <= k_b <= n_b) or n_a == 0 or n_b == 0:
        raise ValueError("need 0 <= k <= n and n > 0 for both arms")
    lo, hi = newcombe_interval(k_a, n_a, k_b, n_b, confidence)
    z, p = two_proportion_z_test(k_a, n_a, k_b, n_b)
    pa, pb = k_a / n_a, k_b / n_b
    return ProportionDifference(
        p_a=pa,
        p_b=pb,
        difference=pb - pa,
        lower=float(lo),
        upper=float(hi),
        z=float(z),
        p_value=float(p),
        n_a=n_a,
        n_b=n_b,
        confidence=confidence,
    )
