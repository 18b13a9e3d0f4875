"""Interval coverage and ECE behaviour at rare events and small n, bounded size.

The simulations are those of ``bench/coverage.py`` (one definition), run here with fewer
windows; the full table in docs/statistics.md comes from ``python bench/coverage.py``.
Tolerances are ±3 binomial standard errors at the window counts used.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitor.stats.binary import BinaryLayout
from monitor.stats.scores import ScoreLayout

from .bench_module import load_bench

bench = load_bench("coverage")


def _tolerance(windows: int) -> float:
    return 3 * math.sqrt(0.95 * 0.05 / windows)


@pytest.mark.slow
@pytest.mark.parametrize("d", [2.0, 3.5])  # ROC-AUC 0.921 and a very accurate 0.993
@pytest.mark.parametrize(("prevalence", "n"), [(0.01, 300), (0.05, 1000), (0.2, 300)])
def test_binary_intervals_cover_or_are_withheld(prevalence: float, n: int, d: float) -> None:
    windows = 400
    tol = _tolerance(windows)
    results = {c.name: c for c in bench.binary_coverage(prevalence, n, windows, seed=3, d=d)}
    names = ("accuracy", "f1", "mcc", "cohen_kappa", "recall", "precision", "roc_auc", "pr_auc",
             "log_loss", "brier")  # fmt: skip
    for name in names:
        c = results[name]
        print(f"d'={d} {prevalence} {n} {name}: {c.coverage:.3f} exported {c.exported:.2f}")
        if c.exported > 0.2:  # a handful of exported windows says nothing about coverage
            high = 1.0 if c.exact else 0.95 + tol  # exact intervals may over-cover
            assert 0.95 - tol <= c.coverage <= high, name


def test_small_class_counts_withhold_intervals_with_a_reason() -> None:
    """3 positives in 300 rows: F1/MCC/AUC/log loss keep their value but no interval."""
    rng = np.random.default_rng(5)
    y = np.zeros(300, dtype=np.int64)
    y[:3] = 1
    s = np.clip(0.02 + 0.5 * y + 0.05 * rng.random(300), 0, 1)
    lay, scores = BinaryLayout(), ScoreLayout()
    cm, hist = lay.empty(), scores.empty()
    lay.add(cm, y, (s >= 0.5).astype(np.int64))
    scores.add(hist, y, s)
    m = {x.name: x for x in lay.metrics(cm) + scores.metrics(hist)}
    for name in ("f1", "mcc", "cohen_kappa", "roc_auc", "pr_auc", "log_loss", "brier"):
        assert math.isfinite(m[name].value), name
        assert math.isnan(m[name].lower) and math.isnan(m[name].upper), name
        assert "3 positives" in m[name].note, name
    for name in ("prevalence", "base_rate"):  # the class count is their binomial count
        assert math.isnan(m[name].lower) and "3 positives" in m[name].note, name
    for name in ("recall", "precision"):  # 3 trials each: Wilson needs MIN_TRIALS
        assert math.isnan(m[name].upper) and "3 trials (needs >= 10)" in m[name].note, name
    for name in ("accuracy", "specificity", "predicted_positive_rate"):  # 297+ trials
        assert m[name].lower <= m[name].value <= m[name].upper and not m[name].note, name


def test_wilson_interval_needs_ten_trials() -> None:
    """The MIN_TRIALS rule is on the denominator only (ancillary: no selection on the
    count), the same in the binary layout and :func:`ratio` (multiclass, regression)."""
    from monitor.stats.common import MIN_TRIALS, ratio

    below = ratio("x", 0.0, MIN_TRIALS - 1, 0.95)
    at = ratio("x", 0.0, MIN_TRIALS, 0.95)
    assert below.value == 0.0 and math.isnan(below.lower) and "9 trials" in below.note
    assert at.lower == 0.0 and 0.0 < at.upper < 1.0 and not at.note
    assert math.isnan(ratio("x", 0.0, 0.0, 0.95).value) and not ratio("x", 0, 0, 0.95).note
    # 12 positives of 40 rows, 9 predicted positive: precision withheld, recall not
    m = {x.name: x for x in BinaryLayout().metrics(np.array([25.0, 3.0, 6.0, 6.0]))}
    assert math.isnan(m["precision"].lower) and "9 trials" in m["precision"].note
    assert m["recall"].lower < m["recall"].value < m["recall"].upper
    assert m["prevalence"].lower < 0.3 < m["prevalence"].upper  # 12 and 28: both >= 10


def test_f1_interval_has_width_when_tp_is_zero() -> None:
    """The delta method collapsed to a point at TP = 0; the posterior interval does not."""
    f1 = {x.name: x for x in BinaryLayout().metrics(np.array([900.0, 40.0, 30.0, 0.0]))}["f1"]
    assert f1.value == 0.0 and f1.lower == 0.0 and f1.upper > 0.02


@pytest.mark.slow
def test_heavy_tail_regression_intervals() -> None:
    windows = 400
    tol = _tolerance(windows)
    results = {c.name: c for c in bench.regression_coverage("t3", 1000, windows, seed=9)}
    for name in ("mse", "rmse", "r2", "mape"):
        assert results[name].exported == 0.0, name
    for name in ("mae", "huber", "mean_error"):
        assert 0.95 - tol <= results[name].coverage <= 0.95 + tol, name


@pytest.mark.slow
@pytest.mark.parametrize("scores", ["uniform", "beta(1,4)"])
def test_debiased_ece_and_calibration_test(scores: str) -> None:
    windows = 600
    calibrated = bench.calibration_study(scores, 0.0, 1000, windows, seed=21)
    print(calibrated)
    assert abs(calibrated.ece_debiased_mean) <= 0.003
    assert calibrated.ece_plugin_mean > 0.02  # the bias the debiasing removes
    assert calibrated.point_rule_fires < 0.05
    assert 0.05 - _tolerance(windows) <= calibrated.test_rejects <= 0.05 + _tolerance(windows)
    off = bench.calibration_study(scores, 0.06, 1000, windows, seed=22)
    print(off)
    assert off.test_rejects >= 0.95
    assert abs(off.ece_debiased_mean - 0.06) <= 0.005  # the evidence weight keeps the signal
    # acceptance: > 95 % (full size in the bench); here within 2 s.e. of 600 windows
    assert off.point_rule_fires >= 0.95 - 2 * math.sqrt(0.95 * 0.05 / windows)


def test_evidence_weight_has_mean_one_under_calibration() -> None:
    """E w(p) = 1 for p ~ Uniform(0, 1): what keeps the debiased ECE's null mean at 0."""
    from scipy import integrate

    from monitor.stats.scores import EVIDENCE_ALPHA, _evidence_weight

    mean, _ = integrate.quad(_evidence_weight, 0.0, 1.0, points=[EVIDENCE_ALPHA])
    assert mean == pytest.approx(1.0, abs=1e-9)
    assert _evidence_weight(0.0) == 0.0 and _evidence_weight(0.5) == _evidence_weight(1.0) > 1


