"""Score-based binary metrics (ROC-AUC, PR-AUC, losses, calibration, threshold economics)
from one fixed-size, additive histogram layout.

Layout (float64; B fine bins, M calibration bins; ``width = 3B + 3M + 5``):

* ``[0, B)`` negatives per fine bin, ``[B, 2B)`` positives per fine bin,
  ``[2B, 3B)`` Σp per fine bin (both classes);
* ``[3B, 3B+M)`` count, ``[3B+M, 3B+2M)`` Σp, ``[3B+2M, 3B+3M)`` Σy per equal-width
  calibration bin ``(m/M, (m+1)/M]`` (first bin closed: Guo et al.'s intervals and sklearn
  ``calibration_curve``'s ``searchsorted`` convention) — stored exactly so
  ECE/MCE/reliability are not approximated;
* ``[3B+3M, 3B+3M+5)`` n, Σ log-loss, Σ log-loss², Σ (p−y)², Σ (p−y)⁴.

Fine bins: the B − 1 interior edges are uniform in logit(p) on [−L, L] (default B = 2048,
L = 16, i.e. p in [1.1e-7, 1 − 1.1e-7]); the end bins are [0, σ(−L)) and [σ(L), 1]. A logit
bin is 0.0156 wide, so a score p lands in a bin of relative width ≈ 1.6 % of p(1−p):
scores concentrated in [0.001, 0.01] still spread over ~147 bins. Bin j holds
``lower[j] <= p < lower[j+1]``, so "predict positive iff p >= lower[j]" is exact at every
bin edge — the thresholds ROC, PR and the economics are evaluated at.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

# scipy.special is imported where it is used: `monitor check-config` imports this module
# (the configuration's metric names) and needs none of it (~0.4 s of CPU per start)
from .common import NAN, class_count_reason, clt_mean, wald, withheld
from .common import as_index as _as_index
from .common import ratio as _ratio
from .intervals import wilson_interval, z_value
from .results import MetricValue

__all__ = [
    "ReliabilityBin",
    "ScoreLayout",
    "ThresholdValue",
    "ValueMatrix",
    "average_precision_from_hist",
    "calibration_test",
    "ece_debiased_from_bins",
    "ece_from_bins",
    "gain_name",
    "gini_from_auc",
    "ks_from_hist",
    "roc_auc_from_hist",
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


# --------------------------------------------------------------------------- pure functions


def roc_auc_from_hist(neg: np.ndarray, pos: np.ndarray) -> tuple[float, float, float, float]:
    """ROC-AUC from class histograms over ordered bins: (auc, se_delong, se_hanley, bound).

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
    neg = np.asarray(neg, dtype=np.float64)
    pos = np.asarray(pos, dtype=np.float64)
    n_pos, n_neg = float(pos.sum()), float(neg.sum())
    if n_pos <= 0 or n_neg <= 0:
        return NAN, NAN, NAN, NAN
    neg_below = np.cumsum(neg) - neg
    pos_above = n_pos - np.cumsum(pos)
    v10 = (neg_below + neg / 2) / n_neg  # placement of a positive in bin j
    v01 = (pos_above + pos / 2) / n_pos  # placement of a negative in bin j
    auc = float(pos @ v10) / n_pos
    s10 = float(pos @ (v10 - auc) ** 2) / (n_pos - 1) if n_pos > 1 else 0.0
    s01 = float(neg @ (v01 - auc) ** 2) / (n_neg - 1) if n_neg > 1 else 0.0
    se_delong = math.sqrt(s10 / n_pos + s01 / n_neg)
    q1, q2 = auc / (2 - auc), 2 * auc * auc / (1 + auc)
    var_hm = (auc * (1 - auc) + (n_pos - 1) * (q1 - auc * auc) + (n_neg - 1) * (q2 - auc * auc)) / (
        n_pos * n_neg
    )
    bound = 0.5 * float(pos @ neg) / (n_pos * n_neg)
    return auc, se_delong, math.sqrt(max(var_hm, 0.0)), bound


