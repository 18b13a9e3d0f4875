"""Two-sample tests and effect sizes between a reference and a live count vector.

All functions take the reference (:mod:`.reference`) and a live count vector laid out as in
:mod:`.summaries` (index 0 = missing, excluded from every distribution comparison: missing
data is reported on its own by :func:`missing_rate_test`).

Significance and size answer different questions. With production traffic a window can hold
millions of events, and at that size any two-sample test declares a practically irrelevant
shift "significant"; an effect size says whether it matters. :class:`.detector.DriftDetector`
requires both.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np
from scipy import special

from monitor.drift.reference import CategoricalReference, NumericReference
from monitor.drift.summaries import n_cells, reference_cells

__all__ = [
    "QUANTILE_SCALE",
    "TestResult",
    "WassersteinResult",
    "binned_ks",
    "categorical_detectable",
    "chi_square",
    "js_distance",
    "js_distance_debiased",
    "ks_binning_bound",
    "missing_rate_test",
    "numeric_detectable",
    "psi",
    "quantile_effect",
    "wasserstein_binned",
]

PSI_EPS = 1e-4
"""Share floor for PSI: an empty cell would make ``ln(q/p)`` infinite (common practice)."""


class TestResult(NamedTuple):
    """A test statistic and its p-value (unpacks as ``statistic, p_value``)."""

    statistic: float
    p_value: float


class WassersteinResult(NamedTuple):
    """1-Wasserstein distance in feature units and in reference standard deviations."""

    distance: float
    distance_sd: float


def _live(ref: NumericReference | CategoricalReference, live_counts: np.ndarray) -> np.ndarray:
    counts = np.asarray(live_counts)
    if counts.shape != (n_cells(ref),):
        raise ValueError(
            f"{ref.name}: live counts must have {n_cells(ref)} cells, got shape {counts.shape}"
        )
    if (counts < 0).any():
        raise ValueError(f"{ref.name}: live counts must be non-negative")
    return counts.astype(np.float64)


def _numeric_masses(ref: NumericReference, live_counts: np.ndarray) -> tuple[np.ndarray, ...]:
    """Reference and live counts over the ordered cells ``[under, bins..., over]``."""
    live = _live(ref, live_counts)[1:]
    r = np.concatenate([[0.0], ref.counts.astype(np.float64), [0.0]])
    return r, live


_KSTWO_MAX_N = 10_000


def binned_ks(ref: NumericReference, live_counts: np.ndarray) -> TestResult:
    """Two-sample Kolmogorov–Smirnov test evaluated on the reference grid.

    The statistic is ``max |F_ref - F_live|`` over the cell boundaries (after underflow,
    after each bin, so at each edge's left limit and at the max); missing values are
    excluded. The p-value is Smirnov's two-sided distribution for that statistic with the
    effective size ``round(n m / (n + m))`` (``scipy.stats.kstwo``) — the asymptotics
    ``scipy.stats.ks_2samp(method="asymp")`` uses on raw data — and, above an effective size
    of 10,000, the limiting Kolmogorov distribution (faster by four orders, conservative).

    Error bound. Between two consecutive boundaries each CDF rises by its mass in that
    cell, so for any ``x`` inside cell ``j`` ``|F_ref(x) - F_live(x)|`` exceeds the larger of
    the two boundary differences by at most ``min(p_ref[j], p_live[j])``. Hence

        D_binned <= D_exact <= D_binned + max_j min(p_ref[j], p_live[j])

    (:func:`ks_binning_bound`). The reference never has mass outside its own range, so the
    bound is at most the largest reference bin mass: about ``1/B`` (0.01 with 100 bins)
    for continuous data, more for bins forced wide by ties. Since ``D_binned <= D_exact`` and
    the p-value decreases in the statistic, the binned p-value is never below the raw-data
    asymptotic p-value: binning only makes the test conservative.
    """
    r, q = _numeric_masses(ref, live_counts)
    n, m = r.sum(), q.sum()
    if n <= 0 or m <= 0:
        return TestResult(0.0, 1.0)
    diff = np.cumsum(r) / n - np.cumsum(q) / m
    statistic = float(np.max(np.abs(diff[:-1]))) if diff.size > 1 else 0.0
    en = round(n * m / (n + m))
    if en > _KSTWO_MAX_N:
        # Smirnov's exact-n distribution costs ~90 ms per call at n ~ 1e5 (scipy's kolmogn);
        # the limiting Kolmogorov distribution at D·sqrt(n) is within O(1/sqrt(n)) of it and
        # on the conservative side (Stephens 1970: P(D_n > d) ~ Q((sqrt(n) + 0.12 + ...) d)).
        p_value = float(special.kolmogorov(statistic * math.sqrt(en)))  # kstwobign.sf
    else:
        from scipy import stats  # (imported when first needed: a second of start-up)

        p_value = float(stats.kstwo.sf(statistic, max(en, 1)))
    return TestResult(statistic, float(np.clip(p_value, 0.0, 1.0)))


def ks_binning_bound(ref: NumericReference, live_counts: np.ndarray) -> float:
    """Largest possible ``D_exact - D_binned``: ``max_j min(p_ref[j], p_live[j])``."""
    r, q = _numeric_masses(ref, live_counts)
    n, m = r.sum(), q.sum()
    if n <= 0 or m <= 0:
        return 0.0
    return float(np.max(np.minimum(r / n, q / m)))


def wasserstein_binned(ref: NumericReference, live_counts: np.ndarray) -> WassersteinResult:
    """1-Wasserstein distance ``∫ |F_ref - F_live| dx`` between the binned distributions.

    Within a bin both CDFs are taken linear (mass spread uniformly), so their difference is
    linear and its absolute value integrates exactly (a triangle split where it changes
    sign). Out-of-range live mass is placed at the nearest reference edge — its true
    distance is unknown to the counts — so the distance is a lower bound when live data
    leaves the reference range; the out-of-range count is reported separately.

    Error: inside bin ``j`` each true CDF is within its bin mass of the linear one, so
    ``|W_binned - W_exact| <= Σ_j width_j (p_ref[j] + p_live[j])`` plus the live mass's
    distance beyond the range. The wide outer bins of equal-mass binning dominate: for a
    normal reference with 100 bins the binned value runs ≈ 0.002-0.01 SD above the exact
    one (4% at a 0.3-SD shift) — immaterial next to a 0.05-SD gate.
    Divided by the reference standard deviation it reads "how many SDs the distribution
    moved" (a pure location shift by ``δ`` has distance exactly ``|δ|``).
    """
    r, q = _numeric_masses(ref, live_counts)
    n, m = r.sum(), q.sum()
    if n <= 0 or m <= 0:
        return WassersteinResult(math.nan, math.nan)
    # CDF differences at the edges e_0..e_B: after underflow, then after each bin
    g = (np.cumsum(r) / n - np.cumsum(q) / m)[:-1]
    widths = np.diff(ref.edges)
    a, b = g[:-1], g[1:]
    same = a * b >= 0
    abs_a, abs_b = np.abs(a), np.abs(b)
    with np.errstate(invalid="ignore", divide="ignore"):
        crossing = (a * a + b * b) / (2.0 * (abs_a + abs_b))
    area = np.where(same, 0.5 * (abs_a + abs_b), crossing) * widths
    dist = float(area.sum())
    in_sd = dist / ref.std if ref.std > 0 else (0.0 if dist == 0 else math.inf)
    return WassersteinResult(dist, in_sd)


def _categorical_table(ref: CategoricalReference, live_counts: np.ndarray) -> np.ndarray:
    """2 x (K+1+S) table: reference and live counts over categories, unseen, sketch."""
    live = _live(ref, live_counts)[1:]
    return np.vstack([reference_cells(ref).astype(np.float64), live])


def chi_square(
    ref: CategoricalReference, live_counts: np.ndarray, min_expected: float = 5.0
) -> TestResult:
    """Pearson chi-square test of homogeneity on the 2 x K table (reference, live).

    Homogeneity rather than goodness of fit because the reference is itself a sample.
    Cochran's rule — expected counts of at least about 5 for the chi-square approximation —
    is enforced by folding every column whose smaller expected count is below
    ``min_expected`` into one pooled column (and the pool into the smallest remaining column
    if it is still too small). Unseen live values form their own column, so a new category
    that is frequent enough is tested rather than hidden. Yates' continuity correction is
    off: it is only defined for 1 degree of freedom and over-conservative at these sizes.
    """
    table = _categorical_table(ref, live_counts)
    table = table[:, table.sum(axis=0) > 0]
    rows = table.sum(axis=1)
    if table.shape[1] < 2 or (rows <= 0).any():
        return TestResult(0.0, 1.0)
    expected = np.outer(rows, table.sum(axis=0)) / rows.sum()
    small = expected.min(axis=0) < min_expected
    if small.any():
        big = table[:, ~small]
        pooled = table[:, small].sum(axis=1, keepdims=True)
        pooled_expected = rows * pooled.sum() / rows.sum()
        if pooled_expected.min() < min_expected and big.shape[1] > 0:
            j = int(np.argmin(big.sum(axis=0)))
            big = big.copy()
            big[:, j] += pooled[:, 0]
            table = big
        else:
            table = np.hstack([big, pooled])
    if table.shape[1] < 2:
        return TestResult(0.0, 1.0)
    from scipy import stats  # (imported when first needed: a second of start-up)

    res = stats.chi2_contingency(table, correction=False)
    return TestResult(float(res.statistic), float(res.pvalue))


def _count_pair(
    ref_counts: np.ndarray, live_counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """Two count vectors as floats; None when either is empty (a distance is undefined)."""
    p = np.asarray(ref_counts, dtype=np.float64)
    q = np.asarray(live_counts, dtype=np.float64)
    if p.shape != q.shape:
        raise ValueError(f"count vectors differ in shape: {p.shape} vs {q.shape}")
    if p.sum() <= 0 or q.sum() <= 0:
        return None
    return p, q


def psi(ref_counts: np.ndarray, live_counts: np.ndarray, eps: float = PSI_EPS) -> float:
    """Population stability index ``Σ (q - p) ln(q / p)`` over matching cells.

    Shares are floored at ``eps`` so empty cells stay finite. PSI is the symmetrised KL
    divergence of the binned distributions (Yurdakul 2018 discusses its sampling
    distribution); the industry rule of thumb reads < 0.1 stable, 0.1-0.25 moderate,
    > 0.25 major shift. Reported, not used for the decision (it depends on the binning).
    """
    pair = _count_pair(ref_counts, live_counts)
    if pair is None:
        return math.nan
    p, q = pair
    p = np.maximum(p / p.sum(), eps)
    q = np.maximum(q / q.sum(), eps)
    return float(np.sum((q - p) * np.log(q / p)))


def js_distance(ref_counts: np.ndarray, live_counts: np.ndarray) -> float:
    """Jensen–Shannon distance (base 2, in [0, 1]) between two count vectors.

    The square root of the JS divergence (Lin 1991), a metric that stays finite when a cell
    is empty on one side — unlike KL or an unfloored PSI — which matters for new categories.
    """
    pair = _count_pair(ref_counts, live_counts)
    if pair is None:
        return math.nan
    p, q = pair
    return float(np.clip(_jensenshannon(p, q), 0.0, 1.0))


def missing_rate_test(missing_ref: int, n_ref: int, missing_live: int, n_live: int) -> TestResult:
    """Two-proportion z-test (pooled variance) of the missing rates; statistic is ``z``.

    A broken upstream join or a schema change shows first as a jump in missing values; the
    pooled z-test is the textbook large-sample test of equal proportions.
    """
    if n_ref <= 0 or n_live <= 0:
        return TestResult(0.0, 1.0)
    p1, p2 = missing_ref / n_ref, missing_live / n_live
    pooled = (missing_ref + missing_live) / (n_ref + n_live)
    var = pooled * (1.0 - pooled) * (1.0 / n_ref + 1.0 / n_live)
    if var <= 0:
        return TestResult(0.0, 1.0)
    z = (p2 - p1) / math.sqrt(var)
    return TestResult(float(z), float(2.0 * special.ndtr(-abs(z))))  # 2 norm.sf(|z|)


QUANTILE_SCALE = 2.0 * math.sqrt(math.pi)
"""Converts ∫|F_ref − F_live| dF_ref to normal-SD units: a location shift δ of a normal
feature gives δ·∫φ² = δ/(2√π) on the probability scale."""

_LN2 = math.log(2.0)


def _n_eff(n: float, m: float) -> float:
    return n * m / (n + m)


def quantile_effect(ref: NumericReference, live_counts: np.ndarray) -> tuple[float, float]:
    """Robust, noise-corrected effect size of a numeric feature: ``(effect, null)``.

    The distance is the 1-Wasserstein distance between the two distributions *after the
    reference's probability integral transform*, W = ∫|F_ref − F_live| dF_ref: every
    reference quantile step weighs the same, so the wide, sparsely populated outer bins
    cannot dominate (on the feature's own scale a Cauchy feature's outermost bins are
    ~10⁴ SDs wide and their sampling noise alone passed the gate in simulation). It is scaled
    by 2√π so that a location shift of δ SDs of a *normal* feature reads ≈ δ, the
    unit the gate has always used; for other shapes it reads "the normal shift that would
    move the ranks as much".

    Sampling noise: with n live and m reference values, √n_eff (F_ref − F_live) is a
    Brownian bridge B under H0 (n_eff = nm/(n+m)), and E|B(t)| = √(2t(1−t)/π), so the
    expected null distance is ``null = 2√π ∫√(2t(1−t)/π) dt / √n_eff`` (≈ 1.11/√n_eff
    for a continuous feature; evaluated on the reference's own cells so ties count). The
    returned effect is ``max(0, W·2√π − null)``: the part of the distance noise cannot
    explain (the "expected null distance subtracted" correction).
    """
    r, q = _numeric_masses(ref, live_counts)
    n, m = r.sum(), q.sum()
    if n <= 0 or m <= 0:
        return math.nan, math.nan
    cdf_ref = np.cumsum(r) / n
    g = (cdf_ref - np.cumsum(q) / m)[:-1]  # at the edges: after underflow, after each bin
    mass = r[1:-1] / n  # reference probability of each inner bin
    a, b = g[:-1], g[1:]
    same = a * b >= 0
    abs_a, abs_b = np.abs(a), np.abs(b)
    with np.errstate(invalid="ignore", divide="ignore"):
        crossing = (a * a + b * b) / (2.0 * (abs_a + abs_b))
    w = float((np.where(same, 0.5 * (abs_a + abs_b), crossing) * mass).sum())
    f = cdf_ref[:-1]
    edge_sd = np.sqrt(2.0 * f * (1.0 - f) / math.pi)
    null_w = float((0.5 * (edge_sd[:-1] + edge_sd[1:]) * mass).sum()) / math.sqrt(_n_eff(n, m))
    null = QUANTILE_SCALE * null_w
    return max(0.0, QUANTILE_SCALE * w - null), null


NULL_DRAWS = 64
"""Monte-Carlo draws of the null JS divergence per categorical feature and window."""


def _jensenshannon(p: np.ndarray, q: np.ndarray) -> float:
    """``scipy.spatial.distance.jensenshannon(p, q, base=2.0)``, its very steps, without
    importing scipy.spatial (a third of a second of start-up)."""
    p = p / np.sum(p, axis=0, keepdims=True)
    q = q / np.sum(q, axis=0, keepdims=True)
    m = (p + q) / 2.0
    js = np.sum(special.rel_entr(p, m), axis=0) + np.sum(special.rel_entr(q, m), axis=0)
    js /= np.log(2.0)
    return np.sqrt(js / 2.0)


def _jsd_rows(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Base-2 JS divergence between matching rows of two count matrices."""
    p = p / p.sum(axis=1, keepdims=True)
    q = q / q.sum(axis=1, keepdims=True)
    m = (p + q) / 2.0
    with np.errstate(divide="ignore", invalid="ignore"):
        kl_p = np.where(p > 0, p * np.log2(p / np.where(m > 0, m, 1.0)), 0.0).sum(axis=1)
        kl_q = np.where(q > 0, q * np.log2(q / np.where(m > 0, m, 1.0)), 0.0).sum(axis=1)
    return np.maximum((kl_p + kl_q) / 2.0, 0.0)


def js_distance_debiased(ref_counts: np.ndarray, live_counts: np.ndarray) -> tuple[float, float]:
    """Jensen–Shannon distance with the expected null divergence removed: ``(effect, null)``.

    Two samples of sizes m and n from one distribution over K cells have a JS divergence of
    ≈ (K − 1)(1/n + 1/m)/(8 ln 2) from noise alone (second order; more when many cells hold
    a handful of events): with 200 categories at n = 1,000 that is a JS distance near 0.2,
    far above any gate (100 % of no-drift windows passed it in simulation). The null expectation
    E₀ JSD is computed by drawing both samples ``NULL_DRAWS`` times from the pooled
    distribution (fixed seed: a parametric bootstrap, exact for sparse cells where the
    second-order formula under-reads by ~15 %). The effect is √max(0, JSD − E₀ JSD) and
    ``null`` is √E₀ JSD, the distance pure noise shows at these sizes.
    """
    pair = _count_pair(ref_counts, live_counts)
    if pair is None:
        return math.nan, math.nan
    p, q = pair
    jsd = float(_jensenshannon(p, q)) ** 2
    pooled = (p + q) / (p.sum() + q.sum())
    rng = np.random.default_rng(NULL_SEED)
    ref_draws = rng.multinomial(round(p.sum()), pooled, size=NULL_DRAWS).astype(np.float64)
    live_draws = rng.multinomial(round(q.sum()), pooled, size=NULL_DRAWS).astype(np.float64)
    expected = float(_jsd_rows(ref_draws, live_draws).mean())
    return math.sqrt(max(0.0, jsd - expected)), math.sqrt(expected)


NULL_SEED = 20261123


_KS_SLOPE = 1.0 / math.sqrt(2.0 * math.pi)
"""KS distance per SD of a normal location shift for small shifts: 2Φ(δ/2) − 1 ≈ φ(0)·δ."""


_KS_POWER_SPREAD = 0.15
"""Spread of √n_eff·D around its mean under a location shift, fitted by simulation
(tests/unit/test_drift_gate_simulation.py: normal feature, 100-bin reference of 100,000)."""


def numeric_detectable(n: float, m: float, alpha: float, power: float = 0.8) -> float:
    """Smallest normal-SD location shift the binned KS test detects with ``power`` at this n.

    A shift δ of a normal feature moves the CDF by at most 2Φ(δ/2) − 1 ≈ φ(0)·δ, so
    √n_eff·D ≈ √n_eff·φ(0)·δ plus noise of spread ≈ 0.15; the shift reaching the level-α
    critical value c_α (Kolmogorov distribution) with probability ``power`` is
    δ ≈ (c_α + 0.15·z_power)/(φ(0)·√n_eff). An approximation (normal feature, no
    multiple-testing correction) for sizing windows: ≈ 0.12 SD at 1,000 events and 0.037 at
    10,000 against a large reference; the effect gate is the floor.
    """
    if n <= 0 or m <= 0:
        return math.nan
    c = float(special.kolmogi(alpha))  # (scipy.stats.kstwobign.isf)
    z = float(special.ndtri(power))  # (scipy.stats.norm.ppf)
    return (c + _KS_POWER_SPREAD * z) / (_KS_SLOPE * math.sqrt(_n_eff(n, m)))


@functools.lru_cache(maxsize=256)
def _noncentrality(df: int, alpha: float, power: float) -> float:
    from scipy import optimize, stats  # (imported when first needed: a second of start-up)

    crit = float(stats.chi2.isf(alpha, df))
    return float(
        optimize.brentq(lambda lam: float(stats.ncx2.sf(crit, df, lam)) - power, 1e-6, 1e4)
    )


def categorical_detectable(k: int, n: float, m: float, alpha: float, power: float = 0.8) -> float:
    """Smallest JS distance the chi-square test detects with ``power``: √(λ/(8 ln 2 · n_eff)),
    λ the noncentrality at which χ²(K − 1) exceeds its level-α critical value with that
    probability (Cohen 1988, §7: λ = n_eff·χ²-divergence)."""
    if n <= 0 or m <= 0 or k < 2:
        return math.nan
    lam = _noncentrality(k - 1, alpha, power)
    return math.sqrt(lam / (8.0 * _LN2 * _n_eff(n, m)))
