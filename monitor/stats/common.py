"""Helpers every metric layout shares: NaN, Wald and CLT intervals, Wilson ratios, row indices.

A leaf module (imports only numpy, :mod:`.intervals` and :mod:`.results`) so that the layouts
(:mod:`.binary`, :mod:`.scores`, :mod:`.multiclass`, :mod:`.regression`) can all use it
without importing each other in a cycle.
"""

from __future__ import annotations

import math

import numpy as np

from .intervals import wilson_interval, z_value
from .results import MetricValue

__all__ = [
    "MIN_CLASS_COUNT",
    "MIN_EXPECTED_EVENTS",
    "MIN_TRIALS",
    "NAN",
    "as_index",
    "clt_mean",
    "dispersion",
    "expected_events",
    "homogeneous_delta_se",
    "quasi_binomial_interval",
    "ratio",
    "skew_corrected_bounds",
    "trials_reason",
    "wald",
    "withheld",
]

NAN = float("nan")

MIN_CLASS_COUNT = 10
"""Positives AND negatives a window needs before the intervals of the confusion-count
metrics that mix both classes (F-beta, MCC, kappa, balanced and harmonic class accuracy)
are exported; the score-based metrics need ``scores.MIN_SCORE_CLASS_COUNT``.

Below it the point value is still reported but the interval is NaN with a reason in
:attr:`MetricValue.note`: with a handful of events of one class the delta-method intervals
covered 51-88 % in simulation, and a posterior interval then reflects the prior more than the
data (measured by ``python bench/coverage.py``, docs/statistics.md)."""


MIN_TRIALS = 10
"""Trials (the denominator) a proportion needs before its Wilson interval is exported.

With fewer, the coverage of *any* non-randomized binomial interval at a fixed rate is set
by which few counts it covers: Wilson's at a true rate of 0.74 is 1.0, 0.93, 0.98, 0.94,
0.98, 0.96, 0.99, 0.97, 0.94 for 1-9 trials (exact), and a recall over one to three
positives (1 % prevalence, n = 100) covered 0.98 (Brown, Cai & DasGupta 2001, §2: the
oscillation is a property of the discrete count, not of the method)."""


MIN_EXPECTED_EVENTS = 2.0
"""Expected outcomes of the rarer kind (errors of an accuracy near 1, positives of a rate
near 0, correct outcomes of a model that is almost always wrong) a proportion's trials must
hold, at the long-run rate, for its Wilson interval; below it the interval is the exact
Clopper-Pearson one (:func:`~monitor.stats.intervals.clopper_pearson_interval`).

Why: with one or two expected events the count is 0-3 and Wilson's coverage is set by
which of those few counts it covers: it does not cover a count of 1 when p < 0.18/n and
then covers only (1 − p)ⁿ — 0.87 for an accuracy with 0.4 % errors at n = 30 (Brown, Cai &
DasGupta 2001, §4.1.1 on the boundary dips). The exact interval covers at least the
nominal level at every rate (it over-covers there, which no non-randomized interval
avoids), and it still exists: withholding the interval instead left an SLO that decides on
the interval unable to page for a model that is always wrong. From two expected events on
the measured Wilson cells stay in [0.93, 0.97] (docs/statistics.md). The rate is the
long-run one (the version's longest window), not the window's own, so which interval a
window gets does not depend on what it drew."""


def expected_events(trials: np.ndarray, rate: np.ndarray) -> np.ndarray:
    """Expected outcomes of the rarer kind among ``trials`` at ``rate``: trials·min(r, 1 − r)."""
    r = np.asarray(rate, dtype=np.float64)
    return np.asarray(trials, dtype=np.float64) * np.minimum(r, 1.0 - r)


