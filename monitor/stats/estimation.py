"""Performance estimated before labels arrive: confidence-based performance estimation (CBPE).

NannyML's CBPE (NannyML documentation, "Estimating performance for binary classification",
2022; the idea: a calibrated probability *is* the expected label) turns the scores of
predictions that are still waiting for their labels into an expected confusion matrix: a
prediction with score p, predicted positive (p >= threshold), is a true positive with
probability p and a false positive with probability 1 − p; predicted negative, a false
negative with probability p and a true negative with 1 − p. Accuracy, precision, recall and
F1 follow from the expected cells; ROC-AUC from the score histogram read as a mixture (each
row weighs p as a positive and 1 − p as a negative).

Input: per fine score bin the row count and Σp (:class:`monitor.stats.scores.ScoreLayout`
keeps both, whatever the labels; a bin is narrow enough — 1.6 % of p(1 − p) — that Σp² is
taken as (Σp)²/count).

Intervals target the *realized* value of the same rows once their labels arrive. Given the
scores and calibration, the labels are independent Bernoulli(p_i), so every confusion cell
is a Poisson-binomial sum with variance Σ p_i(1 − p_i) over its rows (Hong 2013); accuracy
and precision are linear in them, recall and F1 get the delta method over the two
independent sums TP and FN, and ROC-AUC the delta method over the per-bin positive counts
(:func:`_auc`), whose spread is the realized AUC's given the scores. The
sampling variance of the scores themselves is left out on purpose: it belongs to a
population value, and adding it made the interval over-cover the realized value.

The estimate is only as good as the calibration: :func:`cbpe` flags it unreliable (and says
why in every ``note``) when the debiased ECE measured on the labelled rows exceeds
``max_ece``, instead of exporting a silently wrong number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .common import NAN, wald
from .multiclass import _metric_grads
from .results import MetricValue
from .scores import roc_auc_from_hist

__all__ = [
    "ESTIMATED_METRICS",
    "MULTICLASS_ESTIMATED_METRICS",
    "Estimate",
    "cbpe",
    "cbpe_multiclass",
    "cbpe_split",
    "cbpe_top_label",
    "estimated_name",
]

ESTIMATED_METRICS = ("accuracy", "precision", "recall", "f1", "roc_auc")
# multiclass: top-label accuracy and macro averages of the expected confusion matrix
MULTICLASS_ESTIMATED_METRICS = ("accuracy", "precision_macro", "recall_macro", "f1_macro")


def estimated_name(metric: str) -> str:
    """``estimated_accuracy`` — exported as ``mlmon_estimated_accuracy`` beside ``accuracy``."""
    return f"estimated_{metric}"


@dataclass(frozen=True, slots=True)
class Estimate:
    """CBPE estimates for one window (or the still-unlabelled part of one)."""

    metrics: tuple[MetricValue, ...]
    reliable: bool
    reason: str
    rows: int

    def by_name(self) -> dict[str, MetricValue]:
        return {m.name: m for m in self.metrics}


def _ratio_interval(name: str, value: float, var: float, n: int, confidence: float) -> MetricValue:
    if not math.isfinite(value):
        return MetricValue(name, NAN, NAN, NAN, n, "cbpe")
    return wald(name, value, math.sqrt(max(var, 0.0)), n, confidence, "cbpe", (0.0, 1.0))


def cbpe(
    count: np.ndarray,
    sum_p: np.ndarray,
    threshold_bin: int,
    confidence: float = 0.95,
    ece: float | None = None,
    max_ece: float = 0.05,
) -> Estimate:
    """Estimated accuracy, precision, recall, F1 and ROC-AUC from per-bin (count, Σp).

    ``threshold_bin`` is the first fine bin predicted positive (``ScoreLayout.bin_of`` of the
    decision threshold, which sits on a bin edge). ``ece`` is the debiased ECE of the labelled
    rows of the same model (None: not measured yet, reported as unreliable — a label-free
    estimate rests on calibration nobody has checked).
    """
    count = np.asarray(count, dtype=np.float64)
    sp = np.asarray(sum_p, dtype=np.float64)
    positive = np.arange(count.shape[0]) >= threshold_bin
    return cbpe_split(
        np.where(positive, count, 0.0),
        np.where(positive, sp, 0.0),
        np.where(positive, 0.0, count),
        np.where(positive, 0.0, sp),
        confidence,
        ece,
        max_ece,
    )


def cbpe_split(
    count_pos: np.ndarray,
    sum_p_pos: np.ndarray,
    count_neg: np.ndarray,
    sum_p_neg: np.ndarray,
    confidence: float = 0.95,
    ece: float | None = None,
    max_ece: float = 0.05,
) -> Estimate:
    """:func:`cbpe` from per-bin (count, Σp) of the rows *decided* positive and negative.

    The engine keeps the two apart at prediction time, so the expected cells are exact for
    any decision rule (an explicit ``prediction``, a threshold inside a bin)."""
    c_pos, s_pos = np.asarray(count_pos, np.float64), np.asarray(sum_p_pos, np.float64)
    c_neg, s_neg = np.asarray(count_neg, np.float64), np.asarray(sum_p_neg, np.float64)
    count, sp = c_pos + c_neg, s_pos + s_neg
    n = float(count.sum())
    rows = round(n)

    def var(c: np.ndarray, s: np.ndarray) -> np.ndarray:  # Σ p(1 − p), p ≈ p̄ in a bin
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = np.where(c > 0, s / np.where(c > 0, c, 1.0), 0.0)
        return s * (1.0 - mean)

    tp, fn = float(s_pos.sum()), float(s_neg.sum())
    n_pp = float(c_pos.sum())
    tn = float(c_neg.sum()) - fn
    v_tp, v_fn = float(var(c_pos, s_pos).sum()), float(var(c_neg, s_neg).sum())
    var_b = var(count, sp)
    out: list[MetricValue] = []
    # accuracy = (TP + n_pn − FN)/n: Var = (V_TP + V_FN)/n²
    acc = (tp + tn) / n if n > 0 else NAN
    out.append(
        _ratio_interval(
            "estimated_accuracy", acc, (v_tp + v_fn) / n**2 if n else NAN, rows, confidence
        )
    )
    prec = tp / n_pp if n_pp > 0 else NAN
    out.append(
        _ratio_interval(
            "estimated_precision", prec, v_tp / n_pp**2 if n_pp else NAN, round(n_pp), confidence
        )
    )
    pos = tp + fn
    if pos > 0:
        rec = tp / pos
        var_rec = (fn * fn * v_tp + tp * tp * v_fn) / pos**4
    else:
        rec, var_rec = NAN, NAN
    out.append(_ratio_interval("estimated_recall", rec, var_rec, rows, confidence))
    den = n_pp + pos
    if den > 0:
        f1 = 2 * tp / den
        g_tp, g_fn = 2 * (n_pp + fn) / den**2, -2 * tp / den**2
        var_f1 = g_tp * g_tp * v_tp + g_fn * g_fn * v_fn
    else:
        f1, var_f1 = NAN, NAN
    out.append(_ratio_interval("estimated_f1", f1, var_f1, rows, confidence))
    out.append(_auc(count, sp, var_b, confidence, rows))
    reason = _flag(ece, max_ece)
    if reason:
        out = [MetricValue(m.name, m.value, m.lower, m.upper, m.n, m.method, reason) for m in out]
    return Estimate(tuple(out), not reason, reason, rows)


def _flag(ece: float | None, max_ece: float) -> str:
    """Why an estimate is unreliable ("" when the measured calibration allows it)."""
    if ece is None or not math.isfinite(ece):
        return "estimate unreliable: calibration not measured on labelled rows"
    if ece > max_ece:
        return f"estimate unreliable: debiased ECE {ece:.3f} > max_ece {max_ece:g}"
    return ""


def cbpe_top_label(
    count: np.ndarray,
    sum_conf: np.ndarray,
    confidence: float = 0.95,
    ece: float | None = None,
    max_ece: float = 0.05,
) -> Estimate:
    """Estimated multiclass accuracy from top-label confidence bins (count, Σ confidence).

    If the top-label confidence c is calibrated (P(correct | c) = c, the property the
    multiclass top-label ECE measures), the prediction is correct with probability c, so
    E[accuracy] = Σc/n with Poisson-binomial variance Σc(1 − c)/n². Within a bin Σc² is
    taken as (Σc)²/count, which by Jensen overstates the variance by the within-bin spread
    of c (< 0.5 % for 10 bins): conservative. ``ece`` is the labelled rows' debiased
    top-label ECE.
    """
    count = np.asarray(count, dtype=np.float64)
    sc = np.asarray(sum_conf, dtype=np.float64)
    n = float(count.sum())
    rows = round(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_c = np.where(count > 0, sc / np.where(count > 0, count, 1.0), 0.0)
    acc = float(sc.sum()) / n if n > 0 else NAN
    var = float((sc * (1.0 - mean_c)).sum()) / n**2 if n > 0 else NAN
    mv = _ratio_interval("estimated_accuracy", acc, var, rows, confidence)
    reason = _flag(ece, max_ece)
    if reason:
        mv = MetricValue(mv.name, mv.value, mv.lower, mv.upper, mv.n, mv.method, reason)
    return Estimate((mv,), not reason, reason, rows)


def cbpe_multiclass(
    decided_sums: np.ndarray,
    confidence: float = 0.95,
    ece: float | None = None,
    max_ece: float = 0.05,
) -> tuple[MetricValue, ...]:
    """Estimated macro precision, recall and F1 from the expected confusion matrix.

    ``decided_sums[i, j]`` = Σ p_j over the predictions decided class i (K×K). NannyML's
    multiclass CBPE (NannyML documentation, "Estimating performance for multiclass
    classification", 2022): if the probability vector is calibrated, a prediction decided i
    has true class j with probability p_j, so E[C_ij] is that sum; per-class precision,
    recall and F1 are read from it as from realized counts (:mod:`.multiclass`, classes
    present, zero division 0) and macro-averaged. The row sums are the decided counts
    (probabilities sum to 1 at ingest).

    Interval: given the scores, each prediction's true class is an independent
    Categorical(p), so the column of counts of decided class i has covariance
    diag(Σp) − Σ p pᵀ (multinomial-type sum). The delta method over the cells then gives
    Var f ≈ Σ_i [Σ_j g_ij² s_ij − Σ_r (g_i·p_r)²]; only the sums s_ij are kept, so the last
    term is replaced by (g_i·s_i)²/n_i, which by Jensen (Σ_r x_r² ≥ (Σ_r x_r)²/n) can only
    make the variance larger: a conservative interval for the realized value (95 % covered
    0.96 on calibrated Dirichlet streams; loose when one decided class's vectors differ
    much, e.g. one-hot; the exact Σ p pᵀ would cost K³ doubles per bucket).
    """
    s = np.asarray(decided_sums, dtype=np.float64)
    k = s.shape[0]
    cm = s.T  # rows true class, columns predicted, as the realized layout
    n_dec = s.sum(axis=1)
    n = float(n_dec.sum())
    rows = round(n)
    present = (cm.sum(axis=0) + cm.sum(axis=1)) > 0
    reason = _flag(ece, max_ece)
    out: list[MetricValue] = []
    for kind in ("precision", "recall", "f1"):
        name = f"estimated_{kind}_macro"
        if n <= 0 or not present.any() or k == 0:
            out.append(MetricValue(name, NAN, NAN, NAN, rows, "cbpe-delta", reason))
            continue
        values, grads, _ = _metric_grads(cm, kind)
        macro = float(values[present].mean())
        g = (grads[present].sum(axis=0) / present.sum()).T  # [decided i, true j]
        with np.errstate(divide="ignore", invalid="ignore"):
            cross = np.where(
                n_dec > 0, (g * s).sum(axis=1) ** 2 / np.where(n_dec > 0, n_dec, 1.0), 0.0
            )
        var = float((g * g * s).sum() - cross.sum())
        mv = wald(name, macro, math.sqrt(max(var, 0.0)), rows, confidence, "cbpe-delta", (0.0, 1.0))
        out.append(MetricValue(mv.name, mv.value, mv.lower, mv.upper, mv.n, mv.method, reason))
    return tuple(out)


def _auc(
    count: np.ndarray, sp: np.ndarray, var_b: np.ndarray, confidence: float, rows: int
) -> MetricValue:
    """Mixture AUC (positives weighted p, negatives 1 − p) with the delta-method SD of the
    realized AUC given the scores.

    With Y_b ~ Poisson-binomial the positives of bin b (mean Σp_b, variance Σp(1 − p)_b),
    the realized AUC is f(Y) = U/(P·N), U = Σ_b Y_b·(N_<b + (c_b − Y_b)/2) (Mann–Whitney with
    in-bin ties as halves). ∂U/∂Y_b = N_<b + c_b/2 − Y_b − P_>b and ∂(P·N)/∂Y_b = N − P, so
    Var f ≈ Σ_b (∂f/∂Y_b)² Var Y_b, evaluated at Y = E[Y]. A 400-draw parametric bootstrap
    of the bin labels covered 0.945 over 2,000 calibrated windows of 1,000 rows, this 0.944,
    at 0.11 ms per window instead of 23 ms (bench/catalog.py).
    """
    neg = count - sp
    auc, _, _, _ = roc_auc_from_hist(neg, sp)
    if not math.isfinite(auc):
        return MetricValue("estimated_roc_auc", NAN, NAN, NAN, rows, "cbpe-delta")
    n_pos = float(sp.sum())
    n_neg = float(neg.sum())
    neg_below = np.cumsum(neg) - neg
    pos_above = n_pos - np.cumsum(sp)
    du = neg_below + count / 2.0 - sp - pos_above
    pn = n_pos * n_neg
    u = auc * pn
    grad = du / pn - u * (n_neg - n_pos) / pn**2
    se = math.sqrt(max(float(np.sum(grad * grad * var_b)), 0.0))
    return wald("estimated_roc_auc", auc, se, rows, confidence, "cbpe-delta", (0.0, 1.0))