def test_binomial_mean_absolute_deviation_matches_the_sum() -> None:
    """de Moivre's closed form E|X − np| against the direct sum over the binomial pmf."""
    from scipy import stats

    from monitor.stats.scores import _binomial_mad

    n = np.array([1.0, 5, 100, 37, 1000, 3, 12])
    p = np.array([0.3, 0.01, 0.5, 0.999, 0.07, 0.0, 1.0])
    direct = [
        float(
            np.sum(
                np.abs(np.arange(int(a) + 1) - a * b) * stats.binom.pmf(np.arange(int(a) + 1), a, b)
            )
        )
        for a, b in zip(n, p, strict=True)
    ]
    np.testing.assert_allclose(_binomial_mad(n, p), direct, atol=1e-10)


def test_gates_read_the_long_run_rates_not_the_window_counts() -> None:
    """With a long-run reference the class gate counts expected positives (rows × long-run
    prevalence) and each Wilson ratio needs MIN_EXPECTED_EVENTS expected outcomes of its
    rarer kind: an accuracy of 0.996 over 30 rows (0.12 expected errors) gets the exact
    interval instead, whatever the window's own counts are; a window with 9 positives where
    12 are expected keeps its F1 interval, one with 11 where 5 are expected does not."""
    from monitor.stats.common import MIN_EXPECTED_EVENTS

    lay = BinaryLayout()
    long_run = np.array([99_000.0, 200.0, 200.0, 600.0])  # 0.4 % errors, 0.8 % positives
    m = {x.name: x for x in lay.metrics(np.array([29.0, 0.0, 0.0, 1.0]), long_run=long_run)}
    assert m["accuracy"].method == "clopper-pearson" and m["accuracy"].upper == 1.0
    assert m["accuracy"].lower == pytest.approx(0.025 ** (1 / 30))  # 30 of 30 right
    window = np.array([1487.0, 4.0, 2.0, 7.0])  # 1,500 rows: 12 positives expected, 9 here
    own = {x.name: x for x in lay.metrics(window)}
    lr = {x.name: x for x in lay.metrics(window, long_run=long_run)}
    assert MIN_EXPECTED_EVENTS == 2.0 and "9 positives" in own["f1"].note  # own: < 10
    assert lr["f1"].lower < lr["f1"].value < lr["f1"].upper  # expected 12: exported
    assert lr["accuracy"].lower < lr["accuracy"].value < lr["accuracy"].upper
    assert lr["accuracy"].method == "wilson"  # 6 errors expected in 1,500
    few = np.array([99_400.0, 100.0, 100.0, 400.0])  # 0.5 % positives: 7.5 expected in 1,500
    window = np.array([1481.0, 1.0, 1.0, 17.0])  # but 18 here
    g = {x.name: x for x in lay.metrics(window, long_run=few)}
    assert math.isnan(g["f1"].lower) and "expected at the long-run prevalence" in g["f1"].note
    assert g["f1"].value == pytest.approx(34 / 36)  # the value itself is always reported


