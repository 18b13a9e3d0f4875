"""Calibration of the 95 % intervals by simulation: many n = 1,000 windows at once.

Each simulated window is one row of a dense matrix filled with the layouts' ``add_rows``
(the engine's bulk path); coverage must lie in [0.93, 0.97] (±4 binomial SEs at 2,000
windows, ±3 at 1,000).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from monitor.stats.binary import BinaryLayout
from monitor.stats.regression import RegressionLayout
from monitor.stats.scores import ScoreLayout

N = 1000
WINDOWS = 2000


def _covers(values: list, truth: float) -> float:
    hits = [m.lower <= truth <= m.upper for m in values]
    return float(np.mean(hits))


@pytest.mark.slow
def test_accuracy_and_recall_coverage() -> None:
    rng = np.random.default_rng(20240601)
    lay = BinaryLayout(betas=())
    prevalence, tpr, tnr = 0.2, 0.85, 0.9
    y = (rng.random((WINDOWS, N)) < prevalence).astype(int)
    correct = rng.random((WINDOWS, N)) < np.where(y == 1, tpr, tnr)
    pred = np.where(correct, y, 1 - y)
    mat = np.zeros((WINDOWS, lay.width))
    rows = np.repeat(np.arange(WINDOWS), N)
    lay.add_rows(mat, rows, y.ravel(), pred.ravel())
    results = [{m.name: m for m in lay.metrics(v)} for v in mat]
    acc_truth = prevalence * tpr + (1 - prevalence) * tnr
    acc = _covers([r["accuracy"] for r in results], acc_truth)
    rec = _covers([r["recall"] for r in results], tpr)
    print(f"coverage accuracy={acc:.4f} recall={rec:.4f}")
    assert 0.93 <= acc <= 0.97
    assert 0.93 <= rec <= 0.97


@pytest.mark.slow
@pytest.mark.parametrize("method", ["delong", "hanley_mcneil"])
def test_roc_auc_coverage(method: str) -> None:
    rng = np.random.default_rng(7 if method == "delong" else 8)
    lay = ScoreLayout()
    windows, shift = 1000, 1.2
    truth = float(norm.cdf(shift / math.sqrt(2)))  # binormal, equal variances
    y = (rng.random((windows, N)) < 0.3).astype(int)
    s = 1 / (1 + np.exp(-(rng.normal(size=(windows, N)) + shift * y - 1.0)))
    mat = np.zeros((windows, lay.width))
    lay.add_rows(mat, np.repeat(np.arange(windows), N), y.ravel(), s.ravel())
    cov = _covers([lay.roc_auc(v, method=method) for v in mat], truth)
    print(f"coverage roc_auc[{method}]={cov:.4f}")
    if method == "delong":
        assert 0.93 <= cov <= 0.97
    else:  # Hanley-McNeil's exponential model is known to be conservative for binormal data
        assert 0.93 <= cov <= 0.98


@pytest.mark.slow
def test_rmse_coverage() -> None:
    rng = np.random.default_rng(99)
    lay = RegressionLayout(quantiles=(), light_tails=True)
    bias, sigma = 0.3, 1.0
    truth = math.sqrt(bias**2 + sigma**2)
    mat = np.zeros((WINDOWS, lay.width))
    chunk = 250
    for start in range(0, WINDOWS, chunk):
        y = rng.normal(5.0, 2.0, (chunk, N))
        f = y + rng.normal(bias, sigma, (chunk, N))
        rows = np.repeat(np.arange(start, start + chunk), N)
        lay.add_rows(mat, rows, y.ravel(), f.ravel())
    cov = _covers([{m.name: m for m in lay.metrics(v)}["rmse"] for v in mat], truth)
    print(f"coverage rmse={cov:.4f}")
    assert 0.93 <= cov <= 0.97