def average_precision_from_hist(neg: np.ndarray, pos: np.ndarray, offset: float = 0.0) -> float:
    """Average precision as sklearn computes it, with one threshold per bin edge.

    AP = Σ_k (R_k − R_{k−1})·P_k over thresholds in decreasing order (the step-wise sum,
    no interpolation). A bin acts as one group of tied scores: its positives all enter
    at the precision of the bin's lower edge, exactly what sklearn does for tied scores.

    ``offset`` c > 0 gives the mid-rank variant: each positive enters at precision
    (TP − c)/(TP − c + FP) instead of TP/(TP + FP) (see :meth:`ScoreLayout.pr_auc_debiased`).
    """
    neg = np.asarray(neg, dtype=np.float64)[::-1]
    pos = np.asarray(pos, dtype=np.float64)[::-1]
    n_pos = float(pos.sum())
    if n_pos <= 0:
        return NAN
    tp, fp = np.cumsum(pos) - offset, np.cumsum(neg)
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = (tp + fp > 0) & (pos > 0)
        precision = np.where(ok, tp / np.where(ok, tp + fp, 1.0), 0.0)
    return float(pos @ precision) / n_pos


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


def ece_from_bins(
    name: str,
    count: np.ndarray,
    sum_p: np.ndarray,
    sum_y: np.ndarray,
    confidence: float = 0.95,
) -> MetricValue:
    """Expected calibration error Σ_b (n_b/n)·|ȳ_b − p̄_b| (Guo et al. 2017) = Σ_b |Σy − Σp|/n.

    Interval: delta method treating each bin's outcome sum as binomial around its own mean
    (Var Σy_b ≈ n_b·ȳ_b(1−ȳ_b), bins independent, |·| differentiated away from 0), so
    SE = sqrt(Σ_b n_b ȳ_b(1−ȳ_b))/n. ECE is biased upward for a calibrated model (the
    |·| of noise is positive) and the interval is conditional on the binning: read it as
    "how precisely this window measures the binned gap", not as a calibration test.
    """
    count = np.asarray(count, dtype=np.float64)
    n = float(count.sum())
    if n <= 0:
        return MetricValue(name, NAN, NAN, NAN, 0, "delta")
    sum_y = np.asarray(sum_y, dtype=np.float64)
    value = float(np.abs(sum_y - np.asarray(sum_p, dtype=np.float64)).sum()) / n
    with np.errstate(divide="ignore", invalid="ignore"):
        ybar = np.where(count > 0, sum_y / np.where(count > 0, count, 1.0), 0.0)
    se = math.sqrt(float(np.sum(count * ybar * (1 - ybar)))) / n
    return wald(name, value, se, round(n), confidence, "delta", (0.0, 1.0))


ECE_INTERVAL_NOTE = "no interval: use calibration_p_value for evidence of miscalibration"

EVIDENCE_ALPHA = 0.05
"""β of the evidence weight in :func:`ece_debiased_from_bins`: below a calibration-test
p-value of β the noise term is phased out."""

EVIDENCE_POWER = 0.5
"""γ of the evidence weight w(p) = min(1, p/β)^γ / (1 − βγ/(γ + 1))."""


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


