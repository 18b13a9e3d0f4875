"""MASE: the scale from the seasonal naive forecast and MAE / scale on a seasonal series."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitor.stats.regression import RegressionLayout, mase, naive_mae_scale


def test_mase_equals_the_formula_on_a_seasonal_series() -> None:
    rng = np.random.default_rng(11)
    season = 7
    t = np.arange(400)
    series = 10 + 3 * np.sin(2 * np.pi * t / season) + rng.normal(0, 0.5, t.size)
    train, test = series[:300], series[300:]
    forecast = 10 + 3 * np.sin(2 * np.pi * t[300:] / season) + rng.normal(0, 0.3, test.size)
    # the formula, written out: Hyndman & Koehler (2006), eq. for q_t
    denom = sum(abs(train[i] - train[i - season]) for i in range(season, train.size)) / (
        train.size - season
    )
    expected = float(np.mean(np.abs(test - forecast))) / denom
    scale = naive_mae_scale(train, season)
    assert scale == pytest.approx(denom, rel=1e-12)
    layout = RegressionLayout()
    vec = layout.empty()
    layout.add(vec, test, forecast)
    mae = next(m for m in layout.metrics(vec) if m.name == "mae")
    got = mase(mae, scale)
    assert got.value == pytest.approx(expected, rel=1e-12)
    assert math.isnan(got.lower) and got.note == mae.note  # 100 rows: withheld, with reason
    big = RegressionLayout().empty()
    layout.add(big, np.tile(test, 5), np.tile(forecast, 5))
    mae_big = layout.metrics(big)[0]
    got_big = mase(mae_big, scale)
    assert math.isfinite(mae_big.lower)
    assert got_big.lower == pytest.approx(mae_big.lower / scale, rel=1e-12)
    assert got_big.upper == pytest.approx(mae_big.upper / scale, rel=1e-12)
    # the non-seasonal naive scale is larger on a seasonal series: the season matters
    assert naive_mae_scale(train, 1) > 2 * scale


def test_mase_undefined_scales() -> None:
    assert math.isnan(naive_mae_scale(np.array([1.0, 2.0]), 7))
    layout = RegressionLayout()
    vec = layout.empty()
    layout.add(vec, np.zeros(5), np.ones(5))
    mae = layout.metrics(vec)[0]
    flat = mase(mae, naive_mae_scale(np.ones(10), 1))
    assert math.isnan(flat.value) and "scale" in flat.note
    with pytest.raises(ValueError):
        naive_mae_scale(np.ones(10), 0)
