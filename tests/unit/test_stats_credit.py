"""Credit-scoring statistics from the score histograms: KS, Gini, cumulative gain and lift."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import ks_2samp
from sklearn.metrics import roc_auc_score

from monitor.stats.scores import ScoreLayout, gain_name, ks_from_hist

LAYOUT = ScoreLayout()


def _window(seed: int, n: int, shift: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.3).astype(float)
    p = 1.0 / (1.0 + np.exp(-(rng.normal(size=n) + shift * (2 * y - 1))))
    vec = LAYOUT.empty()
    LAYOUT.add(vec, y, p)
    return vec, y, p


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(20, 2_000), st.floats(0.0, 2.0))
def test_ks_is_within_the_documented_bound_of_ks_2samp(seed: int, n: int, shift: float) -> None:
    vec, y, p = _window(seed, n, shift)
    if y.sum() in (0, n):
        return
    exact = ks_2samp(p[y == 1], p[y == 0]).statistic
    mv = LAYOUT.ks_statistic(vec)
    bound = LAYOUT.ks_bound(vec)
    assert mv.value <= exact + 1e-12
    assert exact <= mv.value + bound + 1e-12
    assert mv.n == n


def test_ks_is_exact_when_every_bin_holds_one_score_and_undefined_for_one_class() -> None:
    neg = np.array([0, 1, 0, 1, 0, 0], dtype=float)
    pos = np.array([1, 0, 0, 0, 1, 1], dtype=float)
    d, _ = ks_from_hist(neg, pos)
    centers = np.arange(6.0)
    exact = ks_2samp(centers[pos > 0], centers[neg > 0]).statistic
    assert d == pytest.approx(exact)
    assert np.isnan(ks_from_hist(neg, np.zeros(6))[0])


def test_gini_is_two_auc_minus_one_with_the_mapped_interval() -> None:
    vec, y, p = _window(3, 3_000, 0.8)
    auc, gini = LAYOUT.roc_auc(vec), LAYOUT.gini(vec)
    assert gini.value == pytest.approx(2 * auc.value - 1, abs=1e-15)
    assert gini.lower == pytest.approx(2 * auc.lower - 1) and gini.upper == pytest.approx(
        2 * auc.upper - 1
    )
    assert gini.value == pytest.approx(2 * roc_auc_score(y, p) - 1, abs=2e-3)


def test_gain_and_lift_equal_the_sorted_count_on_distinct_scores() -> None:
    vec, y, p = _window(5, 5_000, 1.0)
    order = np.argsort(-p)
    got = {mv.name: mv for mv in LAYOUT.gains(vec, (0.1, 0.25))}
    for f in (0.1, 0.25):
        top = order[: round(f * p.size)]
        expected = y[top].sum() / y.sum()
        # one fine bin straddles the cut: it may hold a handful of rows out of 5,000
        assert got[gain_name(f)].value == pytest.approx(expected, abs=3 / y.sum())
        assert got[gain_name(f, "lift")].value == pytest.approx(got[gain_name(f)].value / f)
        assert got[gain_name(f)].lower < got[gain_name(f)].value < got[gain_name(f)].upper
    assert got["gain_at_10"].value > 0.1  # an informative score beats random
    assert gain_name(0.025, "lift") == "lift_at_2_5"


def test_gain_of_everything_is_one_and_small_windows_withhold_the_interval() -> None:
    vec, _, _ = _window(9, 40, 1.0)
    (gain, lift) = LAYOUT.gains(vec, (1.0,))
    assert gain.value == pytest.approx(1.0) and lift.value == pytest.approx(1.0)
    assert np.isnan(gain.lower) and "withheld" in gain.note
