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

import numpy as np
from scipy.special import expit, logit

from .common import NAN, clt_mean, wald
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
    "ece_from_bins",
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


@dataclass(frozen=True, slots=True)
class ReliabilityBin:
    """One point of a reliability diagram: mean predicted vs observed frequency (Wilson)."""

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


def average_precision_from_hist(neg: np.ndarray, pos: np.ndarray) -> float:
    """Average precision as sklearn computes it, with one threshold per bin edge.

    AP = Σ_k (R_k − R_{k−1})·P_k over thresholds in decreasing order (the step-wise sum,
    no interpolation). A bin acts as one group of tied scores: its positives all enter
    at the precision of the bin's lower edge, exactly what sklearn does for tied scores.
    """
    neg = np.asarray(neg, dtype=np.float64)[::-1]
    pos = np.asarray(pos, dtype=np.float64)[::-1]
    n_pos = float(pos.sum())
    if n_pos <= 0:
        return NAN
    tp, fp = np.cumsum(pos), np.cumsum(neg)
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(tp + fp > 0, tp / np.where(tp + fp > 0, tp + fp, 1.0), 0.0)
    return float(pos @ precision) / n_pos


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
        """ROC-AUC with a DeLong (default) or Hanley–McNeil Wald interval, clipped to [0, 1].

        n is the number of scored rows; see :func:`roc_auc_from_hist` for the bin-error
        bound (:meth:`roc_auc_bound`).
        """
        neg, pos, _ = self.histograms(vec)
        auc, se_dl, se_hm, _ = roc_auc_from_hist(neg, pos)
        se = {"delong": se_dl, "hanley_mcneil": se_hm}[method]
        n = round(float(neg.sum() + pos.sum()))
        return wald("roc_auc", auc, se, n, confidence, method.replace("_", "-"), (0.0, 1.0))

    def roc_auc_bound(self, vec: np.ndarray) -> float:
        """Worst-case |histogram AUC − exact AUC| for this window (see roc_auc_from_hist)."""
        neg, pos, _ = self.histograms(vec)
        return roc_auc_from_hist(neg, pos)[3]

    def pr_auc(self, vec: np.ndarray, confidence: float = 0.95) -> MetricValue:
        """Average precision (sklearn semantics at bin granularity), logit interval.

        Boyd, Eng & Page (2013), "Area under the precision-recall curve: point estimates
        and confidence intervals": logit(AP) ± z/sqrt(P·AP·(1−AP)) back-transformed, which
        they found to cover well; n reported is the positive count P.
        """
        neg, pos, _ = self.histograms(vec)
        ap = average_precision_from_hist(neg, pos)
        n_pos = float(pos.sum())
        n = round(n_pos)
        if not math.isfinite(ap):
            return MetricValue("pr_auc", NAN, NAN, NAN, n, "logit")
        if ap <= 0.0 or ap >= 1.0:
            return MetricValue("pr_auc", ap, ap, ap, n, "logit")
        half = z_value(confidence) / math.sqrt(n_pos * ap * (1 - ap))
        eta = float(logit(ap))
        return MetricValue(
            "pr_auc", ap, float(expit(eta - half)), float(expit(eta + half)), n, "logit"
        )

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
        edges = np.linspace(0.0, 1.0, self.calibration_bins + 1)
        out = []
        for b in range(self.calibration_bins):
            c = float(count[b])
            out.append(
                ReliabilityBin(
                    float(edges[b]),
                    float(edges[b + 1]),
                    round(c),
                    sp[b] / c if c > 0 else NAN,
                    sy[b] / c if c > 0 else NAN,
                    float(lo[b]),
                    float(hi[b]),
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

    def metrics(
        self, vec: np.ndarray, confidence: float = 0.95, auc_method: str = "delong"
    ) -> list[MetricValue]:
        """roc_auc, pr_auc, log_loss, brier, ece, ece_equal_mass, mce (+ base_rate)."""
        count, sp, sy = self.calibration(vec)
        s = self._sums
        n, s_ll, s_ll2, s_br, s_br2 = (float(x) for x in vec[s : s + 5])
        return [
            self.roc_auc(vec, confidence, auc_method),
            self.pr_auc(vec, confidence),
            clt_mean("log_loss", s_ll, s_ll2, n, confidence, (0.0, math.inf)),
            clt_mean("brier", s_br, s_br2, n, confidence, (0.0, 1.0)),
            ece_from_bins("ece", count, sp, sy, confidence),
            self.ece_equal_mass(vec, confidence),
            mce_from_bins(count, sp, sy, confidence),
            _ratio("base_rate", float(sy.sum()), float(count.sum()), confidence),
        ]