def quasi_binomial_interval(
    total: float, total_sq: float, n: float, confidence: float, dispersion: float
) -> tuple[float, float]:
    """Score interval for the mean of a per-unit quantity in [0, 1] (a per-query NDCG, a
    reciprocal rank, a hit) with variance φ·μ(1 − μ): Wilson's interval at n/φ trials.

    Why not the CLT: a strong ranker's per-query metrics are 1 for most queries and the
    spread comes from the few that miss, so the plug-in variance is small exactly when a
    window saw few misses (hit_rate@10 covered 0.61 at 30 queries, with zero-width
    intervals). The quasi-binomial model (McCullagh & Nelder 1989, §9.2) keeps the
    variance's dependence on the mean — the interval is a score interval, as Wilson's, so
    it does not collapse at a mean of 1 — and ``dispersion`` φ is the long-run window's
    s²/(x̄(1 − x̄)) (a nuisance parameter measured on far more units). For 0/1 units
    φ = 1 and this is Wilson's interval."""
    if not (n > 0 and dispersion > 0 and math.isfinite(dispersion)):
        return NAN, NAN
    trials = n / dispersion
    lo, hi = wilson_interval(total / n * trials, trials, confidence)
    return float(lo), float(hi)


def dispersion(total: float, total_sq: float, n: float) -> float:
    """φ = s²/(x̄(1 − x̄)) of units in [0, 1] from their sums (NaN when undefined)."""
    if n < 2:
        return NAN
    mean = total / n
    var = max(total_sq - total * mean, 0.0) / (n - 1.0)
    spread = mean * (1.0 - mean)
    return var / spread if spread > 0 else NAN


def trials_reason(trials: float, minimum: int = MIN_TRIALS) -> str:
    """Empty when a proportion has ``minimum`` trials (or none: then it is undefined)."""
    if trials <= 0 or trials >= minimum:
        return ""
    return f"interval withheld: {round(trials)} trials (needs >= {minimum})"


def withheld(mv: MetricValue, reason: str) -> MetricValue:
    """The same point value with the interval withheld (NaN) and the reason recorded."""
    return MetricValue(mv.name, mv.value, NAN, NAN, mv.n, mv.method, reason)


def class_count_reason(
    positives: float, negatives: float, minimum: int = MIN_CLASS_COUNT, expected: bool = False
) -> str:
    """Empty when both classes reach ``minimum``; else why an interval is withheld.
    ``expected``: the counts are this window's rows times the long-run class shares (the
    gate then selects no windows by their own class counts)."""
    if positives >= minimum and negatives >= minimum:
        return ""
    if expected:
        return (
            f"interval withheld: {positives:.3g} positives and {negatives:.3g} negatives "
            f"expected at the long-run prevalence (needs >= {minimum} of each)"
        )
    return (
        f"interval withheld: {round(positives)} positives and {round(negatives)} negatives "
        f"(needs >= {minimum} of each)"
    )


def wald(
    name: str,
    value: float,
    se: float,
    n: int,
    confidence: float,
    method: str,
    bounds: tuple[float, float] = (-math.inf, math.inf),
) -> MetricValue:
    """Symmetric normal-approximation interval ``value ± z·se``, clipped to ``bounds``.

    Used for every metric whose standard error comes from the delta method or the CLT.
    An undefined value or standard error gives a NaN interval rather than a fake one.
    """
    if not (math.isfinite(value) and math.isfinite(se)):
        return MetricValue(name, value, NAN, NAN, n, method)
    half = z_value(confidence) * se
    lo = max(bounds[0], value - half)
    hi = min(bounds[1], value + half)
    return MetricValue(name, value, lo, hi, n, method)


def clt_mean(
    name: str,
    total: float,
    total_sq: float,
    n: float,
    confidence: float,
    bounds: tuple[float, float] = (-math.inf, math.inf),
) -> MetricValue:
    """Mean of a per-row quantity from its Σx and Σx², with a CLT (t-free Wald) interval.

    The sample variance is ``(Σx² − (Σx)²/n)/(n − 1)`` and the standard error
    ``sqrt(var / n)``. The two sums are all a window needs, so the interval merges with
    the mean. With heavy tails (infinite fourth moment) the interval is honest only in the
    sense of the CLT; see :mod:`.regression` for where it is withheld.
    """
    n_int = round(n)
    if n_int <= 0:
        return MetricValue(name, NAN, NAN, NAN, 0, "clt")
    mean = total / n
    if n_int < 2:
        return MetricValue(name, mean, NAN, NAN, n_int, "clt")
    centered = total_sq - total * total / n
    # Σx² − (Σx)²/n cancels catastrophically when the values (nearly) agree: a residue
    # below the rounding error of Σx² is zero variance, not noise to take a root of.
    if centered <= 1e-12 * abs(total_sq):
        centered = 0.0
    var = centered / (n - 1.0)
    return wald(name, mean, math.sqrt(var / n), n_int, confidence, "clt", bounds)


