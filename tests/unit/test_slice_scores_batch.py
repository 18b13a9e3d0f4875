"""The batched slice score metrics equal ScoreLayout's one-vector methods, row by row,
whatever else is in the batch (edge cases included)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.engine.models import SLICE_LOGIT_RANGE
from monitor.engine.slice_scores import (
    average_precision_interpolated,
    slice_score_metrics,
    slice_score_metrics_many,
)
from monitor.stats.common import class_count_reason, withheld
from monitor.stats.results import MetricValue
from monitor.stats.scores import MIN_SCORE_CLASS_COUNT, ScoreLayout

LAYOUT = ScoreLayout(bins=128, logit_range=SLICE_LOGIT_RANGE)


def _vec(y: np.ndarray, p: np.ndarray) -> np.ndarray:
    vec = LAYOUT.empty()
    if y.size:
        LAYOUT.add(vec, y, p)
    return vec


def _expected(vec: np.ndarray, confidence: float) -> list[MetricValue]:
    """ScoreLayout.metrics with PR-AUC interpolated, gated like every score metric."""
    out = LAYOUT.metrics(vec, confidence)
    neg, pos, _ = LAYOUT.histograms(vec)
    ap = average_precision_interpolated(neg, pos)
    n_pos = float(pos.sum())
    if math.isfinite(ap) and 0 < ap < 1:
        half = 1.959963984540054 / math.sqrt(n_pos * ap * (1 - ap))
        if confidence != 0.95:
            from monitor.stats.intervals import z_value

            half = z_value(confidence) / math.sqrt(n_pos * ap * (1 - ap))
        eta = math.log(ap / (1 - ap))
        lo, hi = 1 / (1 + math.exp(half - eta)), 1 / (1 + math.exp(-eta - half))
        pr = MetricValue("pr_auc", ap, lo, hi, round(n_pos), "logit")
    elif math.isfinite(ap):
        pr = MetricValue("pr_auc", ap, ap, ap, round(n_pos), "logit")
    else:
        pr = MetricValue("pr_auc", math.nan, math.nan, math.nan, round(n_pos), "logit")
    reason = class_count_reason(n_pos, float(neg.sum()), MIN_SCORE_CLASS_COUNT)
    if reason and pr.defined:
        pr = withheld(pr, reason)
    return [pr if mv.name == "pr_auc" else mv for mv in out]


def _same(a: MetricValue, b: MetricValue) -> None:
    assert (a.name, a.n, a.method, a.note) == (b.name, b.n, b.method, b.note), (a, b)
    for x, y in ((a.value, b.value), (a.lower, b.lower), (a.upper, b.upper)):
        assert (math.isnan(x) and math.isnan(y)) or x == pytest.approx(y, rel=1e-9, abs=1e-12), (
            a,
            b,
        )


def _key(m: MetricValue) -> tuple[object, ...]:
    """Exact fields, NaN equal to NaN."""
    return tuple(repr(x) if isinstance(x, float) else x for x in
                 (m.name, m.value, m.lower, m.upper, m.n, m.method, m.note))  # fmt: skip


def _cases() -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    out = []
    for n, prevalence, sep in [(5000, 0.3, 2.0), (400, 0.05, 1.0), (60, 0.5, 0.5), (35, 0.1, 3.0)]:
        y = (rng.random(n) < prevalence).astype(np.int8)
        p = 1 / (1 + np.exp(-(sep * (y - 0.5) + rng.normal(size=n) - 1.0)))
        out.append(_vec(y, p))
    out.append(_vec(np.array([1, 1, 1]), np.array([0.2, 0.9, 0.5])))  # one class
    out.append(_vec(np.array([0, 1]), np.array([0.5, 0.5])))  # one bin, tie
    out.append(_vec(np.array([1]), np.array([0.7])))  # one row
    out.append(_vec(np.zeros(50, np.int8), np.full(50, 1e-6)))  # all in the bottom bin
    out.append(_vec(np.ones(40, np.int8), np.full(40, 1.0)))  # all certain and right
    out.append(LAYOUT.empty())  # no scored rows
    return out


@pytest.mark.parametrize("confidence", [0.95, 0.9])
def test_batch_equals_each_vector_alone(confidence: float) -> None:
    cases = _cases()
    many = slice_score_metrics_many(LAYOUT, np.stack(cases), confidence)
    assert len(many) == len(cases)
    for vec, got in zip(cases, many, strict=True):
        if vec[LAYOUT.width - 5] <= 0:
            assert got is None
            continue
        assert got is not None
        metrics, reliability = got
        expected = _expected(vec, confidence)
        assert [m.name for m in metrics] == [m.name for m in expected]
        for a, b in zip(metrics, expected, strict=True):
            _same(a, b)
        want = LAYOUT.reliability(vec, confidence)
        assert len(reliability) == len(want)
        for a, b in zip(reliability, want, strict=True):
            assert (a.lower, a.upper, a.count) == (b.lower, b.upper, b.count)
            for x, y in zip(
                (a.mean_predicted, a.observed, a.observed_lower, a.observed_upper),
                (b.mean_predicted, b.observed, b.observed_lower, b.observed_upper),
                strict=True,
            ):
                assert (math.isnan(x) and math.isnan(y)) or x == pytest.approx(y, rel=1e-12)
        # alone, the same row gives the same result
        alone = slice_score_metrics(LAYOUT, vec, confidence)
        assert [_key(m) for m in alone] == [_key(m) for m in metrics]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 1), st.floats(0.0, 1.0, allow_nan=False)),
        min_size=1,
        max_size=80,
    )
)
def test_batch_row_equals_one_vector_methods(pairs: list[tuple[int, float]]) -> None:
    y = np.array([a for a, _ in pairs], np.int8)
    p = np.array([b for _, b in pairs])
    vec = _vec(y, p)
    got = slice_score_metrics_many(LAYOUT, np.stack([vec, _cases()[0]]), 0.95)[0]
    assert got is not None
    for a, b in zip(got[0], _expected(vec, 0.95), strict=True):
        _same(a, b)
