"""Score metrics of segment slices, from their coarser score histograms, many at once.

A slice's histogram has fewer bins than the version's (``slice_score_bins``, default
128 over logits ±8) so that it can be kept per segment. ROC-AUC already treats a bin as
tied scores counted by halves, which is unbiased when the two classes mix evenly inside a
bin. Average precision at bin granularity is not: every positive of a bin enters at the
bin's final precision, a downward bias proportional to the bin width (−0.014 at 128
bins). Here a bin is instead crossed along the straight line from its first to its last
(TP, FP) point — the interpolation Davis & Goadrich (2006, "The relationship between
precision-recall and ROC curves", §4) show is the correct one in PR space — which
integrates precision in closed form and brings the error to ~1e-3 at 256 bins and ~1.5e-3
at 128 (docs/semantics.md).

Why a batch: an evaluation tick of a fleet computes ~10⁴ slice windows, and each of the
eleven score metrics is a handful of NumPy calls on a vector of a few hundred bins — the
per-call overhead was 60 % of the tick. :func:`slice_score_metrics_many` computes every
metric of a stack of slice vectors as (rows × bins) array operations, with the same
formulas as :class:`~monitor.stats.scores.ScoreLayout`'s one-vector methods (tested equal
row by row); each row's result depends only on its own vector.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import chdtrc, expit, stdtrit

from ..stats.common import NAN, class_count_reason, trials_reason
from ..stats.intervals import wilson_interval, z_value
from ..stats.results import MetricValue
from ..stats.scores import (
    ECE_INTERVAL_NOTE,
    EVIDENCE_ALPHA,
    EVIDENCE_POWER,
    MIN_GROUP_EVENTS,
    MIN_SCORE_CLASS_COUNT,
    ReliabilityBin,
    ScoreLayout,
    _binomial_mad,
)

__all__ = [
    "SliceScores",
    "average_precision_interpolated",
    "interpolated_ap_many",
    "slice_score_metrics",
    "slice_score_metrics_many",
]

SliceScores = tuple[list[MetricValue], tuple[ReliabilityBin, ...]]


def average_precision_interpolated(neg: np.ndarray, pos: np.ndarray) -> float:
    """AP = (1/P) Σ_bins ∫₀¹ p_j · (a + p_j t)/(c + (p_j + n_j) t) dt, bins from the top.

    a, c: true and all positives above bin j; p_j, n_j: its positives and negatives. With
    d = p_j + n_j the integral is p_j/d + (a − p_j c/d)/d · ln((c + d)/c) (c > 0), and
    p_j/d for the top non-empty bin (c = 0)."""
    neg = np.asarray(neg, np.float64)[np.newaxis, :]
    pos = np.asarray(pos, np.float64)[np.newaxis, :]
    return float(interpolated_ap_many(neg, pos)[0])


def interpolated_ap_many(neg: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """:func:`average_precision_interpolated` of each row of (rows × bins) histograms."""
    neg, pos = neg[:, ::-1], pos[:, ::-1]
    n_pos = pos.sum(axis=1)
    a = np.cumsum(pos, axis=1) - pos
    c = a + np.cumsum(neg, axis=1) - neg
    d = pos + neg
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(pos > 0, pos / np.where(d > 0, d, 1.0), 0.0)
        safe_c = np.where(c > 0, c, 1.0)
        step = (a - frac * c) / np.where(d > 0, d, 1.0) * np.log1p(d / safe_c)
        tail = np.where((c > 0) & (pos > 0), step, 0.0)
        return np.where(n_pos > 0, np.sum(pos * (frac + tail), axis=1) / n_pos, NAN)


def slice_score_metrics(
    layout: ScoreLayout, vec: np.ndarray, confidence: float
) -> list[MetricValue]:
    """The score metrics of one slice vector (:func:`slice_score_metrics_many`)."""
    out = slice_score_metrics_many(layout, np.asarray(vec, np.float64)[np.newaxis, :], confidence)
    return out[0][0] if out[0] is not None else []


def slice_score_metrics_many(
    layout: ScoreLayout, vecs: np.ndarray, confidence: float
) -> list[SliceScores | None]:
    """Per row of ``vecs`` (rows × ``layout.width``): the metrics of ``layout.metrics``
    (roc_auc, pr_auc, pr_auc_debiased, log_loss, brier, ece, ece_debiased,
    calibration_p_value, ece_equal_mass, mce, base_rate) with PR-AUC interpolated, and
    the reliability diagram; None for a row without scored rows.

    PR-AUC carries the Boyd, Eng & Page (2013) logit interval of the version-level PR-AUC
    and the same class-count gate as every score metric."""
    v = np.asarray(vecs, np.float64)
    rows = v.shape[0]
    out: list[SliceScores | None] = [None] * rows
    scored = np.flatnonzero(v[:, layout.width - 5] > 0) if rows else np.empty(0, np.intp)
    if scored.shape[0] == 0:
        return out
    v = v[scored]
    b, mc, cal, s = layout.bins, layout.calibration_bins, 3 * layout.bins, layout._sums
    neg, pos = v[:, :b], v[:, b : 2 * b]
    count, sp, sy = v[:, cal : cal + mc], v[:, cal + mc : cal + 2 * mc], v[:, cal + 2 * mc : s]
    n_pos, n_neg = pos.sum(axis=1), neg.sum(axis=1)
    positives = sy.sum(axis=1)
    n_cal = count.sum(axis=1)
    negatives = n_cal - positives
    z = z_value(confidence)
    reasons = _reasons(positives, negatives)
    score_reasons = _reasons(n_pos, n_neg)

    calibration = _calibration_test(count, sp, sy)
    columns = [
        _roc_auc(neg, pos, n_pos, n_neg, confidence, score_reasons),
        _pr_auc(interpolated_ap_many(neg, pos), n_pos, z, score_reasons),
        _pr_auc(_ap_midrank(neg, pos, n_pos), n_pos, z, score_reasons),
        _clt("log_loss", v[:, s], v[:, s + 1], v[:, s + 2], z, (0.0, math.inf), reasons),
        _clt("brier", v[:, s], v[:, s + 3], v[:, s + 4], z, (0.0, 1.0), reasons),
        _ece("ece", count, sp, sy, z),
        _ece_debiased(count, sp, sy, np.asarray(calibration[0], np.float64)),
        calibration,
        _ece("ece_equal_mass", *_equal_mass(neg, pos, v[:, 2 * b : 3 * b], mc), z),
        _mce(count, sp, sy, z),
        _base_rate(positives, negatives, n_cal, confidence),
    ]
    names = _NAMES
    per_metric = [
        [MetricValue(name, *fields) for fields in zip(*col, strict=True)]
        for name, col in zip(names, columns, strict=True)
    ]
    reliability = _reliability(count, sp, sy, confidence)
    for j, (i, rel) in enumerate(zip(scored.tolist(), reliability, strict=True)):
        out[i] = ([metric[j] for metric in per_metric], rel)
    return out


_NAMES = ("roc_auc", "pr_auc", "pr_auc_debiased", "log_loss", "brier", "ece", "ece_debiased",
          "calibration_p_value", "ece_equal_mass", "mce", "base_rate")  # fmt: skip

# (value, lower, upper, n, method, note) per row, as lists
_Column = tuple[list[float], list[float], list[float], list[int], list[str], list[str]]


def _reasons(positives: np.ndarray, negatives: np.ndarray) -> list[str]:
    short = (positives < MIN_SCORE_CLASS_COUNT) | (negatives < MIN_SCORE_CLASS_COUNT)
    out = [""] * positives.shape[0]
    for i in np.flatnonzero(short).tolist():
        out[i] = class_count_reason(float(positives[i]), float(negatives[i]), MIN_SCORE_CLASS_COUNT)
    return out


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
    inner = ok & (value > 0.0) & (value < 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        vv = np.where(inner, value, 0.5)
        eta = np.log(vv / (1.0 - vv))
        lo = np.where(inner, expit(eta - half), np.where(ok, value, NAN))
        hi = np.where(inner, expit(eta + half), np.where(ok, value, NAN))
    return lo, hi


def _roc_auc(
    neg: np.ndarray,
    pos: np.ndarray,
    n_pos: np.ndarray,
    n_neg: np.ndarray,
    confidence: float,
    reasons: list[str],
) -> _Column:
    """``ScoreLayout.roc_auc`` (DeLong, logit-t interval) of each row."""
    both = (n_pos > 0) & (n_neg > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        np_, nn = n_pos[:, None], n_neg[:, None]
        v10 = (np.cumsum(neg, axis=1) - neg + neg / 2) / nn
        v01 = (np_ - np.cumsum(pos, axis=1) + pos / 2) / np_
        auc = np.einsum("ij,ij->i", pos, v10) / n_pos
        s10 = np.where(n_pos > 1, np.einsum("ij,ij->i", pos, (v10 - auc[:, None]) ** 2)
                       / (n_pos - 1), 0.0)  # fmt: skip
        s01 = np.where(n_neg > 1, np.einsum("ij,ij->i", neg, (v01 - auc[:, None]) ** 2)
                       / (n_neg - 1), 0.0)  # fmt: skip
        se = np.sqrt(s10 / n_pos + s01 / n_neg)
        df = np.minimum(n_pos, n_neg) - 1.0
        quantile = np.where(df >= 1, stdtrit(np.maximum(df, 1.0), 0.5 + confidence / 2.0), np.inf)
        auc = np.where(both, auc, NAN)
        width = se * quantile
        half = width / (auc * (1.0 - auc))
    lo, hi = _logit_bounds(auc, half, np.isfinite(auc) & np.isfinite(width))
    return _column(auc, lo, hi, n_pos + n_neg, "delong-logit", reasons)


def _ap_midrank(neg: np.ndarray, pos: np.ndarray, n_pos: np.ndarray) -> np.ndarray:
    """``average_precision_from_hist(neg, pos, offset=0.5)`` of each row."""
    neg, pos = neg[:, ::-1], pos[:, ::-1]
    tp, fp = np.cumsum(pos, axis=1) - 0.5, np.cumsum(neg, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = (tp + fp > 0) & (pos > 0)
        precision = np.where(ok, tp / np.where(ok, tp + fp, 1.0), 0.0)
        return np.where(n_pos > 0, np.einsum("ij,ij->i", pos, precision) / n_pos, NAN)


def _pr_auc(ap: np.ndarray, n_pos: np.ndarray, z: float, reasons: list[str]) -> _Column:
    """Boyd, Eng & Page (2013) logit interval of average precision, withheld below the
    class-count gate."""
    with np.errstate(divide="ignore", invalid="ignore"):
        half = z / np.sqrt(n_pos * ap * (1.0 - ap))
    lo, hi = _logit_bounds(ap, half, np.isfinite(ap))
    return _column(ap, lo, hi, n_pos, "logit", reasons)


def _clt(
    name: str,
    n: np.ndarray,
    total: np.ndarray,
    total_sq: np.ndarray,
    z: float,
    bounds: tuple[float, float],
    reasons: list[str],
) -> _Column:
    """``stats.common.clt_mean`` of each row, gated."""
    del name
    n_int = np.rint(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(n_int > 0, total / n, NAN)
        centered = total_sq - total * total / n
        centered = np.where(centered <= 1e-12 * np.abs(total_sq), 0.0, centered)
        se = np.where(n_int >= 2, np.sqrt(centered / (n - 1.0) / n), NAN)
    lo, hi = _wald(mean, se, z, bounds)
    return _column(mean, lo, hi, np.maximum(n_int, 0), "clt", reasons)


def _ece(name: str, count: np.ndarray, sp: np.ndarray, sy: np.ndarray, z: float) -> _Column:
    """``ece_from_bins`` of each row: Σ|Σy − Σp|/n with its delta-method interval."""
    del name
    n = count.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.where(n > 0, np.abs(sy - sp).sum(axis=1) / n, NAN)
        ybar = np.where(count > 0, sy / np.where(count > 0, count, 1.0), 0.0)
        se = np.sqrt(np.sum(count * ybar * (1 - ybar), axis=1)) / n
    lo, hi = _wald(value, se, z, (0.0, 1.0))
    return _column(value, lo, hi, np.where(n > 0, n, 0.0), "delta")


def _ece_debiased(
    count: np.ndarray, sp: np.ndarray, sy: np.ndarray, p_value: np.ndarray
) -> _Column:
    """``ece_debiased_from_bins`` of each row, given its calibration-test p-value (no
    interval): (Σ|Σy − Σp| − w(p)·Σ MAD_b)/n."""
    n = count.sum(axis=1)
    ok = count > 0
    c = np.where(ok, count, 1.0)
    pbar = np.clip(np.where(ok, sp / c, 0.0), 0.0, 1.0)
    noise = np.where(ok, _binomial_mad(c, pbar), 0.0).sum(axis=1)
    beta, gamma = EVIDENCE_ALPHA, EVIDENCE_POWER
    with np.errstate(divide="ignore", invalid="ignore"):
        weight = np.minimum(1.0, p_value / beta) ** gamma / (1.0 - beta * gamma / (gamma + 1.0))
        weight = np.where(np.isfinite(p_value), weight, 1.0)
        gap = np.where(ok, np.abs(sy - sp), 0.0).sum(axis=1)
        value = np.where(n > 0, (gap - weight * noise) / n, NAN)
    nan = np.full(n.shape, NAN)
    col = _column(value, nan, nan, np.where(n > 0, n, 0.0), "debiased")
    notes = [ECE_INTERVAL_NOTE if x > 0 else "" for x in n.tolist()]
    return (*col[:5], notes)


def _calibration_test(count: np.ndarray, sp: np.ndarray, sy: np.ndarray) -> _Column:
    """``calibration_test`` of each row: adjacent bins pooled in score order until each
    group expects ``MIN_GROUP_EVENTS`` of each class, the remainder joining the last group;
    χ² over the groups with positive variance."""
    rows, bins = count.shape
    with np.errstate(divide="ignore", invalid="ignore"):
        var = np.where(count > 0, sp * (1.0 - sp / np.where(count > 0, count, 1.0)), 0.0)
    cur = np.zeros((rows, 4))
    last = np.zeros((rows, 4))
    has_last = np.zeros(rows, bool)
    n_groups = np.zeros(rows, np.int64)
    chi2 = np.zeros(rows)
    usable = np.zeros(rows, np.int64)

    def close(mask: np.ndarray) -> None:  # the previous last group is final
        fin = mask & has_last & (last[:, 1] > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
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
    p_value = np.where(ok, chdtrc(np.maximum(usable, 1), chi2), NAN)
    nan = np.full(rows, NAN)
    col = _column(p_value, nan, nan, np.where(n > 0, n, 0.0), "hosmer-lemeshow")
    notes = [
        "a p-value has no interval" if good or empty
        else "too few expected events for a calibration test"
        for good, empty in zip(ok.tolist(), (np.rint(n) <= 0).tolist(), strict=True)
    ]  # fmt: skip
    return (*col[:5], notes)


def _equal_mass(
    neg: np.ndarray, pos: np.ndarray, sp: np.ndarray, mc: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(count, Σp, Σy) per equal-mass bin (``ScoreLayout.ece_equal_mass``) of each row."""
    rows = neg.shape[0]
    cnt = neg + pos
    n = cnt.sum(axis=1)
    mid = np.cumsum(cnt, axis=1) - cnt / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        group = np.floor(mc * mid / np.where(n > 0, n, 1.0)[:, None]).astype(np.intp)
    flat = (np.minimum(mc - 1, group) + mc * np.arange(rows)[:, None]).ravel()
    return tuple(  # type: ignore[return-value]
        np.bincount(flat, weights=w.ravel(), minlength=rows * mc).reshape(rows, mc)
        for w in (cnt, sp, pos)
    )


