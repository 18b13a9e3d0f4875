"""The golden comparisons' tolerance: it absorbs another CPU's summation order and still
catches a real change."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitor.stats.results import MetricValue

from .close import REL, assert_close


def test_last_digit_differences_pass_and_real_changes_fail() -> None:
    rng = np.random.default_rng(7)
    x = rng.random(10_000)
    # two summation orders of the same numbers: equal up to rounding, not bit for bit
    a, b = float(np.sum(x)), math.fsum(x[::-1].tolist())
    assert_close(
        MetricValue("m", a, 0.0, 1.0, 3, "wilson"), MetricValue("m", b, 0.0, 1.0, 3, "wilson")
    )
    shifted = np.nextafter(x, 2.0)  # every float one ulp up, as another kernel may round
    assert repr(shifted.tolist()) != repr(x.tolist())
    assert_close({"s": shifted, "n": [1, 2]}, {"s": x, "n": [1, 2]})
    with pytest.raises(AssertionError, match="s"):
        assert_close({"s": x * (1 + 100 * REL)}, {"s": x})
    with pytest.raises(AssertionError, match="n"):  # counts compare exactly
        assert_close({"n": np.array([1, 3])}, {"n": np.array([1, 2])})
    with pytest.raises(AssertionError):
        assert_close(
            MetricValue("m", a, 0.0, 1.0, 4, "wilson"), MetricValue("m", a, 0.0, 1.0, 3, "wilson")
        )
    assert_close([math.nan, 1.0], [math.nan, 1.0])
    with pytest.raises(AssertionError):
        assert_close([math.nan], [1.0])
