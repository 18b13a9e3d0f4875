"""Regression moment layout: merge law, scikit-learn / numpy oracles, delta-method checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import (
    mean_absolute_error,
    mean_absolute_percentage_error,
    mean_pinball_loss,
    mean_squared_error,
    r2_score,
    root_mean_squared_error,
)

from monitor.stats.regression import RegressionLayout

from .test_stats_binary import assert_same_metrics

# light_tails: these tests check the CLT intervals themselves (withheld by default)
LAYOUT = RegressionLayout(huber_delta=1.5, quantiles=(0.05, 0.5, 0.9), light_tails=True)


def _by_name(vec: np.ndarray, layout: RegressionLayout = LAYOUT) -> dict:
    return {m.name: m for m in layout.metrics(vec)}


finite = st.integers(-64_000, 64_000).map(lambda k: k / 64)  # includes exact zeros
rows = st.lists(
    st.tuples(finite, finite, finite, st.integers(0, 640).map(lambda k: k / 64)),
    min_size=0,
    max_size=40,
)


@given(rows, rows)
@settings(max_examples=60, deadline=None)
def test_merge_equals_one_pass(a: list, b: list) -> None:
    def vec(rs: list) -> np.ndarray:
        arr = np.array(rs, dtype=np.float64).reshape(-1, 4)
        v = LAYOUT.empty()
        lo = arr[:, 2] - arr[:, 3]
        LAYOUT.add(v, arr[:, 0], arr[:, 1], lo, arr[:, 2] + arr[:, 3])
        return v

    merged, single = vec(a) + vec(b), vec(a + b)
    # moments of values up to 1e3 reach 1e12 (fourth powers): compare relative to scale
    np.testing.assert_allclose(merged, single, rtol=1e-12, atol=1e-6)
    assert_same_metrics(LAYOUT.metrics(merged), LAYOUT.metrics(single), tol=1e-9)


def _dataset(kind: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = 5000
    if kind == "normal":
        y = rng.normal(10, 3, n)
        f = y + rng.normal(0.2, 1.0, n)
    elif kind == "student_t2":
        y = rng.standard_t(2, n) * 5
        f = 0.8 * y + rng.standard_t(2, n)
    elif kind == "lognormal":
        y = rng.lognormal(1.0, 1.2, n)
        f = y * rng.lognormal(0.0, 0.3, n)
    elif kind == "zeros":  # counts with many exact zeros in targets and predictions
        y = rng.poisson(0.7, n).astype(float)
        f = np.where(rng.random(n) < 0.5, y, rng.poisson(0.7, n)).astype(float)
    else:
        raise ValueError(kind)
    return y, f


@pytest.mark.parametrize("kind", ["normal", "student_t2", "lognormal", "zeros"])
def test_values_match_sklearn(kind: str) -> None:
    y, f = _dataset(kind, 4)
    rng = np.random.default_rng(5)
    half = rng.uniform(0.5, 3, y.size)
    lo, hi = f - half, f + half
    lo[::7] = np.nan  # some rows carry no interval
    v = LAYOUT.empty()
    LAYOUT.add(v, y, f, lo, hi)
    m = _by_name(v)
    e = f - y
    nz = y != 0
    both = (np.abs(y) + np.abs(f)) > 0
    dom = (y > -1) & (f > -1)
    has = np.isfinite(lo)
    ae = np.abs(e)
    huber = np.where(ae <= 1.5, 0.5 * e**2, 1.5 * (ae - 0.75))
    expected = {
        "mae": mean_absolute_error(y, f),
        "mse": mean_squared_error(y, f),
        "rmse": root_mean_squared_error(y, f),
        "r2": r2_score(y, f),
        "mean_error": np.mean(e),
        "mape": mean_absolute_percentage_error(y[nz], f[nz]),
        "smape": np.mean(2 * ae[both] / (np.abs(y[both]) + np.abs(f[both]))),
        "male": np.mean(np.abs(np.log1p(f[dom]) - np.log1p(y[dom]))),
        "huber": np.mean(huber),
        "pinball_q0_05": mean_pinball_loss(y, f, alpha=0.05),
        "pinball_q0_5": mean_pinball_loss(y, f, alpha=0.5),
        "pinball_q0_9": mean_pinball_loss(y, f, alpha=0.9),
        "interval_coverage": np.mean((lo[has] <= y[has]) & (y[has] <= hi[has])),
        "interval_width": np.mean(hi[has] - lo[has]),
    }
    for name, value in expected.items():
        assert m[name].value == pytest.approx(value, rel=1e-9, abs=1e-9), name
        assert m[name].lower < m[name].value < m[name].upper, name
    assert m["mape"].n == nz.sum() and m["smape"].n == both.sum() and m["male"].n == dom.sum()
    assert m["interval_coverage"].n == has.sum()
    assert LAYOUT.excluded(v) == {
        "mape": int((~nz).sum()),
        "smape": int((~both).sum()),
        "male": int((~dom).sum()),
    }


def test_r2_delta_se_matches_bootstrap_spread() -> None:
    """The R² delta-method SE agrees with a nonparametric bootstrap of the same window."""
    y, f = _dataset("lognormal", 8)
    y, f = y[:2000], f[:2000]
    v = LAYOUT.empty()
    LAYOUT.add(v, y, f)
    m = _by_name(v)["r2"]
    se_delta = (m.upper - m.lower) / (2 * 1.959963984540054)
    rng = np.random.default_rng(9)
    idx = rng.integers(0, y.size, size=(1000, y.size))
    yb, fb = y[idx], f[idx]
    r2b = 1 - ((fb - yb) ** 2).sum(axis=1) / ((yb - yb.mean(axis=1, keepdims=True)) ** 2).sum(
        axis=1
    )
    assert se_delta == pytest.approx(float(r2b.std()), rel=0.15)


def test_add_rows_routes_rows() -> None:
    rng = np.random.default_rng(2)
    y, f = rng.normal(size=300), rng.normal(size=300)
    g = rng.integers(0, 4, 300)
    mat = np.zeros((4, LAYOUT.width))
    LAYOUT.add_rows(mat, g, y, f)
    for k in range(4):
        v = LAYOUT.empty()
        LAYOUT.add(v, y[g == k], f[g == k])
        np.testing.assert_allclose(mat[k], v, rtol=1e-12)


def test_empty_layout_gives_nan() -> None:
    assert all(np.isnan(m.value) for m in LAYOUT.metrics(LAYOUT.empty()))


def test_fourth_moment_intervals_are_withheld_by_default() -> None:
    """MSE/RMSE/R²/MAPE intervals need light tails; by default they are NaN with a reason."""
    rng = np.random.default_rng(4)
    y = rng.gamma(2.0, 1.0, 500)
    f = y + rng.standard_t(3, 500)
    default = RegressionLayout()
    v = default.empty()
    default.add(v, y, f)
    m = {x.name: x for x in default.metrics(v)}
    for name in ("mse", "rmse", "r2", "mape"):
        assert math.isfinite(m[name].value), name
        assert math.isnan(m[name].lower) and math.isnan(m[name].upper), name
        assert "withheld" in m[name].note, name
    for name in ("mae", "huber", "mean_error", "smape"):
        assert m[name].lower < m[name].value < m[name].upper and not m[name].note, name
