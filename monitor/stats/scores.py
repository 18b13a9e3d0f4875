"""Score-based binary metrics (ROC-AUC, PR-AUC, losses, calibration, threshold economics)
from one fixed-size, additive histogram layout.

Layout (float64; B fine bins, M calibration bins; ``width = 5B + 3M + 9``):

* ``[0, B)`` negatives per fine bin, ``[B, 2B)`` positives per fine bin,
  ``[2B, 3B)`` Σp per fine bin (both classes);
* ``[3B, 3B+M)`` count, ``[3B+M, 3B+2M)`` Σp, ``[3B+2M, 3B+3M)`` Σy per equal-width
  calibration bin ``(m/M, (m+1)/M]`` (first bin closed: Guo et al.'s intervals and sklearn
  ``calibration_curve``'s ``searchsorted`` convention) — stored exactly so
  ECE/MCE/reliability are not approximated;
* ``[3B+3M, 3B+3M+5)`` n, Σ log-loss, Σ log-loss², Σ (p−y)², Σ (p−y)⁴;
* ``[3B+3M+5, 3B+3M+8)`` the rows counted in the cubic sums, Σ log-loss³, Σ |p−y|⁶ — the
  third moments of the two losses, for their skewness-corrected intervals (appended: a
  checkpoint written before them loads with zeros there, and a window whose cubic count
  falls short of n falls back to the CLT interval).
* ``[3B+3M+8, 4B+3M+8)`` Σp of the positives per fine bin, ``[4B+3M+8, 5B+3M+8)`` Σp² per
  fine bin (both classes), ``5B+3M+8`` the rows counted in them — what average precision
  reads inside a bin (:func:`average_precision_many`; appended like the cubic sums: a
  window whose count falls short of n reads every bin as one group of tied scores).

Fine bins: the B − 1 interior edges are uniform in logit(p) on [−L, L] (default B = 2048,
L = 16, i.e. p in [1.1e-7, 1 − 1.1e-7]); the end bins are [0, σ(−L)) and [σ(L), 1]. A logit
bin is 0.0156 wide, so a score p lands in a bin of relative width ≈ 1.6 % of p(1−p):
scores concentrated in [0.001, 0.01] still spread over ~147 bins. Bin j holds
``lower[j] <= p < lower[j+1]``, so "predict positive iff p >= lower[j]" is exact at every
bin edge — the thresholds ROC, PR and the economics are evaluated at. A version's fine
histogram (slice ``all``) and a segment slice's coarser one (``slice_score_bins``) share
this layout, and their metrics one implementation: every formula takes a stack of
vectors (:meth:`ScoreLayout.metrics_many`), one vector being a 1-row stack.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache, partial
from itertools import repeat
from typing import Literal, NamedTuple

import numpy as np

# scipy.special is imported where it is used: `monitor check-config` imports this module
# (the configuration's metric names) and needs none of it (~0.4 s of CPU per start)
from .common import (
    MIN_CLASS_COUNT,
    NAN,
    class_count_reason,
    skew_corrected_bounds,
    trials_reason,
    wald,
    withheld,
)
from .common import as_index as _as_index
from .common import ratio as _ratio
from .intervals import wilson_interval, z_value
from .results import MetricValue

__all__ = [
    "MIN_SCORE_CLASS_COUNT",
    "ReliabilityBin",
    "ScoreCells",
    "ScoreLayout",
    "ThresholdValue",
    "ValueMatrix",
    "average_precision_from_hist",
    "average_precision_many",
    "average_precision_se_many",
    "calibration_test",
    "calibration_test_many",
    "ece_debiased_from_bins",
    "ece_debiased_many",
    "ece_from_bins",
    "ece_many",
    "equal_mass_bins",
    "gain_name",
    "gini_from_auc",
    "ks_from_hist",
    "mce_from_bins",
    "mce_many",
    "reliability_many",
    "roc_auc_from_hist",
    "roc_auc_many",
]


@dataclass(frozen=True, slots=True)
class ValueMatrix:
    """Value (profit, negative for cost) of one prediction per outcome, in any currency."""

    tp: float
    fp: float
    fn: float
    tn: float


@dataclass(frozen=True, slots=True)
class ThresholdValue:
    """Expected value per prediction when predicting positive iff ``score >= threshold``.

    ``threshold`` is a bin edge (``inf`` = never predict positive). ``value`` carries the
    EV with its CLT interval (per-row value takes four values with multinomial weights).
    """

    threshold: float
    value: MetricValue


class ReliabilityBin(NamedTuple):
    """One point of a reliability diagram: mean predicted vs observed frequency (Wilson).

    A named tuple (immutable, ten times cheaper to build than a frozen dataclass): a tick
    builds one per calibration bin of every changed slice window."""

    lower: float
    upper: float
    count: int
    mean_predicted: float
    observed: float
    observed_lower: float
    observed_upper: float


# --------------------------------------------------------------------------- formulas
#
# Every formula takes a stack of histograms — (rows × bins) arrays, one row per window or
# slice — and returns one value per row: an evaluation tick of a fleet computes ~10⁴
# slice windows, and per-call NumPy overhead on a few hundred bins dominated when each was
# a separate call. A single vector is a 1-row stack (the ``*_from_hist``/``*_from_bins``
# functions), so slice ``all`` and every segment slice run the same code, and each row's
# result depends only on its own row.

MIN_SCORE_CLASS_COUNT = 30
"""Positives and negatives before the ROC-AUC, PR-AUC, log-loss and Brier intervals are
exported. Measured (docs/statistics.md): with 10-20 events of the smaller class the
logit-t DeLong interval covered 0.87-0.91, average precision's logit interval 0.92, and
the CLT intervals of the log loss and Brier score — means of a per-row loss that is
strongly skewed when one class is rare — 0.92 or 0.99; from 30 on all stay in
[0.93, 0.97]. (The confusion-count metrics need only ``MIN_CLASS_COUNT``.)"""

CUBIC_COLUMNS = 3
"""Columns appended for the losses' third moments (a layout one narrower is their legacy)."""

AUC_PSEUDO_PAIR = 0.5
"""Pseudo-observations added to each class before the DeLong variance of the ROC-AUC
interval: this many positives distributed as the negatives and negatives distributed as
the positives — half a chance-level pair (see :func:`_roc_auc_arrays`)."""

MIN_GROUP_EVENTS = 5.0
"""Expected positives and negatives each calibration group needs for the chi-square test."""

ECE_INTERVAL_NOTE = "no interval: use calibration_p_value for evidence of miscalibration"

EVIDENCE_ALPHA = 0.05
"""β of the evidence weight in :func:`ece_debiased_many`: below a calibration-test
p-value of β the noise term is phased out."""

EVIDENCE_POWER = 0.5
"""γ of the evidence weight w(p) = min(1, p/β)^γ / (1 − βγ/(γ + 1))."""

_P_VALUE_NOTE = "a p-value has no interval"
_FEW_EVENTS_NOTE = "too few expected events for a calibration test"


def _rows(a: np.ndarray) -> np.ndarray:
    return np.atleast_2d(np.asarray(a, dtype=np.float64))


