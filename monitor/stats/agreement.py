"""Agreement statistics over a K×K confusion matrix (MCC, Cohen's kappa) with delta-method SEs.

Shared by the binary (K = 2) and multiclass layouts; a leaf module so neither imports the
other.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from .common import NAN, homogeneous_delta_se

__all__ = ["KappaWeights", "kappa_with_se", "mcc_with_se"]

KappaWeights = Literal["none", "linear", "quadratic"]


def mcc_with_se(counts: np.ndarray) -> tuple[float, float]:
    """K-class MCC (Gorodkin 2004; sklearn's ``matthews_corrcoef``) and its delta-method SE.

    With t, p the true/predicted margins, c the trace and s = n:
    MCC = (c·s − p·t) / sqrt((s² − p·p)(s² − t·t)). It is scale-free in the counts, so
    Var ≈ Σ (∂MCC/∂C_ij)² C_ij (see :func:`monitor.stats.common.homogeneous_delta_se`),
    with ∂A = s·δ_ij + c − t_j − p_i, ∂B = 2(s − p_j), ∂D = 2(s − t_i) and
    ∂MCC = ∂A/√(BD) − MCC/2·(∂B/B + ∂D/D). An empty margin gives MCC = 0 (sklearn) and a
    NaN standard error.
    """
    cm = np.asarray(counts, dtype=np.float64)
    t, p = cm.sum(axis=1), cm.sum(axis=0)
    c, s = float(np.trace(cm)), float(cm.sum())
    a = c * s - float(p @ t)
    b = s * s - float(p @ p)
    d = s * s - float(t @ t)
    if b * d <= 0:
        return (0.0 if s > 0 else NAN), NAN
    value = a / math.sqrt(b * d)
    da = s * np.eye(len(t)) + c - t[np.newaxis, :] - p[:, np.newaxis]
    db = 2.0 * (s - p)[np.newaxis, :]
    dd = 2.0 * (s - t)[:, np.newaxis]
    grad = da / math.sqrt(b * d) - value / 2.0 * (db / b + dd / d)
    return value, homogeneous_delta_se(grad, cm)


def kappa_with_se(counts: np.ndarray, weights: KappaWeights = "none") -> tuple[float, float]:
    """(Weighted) Cohen's kappa with the Fleiss, Cohen & Everitt (1969) large-sample SE.

    Value: sklearn's ``cohen_kappa_score(weights=...)`` — disagreement weights 1−δ_ij,
    |i−j| or (i−j)² over the *present* labels (sklearn builds its label list from the
    data, so absent classes do not stretch the linear/quadratic distances).
    SE: with agreement weights w = 1 − w_dis/max(w_dis), p_o = Σ w p, p_e = Σ w r cᵀ,
    w̄_i = Σ_j w_ij c_j, w̄_j = Σ_i w_ij r_i:
    Var κ = [Σ p_ij (w_ij − (w̄_i + w̄_j)(1−κ))² − (κ − p_e(1−κ))²] / (n (1−p_e)²),
    which is the delta method on the multinomial (valid for κ ≠ 0 as well as κ = 0).
    """
    cm = np.asarray(counts, dtype=np.float64)
    present = (cm.sum(axis=0) + cm.sum(axis=1)) > 0
    cm = cm[np.ix_(present, present)]
    n = float(cm.sum())
    k = cm.shape[0]
    if n <= 0:
        return NAN, NAN
    idx = np.arange(k, dtype=np.float64)
    if weights == "none":
        wd = 1.0 - np.eye(k)
    elif weights == "linear":
        wd = np.abs(idx[:, None] - idx[None, :])
    elif weights == "quadratic":
        wd = (idx[:, None] - idx[None, :]) ** 2
    else:
        raise ValueError(f"unknown kappa weights {weights!r}")
    p = cm / n
    r, c = p.sum(axis=1), p.sum(axis=0)
    expected = np.outer(r, c)
    denom = float(np.sum(wd * expected))
    if denom <= 0:
        return NAN, NAN
    value = 1.0 - float(np.sum(wd * p)) / denom
    w = 1.0 - wd / wd.max()
    pe = float(np.sum(w * expected))
    wi = w @ c
    wj = r @ w
    term = w - (wi[:, None] + wj[None, :]) * (1.0 - value)
    var = (float(np.sum(p * term**2)) - (value - pe * (1.0 - value)) ** 2) / (n * (1 - pe) ** 2)
    return value, math.sqrt(max(var, 0.0))
