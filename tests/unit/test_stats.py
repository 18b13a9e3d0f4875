"""Statistics against SciPy / scikit-learn oracles, plus the merge law."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest
from sklearn.metrics import accuracy_score, f1_score, precision_score, recall_score

from monitor.stats.binary import BinaryLayout
from monitor.stats.intervals import wilson_interval, z_value


@given(st.integers(1, 5000), st.data())
def test_wilson_matches_scipy(n: int, data: st.DataObject) -> None:
    k = data.draw(st.integers(0, n))
    conf = data.draw(st.sampled_from([0.8, 0.9, 0.95, 0.99]))
    lo, hi = wilson_interval(k, n, conf)
    ci = binomtest(k, n).proportion_ci(confidence_level=conf, method="wilson")
    assert float(lo) == pytest.approx(ci.low, abs=1e-12)
    assert float(hi) == pytest.approx(ci.high, abs=1e-12)


def test_wilson_empty_is_nan_and_vectorized() -> None:
    lo, hi = wilson_interval(np.array([0, 3]), np.array([0, 10]))
    assert math.isnan(lo[0]) and math.isnan(hi[0])
    assert 0 < lo[1] < 0.3 < hi[1] < 1


def test_z_value_rejects_bad_confidence() -> None:
    with pytest.raises(ValueError):
        z_value(1.0)


def test_wilson_coverage_is_near_nominal() -> None:
    """Calibration: the 95% interval covers the true p in about 95% of samples."""
    rng = np.random.default_rng(11)
    for p, n in [(0.05, 60), (0.5, 40), (0.9, 200)]:
        k = rng.binomial(n, p, 4000)
        lo, hi = wilson_interval(k, np.full(4000, n))
        cover = np.mean((lo <= p) & (p <= hi))
        assert 0.92 <= cover <= 0.98, (p, n, cover)


binary = st.lists(st.tuples(st.integers(0, 1), st.integers(0, 1)), min_size=1, max_size=300)


LAYOUT = BinaryLayout(betas=())


def _counts(pairs: list[tuple[int, int]]) -> np.ndarray:
    v = LAYOUT.empty()
    if pairs:
        y, p = np.array(pairs).T
        LAYOUT.add(v, y, p)
    return v


@settings(deadline=None)  # a posterior sample per example; timing is not what is tested
@given(binary)
def test_metrics_match_sklearn(pairs: list[tuple[int, int]]) -> None:
    y, p = (list(a) for a in zip(*pairs, strict=True))
    got = {m.name: m for m in LAYOUT.metrics(_counts(pairs))}
    assert got["accuracy"].value == pytest.approx(accuracy_score(y, p), abs=1e-12)
    assert got["accuracy"].n == len(y)
    for name, fn in (("precision", precision_score), ("recall", recall_score), ("f1", f1_score)):
        expected = fn(y, p, zero_division=np.nan)
        if math.isnan(expected):
            assert math.isnan(got[name].value)
        else:
            assert got[name].value == pytest.approx(expected, abs=1e-12)
            if not got[name].note:  # withheld intervals are NaN with a reason
                assert got[name].lower <= got[name].value <= got[name].upper
            else:
                assert math.isnan(got[name].lower) and "withheld" in got[name].note


@settings(deadline=None)
@given(binary, binary)
def test_merge_equals_union(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> None:
    merged = _counts(a) + _counts(b)
    union = _counts(a + b)
    assert merged.tolist() == union.tolist()
    m1 = [(m.name, m.value, m.lower, m.upper, m.n) for m in LAYOUT.metrics(merged)]
    m2 = [(m.name, m.value, m.lower, m.upper, m.n) for m in LAYOUT.metrics(union)]
    assert str(m1) == str(m2)


@settings(deadline=None, max_examples=1)
@given(st.just(0))
def test_f1_interval_coverage(_: int) -> None:
    """Calibration of the Jeffreys-posterior F1 interval at moderate n."""
    rng = np.random.default_rng(5)
    probs = np.array([0.6, 0.1, 0.1, 0.2])  # TN, FP, FN, TP
    true_f1 = 2 * probs[3] / (2 * probs[3] + probs[1] + probs[2])
    hits = 0
    reps = 1000
    for _ in range(reps):
        f1 = {m.name: m for m in LAYOUT.metrics(rng.multinomial(500, probs).astype(float))}["f1"]
        hits += f1.lower <= true_f1 <= f1.upper
    assert 0.93 <= hits / reps <= 0.97


def test_wilson_scalar_path_equals_array_path() -> None:
    """One proportion takes a plain-float path; it must give the array path's bounds."""
    from monitor.stats.intervals import wilson_interval

    rng = np.random.default_rng(1)
    n = rng.integers(0, 200, 2000).astype(np.float64)
    k = np.floor(rng.random(2000) * (n + 1))
    k[:50], k[50:100] = n[:50], 0.0
    for conf in (0.9, 0.95):
        lo, hi = wilson_interval(k, n, conf)
        for i in range(k.size):
            a, b = wilson_interval(float(k[i]), float(n[i]), conf)
            if n[i] == 0:
                assert np.isnan(a) and np.isnan(b) and np.isnan(lo[i])
            else:
                assert (a, b) == (lo[i], hi[i])
