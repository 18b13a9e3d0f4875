"""Coverage of CBPE's intervals by simulation under a mild miscalibration: how often the
estimate is marked reliable and how often each interval covers the realised value of its
window. Scores are logistic(N(−0.5, 2)); the true positive rate of a score is the score
with its logit shifted by ``a`` ("shift") or divided by ``a`` ("over": overconfident
scores), both below the default ``max_ece`` for the values used. The labelled rows that
recalibrate each estimate come from the same stream; their debiased ECE is the gate's, as
in the engine. Seeded by the caller's ``numpy.random.Generator``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .estimation import LabelledBins, cbpe
from .scores import ScoreLayout, ece_debiased_from_bins, roc_auc_from_hist

__all__ = ["CbpeCoverage", "simulate_cbpe", "true_ece", "true_rate"]

CALIBRATION_BINS = 10


@dataclass(frozen=True, slots=True)
class CbpeCoverage:
    windows: int
    reliable: float  # share of windows whose estimate is marked reliable
    coverage: dict[str, float]  # per estimated metric: share of windows whose interval covers


def scores(rng: np.random.Generator, n: int) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-rng.normal(-0.5, 2.0, n)))


def true_rate(p: np.ndarray, kind: str, a: float) -> np.ndarray:
    """P(y = 1 | score p): the logit shifted by ``a`` ("shift") or divided by it ("over")."""
    logit = np.log(p) - np.log1p(-p)
    return 1.0 / (1.0 + np.exp(-(logit + a if kind == "shift" else logit / a)))


def true_ece(kind: str, a: float, rng: np.random.Generator, n: int = 1_000_000) -> float:
    """The scenario's ECE over 10 equal-width bins (a large sample of the rates)."""
    p = scores(rng, n)
    b = _calibration_bin(p)
    gap = np.bincount(b, weights=true_rate(p, kind, a) - p, minlength=CALIBRATION_BINS)
    return float(np.abs(gap).sum() / n)


def _calibration_bin(p: np.ndarray) -> np.ndarray:
    edges = np.linspace(0.0, 1.0, CALIBRATION_BINS + 1)[1:-1]
    return np.searchsorted(edges, p, side="left")


def _bins(layout: ScoreLayout, p: np.ndarray, y: np.ndarray | None = None) -> tuple:
    b = layout.bin_of(p)
    c = np.bincount(b, minlength=layout.bins).astype(float)
    s = np.bincount(b, weights=p, minlength=layout.bins)
    return (c, s) if y is None else (c, s, np.bincount(b, weights=y, minlength=layout.bins))


def _realised(layout: ScoreLayout, p: np.ndarray, y: np.ndarray) -> dict[str, float]:
    pred = p >= 0.5
    tp, fp = float(np.sum(pred & (y > 0))), float(np.sum(pred & (y == 0)))
    fn = float(np.sum(~pred & (y > 0)))
    b = layout.bin_of(p)
    neg = np.bincount(b, weights=1 - y, minlength=layout.bins)
    pos = np.bincount(b, weights=y, minlength=layout.bins)
    return {
        "estimated_accuracy": float(np.mean(pred == (y > 0))),
        "estimated_precision": tp / (tp + fp) if tp + fp else 0.0,
        "estimated_recall": tp / (tp + fn) if tp + fn else 0.0,
        "estimated_f1": 2 * tp / (2 * tp + fp + fn) if tp else 0.0,
        "estimated_roc_auc": roc_auc_from_hist(neg, pos)[0],
    }


def simulate_cbpe(
    layout: ScoreLayout,
    kind: str,
    a: float,
    labelled: int,
    windows: int,
    rng: np.random.Generator,
    size: int = 1_000,
    max_ece: float = 0.05,
) -> CbpeCoverage:
    """``windows`` windows of ``size`` predictions, each estimated with ``labelled``
    labelled rows of the same stream recalibrating it (threshold 0.5, a bin edge)."""
    threshold = int(layout.bin_of(np.array([0.5]))[0])
    hits: dict[str, int] = {}
    reliable = 0
    for _ in range(windows):
        pl = scores(rng, labelled)
        yl = (rng.random(labelled) < true_rate(pl, kind, a)).astype(float)
        cb = _calibration_bin(pl)
        ece = ece_debiased_from_bins(
            np.bincount(cb, minlength=CALIBRATION_BINS).astype(float),
            np.bincount(cb, weights=pl, minlength=CALIBRATION_BINS),
            np.bincount(cb, weights=yl, minlength=CALIBRATION_BINS),
        ).value
        p = scores(rng, size)
        y = (rng.random(size) < true_rate(p, kind, a)).astype(float)
        est = cbpe(
            *_bins(layout, p), threshold, ece=ece, max_ece=max_ece,
            labelled=LabelledBins(*_bins(layout, pl, yl)),
        )  # fmt: skip
        reliable += est.reliable
        realised = _realised(layout, p, y)
        for m in est.metrics:
            hits[m.name] = hits.get(m.name, 0) + bool(m.lower <= realised[m.name] <= m.upper)
    return CbpeCoverage(windows, reliable / windows, {k: v / windows for k, v in hits.items()})