def ece_debiased_from_bins(
    count: np.ndarray,
    sum_p: np.ndarray,
    sum_y: np.ndarray,
    name: str = "ece_debiased",
    p_value: float | None = None,
) -> MetricValue:
    """ECE with the calibrated model's expected ECE subtracted (mean ≈ 0 when calibrated).

    The plug-in ECE Σ_b |S_b|/n, S_b = Σy − Σp over bin b, is biased upward: for a perfectly
    calibrated model S_b is pure binomial noise and E|S_b| is its mean absolute deviation
    MAD_b (at n = 1,000 with 10 bins the plug-in reads 0.025-0.03 for a perfect model).
    Following Roelofs et al. (2022, "Mitigating bias in calibration error estimation") and
    Kumar et al. (2019, "Verified uncertainty calibration", debiased estimator), the
    expected noise Σ_b MAD_b is subtracted, with MAD_b exact for Binomial(n_b, p̄_b)
    (:func:`_binomial_mad`) — weighted by the evidence of miscalibration:

        ece_debiased = (Σ_b |S_b| − w(p)·Σ_b MAD_b) / n,
        w(p) = min(1, p/β)^γ / (1 − βγ/(γ + 1)),  β = 0.05, γ = ½,

    p the :func:`calibration_test` p-value of the same bins. Why: given the scores the
    MADs are constants, and under calibration p is uniform, so E w(p) = 1 and
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
    point rule on this value, and :func:`calibration_test` is the evidence that a model is
    miscalibrated.
    """
    count = np.asarray(count, dtype=np.float64)
    n = float(count.sum())
    if n <= 0:
        return MetricValue(name, NAN, NAN, NAN, 0, "debiased")
    ok = count > 0
    c = count[ok]
    sp = np.asarray(sum_p, dtype=np.float64)
    sy = np.asarray(sum_y, dtype=np.float64)
    pbar = np.clip(sp[ok] / c, 0.0, 1.0)
    noise = float(np.sum(_binomial_mad(c, pbar)))
    if p_value is None:  # callers that already ran the test pass its p-value
        p_value = calibration_test(count, sp, sy).value
    weight = 1.0 if not math.isfinite(p_value) else _evidence_weight(p_value)
    value = (float(np.sum(np.abs(sy[ok] - sp[ok]))) - weight * noise) / n
    return MetricValue(name, value, NAN, NAN, round(n), "debiased", ECE_INTERVAL_NOTE)


def _evidence_weight(p_value: float) -> float:
    """w(p) of :func:`ece_debiased_from_bins`; its mean over p ~ Uniform(0, 1) is 1."""
    beta, gamma = EVIDENCE_ALPHA, EVIDENCE_POWER
    return min(1.0, p_value / beta) ** gamma / (1.0 - beta * gamma / (gamma + 1.0))


MIN_SCORE_CLASS_COUNT = 30
"""Positives and negatives before the ROC-AUC, PR-AUC, log-loss and Brier intervals are
exported. Measured (docs/statistics.md): with 10-20 events of the smaller class the
logit-t DeLong interval covered 0.87-0.91, average precision's logit interval 0.92, and
the CLT intervals of the log loss and Brier score — means of a per-row loss that is
strongly skewed when one class is rare — 0.92 or 0.99; from 30 on all stay in
[0.93, 0.97]. (The confusion-count metrics need only ``MIN_CLASS_COUNT``.)"""

MIN_GROUP_EVENTS = 5.0
"""Expected positives and negatives each calibration group needs for the chi-square test."""