def test_light_tailed_rmse_is_withheld_in_small_windows_too() -> None:
    """The n >= 300 rule covers every mean loss and what is built from one (RMSE's roots,
    R²), whatever the method label; with `light_tails` RMSE covered 0.90 at n = 30."""
    from monitor.stats.regression import MIN_LOSS_ROWS, RegressionLayout

    rng = np.random.default_rng(4)
    lay = RegressionLayout(light_tails=True)
    vec = lay.empty()
    y = rng.gamma(2.0, 3.0, 30)
    lay.add(vec, y, y + rng.normal(size=30))
    m = {x.name: x for x in lay.metrics(vec)}
    for name in ("mae", "mse", "rmse", "r2"):
        assert math.isnan(m[name].lower) and f">= {MIN_LOSS_ROWS} rows" in m[name].note, name
    assert m["mean_error"].lower < m["mean_error"].upper  # a mean of a symmetric error


@pytest.mark.slow
@pytest.mark.parametrize(("strength", "queries"), [(2.0, 30), (4.0, 100)])
def test_ranking_intervals_of_a_strong_ranker(strength: float, queries: int) -> None:
    """Quasi-binomial score intervals with the long-run dispersion: in [0.93, 0.97] (±3 s.e.
    of 400 windows), at least 0.95 − 3 s.e. where the exact interval takes over, or
    withheld — hit_rate@10 of a strong ranker covered 0.61 at 30 queries with the CLT,
    MRR 0.62."""
    windows = 400
    tol = _tolerance(windows)
    for c in bench.ranking_coverage(strength, queries, windows, seed=31):
        print(f"{strength} {queries} {c.name}: {c.coverage:.3f} exported {c.exported:.2f}")
        if c.assessed:
            assert 0.95 - tol <= c.coverage <= (1.0 if c.exact else 0.95 + tol), c.name