def _mce(count: np.ndarray, sp: np.ndarray, sy: np.ndarray, z: float) -> _Column:
    """``mce_from_bins`` of each row: the largest bin gap, Wald on that bin."""
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
    return _column(value, lo, hi, np.where(any_ok, count[r, b], 0.0), "delta")


def _base_rate(
    positives: np.ndarray, negatives: np.ndarray, n: np.ndarray, confidence: float
) -> _Column:
    """``common.ratio`` of the base rate, gated like ``ScoreLayout.metrics``: withheld
    below ``MIN_TRIALS`` rows, then below ``MIN_CLASS_COUNT`` of a class."""
    lo, hi = wilson_interval(positives, n, confidence)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.where(n > 0, positives / n, NAN)
    reasons = [
        trials_reason(t) or (class_count_reason(p, q) if t > 0 else "")
        for t, p, q in zip(n.tolist(), positives.tolist(), negatives.tolist(), strict=True)
    ]
    return _column(value, lo, hi, n, "wilson", reasons)


def _reliability(
    count: np.ndarray, sp: np.ndarray, sy: np.ndarray, confidence: float
) -> list[tuple[ReliabilityBin, ...]]:
    """``ScoreLayout.reliability`` of each row."""
    mc = count.shape[1]
    lo, hi = wilson_interval(sy, count, confidence)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_p = np.where(count > 0, sp / count, NAN).tolist()
        mean_y = np.where(count > 0, sy / count, NAN).tolist()
    edges = np.linspace(0.0, 1.0, mc + 1).tolist()
    counts = np.rint(count).astype(np.int64).tolist()
    los, his = lo.tolist(), hi.tolist()
    return [
        tuple(
            ReliabilityBin(edges[k], edges[k + 1], c[k], mp[k], my[k], lw[k], hg[k])
            for k in range(mc)
        )
        for c, mp, my, lw, hg in zip(counts, mean_p, mean_y, los, his, strict=True)
    ]