def skew_corrected_bounds(
    n: np.ndarray, total: np.ndarray, total_sq: np.ndarray, total_cu: np.ndarray, z: float
) -> tuple[np.ndarray, np.ndarray]:
    """Interval for a mean from Σx, Σx², Σx³ with Hall's skewness-removing transformation.

    Hall (1992), "On the removal of skewness by transformation", JRSS-B 54(1): with
    T = √n(x̄ − μ)/s and γ̂ the sample skewness, g(T) = T + aT² + a²T³/3 + γ̂/(6√n),
    a = γ̂/(3√n), is N(0, 1) to second order and monotone, with the inverse
    g⁻¹(x) = ((1 + 3a(x − γ̂/(6√n)))^(1/3) − 1)/a; so μ ∈ [x̄ − s·g⁻¹(z)/√n,
    x̄ − s·g⁻¹(−z)/√n]. Why: the log loss and Brier score of a rare class or of a very
    accurate model are means of a per-row loss with skewness 9-14, where the CLT interval
    covered 0.90-0.93 (it is symmetric, the sampling distribution of the mean is not);
    the three sums merge by addition like the other two. Where γ̂ ≈ 0 it is the CLT
    interval. Vectorized; NaN where n < 2."""
    n = np.asarray(n, dtype=np.float64)
    s1, s2, s3 = (np.asarray(x, dtype=np.float64) for x in (total, total_sq, total_cu))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        mean = s1 / n
        centered2 = np.maximum(s2 - s1 * mean, 0.0)
        var = centered2 / (n - 1.0)
        sd = np.sqrt(var)
        m3 = (s3 - 3.0 * mean * s2 + 3.0 * mean * mean * s1 - n * mean**3) / n
        gamma = np.where(var > 0, m3 / np.power(np.where(var > 0, var, 1.0), 1.5), 0.0)
        root_n = np.sqrt(n)
        a = gamma / (3.0 * root_n)
        shift = gamma / (6.0 * root_n)

        def inverse(x: float) -> np.ndarray:
            y = x - shift
            small = np.abs(a) < 1e-12
            safe = np.where(small, 1.0, a)
            return np.where(small, y, (np.cbrt(1.0 + 3.0 * safe * y) - 1.0) / safe)

        lower = mean - sd * inverse(z) / root_n
        upper = mean - sd * inverse(-z) / root_n
    ok = n >= 2
    return np.where(ok, lower, NAN), np.where(ok, upper, NAN)


def homogeneous_delta_se(grad: np.ndarray, counts: np.ndarray) -> float:
    """Delta-method standard error of a statistic f(counts) that is homogeneous of degree 0.

    Under the multinomial model with proportions p, Var f(p̂) ≈ (1/n)[Σ g_i² p_i − (Σ g_i p_i)²]
    with g = ∇_p f. For a ratio of counts (scale-free: accuracy, F-beta, MCC, ...) Euler's
    theorem gives Σ g_i p_i = 0, and rewriting the gradient in counts (∂f/∂N_i = g_i/n) leaves
    Var ≈ Σ_i (∂f/∂N_i)² N_i — the formula used throughout (Takahashi et al. 2022 for F1).
    """
    g = np.asarray(grad, dtype=np.float64)
    c = np.asarray(counts, dtype=np.float64)
    return float(math.sqrt(max(0.0, float(np.sum(g * g * c)))))


def ratio(name: str, k: float, n: float, confidence: float) -> MetricValue:
    """A proportion k/n with its Wilson interval (NaN when n = 0; withheld with a note
    below :data:`MIN_TRIALS` trials)."""
    value = k / n if n > 0 else NAN
    reason = trials_reason(n)
    if reason:
        return MetricValue(name, value, NAN, NAN, round(n), "wilson", reason)
    lo, hi = wilson_interval(k, n, confidence)
    return MetricValue(name, value, float(lo), float(hi), round(n), "wilson")


def as_index(rows: np.ndarray | int, size: int) -> np.ndarray:
    """Row indices broadcast to one per added row (an int means "all into that row")."""
    return np.broadcast_to(np.asarray(rows, dtype=np.intp), (size,))
