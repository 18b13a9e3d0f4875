"""Confidence intervals for the monitor's quality metrics."""

from __future__ import annotations

import functools
import math

import numpy as np

__all__ = ["clopper_pearson_interval", "wilson_interval", "wilson_interval_z", "z_value"]


@functools.lru_cache(maxsize=64)
def z_value(confidence: float) -> float:
    """Two-sided standard-normal quantile for a confidence level (0.95 -> 1.959...).

    ``scipy.special.ndtri`` is what ``scipy.stats.norm.ppf`` evaluates (without importing
    scipy.stats: about a second of start-up); cached, as every interval asks for it."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    from scipy.special import ndtri

    return float(ndtri(0.5 + confidence / 2.0))


def wilson_interval(
    successes: np.ndarray | float, trials: np.ndarray | float, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval for a binomial proportion, vectorized.

    Wilson (1927), "Probable inference, the law of succession, and statistical
    inference". Chosen over the Wald interval because it keeps its coverage near
    0 and 1 and for small n (Brown, Cai & DasGupta 2001), exactly where a failing
    slice lives. Where ``trials == 0`` the interval is NaN: there is nothing to say.
    """
    z = z_value(confidence)
    z2 = z * z
    if np.ndim(successes) == 0 and np.ndim(trials) == 0:
        return _wilson_scalar(float(successes), float(trials), z, z2)  # type: ignore[arg-type]
    return wilson_interval_z(successes, trials, z)


def wilson_interval_z(
    successes: np.ndarray | float, trials: np.ndarray | float, z: np.ndarray | float
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`wilson_interval` at normal quantile(s) ``z``, an array to give each
    proportion its own level: many intervals at several levels in one vectorized call
    (the fairness gaps' Bonferroni levels differ by gap)."""
    z2 = np.multiply(z, z)
    k = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = k / n
        denom = 1.0 + z2 / n
        centre = (p + z2 / (2.0 * n)) / denom
        half = z * np.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n)) / denom
        lower = np.clip(centre - half, 0.0, 1.0)
        upper = np.clip(centre + half, 0.0, 1.0)
    # exact at the boundaries (floating error would otherwise put 0 outside [lo, hi])
    lower = np.where(k <= 0, 0.0, lower)
    upper = np.where(k >= n, 1.0, upper)
    empty = n <= 0
    lower = np.where(empty, np.nan, lower)
    upper = np.where(empty, np.nan, upper)
    return lower, upper


def _wilson_scalar(k: float, n: float, z: float, z2: float) -> tuple[np.ndarray, np.ndarray]:
    """The same arithmetic for one proportion in plain floats (a tick computes thousands:
    NumPy's per-call overhead was ~50 µs of each); equal to the array path, tested."""
    if n <= 0:
        return np.float64(np.nan), np.float64(np.nan)  # type: ignore[return-value]
    p = k / n
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2.0 * n)) / denom
    spread = p * (1.0 - p) / n + z2 / (4.0 * n * n)
    half = z * math.sqrt(spread) / denom if spread >= 0 else math.nan
    lower = 0.0 if k <= 0 else min(max(centre - half, 0.0), 1.0)
    upper = 1.0 if k >= n else min(max(centre + half, 0.0), 1.0)
    return np.float64(lower), np.float64(upper)  # type: ignore[return-value]


def clopper_pearson_interval(
    successes: np.ndarray | float, trials: np.ndarray | float, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """Exact equal-tailed binomial interval (Clopper & Pearson 1934), vectorized.

    The bounds are the beta quantiles B(α/2; k, n − k + 1) and B(1 − α/2; k + 1, n − k)
    (``scipy.special.betaincinv``, the function ``scipy.stats.beta.ppf`` evaluates), so
    each bound misses the true rate with probability at most α/2 at *every* rate: the
    coverage is at least the nominal level however few events are expected. Why not
    everywhere: it is conservative (it over-covers, most at mid rates), so Wilson's interval
    is used wherever its measured coverage holds and this one where Wilson's does not —
    at one or two expected events of the rarer kind. With no success the interval is
    [0, 1 − (α/2)^(1/n)] ≈ [0, 3.7/n] at 95 %, the two-sided form of the "rule of three"
    (Hanley & Lippman-Hand 1983: 3/n is the one-sided 95 % bound); k = n mirrors it.
    Non-integer counts (the quasi-binomial effective trials of a per-query mean) are
    accepted: the beta quantiles are continuous in them. Where ``trials == 0``: NaN.
    """
    from scipy.special import betaincinv

    alpha = 1.0 - confidence
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    k = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    some, short = k > 0, k < n  # the other arguments stay valid where a bound is fixed
    lo_a, lo_b = np.where(some, k, 1.0), np.where(some, n - k + 1.0, 1.0)
    hi_a, hi_b = np.where(short, k + 1.0, 1.0), np.where(short, n - k, 1.0)
    with np.errstate(invalid="ignore"):
        lower = betaincinv(lo_a, lo_b, alpha / 2.0)
        upper = betaincinv(hi_a, hi_b, 1.0 - alpha / 2.0)
    lower = np.where(some, lower, 0.0)
    upper = np.where(short, upper, 1.0)
    empty = n <= 0
    return np.where(empty, np.nan, lower), np.where(empty, np.nan, upper)