def calibration_test(count: np.ndarray, sum_p: np.ndarray, sum_y: np.ndarray) -> MetricValue:
    """Bin-level goodness-of-fit test of calibration: ``calibration_p_value``.

    H0: the model is calibrated, i.e. in each calibration bin Σy has mean Σp. Under H0
    S_b = Σy − Σp has variance Σ p(1−p) ≈ n_b p̄_b(1 − p̄_b), and χ² = Σ_g S_g²/V_g is
    asymptotically χ² with G degrees of freedom (G groups, no parameter fitted on the
    window) — the Hosmer–Lemeshow statistic for a model evaluated out of sample (Hosmer &
    Lemeshow 2000, §5.2.2). Adjacent bins are pooled (in score order) until each group
    expects at least 5 positives and 5 negatives (Cochran's rule), so the χ² approximation
    holds at small n. Measured false alarm rate at α = 0.05 and power are in
    docs/statistics.md. A p-value has no interval (``note`` says so).
    """
    count = np.asarray(count, dtype=np.float64)
    n = round(float(count.sum()))
    note = "a p-value has no interval"
    if n <= 0:
        return MetricValue("calibration_p_value", NAN, NAN, NAN, 0, "hosmer-lemeshow", note)
    sp = np.asarray(sum_p, dtype=np.float64)
    sy = np.asarray(sum_y, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.where(count > 0, sp * (1.0 - sp / np.where(count > 0, count, 1.0)), 0.0)
    groups: list[list[float]] = []  # [Σy − Σp, V, Σp, Σ(1 − p)]
    cur = [0.0, 0.0, 0.0, 0.0]
    for b in range(count.size):
        if count[b] <= 0:
            continue
        cur = [cur[0] + sy[b] - sp[b], cur[1] + v[b], cur[2] + sp[b], cur[3] + count[b] - sp[b]]
        if cur[2] >= MIN_GROUP_EVENTS and cur[3] >= MIN_GROUP_EVENTS:
            groups.append(cur)
            cur = [0.0, 0.0, 0.0, 0.0]
    if cur[2] + cur[3] > 0:
        if groups:
            groups[-1] = [a + b for a, b in zip(groups[-1], cur, strict=True)]
        else:
            groups.append(cur)
    usable = [g for g in groups if g[1] > 0]
    if not usable or (len(groups) == 1 and (groups[0][2] < 1 or groups[0][3] < 1)):
        reason = "too few expected events for a calibration test"
        return MetricValue("calibration_p_value", NAN, NAN, NAN, n, "hosmer-lemeshow", reason)
    from scipy.special import chdtrc

    chi2 = float(sum(g[0] ** 2 / g[1] for g in usable))
    p_value = float(chdtrc(len(usable), chi2))
    return MetricValue("calibration_p_value", p_value, NAN, NAN, n, "hosmer-lemeshow", note)


def mce_from_bins(
    count: np.ndarray, sum_p: np.ndarray, sum_y: np.ndarray, confidence: float = 0.95
) -> MetricValue:
    """Maximum calibration error max_b |ȳ_b − p̄_b| over non-empty bins (Guo et al. 2017).

    Interval: Wald on the arg-max bin's observed frequency (SE sqrt(ȳ(1−ȳ)/n_b)); n is
    that bin's count. It ignores the selection of the maximum, so it is optimistic.
    """
    count = np.asarray(count, dtype=np.float64)
    nonempty = count > 0
    if not nonempty.any():
        return MetricValue("mce", NAN, NAN, NAN, 0, "delta")
    c = count[nonempty]
    ybar = np.asarray(sum_y, dtype=np.float64)[nonempty] / c
    gap = np.abs(ybar - np.asarray(sum_p, dtype=np.float64)[nonempty] / c)
    b = int(np.argmax(gap))
    se = math.sqrt(ybar[b] * (1 - ybar[b]) / c[b])
    return wald("mce", float(gap[b]), se, round(c[b]), confidence, "delta", (0.0, 1.0))


def _logit_interval(name: str, value: float, half_width: float, n: int, method: str) -> MetricValue:
    """value in (0, 1) with ``value ± half_width`` taken on the logit scale (delta method:
    d logit(v)/dv = 1/(v(1 − v))) and mapped back."""
    if not (math.isfinite(value) and math.isfinite(half_width)):
        return MetricValue(name, value, NAN, NAN, n, method)
    if value <= 0.0 or value >= 1.0:
        return MetricValue(name, value, value, value, n, method)
    from scipy.special import expit, logit

    eta, half = float(logit(value)), half_width / (value * (1.0 - value))
    return MetricValue(name, value, float(expit(eta - half)), float(expit(eta + half)), n, method)


# --------------------------------------------------------------------------- layout


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
        return 3 * self.bins + 3 * self.calibration_bins + 5

    @property
    def _cal(self) -> int:
        return 3 * self.bins

    @property
    def _sums(self) -> int:
        return 3 * self.bins + 3 * self.calibration_bins

    def empty(self) -> np.ndarray:
        return np.zeros(self.width, dtype=np.float64)

    def interior_edges(self) -> np.ndarray:
        """The B − 1 interior fine-bin edges, uniform in logit."""
        from scipy.special import expit

        return expit(np.linspace(-self.logit_range, self.logit_range, self.bins - 1))

    def lower_edges(self) -> np.ndarray:
        """Lower edge of each fine bin (0 for the first): the candidate thresholds."""
        return np.concatenate([[0.0], self.interior_edges()])

    def bin_of(self, score: np.ndarray) -> np.ndarray:
        return np.searchsorted(
            self.interior_edges(), np.asarray(score, dtype=np.float64), side="right"
        )

    # accumulation ------------------------------------------------------------
    def add_rows(
        self, matrix: np.ndarray, rows: np.ndarray | int, y_true: np.ndarray, score: np.ndarray
    ) -> None:
        """Add (0/1 label, probability-of-positive score) pairs into ``matrix[rows[i]]``."""
        y = np.asarray(y_true, dtype=np.float64)
        p = np.clip(np.asarray(score, dtype=np.float64), 0.0, 1.0)
        m = y.size
        r = _as_index(rows, m)
        b = self.bins
        fine = self.bin_of(p)
        np.add.at(matrix, (r, fine + b * (y > 0.5)), 1.0)
        np.add.at(matrix, (r, 2 * b + fine), p)
        mc = self.calibration_bins
        coarse = np.searchsorted(np.linspace(0.0, 1.0, mc + 1)[1:-1], p, side="left")
        cal = self._cal
        np.add.at(matrix, (r, cal + coarse), 1.0)
        np.add.at(matrix, (r, cal + mc + coarse), p)
        np.add.at(matrix, (r, cal + 2 * mc + coarse), y)
        pc = np.clip(p, self.eps, 1.0 - self.eps)
        ll = -(y * np.log(pc) + (1.0 - y) * np.log1p(-pc))
        br = (p - y) ** 2
        dense = np.column_stack([np.ones(m), ll, ll * ll, br, br * br])
        np.add.at(matrix, (r[:, None], self._sums + np.arange(5)[None, :]), dense)

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
        number of scored rows; see :func:`roc_auc_from_hist` for the bin-error bound
        (:meth:`roc_auc_bound`).
        """
        neg, pos, _ = self.histograms(vec)
        auc, se_dl, se_hm, _ = roc_auc_from_hist(neg, pos)
        se = {"delong": se_dl, "hanley_mcneil": se_hm}[method]
        n = round(float(neg.sum() + pos.sum()))
        n_pos, n_neg = float(pos.sum()), float(neg.sum())
        label = method.replace("_", "-") + "-logit"
        df = min(n_pos, n_neg) - 1.0
        from scipy.special import stdtrit

        quantile = float(stdtrit(df, 0.5 + confidence / 2.0)) if df >= 1 else math.inf
        mv = _logit_interval("roc_auc", auc, se * quantile, n, label)
        reason = class_count_reason(n_pos, n_neg, MIN_SCORE_CLASS_COUNT)
        return withheld(mv, reason) if reason and mv.defined else mv

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

    def pr_auc(self, vec: np.ndarray, confidence: float = 0.95) -> MetricValue:
        """Average precision (sklearn semantics at bin granularity), logit interval.

        Boyd, Eng & Page (2013), "Area under the precision-recall curve: point estimates
        and confidence intervals": logit(AP) ± z/sqrt(P·AP·(1−AP)) back-transformed, which
        they found to cover well; n reported is the positive count P.
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
        neg, pos, _ = self.histograms(vec)
        ap = average_precision_from_hist(neg, pos, offset)
        n_pos = float(pos.sum())
        n = round(n_pos)
        if not math.isfinite(ap):
            return MetricValue(name, NAN, NAN, NAN, n, "logit")
        reason = class_count_reason(n_pos, float(neg.sum()), MIN_SCORE_CLASS_COUNT)
        if reason:
            return MetricValue(name, ap, NAN, NAN, n, "logit", reason)
        if ap <= 0.0 or ap >= 1.0:
            return MetricValue(name, ap, ap, ap, n, "logit")
        half = z_value(confidence) / math.sqrt(n_pos * ap * (1 - ap))
        from scipy.special import expit, logit

        eta = float(logit(ap))
        return MetricValue(name, ap, float(expit(eta - half)), float(expit(eta + half)), n, "logit")

    def ece_equal_mass(self, vec: np.ndarray, confidence: float = 0.95) -> MetricValue:
        """ECE over M equal-mass bins formed by merging adjacent fine bins.

        A fine bin goes to coarse bin floor(M·(rows before it + half its rows)/n), so the
        coarse bins hold ≈ n/M rows each, off by at most one fine bin's mass (fine bins are
        never split). The gap uses the exact per-fine-bin Σp and positive counts.
        """
        neg, pos, sp = self.histograms(vec)
        cnt = neg + pos
        n = float(cnt.sum())
        mc = self.calibration_bins
        if n <= 0:
            return MetricValue("ece_equal_mass", NAN, NAN, NAN, 0, "delta")
        mid = np.cumsum(cnt) - cnt / 2
        group = np.minimum(mc - 1, np.floor(mc * mid / n).astype(np.intp))
        agg = [np.bincount(group, weights=w, minlength=mc) for w in (cnt, sp, pos)]
        return ece_from_bins("ece_equal_mass", agg[0], agg[1], agg[2], confidence)

    def reliability(self, vec: np.ndarray, confidence: float = 0.95) -> list[ReliabilityBin]:
        """Equal-width reliability diagram points (empty bins have NaN means)."""
        count, sp, sy = self.calibration(vec)
        lo, hi = wilson_interval(sy, count, confidence)
        edges = np.linspace(0.0, 1.0, self.calibration_bins + 1).tolist()
        # plain floats: this runs for every exported window, ~10 bins each
        rows = zip(count.tolist(), sp.tolist(), sy.tolist(), lo.tolist(), hi.tolist(), strict=True)
        return [
            ReliabilityBin(edges[b], edges[b + 1], round(c), s_p / c if c > 0 else NAN,
                           s_y / c if c > 0 else NAN, lo_b, hi_b)
            for b, (c, s_p, s_y, lo_b, hi_b) in enumerate(rows)
        ]  # fmt: skip

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

    def metrics(
        self, vec: np.ndarray, confidence: float = 0.95, auc_method: str = "delong"
    ) -> list[MetricValue]:
        """roc_auc, pr_auc, pr_auc_debiased, log_loss, brier, ece, ece_debiased,
        calibration_p_value, ece_equal_mass, mce (+ base_rate).

        Interval gates: below ``MIN_SCORE_CLASS_COUNT`` positives or negatives the AUC, AP,
        log loss and Brier intervals are withheld (NaN, with the reason in ``note``)."""
        count, sp, sy = self.calibration(vec)
        s = self._sums
        n, s_ll, s_ll2, s_br, s_br2 = (float(x) for x in vec[s : s + 5])
        positives = float(sy.sum())
        negatives = float(count.sum()) - positives
        reason = class_count_reason(positives, negatives, MIN_SCORE_CLASS_COUNT)

        def gated(mv: MetricValue) -> MetricValue:
            return withheld(mv, reason) if reason and mv.defined else mv

        calibration = calibration_test(count, sp, sy)
        # base rate = prevalence: the class count is its binomial count (binary.BinaryLayout)
        base_reason = class_count_reason(positives, negatives)

        def class_gated(mv: MetricValue) -> MetricValue:
            return withheld(mv, base_reason) if base_reason and mv.defined and not mv.note else mv

        return [
            self.roc_auc(vec, confidence, auc_method),
            self.pr_auc(vec, confidence),
            self.pr_auc_debiased(vec, confidence),
            gated(clt_mean("log_loss", s_ll, s_ll2, n, confidence, (0.0, math.inf))),
            gated(clt_mean("brier", s_br, s_br2, n, confidence, (0.0, 1.0))),
            ece_from_bins("ece", count, sp, sy, confidence),
            ece_debiased_from_bins(count, sp, sy, p_value=calibration.value),
            calibration,
            self.ece_equal_mass(vec, confidence),
            mce_from_bins(count, sp, sy, confidence),
            class_gated(_ratio("base_rate", positives, float(count.sum()), confidence)),
        ]