def roc_auc_many(
    neg: np.ndarray, pos: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """ROC-AUC of each row of class histograms over ordered bins: (auc, se_delong,
    se_hanley, bound), NaN for a row without both classes.

    AUC = P(score⁺ > score⁻) + ½ P(tie) with every pair inside one bin counted as a tie
    (Mann–Whitney with mid-ranks). sklearn's exact AUC differs only on within-bin pairs,
    each of which it scores 0, ½ or 1 instead of ½, so
    |AUC_hist − AUC_exact| <= ½ Σ_j pos_j·neg_j / (P·N) — the returned ``bound``, which is
    zero when every bin holds one distinct score (exact ties are halves for sklearn too).

    SEs: DeLong, DeLong & Clarke-Pearson (1988) structural components, exact at bin
    granularity because each observation's placement value only needs the other class's
    histogram; and Hanley & McNeil (1982): Q1 = A/(2−A), Q2 = 2A²/(1+A),
    Var = [A(1−A) + (P−1)(Q1−A²) + (N−1)(Q2−A²)]/(P·N).
    """
    neg, pos = _rows(neg), _rows(pos)
    n_pos, n_neg = pos.sum(axis=1), neg.sum(axis=1)
    both = (n_pos > 0) & (n_neg > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        np_, nn = n_pos[:, None], n_neg[:, None]
        v10 = (np.cumsum(neg, axis=1) - neg + neg / 2) / nn  # placement of a positive in bin j
        v01 = (np_ - np.cumsum(pos, axis=1) + pos / 2) / np_  # placement of a negative in bin j
        auc = np.einsum("ij,ij->i", pos, v10) / n_pos
        s10 = np.where(n_pos > 1, np.einsum("ij,ij->i", pos, (v10 - auc[:, None]) ** 2)
                       / (n_pos - 1), 0.0)  # fmt: skip
        s01 = np.where(n_neg > 1, np.einsum("ij,ij->i", neg, (v01 - auc[:, None]) ** 2)
                       / (n_neg - 1), 0.0)  # fmt: skip
        se_delong = np.sqrt(s10 / n_pos + s01 / n_neg)
        q1, q2 = auc / (2 - auc), 2 * auc * auc / (1 + auc)
        var_hm = (auc * (1 - auc) + (n_pos - 1) * (q1 - auc * auc)
                  + (n_neg - 1) * (q2 - auc * auc)) / (n_pos * n_neg)  # fmt: skip
        bound = 0.5 * np.einsum("ij,ij->i", pos, neg) / (n_pos * n_neg)
    nan = np.full(auc.shape, NAN)
    return (
        np.where(both, auc, nan),
        np.where(both, se_delong, nan),
        np.where(both, np.sqrt(np.maximum(var_hm, 0.0)), nan),
        np.where(both, bound, nan),
    )


TIE_TOLERANCE = 1e-9
"""A bin whose within-class sum of squares is at most this share of its Σp² (plus
:data:`SCORE_RESOLUTION`² a row) holds tied scores per class: above the float residue of
a window's running sums, below the spread of distinct scores in a bin (about
(1.6 % of p)²/12 relative at 2,048 bins)."""

SCORE_RESOLUTION = 1e-12
"""Scores closer than this are one score (the residue of sums of tiny scores)."""

AP_NODES = 8
"""Points per bin at which the positives' precisions are evaluated: every positive of a
bin holding at most this many, else the midpoints of this many equal groups."""


def average_precision_many(
    neg: np.ndarray,
    pos: np.ndarray,
    offset: float = 0.0,
    within: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    complete: np.ndarray | None = None,
) -> np.ndarray:
    """Average precision of each row of class histograms over ordered bins, as
    scikit-learn's ``average_precision_score`` on the raw scores: NaN without positives.

    AP = (1/P) Σ_i precision at the i-th positive (highest score first), tied scores one
    threshold. Between bins the order is known; inside a bin it is read from ``within``
    = (Σp of the positives, Σp, Σp²) per bin:

    * tied scores (the pooled within-class sum of squares is zero, :data:`TIE_TOLERANCE`):
      scikit-learn's tie rule — the bin's positives enter together at the precision of the
      bin's end, after the negatives when both classes hold one equal score, else in the
      order of the two scores; exact;
    * distinct scores: an equal-variance binormal model of the bin (Hanley 1988 — the
      classes' means and pooled variance, on n − 2 degrees of freedom): the positive at
      rank r/(p + 1) from the top of the bin's p is preceded by n·Φ(Φ⁻¹(r/(p + 1)) + δ)
      of its n negatives, δ = (mean⁻ − mean⁺)/sd; δ = 0 is a random order of the bin.
      Evaluated at every positive of a bin (at most :data:`AP_NODES`) or the midpoints of
      :data:`AP_NODES` groups.

    Without ``within``, or for a row where ``complete`` is False (its statistics miss some
    rows), every bin is read as one group of tied scores: the AP of the binned scores,
    which reads low by up to the precision a bin's width spans (−0.005 to −0.009 at 128
    bins on a rare-event stream; within 0.002 with ``within``, docs/semantics.md).

    ``offset`` c > 0 gives the mid-rank variant: each positive enters at precision
    (TP − c)/(TP − c + FP) instead of TP/(TP + FP) (see :meth:`ScoreLayout.pr_auc_debiased`).
    """
    return _average_precisions(neg, pos, (offset,), within, complete)[0]


def _average_precisions(
    neg: np.ndarray,
    pos: np.ndarray,
    offsets: Sequence[float],
    within: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    complete: np.ndarray | None = None,
) -> list[np.ndarray]:
    """:func:`average_precision_many` at each of ``offsets``: the offset enters only the
    precisions, so the cumulative counts and the within-bin reading (the costly part)
    are computed once for both of a window's variants."""
    from scipy.special import ndtr, ndtri

    neg, pos = _rows(neg), _rows(pos)
    n_pos = pos.sum(axis=1)
    tp_base = np.cumsum(pos[:, ::-1], axis=1)[:, ::-1] - pos
    fp_above = np.cumsum(neg[:, ::-1], axis=1)[:, ::-1] - neg
    row, col = np.nonzero(pos > 0)  # only bins with positives add to AP
    p, n = pos[row, col], neg[row, col]
    with np.errstate(divide="ignore", invalid="ignore"):
        distinct = np.zeros(p.shape, dtype=bool)
        first = np.zeros(p.shape, dtype=bool)
        delta = np.zeros(p.shape)
        if within is not None:
            s_pos, s_all, sq = (_rows(a)[row, col] for a in within)
            ok = np.ones(n_pos.shape, bool) if complete is None else np.asarray(complete, bool)
            ok = ok[row]
            m_p = s_pos / p
            m_n = np.where(n > 0, (s_all - s_pos) / n, 0.0)
            ss = sq - p * m_p**2 - n * m_n**2  # within-class sum of squares
            distinct = (ss > TIE_TOLERANCE * sq + (p + n) * SCORE_RESOLUTION**2) & ok
            sd = np.sqrt(np.maximum(ss, 0.0) / np.maximum(p + n - 2.0, 1.0))
            delta = np.where(distinct, (m_n - m_p) / np.where(distinct, sd, 1.0), 0.0)
            # tied per class, the positives' score above the negatives': they come first
            apart = TIE_TOLERANCE * (np.abs(m_p) + np.abs(m_n)) + SCORE_RESOLUTION
            first = ~distinct & ok & (m_p - m_n > apart)
        p2, n2, d2 = p[:, None], n[:, None], distinct[:, None]
        k = np.arange(AP_NODES, dtype=np.float64)
        few = p2 <= AP_NODES
        rank = np.where(few, k + 1.0, (k + 0.5) * p2 / AP_NODES + 0.5)
        weight = np.where(few, np.clip(p2 - k, 0.0, 1.0), p2 / AP_NODES)
        share = np.where(first[:, None], 0.0, 1.0) * np.ones_like(rank)
        read = distinct & (n > 0)  # a binormal reading is needed
        share[read] = ndtr(ndtri(rank[read] / (p2[read] + 1.0)) + delta[read, None])
        ahead = np.where(d2, rank, p2)
        tp_at, fp_at, n_ahead = tp_base[row, col, None], fp_above[row, col, None], n2 * share
        out = []
        for offset in offsets:
            tp = (tp_at - offset) + ahead
            total = tp + fp_at + n_ahead
            live = (weight > 0) & (total > 0)
            precision = np.where(live, tp / np.where(live, total, 1.0), 0.0)
            ap = np.bincount(row, np.einsum("ij,ij->i", weight, precision), n_pos.size)
            out.append(np.where(n_pos > 0, ap / n_pos, NAN))
        return out


def ece_many(
    count: np.ndarray, sum_p: np.ndarray, sum_y: np.ndarray, z: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Expected calibration error Σ_b (n_b/n)·|ȳ_b − p̄_b| (Guo et al. 2017) = Σ_b |Σy − Σp|/n
    of each row of calibration bins: (value, lower, upper, n).

    Interval: delta method treating each bin's outcome sum as binomial around its own mean
    (Var Σy_b ≈ n_b·ȳ_b(1−ȳ_b), bins independent, |·| differentiated away from 0), so
    SE = sqrt(Σ_b n_b ȳ_b(1−ȳ_b))/n. ECE is biased upward for a calibrated model (the
    |·| of noise is positive) and the interval is conditional on the binning: read it as
    "how precisely this window measures the binned gap", not as a calibration test.
    """
    count, sp, sy = _rows(count), _rows(sum_p), _rows(sum_y)
    n = count.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.where(n > 0, np.abs(sy - sp).sum(axis=1) / n, NAN)
        ybar = np.where(count > 0, sy / np.where(count > 0, count, 1.0), 0.0)
        se = np.sqrt(np.sum(count * ybar * (1 - ybar), axis=1)) / n
    lo, hi = _wald(value, se, z, (0.0, 1.0))
    return value, lo, hi, np.where(n > 0, n, 0.0)


def _binomial_mad(n: np.ndarray, p: np.ndarray) -> np.ndarray:
    """E|X − np| for X ~ Binomial(n, p), de Moivre's closed form 2(m+1)(1−p)·P(X = m+1),
    m = ⌊np⌋ (Diaconis & Zabell 1991, "Closed form summation for classical distributions")."""
    from scipy.special import gammaln

    m = np.floor(n * p)
    k = m + 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        log_pmf = (
            gammaln(n + 1.0) - gammaln(k + 1.0) - gammaln(n - k + 1.0)
            + k * np.log(p) + (n - k) * np.log1p(-p)
        )  # fmt: skip
        pmf = np.where((k <= n) & (p > 0.0) & (p < 1.0), np.exp(log_pmf), 0.0)
    return 2.0 * k * (1.0 - p) * pmf


def _evidence_weight(p_value: np.ndarray | float) -> np.ndarray:
    """w(p) of :func:`ece_debiased_many` (1 where p is undefined); its mean over
    p ~ Uniform(0, 1) is 1."""
    beta, gamma = EVIDENCE_ALPHA, EVIDENCE_POWER
    p = np.asarray(p_value, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        w = np.minimum(1.0, p / beta) ** gamma / (1.0 - beta * gamma / (gamma + 1.0))
    return np.where(np.isfinite(p), w, 1.0)


def ece_debiased_many(
    count: np.ndarray, sum_p: np.ndarray, sum_y: np.ndarray, p_value: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """ECE with the calibrated model's expected ECE subtracted (mean ≈ 0 when calibrated)
    of each row, given its :func:`calibration_test_many` p-value: (value, n).

    The plug-in ECE Σ_b |S_b|/n, S_b = Σy − Σp over bin b, is biased upward: for a perfectly
    calibrated model S_b is pure binomial noise and E|S_b| is its mean absolute deviation
    MAD_b (at n = 1,000 with 10 bins the plug-in reads 0.025-0.03 for a perfect model).
    Following Roelofs et al. (2022, "Mitigating bias in calibration error estimation") and
    Kumar et al. (2019, "Verified uncertainty calibration", debiased estimator), the
    expected noise Σ_b MAD_b is subtracted, with MAD_b exact for Binomial(n_b, p̄_b)
    (:func:`_binomial_mad`) — weighted by the evidence of miscalibration:

        ece_debiased = (Σ_b |S_b| − w(p)·Σ_b MAD_b) / n,
        w(p) = min(1, p/β)^γ / (1 − βγ/(γ + 1)),  β = 0.05, γ = ½,

    p the calibration-test p-value of the same bins. Why: given the scores the MADs are
    constants, and under calibration p is uniform, so E w(p) = 1 and
    E[ece_debiased] = Σ MAD_b − Σ MAD_b = 0 whatever the dependence between p and |S_b|.
    When the χ² test (which pools the evidence of all bins) finds a real gap, p is small
    and the noise term is no longer subtracted from the signal: the plain subtraction reads
    a true ECE of 0.06 as 0.03 at n = 1,000, a per-bin kernel weight (each bin's own
    z-score, |z| ≈ 1.3 there) as 0.041 with a spread of 0.016, and this weight as 0.060.
    The form of w trades the two error rates of an ECE SLO at 0.02 (measured in
    docs/statistics.md). The value can be slightly negative: read it as "no evidence of
    miscalibration".

    No interval: |S_b| is a folded normal whose spread depends on the unknown gap, and the
    Wald interval built from the folded-normal variance covered only 0.80-0.92 of
    calibrated windows and 0.5-0.7 at a true ECE of 0.06 (n ≤ 1,000). ECE SLOs use the
    point rule on this value, and the calibration test is the evidence that a model is
    miscalibrated.
    """
    count, sp, sy = _rows(count), _rows(sum_p), _rows(sum_y)
    n = count.sum(axis=1)
    ok = count > 0
    c = np.where(ok, count, 1.0)
    pbar = np.clip(np.where(ok, sp / c, 0.0), 0.0, 1.0)
    noise = np.where(ok, _binomial_mad(c, pbar), 0.0).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        gap = np.where(ok, np.abs(sy - sp), 0.0).sum(axis=1)
        value = np.where(n > 0, (gap - _evidence_weight(p_value) * noise) / n, NAN)
    return value, np.where(n > 0, n, 0.0)


def calibration_test_many(
    count: np.ndarray, sum_p: np.ndarray, sum_y: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bin-level goodness-of-fit test of calibration of each row: (p-value, testable, n).

    H0: the model is calibrated, i.e. in each calibration bin Σy has mean Σp. Under H0
    S_b = Σy − Σp has variance Σ p(1−p) ≈ n_b p̄_b(1 − p̄_b), and χ² = Σ_g S_g²/V_g is
    asymptotically χ² with G degrees of freedom (G groups, no parameter fitted on the
    window) — the Hosmer–Lemeshow statistic for a model evaluated out of sample (Hosmer &
    Lemeshow 2000, §5.2.2). Adjacent bins are pooled (in score order) until each group
    expects at least 5 positives and 5 negatives (Cochran's rule), the remainder joining
    the last group, so the χ² approximation holds at small n; groups without variance are
    left out. Measured false alarm rate at α = 0.05 and power are in docs/statistics.md.
    ``testable`` is False (p NaN) for a row with too few expected events.
    """
    count, sp, sy = _rows(count), _rows(sum_p), _rows(sum_y)
    rows, bins = count.shape
    with np.errstate(divide="ignore", invalid="ignore"):
        var = np.where(count > 0, sp * (1.0 - sp / np.where(count > 0, count, 1.0)), 0.0)
    cur = np.zeros((rows, 4))  # [Σy − Σp, V, Σp, Σ(1 − p)]
    last = np.zeros((rows, 4))
    has_last = np.zeros(rows, bool)
    n_groups = np.zeros(rows, np.int64)
    chi2 = np.zeros(rows)
    usable = np.zeros(rows, np.int64)

    def close(mask: np.ndarray) -> None:  # the previous last group is final
        fin = mask & has_last & (last[:, 1] > 0)
        # a subnormal V (scores of exactly 0 or 1 but one) gives χ² = inf, p = 0: certainty
        # contradicted by an outcome is evidence against calibration, not a numeric fault
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            chi2[:] = np.where(fin, chi2 + last[:, 0] ** 2 / last[:, 1], chi2)
        usable[:] += fin

    for j in range(bins):
        live = count[:, j] > 0
        step = np.stack([sy[:, j] - sp[:, j], var[:, j], sp[:, j], count[:, j] - sp[:, j]], 1)
        cur = np.where(live[:, None], cur + step, cur)
        push = live & (cur[:, 2] >= MIN_GROUP_EVENTS) & (cur[:, 3] >= MIN_GROUP_EVENTS)
        close(push)
        last = np.where(push[:, None], cur, last)
        has_last |= push
        n_groups += push
        cur = np.where(push[:, None], 0.0, cur)
    rest = cur[:, 2] + cur[:, 3] > 0
    last = np.where((rest & has_last)[:, None], last + cur, np.where(rest[:, None], cur, last))
    n_groups += rest & ~has_last
    has_last |= rest
    close(np.ones(rows, bool))
    n = count.sum(axis=1)
    lone = (n_groups == 1) & ((last[:, 2] < 1) | (last[:, 3] < 1))
    ok = (np.rint(n) > 0) & (usable > 0) & ~lone
    from scipy.special import chdtrc

    p_value = np.where(ok, chdtrc(np.maximum(usable, 1), chi2), NAN)
    return p_value, ok, np.where(n > 0, n, 0.0)


def mce_many(
    count: np.ndarray, sum_p: np.ndarray, sum_y: np.ndarray, z: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Maximum calibration error max_b |ȳ_b − p̄_b| over non-empty bins (Guo et al. 2017)
    of each row: (value, lower, upper, n).

    Interval: Wald on the arg-max bin's observed frequency (SE sqrt(ȳ(1−ȳ)/n_b)); n is
    that bin's count. It ignores the selection of the maximum, so it is optimistic.
    """
    count, sp, sy = _rows(count), _rows(sum_p), _rows(sum_y)
    ok = count > 0
    c = np.where(ok, count, 1.0)
    ybar = sy / c
    gap = np.where(ok, np.abs(ybar - sp / c), -np.inf)
    b = np.argmax(gap, axis=1)
    r = np.arange(count.shape[0])
    any_ok = ok.any(axis=1)
    value = np.where(any_ok, gap[r, b], NAN)
    yb = ybar[r, b]
    with np.errstate(invalid="ignore"):
        se = np.sqrt(yb * (1 - yb) / c[r, b])
    lo, hi = _wald(value, se, z, (0.0, 1.0))
    return value, lo, hi, np.where(any_ok, count[r, b], 0.0)


def equal_mass_bins(
    neg: np.ndarray, pos: np.ndarray, sum_p: np.ndarray, mc: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(count, Σp, Σy) per equal-mass bin of each row, formed by merging adjacent fine bins.

    A fine bin goes to coarse bin floor(M·(rows before it + half its rows)/n), so the
    coarse bins hold ≈ n/M rows each, off by at most one fine bin's mass (fine bins are
    never split). The gap uses the exact per-fine-bin Σp and positive counts."""
    neg, pos, sp = _rows(neg), _rows(pos), _rows(sum_p)
    rows = neg.shape[0]
    cnt = neg + pos
    n = cnt.sum(axis=1)
    mid = np.cumsum(cnt, axis=1) - cnt / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        group = np.floor(mc * mid / np.where(n > 0, n, 1.0)[:, None]).astype(np.intp)
    flat = (np.minimum(mc - 1, group) + mc * np.arange(rows)[:, None]).ravel()
    count, s_p, s_y = (
        np.bincount(flat, weights=w.ravel(), minlength=rows * mc).reshape(rows, mc)
        for w in (cnt, sp, pos)
    )
    return count, s_p, s_y


def reliability_many(
    count: np.ndarray, sum_p: np.ndarray, sum_y: np.ndarray, confidence: float
) -> list[tuple[ReliabilityBin, ...]]:
    """Equal-width reliability diagram points of each row (empty bins have NaN means)."""
    count, sp, sy = _rows(count), _rows(sum_p), _rows(sum_y)
    mc = count.shape[1]
    lo, hi = wilson_interval(sy, count, confidence)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_p = np.where(count > 0, sp / count, NAN).tolist()
        mean_y = np.where(count > 0, sy / count, NAN).tolist()
    edges = np.linspace(0.0, 1.0, mc + 1).tolist()
    lowers, uppers = edges[:-1], edges[1:]
    counts = np.rint(count).astype(np.int64).tolist()
    # plain floats: this runs for every exported window, ~10 bins each (built in C)
    return [
        tuple(map(_new_bin, zip(lowers, uppers, c, mp, my, lw, hg, strict=True)))
        for c, mp, my, lw, hg in zip(counts, mean_p, mean_y, lo.tolist(), hi.tolist(), strict=True)
    ]


# a named tuple from a tuple of its fields without its Python ``__new__`` (a tick builds
# ~10⁵ of them: ``map`` over zipped field lists then runs in C)
_new_bin = partial(tuple.__new__, ReliabilityBin)
_new_value = partial(tuple.__new__, MetricValue)


# -- (value, lower, upper, n) arrays -> MetricValue lists ------------------------------

# (value, lower, upper, n, method, note) per row, as lists
_Column = tuple[list[float], list[float], list[float], list[int], list[str], list[str]]


def _wald(
    value: np.ndarray, se: np.ndarray, z: float, bounds: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray]:
    """``stats.common.wald``'s interval: value ± z·se clipped, NaN unless both finite."""
    ok = np.isfinite(value) & np.isfinite(se)
    with np.errstate(invalid="ignore"):
        half = z * se
        lo = np.maximum(bounds[0], value - half)
        hi = np.minimum(bounds[1], value + half)
    return np.where(ok, lo, NAN), np.where(ok, hi, NAN)


def _logit_bounds(
    value: np.ndarray, half: np.ndarray, ok: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """value ± half on the logit scale (``half`` already on that scale) where ``ok``;
    the value itself at 0 or 1; NaN where not ``ok``."""
    from scipy.special import expit

    inner = ok & (value > 0.0) & (value < 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        vv = np.where(inner, value, 0.5)
        eta = np.log(vv / (1.0 - vv))
        lo = np.where(inner, expit(eta - half), np.where(ok, value, NAN))
        hi = np.where(inner, expit(eta + half), np.where(ok, value, NAN))
    return lo, hi


def _column(
    value: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    n: np.ndarray,
    method: str,
    reasons: list[str] | None = None,
) -> _Column:
    """Lists for :class:`MetricValue`; a row with a reason and a defined value has its
    interval withheld (``stats.common.withheld``)."""
    vals, lows, highs = value.tolist(), lower.tolist(), upper.tolist()
    notes = [""] * len(vals)
    if reasons is not None:
        for i, reason in enumerate(reasons):
            if reason and not math.isnan(vals[i]):
                lows[i] = highs[i] = NAN
                notes[i] = reason
    return vals, lows, highs, np.rint(n).astype(np.int64).tolist(), [method] * len(vals), notes


def _values(name: str, col: _Column) -> list[MetricValue]:
    return list(map(_new_value, zip(repeat(name, len(col[0])), *col, strict=True)))


def _reasons(
    positives: np.ndarray,
    negatives: np.ndarray,
    minimum: int,
    share: np.ndarray | None = None,
) -> list[str]:
    """``class_count_reason`` of each row (empty where both classes reach ``minimum``).
    ``share``: each row's long-run prevalence — the gate then counts the classes this
    many rows are expected to hold (rows without one keep their own counts), so no window
    is exported or withheld for its own class counts."""
    expected = np.zeros(positives.shape, bool)
    if share is not None:
        n = positives + negatives
        expected = np.isfinite(share)
        s = np.where(expected, share, 0.0)
        positives = np.where(expected, n * s, positives)
        negatives = np.where(expected, n * (1.0 - s), negatives)
    short = (positives < minimum) | (negatives < minimum)
    out = [""] * positives.shape[0]
    for i in np.flatnonzero(short).tolist():
        out[i] = class_count_reason(
            float(positives[i]), float(negatives[i]), minimum, expected=bool(expected[i])
        )
    return out


def _roc_auc_arrays(
    neg: np.ndarray, pos: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(AUC, the pseudo-pair centre, its DeLong SE, its Hanley–McNeil SE) of each row: what
    the logit interval of ROC-AUC reads (:func:`_roc_auc_interval`).

    The interval is centred on, and its variance taken from, the histograms with
    :data:`AUC_PSEUDO_PAIR` pseudo-observations per class — a positive distributed as the
    negatives and a negative as the positives, i.e. half a pair at chance level — in the
    spirit of Agresti & Coull's (1998) added successes and failures. Why: near AUC = 1
    the DeLong variance rests on the few positives placed below some negative, so it is
    small exactly when a window drew few of them; the plain logit-t interval covered 0.88
    for an AUC of 0.993 with 50 positives (0.81 with 30), and the score-type interval of
    Newcombe (2006) over-covered (0.98-0.995). With the pseudo-pair it covered 0.94-0.975
    for AUCs of 0.92-0.993 (docs/statistics.md). The interval is widened to contain the
    reported value, which stays the plain (scikit-learn's) AUC."""
    auc, _, _, _ = roc_auc_many(neg, pos)
    n_pos, n_neg = pos.sum(axis=1), neg.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = AUC_PSEUDO_PAIR
        pa = pos + a * neg / n_neg[:, None]
        na = neg + a * pos / n_pos[:, None]
    centre, se_dl, se_hm, _ = roc_auc_many(na, pa)
    return auc, centre, se_dl, se_hm


def _roc_auc_interval(
    auc: np.ndarray,
    centre: np.ndarray,
    se: np.ndarray,
    n_pos: np.ndarray,
    n_neg: np.ndarray,
    confidence: float,
    method: str,
    reasons: list[str],
) -> _Column:
    """ROC-AUC with a DeLong or Hanley–McNeil interval on the logit scale, each row, from
    :func:`_roc_auc_arrays`."""
    from scipy.special import stdtrit

    df = np.minimum(n_pos, n_neg) - 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        quantile = np.where(df >= 1, stdtrit(np.maximum(df, 1.0), 0.5 + confidence / 2.0), np.inf)
        width = se * quantile
        half = width / (centre * (1.0 - centre))
    ok = np.isfinite(auc) & np.isfinite(width) & np.isfinite(centre)
    lo, hi = _logit_bounds(centre, half, ok)
    lo, hi = np.fmin(lo, auc), np.fmax(hi, auc)
    label = method.replace("_", "-") + "-logit-pseudo"
    return _column(auc, lo, hi, n_pos + n_neg, label, reasons)


def average_precision_se_many(neg: np.ndarray, pos: np.ndarray, offset: float = 0.0) -> np.ndarray:
    """Standard error of each row's average precision by its empirical influence function
    (the infinitesimal jackknife; DeLong's structural components are the same idea for
    the AUC), exact at bin granularity.

    AP = (1/P) Σ_b pos_b·g_b, g_b = (TP_b − c)/(TP_b − c + FP_b) the precision at the lower
    edge of bin b (TP_b, FP_b: positives and negatives in bins ≥ b; c the mid-rank
    ``offset``). One more negative in bin j raises FP_b for every b ≤ j:
    ψ⁻_j = −(1/P) Σ_{b≤j} pos_b·g_b/(TP_b − c + FP_b). One more positive in bin j raises
    TP_b for b ≤ j and adds its own term: ψ⁺_j = (1/P)[g_j + Σ_{b≤j} pos_b(1 −
    g_b)/(TP_b − c + FP_b) − AP]. Var AP ≈ Σ_i (ψ_i − ψ̄)² over every row of either class,
    centred on the overall mean, so the randomness of the class counts — which AP, unlike
    AUC, depends on — is in it."""
    return _average_precision_ses(neg, pos, (offset,))[0]


def _average_precision_ses(
    neg: np.ndarray, pos: np.ndarray, offsets: Sequence[float]
) -> list[np.ndarray]:
    """:func:`average_precision_se_many` at each of ``offsets`` (the cumulative counts
    summed once)."""
    neg, pos = _rows(neg), _rows(pos)
    n_pos, n_neg = pos.sum(axis=1), neg.sum(axis=1)
    tp_all = np.cumsum(pos[:, ::-1], axis=1)[:, ::-1]
    fp = np.cumsum(neg[:, ::-1], axis=1)[:, ::-1]
    return [_ap_se(neg, pos, n_pos, n_neg, tp_all - offset, fp) for offset in offsets]


def _ap_se(
    neg: np.ndarray,
    pos: np.ndarray,
    n_pos: np.ndarray,
    n_neg: np.ndarray,
    tp: np.ndarray,
    fp: np.ndarray,
) -> np.ndarray:
    """One offset's standard errors, given the cumulative counts ``tp`` (less c), ``fp``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        total = tp + fp
        live = (total > 0) & (pos > 0)
        g = np.where(live, tp / np.where(live, total, 1.0), 0.0)
        step = np.where(live, pos / np.where(live, total, 1.0), 0.0)
        ap = np.einsum("ij,ij->i", pos, g) / n_pos
        psi_n = -np.cumsum(step * g, axis=1) / n_pos[:, None]
        psi_p = (g + np.cumsum(step * (1.0 - g), axis=1) - ap[:, None]) / n_pos[:, None]
        mean = (np.einsum("ij,ij->i", neg, psi_n) + np.einsum("ij,ij->i", pos, psi_p)) / (
            n_pos + n_neg
        )
        var = np.einsum("ij,ij->i", neg, (psi_n - mean[:, None]) ** 2) + np.einsum(
            "ij,ij->i", pos, (psi_p - mean[:, None]) ** 2
        )
    return np.where((n_pos > 0) & (n_neg > 0), np.sqrt(np.maximum(var, 0.0)), NAN)


def _ap_column(
    ap: np.ndarray, se: np.ndarray, n_pos: np.ndarray, df: np.ndarray, confidence: float,
    reasons: list[str],
) -> _Column:  # fmt: skip
    """Logit interval of average precision, logit(AP) ± t·se/(AP(1 − AP)), ``se`` from
    :func:`average_precision_se_many` and Student's t on min(P, N) − 1 degrees of freedom
    (see :meth:`ScoreLayout.pr_auc`), withheld below the class-count gate."""
    from scipy.special import stdtrit

    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(df >= 1, stdtrit(np.maximum(df, 1.0), 0.5 + confidence / 2.0), np.inf)
        half = q * se / (ap * (1.0 - ap))
    lo, hi = _logit_bounds(ap, half, np.isfinite(ap) & np.isfinite(half))
    return _column(ap, lo, hi, n_pos, "influence-logit", reasons)


def _clt_column(
    n: np.ndarray,
    total: np.ndarray,
    total_sq: np.ndarray,
    z: float,
    bounds: tuple[float, float],
    reasons: list[str],
    total_cu: np.ndarray | None = None,
    n_cu: np.ndarray | None = None,
) -> _Column:
    """``stats.common.clt_mean`` of each row, gated; with the cubic sums of every row
    (``n_cu == n``), Hall's skewness-corrected interval
    (:func:`~monitor.stats.common.skew_corrected_bounds`) instead."""
    n_int = np.rint(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(n_int > 0, total / n, NAN)
        centered = total_sq - total * total / n
        centered = np.where(centered <= 1e-12 * np.abs(total_sq), 0.0, centered)
        se = np.where(n_int >= 2, np.sqrt(centered / (n - 1.0) / n), NAN)
    lo, hi = _wald(mean, se, z, bounds)
    full = np.zeros(mean.shape, bool)
    if total_cu is not None and n_cu is not None:
        full = (n_cu == n) & (n_int >= 2) & (se > 0)
        if full.any():
            s_lo, s_hi = skew_corrected_bounds(n, total, total_sq, total_cu, z)
            lo = np.where(full, np.maximum(bounds[0], s_lo), lo)
            hi = np.where(full, np.minimum(bounds[1], s_hi), hi)
    col = _column(mean, lo, hi, np.maximum(n_int, 0), "clt", reasons)
    methods = ["clt-skew" if f else "clt" for f in full.tolist()]
    return (*col[:4], methods, col[5])


def _ece_column(count: np.ndarray, sp: np.ndarray, sy: np.ndarray, z: float) -> _Column:
    value, lo, hi, n = ece_many(count, sp, sy, z)
    return _column(value, lo, hi, n, "delta")


def _ece_debiased_column(
    count: np.ndarray, sp: np.ndarray, sy: np.ndarray, p_value: np.ndarray
) -> _Column:
    value, n = ece_debiased_many(count, sp, sy, p_value)
    nan = np.full(n.shape, NAN)
    col = _column(value, nan, nan, n, "debiased")
    return (*col[:5], [ECE_INTERVAL_NOTE if x > 0 else "" for x in n.tolist()])


def _calibration_column(p_value: np.ndarray, ok: np.ndarray, n: np.ndarray) -> _Column:
    nan = np.full(n.shape, NAN)
    col = _column(p_value, nan, nan, n, "hosmer-lemeshow")
    notes = [
        _P_VALUE_NOTE if good or empty else _FEW_EVENTS_NOTE
        for good, empty in zip(ok.tolist(), (np.rint(n) <= 0).tolist(), strict=True)
    ]
    return (*col[:5], notes)


def _base_rate_column(
    positives: np.ndarray,
    negatives: np.ndarray,
    n: np.ndarray,
    confidence: float,
    share: np.ndarray | None = None,
) -> _Column:
    """``common.ratio`` of the base rate, withheld below ``MIN_TRIALS`` rows, then below
    ``MIN_CLASS_COUNT`` of a class (the class count is its binomial count; expected at
    the long-run ``share`` when given, as the binary prevalence)."""
    lo, hi = wilson_interval(positives, n, confidence)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.where(n > 0, positives / n, NAN)
    classes = _reasons(positives, negatives, MIN_CLASS_COUNT, share)
    reasons = [
        trials_reason(t) or (c if t > 0 else "") for t, c in zip(n.tolist(), classes, strict=True)
    ]
    return _column(value, lo, hi, n, "wilson", reasons)


# -- one vector: a 1-row stack ----------------------------------------------------------


def roc_auc_from_hist(neg: np.ndarray, pos: np.ndarray) -> tuple[float, float, float, float]:
    """(auc, se_delong, se_hanley, bound) of one pair of class histograms
    (:func:`roc_auc_many`)."""
    auc, se_dl, se_hm, bound = roc_auc_many(neg, pos)
    return float(auc[0]), float(se_dl[0]), float(se_hm[0]), float(bound[0])


def average_precision_from_hist(neg: np.ndarray, pos: np.ndarray, offset: float = 0.0) -> float:
    """Average precision of one pair of class histograms (:func:`average_precision_many`)."""
    return float(average_precision_many(neg, pos, offset)[0])


def ece_from_bins(
    name: str,
    count: np.ndarray,
    sum_p: np.ndarray,
    sum_y: np.ndarray,
    confidence: float = 0.95,
) -> MetricValue:
    """ECE of one set of calibration bins with its delta-method interval (:func:`ece_many`)."""
    return _values(name, _ece_column(count, sum_p, sum_y, z_value(confidence)))[0]


def ece_debiased_from_bins(
    count: np.ndarray,
    sum_p: np.ndarray,
    sum_y: np.ndarray,
    name: str = "ece_debiased",
    p_value: float | None = None,
) -> MetricValue:
    """Debiased ECE of one set of calibration bins (:func:`ece_debiased_many`); callers
    that already ran the calibration test pass its p-value."""
    if p_value is None:
        p_value = calibration_test(count, sum_p, sum_y).value
    col = _ece_debiased_column(count, sum_p, sum_y, np.array([p_value], np.float64))
    return _values(name, col)[0]


def calibration_test(count: np.ndarray, sum_p: np.ndarray, sum_y: np.ndarray) -> MetricValue:
    """``calibration_p_value`` of one set of calibration bins (:func:`calibration_test_many`);
    a p-value has no interval (``note`` says so)."""
    return _values("calibration_p_value", _calibration_column(*calibration_test_many(
        count, sum_p, sum_y)))[0]  # fmt: skip


def mce_from_bins(
    count: np.ndarray, sum_p: np.ndarray, sum_y: np.ndarray, confidence: float = 0.95
) -> MetricValue:
    """MCE of one set of calibration bins (:func:`mce_many`)."""
    value, lo, hi, n = mce_many(count, sum_p, sum_y, z_value(confidence))
    return _values("mce", _column(value, lo, hi, n, "delta"))[0]


def ks_from_hist(neg: np.ndarray, pos: np.ndarray) -> tuple[float, float]:
    """Two-sample Kolmogorov–Smirnov statistic of positive vs negative scores: (D, bound).

    D = max_t |F⁺(t) − F⁻(t)| over the bin edges t, F the class's empirical CDF below t
    (the credit-scoring "KS", Siddiqi 2006, ch. 9). Each edge is a real threshold, so
    D <= D_exact (``scipy.stats.ks_2samp``); inside bin j the CDFs move by at most pos_j/P and
    neg_j/N, so D_exact <= D + bound with bound = max_j max(pos_j/P, neg_j/N).
    """
    neg = np.asarray(neg, dtype=np.float64)
    pos = np.asarray(pos, dtype=np.float64)
    n_pos, n_neg = float(pos.sum()), float(neg.sum())
    if n_pos <= 0 or n_neg <= 0:
        return NAN, NAN
    gap = np.abs(np.cumsum(pos) / n_pos - np.cumsum(neg) / n_neg)
    bound = float(max(np.max(pos) / n_pos, np.max(neg) / n_neg))
    return float(np.max(gap)), bound


def gini_from_auc(auc: MetricValue) -> MetricValue:
    """Gini = 2·AUC − 1 with the AUC interval's end points mapped (a monotone transform)."""
    return MetricValue(
        "gini", 2 * auc.value - 1, 2 * auc.lower - 1, 2 * auc.upper - 1, auc.n, auc.method, auc.note
    )


def gain_name(fraction: float, stem: str = "gain") -> str:
    """``gain_at_10`` for the top 10 % (fraction 0.1); ``lift_at_2_5`` for 0.025."""
    return f"{stem}_at_" + f"{100 * fraction:g}".replace(".", "_")


# --------------------------------------------------------------------------- layout


@cache
def _interior_edges(bins: int, logit_range: float) -> np.ndarray:
    from scipy.special import expit

    edges = expit(np.linspace(-logit_range, logit_range, bins - 1))
    edges.flags.writeable = False  # shared by every layout of these parameters
    return edges


@dataclass(frozen=True, slots=True)
class ScoreCells:
    """The cells a batch of (label, score) pairs adds to its rows, by part: part
    ``(offset, k, bins, weight)`` adds ``weight[i]`` at column ``offset + bins[i]`` of
    pair i's row (``bins`` in [0, k); None: the one column ``offset``). The parts'
    columns do not overlap. Kept as the few per-pair arrays the parts share."""

    pairs: int
    parts: tuple[tuple[int, int, np.ndarray | None, np.ndarray], ...]

    def __len__(self) -> int:
        return self.pairs

    def take(self, lo: int, hi: int) -> ScoreCells:
        """The cells of pairs ``[lo, hi)``."""
        return ScoreCells(
            hi - lo,
            tuple(
                (offset, k, None if bins is None else bins[lo:hi], weight[lo:hi])
                for offset, k, bins, weight in self.parts
            ),
        )

    def dense(self) -> tuple[np.ndarray, np.ndarray]:
        """(columns, weights) as two (parts, pairs) arrays."""
        cols = np.empty((len(self.parts), self.pairs), np.int64)
        for row, (offset, _, bins, _) in zip(cols, self.parts, strict=True):
            row[:] = offset if bins is None else offset + bins
        return cols, np.stack([weight for _, _, _, weight in self.parts])


def _checked_bins(
    edges: np.ndarray, x: np.ndarray, guess: np.ndarray, side: Literal["left", "right"]
) -> np.ndarray:
    """``np.searchsorted(edges, x, side)`` from a guess of each answer: a guess is kept
    where the edges on either side of it hold ``x`` between them as ``side`` orders
    ties, the others are searched, so the answer is the search's whatever the guess."""
    n = edges.shape[0]
    if n == 0:
        return np.searchsorted(edges, x, side=side)
    k = np.clip(guess, 0, n)
    below = edges[np.maximum(k - 1, 0)]
    above = edges[np.minimum(k, n - 1)]
    if side == "right":
        ok = ((k == 0) | (below <= x)) & ((k == n) | (x < above))
    else:
        ok = ((k == 0) | (below < x)) & ((k == n) | (x <= above))
    if not ok.all():
        miss = np.flatnonzero(~ok)
        k[miss] = np.searchsorted(edges, x[miss], side=side)
    return k


@cache
def _calibration_edges(bins: int) -> np.ndarray:
    edges = np.linspace(0.0, 1.0, bins + 1)[1:-1]
    edges.flags.writeable = False
    return edges


class _HistogramStats(NamedTuple):
    """:meth:`ScoreLayout._histogram_stats` of a stack of rows."""

    # (8, rows): AUC, its pseudo-pair centre, DeLong SE, Hanley-McNeil SE; AP plain and
    # mid-rank (offsets _AP_OFFSETS), their SEs
    rows: np.ndarray
    mass_count: np.ndarray  # (rows, M) equal-mass calibration bins: count, Σp, Σy
    mass_p: np.ndarray
    mass_y: np.ndarray


_AP_OFFSETS = (0.0, 0.5)  # pr_auc and pr_auc_debiased (mid-rank precisions)

MIN_PACKED_WIDTH = 8
"""The narrowest width a row's occupied bins are packed into (:func:`_support_classes`)."""


def _support_classes(
    hist: Sequence[np.ndarray],
) -> Iterator[tuple[np.ndarray, list[np.ndarray]]]:
    """The rows of (rows, bins) per-bin arrays grouped by how many bins they occupy
    (non-zero in any array), each group's arrays holding only those bins, in bin order,
    zero-padded to the group's width: a power of two from :data:`MIN_PACKED_WIDTH` (the
    full bins past half of them, as they are). Yields (the group's rows, its arrays).

    Why: every histogram metric here is a function of the occupied bins in their order
    — an empty bin adds nothing to a cumulative count, and a term weighted by its
    (zero) count adds zero — while a fleet's slice rows occupy a median of 5 of their 128
    bins and a version's a few hundred of 2,048: the metrics' cumulative sums and
    products then run over a tenth of the cells. The width depends on the row alone, so
    a row's metrics are the same whatever else is in the batch (the order in which its
    terms are summed included)."""
    rows, bins = hist[0].shape
    occupied = hist[0] != 0
    for h in hist[1:]:
        occupied |= h != 0
    nnz = occupied.sum(axis=1)
    width = np.full(rows, MIN_PACKED_WIDTH, np.int64)
    while (short := width < nnz).any():
        width[short] *= 2
    width = np.where(width * 2 > bins, bins, width)
    for w in np.unique(width).tolist():
        at = np.flatnonzero(width == w)
        if w == bins:
            yield at, [h[at] for h in hist]
            continue
        r, c = np.nonzero(occupied[at])
        counts = nnz[at]
        dest = np.arange(r.shape[0]) - np.repeat(np.cumsum(counts) - counts, counts)
        src = at[r]
        packed = []
        for h in hist:
            x = np.zeros((at.shape[0], w))
            x[r, dest] = h[src, c]
            packed.append(x)
        yield at, packed


@dataclass(frozen=True, slots=True)
class ScoreLayout:
    """Histogram layout for (label, score) pairs; see the module docstring for the vector."""

    bins: int = 2048
    logit_range: float = 16.0
    calibration_bins: int = 10
    eps: float = 1e-15

    def __post_init__(self) -> None:
        if self.bins < 3 or self.calibration_bins < 1 or self.logit_range <= 0:
            raise ValueError("invalid score layout parameters")

    # offsets -----------------------------------------------------------------
    @property
    def width(self) -> int:
        return self._within + 2 * self.bins + 1

    @property
    def legacy_widths(self) -> tuple[int, int]:
        """The widths before the cubic sums and before the within-bin sums were appended
        (checkpoints of either load with zeros there)."""
        return self._sums + 5, self._within

    @property
    def n_column(self) -> int:
        """Index of the scored rows' count."""
        return self._sums

    @property
    def _cal(self) -> int:
        return 3 * self.bins

    @property
    def _sums(self) -> int:
        return 3 * self.bins + 3 * self.calibration_bins

    @property
    def _within(self) -> int:
        return self._sums + 5 + CUBIC_COLUMNS

    def empty(self) -> np.ndarray:
        return np.zeros(self.width, dtype=np.float64)

    def interior_edges(self) -> np.ndarray:
        """The B − 1 interior fine-bin edges, uniform in logit (computed once per layout:
        every batch of every model bins its scores against them)."""
        return _interior_edges(self.bins, self.logit_range)

    def lower_edges(self) -> np.ndarray:
        """Lower edge of each fine bin (0 for the first): the candidate thresholds."""
        return np.concatenate([[0.0], self.interior_edges()])

    def bin_of(self, score: np.ndarray) -> np.ndarray:
        """``np.searchsorted(interior_edges, score, side="right")``, each score's bin
        guessed from its logit (the edges are uniform in logit) and checked against its
        edges: a fourth of the binary search's time on 20,000 scores; a guess the check
        refuses (rounding at an edge, NaN) is searched."""
        p = np.asarray(score, dtype=np.float64)
        edges = self.interior_edges()
        if p.ndim != 1:
            return np.searchsorted(edges, p, side="right")
        step = 2.0 * self.logit_range / (self.bins - 2)
        with np.errstate(divide="ignore", invalid="ignore"):
            at = (np.log(p) - np.log1p(-p) + self.logit_range) / step
            guess = np.floor(np.clip(at, -1.0, float(self.bins))).astype(np.intp) + 1
        return _checked_bins(edges, p, guess, "right")

    # accumulation ------------------------------------------------------------
    def add_rows(
        self, matrix: np.ndarray, rows: np.ndarray | int, y_true: np.ndarray, score: np.ndarray
    ) -> None:
        """Add (0/1 label, probability-of-positive score) pairs into ``matrix[rows[i]]``
        (:meth:`cells`, then :meth:`add_cells`)."""
        cells = self.cells(y_true, score)
        if len(cells):
            self.add_cells(matrix, _as_index(rows, len(cells)), cells)

    def cells(self, y_true: np.ndarray, score: np.ndarray) -> ScoreCells:
        """The cells the pairs add to their row (:class:`ScoreCells`). They depend on the
        pairs alone, not on their rows, so a batch spanning many stores (one per model)
        computes them once and each store adds its pairs' slice (:meth:`add_cells`)."""
        y = np.asarray(y_true, dtype=np.float64)
        p = np.clip(np.asarray(score, dtype=np.float64), 0.0, 1.0)
        m = y.size
        b = self.bins
        fine = self.bin_of(p)
        mc = self.calibration_bins
        with np.errstate(invalid="ignore"):  # (a NaN's guess is searched)
            guess = np.ceil(p * mc).astype(np.intp) - 1  # p in [0, 1]: edges at k / mc
        coarse = _checked_bins(_calibration_edges(mc), p, guess, "left")
        cal = self._cal
        pc = np.clip(p, self.eps, 1.0 - self.eps)
        ll = -(y * np.log(pc) + (1.0 - y) * np.log1p(-pc))
        br = (p - y) ** 2
        ones = np.ones(m)
        w, sums = self._within, self._sums
        by_class = fine + b * (y > 0.5)
        parts = (
            (0, 2 * b, by_class, ones),  # negatives, positives per fine bin
            (2 * b, b, fine, p),  # Σp per fine bin
            (cal, mc, coarse, ones),  # calibration bins: count, Σp, Σy
            (cal + mc, mc, coarse, p),
            (cal + 2 * mc, mc, coarse, y),
            *((sums + j, 1, None, v) for j, v in enumerate(
                (ones, ll, ll * ll, br, br * br, ones, ll**3, br**3)
            )),
            (w, b, fine, p * y),  # within-bin sums
            (w + b, b, fine, p * p),
            (w + 2 * b, 1, None, ones),
        )  # fmt: skip
        return ScoreCells(m, parts)

    @staticmethod
    def add_cells(matrix: np.ndarray, rows: np.ndarray, cells: ScoreCells) -> None:
        """Add :meth:`cells` into ``matrix[rows[i]]``.

        A weighted ``bincount`` per part over the span of rows the pairs touch (a batch's
        rows are a few recent buckets), added to the matrix once; rows far apart take
        ``np.add.at``. The parts' columns do not overlap, so each cell's sum is its pairs'
        weights added in pair order, as one ``bincount`` over every part would add them
        — without (16, pairs) arrays of columns and weights (about 5 MB at 20,000 pairs,
        the larger part of the time)."""
        m = rows.shape[0]
        if m == 0:
            return
        lo, hi = int(rows.min()), int(rows.max()) + 1
        width = matrix.shape[1]
        span = hi - lo
        if span * width > 4 * len(cells.parts) * m + 65_536:  # rows far apart: sparse adds
            cols, weights = cells.dense()
            if matrix.flags.c_contiguous:  # one unbuffered add into the flat matrix
                np.add.at(matrix.reshape(-1), (rows * width + cols).ravel(), weights.ravel())
                return
            for c, w in zip(cols, weights, strict=True):
                np.add.at(matrix, (rows, c), w)
            return
        r = rows - lo
        sums = np.zeros((span, width))
        index: dict[tuple[int, int], np.ndarray] = {}  # (bins, id of the bin column) -> index
        for offset, k, bins, weight in cells.parts:
            if bins is None:
                sums[:, offset] = np.bincount(r, weight, span)
                continue
            at = index.get((k, id(bins)))
            if at is None:
                at = index[k, id(bins)] = r * k + bins
            sums[:, offset : offset + k] = np.bincount(at, weight, span * k).reshape(span, k)
        matrix[lo:hi] += sums

    def add(self, vec: np.ndarray, y_true: np.ndarray, score: np.ndarray) -> None:
        self.add_rows(vec[np.newaxis, :], 0, y_true, score)

    # views -------------------------------------------------------------------
    def histograms(self, vec: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(negatives, positives, Σp) per fine bin."""
        b = self.bins
        v = np.asarray(vec, dtype=np.float64)
        return v[:b], v[b : 2 * b], v[2 * b : 3 * b]

    def calibration(self, vec: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(count, Σp, Σy) per equal-width calibration bin."""
        mc, cal = self.calibration_bins, self._cal
        v = np.asarray(vec, dtype=np.float64)
        return v[cal : cal + mc], v[cal + mc : cal + 2 * mc], v[cal + 2 * mc : cal + 3 * mc]

    # metrics of a stack of vectors (one is a 1-row stack) ---------------------------
    def _stack(self, vecs: np.ndarray) -> np.ndarray:
        v = np.atleast_2d(np.asarray(vecs, dtype=np.float64))
        if v.shape[1] != self.width:
            raise ValueError(f"score vectors have width {v.shape[1]}, the layout {self.width}")
        return v

    def _classes(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        b = self.bins
        return v[:, :b], v[:, b : 2 * b]

    def _bins(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        mc, cal = self.calibration_bins, self._cal
        return v[:, cal : cal + mc], v[:, cal + mc : cal + 2 * mc], v[:, cal + 2 * mc : self._sums]

    def _histogram_stats(self, v: np.ndarray) -> _HistogramStats:
        """What the score metrics read from each row's fine bins (ROC-AUC and its
        pseudo-pair centre and SEs; average precision, plain and mid-rank, read inside
        the bins where the row's within-bin sums count every scored row, and their SEs;
        the equal-mass calibration bins), computed on the row's occupied bins only
        (:func:`_support_classes`): a slice's window holds a few dozen scored rows in
        128 bins, a version's a few hundred occupied bins of 2,048."""
        b, w = self.bins, self._within
        hist = (v[:, :b], v[:, b : 2 * b], v[:, 2 * b : 3 * b], v[:, w : w + b],
                v[:, w + b : w + 2 * b])  # fmt: skip
        complete = v[:, w + 2 * b] >= v[:, self.n_column] - 0.5
        n, mc = v.shape[0], self.calibration_bins
        out = _HistogramStats(np.empty((8, n)), *(np.empty((n, mc)) for _ in range(3)))
        for at, (neg, pos, sp, s_pos, sq) in _support_classes(hist):
            out.rows[0:4, at] = _roc_auc_arrays(neg, pos)
            out.rows[4:6, at] = _average_precisions(
                neg, pos, _AP_OFFSETS, (s_pos, sp, sq), complete[at]
            )
            out.rows[6:8, at] = _average_precision_ses(neg, pos, _AP_OFFSETS)
            out.mass_count[at], out.mass_p[at], out.mass_y[at] = equal_mass_bins(neg, pos, sp, mc)
        return out

    def metrics_many(
        self,
        vecs: np.ndarray,
        confidence: float = 0.95,
        auc_method: str = "delong",
        positive_share: np.ndarray | None = None,
    ) -> list[list[MetricValue]]:
        """The score metrics of each row of ``vecs`` (rows × ``width``): roc_auc, pr_auc,
        pr_auc_debiased, log_loss, brier, ece, ece_debiased, calibration_p_value,
        ece_equal_mass, mce, base_rate — the same code for a version's fine histogram
        (slice ``all``, a 1-row stack) and a batch of segment slices' coarse ones.

        Interval gates: below ``MIN_SCORE_CLASS_COUNT`` positives or negatives the AUC, AP,
        log loss and Brier intervals are withheld (NaN, with the reason in ``note``) —
        counted at ``positive_share``, each row's long-run prevalence, when given (the
        engine passes the model's longest window's), else the row's own."""
        v = self._stack(vecs)
        neg, pos = self._classes(v)
        count, sp, sy = self._bins(v)
        s = self._sums
        n_pos, n_neg = pos.sum(axis=1), neg.sum(axis=1)
        positives = sy.sum(axis=1)
        n_cal = count.sum(axis=1)
        negatives = n_cal - positives
        z = z_value(confidence)
        share = None if positive_share is None else np.asarray(positive_share, np.float64)
        reasons = _reasons(positives, negatives, MIN_SCORE_CLASS_COUNT, share)
        score_reasons = _reasons(n_pos, n_neg, MIN_SCORE_CLASS_COUNT, share)
        df = np.minimum(n_pos, n_neg) - 1.0
        n_cu = v[:, s + 5]
        p_value, testable, n_test = calibration_test_many(count, sp, sy)
        mce = mce_many(count, sp, sy, z)
        hs = self._histogram_stats(v)
        auc, centre, se_dl, se_hm, ap, ap_mid, se, se_mid = hs.rows
        mass = (hs.mass_count, hs.mass_p, hs.mass_y)
        auc_se = {"delong": se_dl, "hanley_mcneil": se_hm}[auc_method]
        columns = (
            ("roc_auc", _roc_auc_interval(auc, centre, auc_se, n_pos, n_neg, confidence,
                                          auc_method, score_reasons)),
            ("pr_auc", _ap_column(ap, se, n_pos, df, confidence, score_reasons)),
            ("pr_auc_debiased", _ap_column(ap_mid, se_mid, n_pos, df, confidence,
                                           score_reasons)),
            ("log_loss", _clt_column(v[:, s], v[:, s + 1], v[:, s + 2], z, (0.0, math.inf),
                                     reasons, v[:, s + 6], n_cu)),
            ("brier", _clt_column(v[:, s], v[:, s + 3], v[:, s + 4], z, (0.0, 1.0), reasons,
                                  v[:, s + 7], n_cu)),
            ("ece", _ece_column(count, sp, sy, z)),
            ("ece_debiased", _ece_debiased_column(count, sp, sy, p_value)),
            ("calibration_p_value", _calibration_column(p_value, testable, n_test)),
            ("ece_equal_mass", _ece_column(*mass, z)),
            ("mce", _column(*mce, "delta")),
            ("base_rate", _base_rate_column(positives, negatives, n_cal, confidence, share)),
        )  # fmt: skip
        per_metric = [_values(name, col) for name, col in columns]
        return [list(row) for row in zip(*per_metric, strict=True)]

    def metrics(
        self, vec: np.ndarray, confidence: float = 0.95, auc_method: str = "delong"
    ) -> list[MetricValue]:
        """The score metrics of one vector (:meth:`metrics_many`)."""
        return self.metrics_many(vec, confidence, auc_method)[0]

    def reliability_many(
        self, vecs: np.ndarray, confidence: float = 0.95
    ) -> list[tuple[ReliabilityBin, ...]]:
        """Equal-width reliability diagram points of each row (:func:`reliability_many`)."""
        return reliability_many(*self._bins(self._stack(vecs)), confidence)

    def reliability(self, vec: np.ndarray, confidence: float = 0.95) -> list[ReliabilityBin]:
        """Equal-width reliability diagram points (empty bins have NaN means)."""
        return list(self.reliability_many(vec, confidence)[0])

    def roc_auc(
        self, vec: np.ndarray, confidence: float = 0.95, method: str = "delong"
    ) -> MetricValue:
        """ROC-AUC with a DeLong (default) or Hanley–McNeil interval on the logit scale.

        The interval is logit(AUC) ± t·se/(AUC(1−AUC)) mapped back (the delta method on
        the logit, Pepe 2003 §5.2.3, which keeps the interval inside (0, 1) and follows the
        skew of AUC near 1), with Student's t on min(P, N) − 1 degrees of freedom because
        DeLong's variance is estimated from the smaller class's placement values. It is
        withheld below ``MIN_SCORE_CLASS_COUNT`` positives or negatives: measured coverage
        with 10-20 events of one class was 0.87-0.91 even so (docs/statistics.md). n is the
        number of scored rows; see :func:`roc_auc_many` for the bin-error bound
        (:meth:`roc_auc_bound`).
        """
        v = self._stack(vec)
        neg, pos = self._classes(v)
        n_pos, n_neg = pos.sum(axis=1), neg.sum(axis=1)
        reasons = _reasons(n_pos, n_neg, MIN_SCORE_CLASS_COUNT)
        auc, centre, se_dl, se_hm = self._histogram_stats(v).rows[:4]
        se = {"delong": se_dl, "hanley_mcneil": se_hm}[method]
        col = _roc_auc_interval(auc, centre, se, n_pos, n_neg, confidence, method, reasons)
        return _values("roc_auc", col)[0]

    def pr_auc(self, vec: np.ndarray, confidence: float = 0.95) -> MetricValue:
        """Average precision (scikit-learn's on the raw scores, read from the histogram by
        :func:`average_precision_many`), logit interval.

        logit(AP) ± t·se/(AP(1 − AP)) back-transformed, as Boyd, Eng & Page (2013), "Area
        under the precision-recall curve: point estimates and confidence intervals", but
        with the influence-function standard error (:func:`average_precision_se_many`)
        instead of their binomial sqrt(AP(1 − AP)/P): that one ignores how the positives
        are ranked and over-covered (0.986-0.997) for an accurate model, where AP is near
        1 and known far better than a proportion of P. Student's t on min(P, N) − 1 df;
        n reported is the positive count P.
        """
        return self._ap("pr_auc", vec, confidence, 0.0)

    def pr_auc_debiased(self, vec: np.ndarray, confidence: float = 0.95) -> MetricValue:
        """Average precision with mid-rank precisions: lower small-sample bias.

        sklearn's AP credits the i-th positive with precision i/k_i, the precision at the
        right end of the recall step [(i−1)/P, i/P] it stands for. With few positives the
        first one or two dominate (a positive ranked first alone adds 1/P) and AP is biased
        upward: +48 % at 1 % prevalence and n = 1,000 (10 positives) for a binormal score
        with d' = 1.5. Evaluating each positive at the middle of its step,
        (i − ½)/(i − ½ + FP_i), the same correction as the mid-rank empirical CDF, cuts the
        bias to +34 % there, +3 % at 5 % prevalence (vs +5 %) and leaves large windows
        unchanged (measured, ``python bench/coverage.py``). Same logit interval and gate as
        :meth:`pr_auc`; the point value no longer equals scikit-learn's (``pr_auc`` does).
        """
        return self._ap("pr_auc_debiased", vec, confidence, 0.5)

    def _ap(self, name: str, vec: np.ndarray, confidence: float, offset: float) -> MetricValue:
        v = self._stack(vec)
        neg, pos = self._classes(v)
        n_pos = pos.sum(axis=1)
        reasons = _reasons(n_pos, neg.sum(axis=1), MIN_SCORE_CLASS_COUNT)
        at = _AP_OFFSETS.index(offset)  # the plain or the mid-rank AP and its SE
        rows = self._histogram_stats(v).rows
        ap, se = rows[4 + at], rows[6 + at]
        df = np.minimum(n_pos, neg.sum(axis=1)) - 1.0
        return _values(name, _ap_column(ap, se, n_pos, df, confidence, reasons))[0]

    def ece_equal_mass(self, vec: np.ndarray, confidence: float = 0.95) -> MetricValue:
        """ECE over M equal-mass bins formed by merging adjacent fine bins
        (:func:`equal_mass_bins`)."""
        hs = self._histogram_stats(self._stack(vec))
        mass = (hs.mass_count, hs.mass_p, hs.mass_y)
        return _values("ece_equal_mass", _ece_column(*mass, z_value(confidence)))[0]

    def roc_auc_bound(self, vec: np.ndarray) -> float:
        """Worst-case |histogram AUC − exact AUC| for this window (see roc_auc_from_hist)."""
        neg, pos, _ = self.histograms(vec)
        return roc_auc_from_hist(neg, pos)[3]

    def ks_statistic(self, vec: np.ndarray) -> MetricValue:
        """KS statistic between the class score distributions (:func:`ks_from_hist`).

        No interval: D's sampling distribution under the alternative has no closed form
        at histogram granularity; the value is a monitoring signal (credit scorecards read
        its level), while AUC/Gini carry the intervals. n is the number of scored rows."""
        neg, pos, _ = self.histograms(vec)
        d, _ = ks_from_hist(neg, pos)
        return MetricValue("ks_statistic", d, NAN, NAN, round(float(neg.sum() + pos.sum())), "none")

    def ks_bound(self, vec: np.ndarray) -> float:
        """Worst-case D_exact − D for this window (see :func:`ks_from_hist`)."""
        neg, pos, _ = self.histograms(vec)
        return ks_from_hist(neg, pos)[1]

    def gini(
        self, vec: np.ndarray, confidence: float = 0.95, method: str = "delong"
    ) -> MetricValue:
        """Gini (accuracy ratio) = 2·AUC − 1, the interval mapped from AUC's (monotone)."""
        return gini_from_auc(self.roc_auc(vec, confidence, method))

    def gains(
        self,
        vec: np.ndarray,
        fractions: tuple[float, ...] = (0.1, 0.2, 0.5),
        confidence: float = 0.95,
    ) -> list[MetricValue]:
        """Cumulative gain and lift at each fraction f of rows taken by descending score.

        gain(f) = share of all positives among the top f·n rows (the cumulative gains chart,
        Berry & Linoff 2004); lift(f) = gain(f)/f (1 = no better than random). A bin cut by
        the f·n boundary contributes its positives pro rata — the expectation under random
        order of its tied scores, as for ranking ties. Interval: Wilson on the captured
        positives out of P (conditional on the cut; the cut's own randomness is ignored),
        lift's is gain's divided by f. Withheld below ``MIN_SCORE_CLASS_COUNT`` of a class.
        """
        neg, pos, _ = self.histograms(vec)
        neg, pos = neg[::-1], pos[::-1]
        cnt = neg + pos
        n, n_pos = float(cnt.sum()), float(pos.sum())
        reason = class_count_reason(n_pos, float(neg.sum()), MIN_SCORE_CLASS_COUNT)
        before = np.cumsum(cnt) - cnt
        out: list[MetricValue] = []
        for f in fractions:
            if n <= 0 or n_pos <= 0:
                captured = NAN
            else:
                with np.errstate(divide="ignore", invalid="ignore"):
                    taken = np.clip((f * n - before) / np.where(cnt > 0, cnt, 1.0), 0.0, 1.0)
                captured = float(pos @ taken)
            gain = _ratio(gain_name(f), captured, n_pos, confidence)
            gain = withheld(gain, reason) if reason and gain.defined else gain
            out.append(gain)
            out.append(
                MetricValue(
                    gain_name(f, "lift"),
                    gain.value / f,
                    gain.lower / f,
                    gain.upper / f,
                    gain.n,
                    "wilson",
                    gain.note,
                )
            )
        return out

    def _ev_all(
        self, vec: np.ndarray, values: ValueMatrix, confidence: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        neg, pos, _ = self.histograms(vec)
        # threshold j (0..B): predict positive iff bin >= j; j = B means never
        tp = np.concatenate([np.cumsum(pos[::-1])[::-1], [0.0]])
        fp = np.concatenate([np.cumsum(neg[::-1])[::-1], [0.0]])
        fn, tn = pos.sum() - tp, neg.sum() - fp
        n = float(neg.sum() + pos.sum())
        with np.errstate(divide="ignore", invalid="ignore"):
            ev = (values.tp * tp + values.fp * fp + values.fn * fn + values.tn * tn) / n
            ev2 = (
                values.tp**2 * tp + values.fp**2 * fp + values.fn**2 * fn + values.tn**2 * tn
            ) / n
            se = np.sqrt(np.maximum(ev2 - ev * ev, 0.0) / n)
        thresholds = np.concatenate([self.lower_edges(), [math.inf]])
        return thresholds, ev, se, n

    def expected_value(
        self, vec: np.ndarray, values: ValueMatrix, threshold: float, confidence: float = 0.95
    ) -> ThresholdValue:
        """EV per prediction at ``threshold``, snapped up to the next bin edge (reported).

        Interval: CLT on the per-row value, whose variance is Σ_c v_c²·p_c − EV² over the
        four outcomes.
        """
        thresholds, ev, se, n = self._ev_all(vec, values, confidence)
        j = int(np.searchsorted(thresholds, threshold, side="left"))
        j = min(j, len(thresholds) - 1)
        mv = wald("expected_value", float(ev[j]), float(se[j]), round(n), confidence, "clt")
        return ThresholdValue(float(thresholds[j]), mv)

    def best_threshold(
        self, vec: np.ndarray, values: ValueMatrix, confidence: float = 0.95
    ) -> ThresholdValue:
        """The EV-maximizing bin edge (lowest such edge on ties) and its EV.

        The interval is the CLT interval at the chosen edge; it ignores that the edge was
        chosen on the same data (winner's curse), so it is optimistic for small windows.
        """
        thresholds, ev, se, n = self._ev_all(vec, values, confidence)
        if n <= 0:
            return ThresholdValue(NAN, MetricValue("expected_value", NAN, NAN, NAN, 0, "clt"))
        j = int(np.argmax(ev))
        mv = wald("expected_value", float(ev[j]), float(se[j]), round(n), confidence, "clt")
        return ThresholdValue(float(thresholds[j]), mv)
