"""One implementation of the score metrics for slice ``all`` and every segment slice: a
stack of histograms gives, row by row, what each vector gives alone (whatever else is in
the batch, edge cases included), and each row matches scikit-learn: on the binned scores
for ROC-AUC, on the raw scores for average precision where the bins hold tied scores."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import average_precision_score, brier_score_loss, roc_auc_score

from monitor.engine.evaluate import score_results
from monitor.engine.models import SLICE_LOGIT_RANGE
from monitor.stats.results import MetricValue
from monitor.stats.scores import ScoreLayout

LAYOUT = ScoreLayout(bins=128, logit_range=SLICE_LOGIT_RANGE)


def _vec(y: np.ndarray, p: np.ndarray) -> np.ndarray:
    vec = LAYOUT.empty()
    if y.size:
        LAYOUT.add(vec, y, p)
    return vec


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
def test_a_stack_gives_each_vector_its_result_alone(confidence: float) -> None:
    cases = _cases()
    stack = np.stack(cases)
    many = LAYOUT.metrics_many(stack, confidence)
    reliability = LAYOUT.reliability_many(stack, confidence)
    results = score_results(LAYOUT, stack, confidence)
    assert len(many) == len(reliability) == len(results) == len(cases)
    for vec, metrics, rel, result in zip(cases, many, reliability, results, strict=True):
        alone = LAYOUT.metrics(vec, confidence)
        assert [_key(m) for m in metrics] == [_key(m) for m in alone]
        assert [repr(b) for b in rel] == [repr(b) for b in LAYOUT.reliability(vec, confidence)]
        # the per-metric methods are rows of the same computation
        by_name = {m.name: m for m in alone}
        assert _key(LAYOUT.roc_auc(vec, confidence)) == _key(by_name["roc_auc"])
        assert _key(LAYOUT.pr_auc(vec, confidence)) == _key(by_name["pr_auc"])
        assert _key(LAYOUT.ece_equal_mass(vec, confidence)) == _key(by_name["ece_equal_mass"])
        # a window without scored rows has no score metrics in a result
        if vec[LAYOUT.n_column] <= 0:
            assert result is None
        else:
            assert result is not None and [_key(m) for m in result[0]] == [_key(m) for m in alone]
    # every metric of the first (large) case is defined, with its interval
    big = {m.name: m for m in many[0]}
    for name in ("roc_auc", "pr_auc", "log_loss", "brier", "ece", "mce", "base_rate"):
        assert big[name].lower < big[name].value < big[name].upper, name


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 1), st.floats(0.0, 1.0, allow_nan=False)),
        min_size=1,
        max_size=80,
    )
)
def test_each_row_matches_scikit_learn(pairs: list[tuple[int, float]]) -> None:
    y = np.array([a for a, _ in pairs], np.int8)
    p = np.array([b for _, b in pairs])
    vec = _vec(y, p)
    row = LAYOUT.metrics_many(np.stack([_cases()[0], vec, _cases()[1]]), 0.95)[1]
    assert [_key(m) for m in row] == [_key(m) for m in LAYOUT.metrics(vec)]
    got = {m.name: m.value for m in row}
    binned = LAYOUT.bin_of(p)  # each score replaced by its bin: a bin is a group of ties
    if 0 < y.sum() < y.size:
        assert got["roc_auc"] == pytest.approx(roc_auc_score(y, binned), abs=1e-12)
        # AP reads an order inside each bin: between the bin's positives ranked below all
        # its negatives (one by one) and above them (together), the extremes of any order
        rank = np.argsort(np.argsort(p))
        low = binned + np.where(y == 1, 0.4 * rank / y.size, 0.5)
        high = binned + 0.5 * y
        lo, hi = average_precision_score(y, low), average_precision_score(y, high)
        assert lo - 1e-12 <= got["pr_auc"] <= hi + 1e-12
        if all(np.unique(p[binned == j]).size == 1 for j in np.unique(binned)):
            assert got["pr_auc"] == pytest.approx(average_precision_score(y, p), abs=1e-12)
    else:
        assert math.isnan(got["roc_auc"])
    assert got["brier"] == pytest.approx(brier_score_loss(y, p), abs=1e-12)
    assert got["base_rate"] == pytest.approx(y.mean(), abs=1e-12)


TIED = [0.0, 0.001, 0.01, 0.2, 0.5, 0.7, 0.99, 1.0]  # one bin each


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.sampled_from(TIED)), min_size=1, max_size=80))
def test_ap_of_tied_scores_is_scikit_learns(pairs: list[tuple[int, float]]) -> None:
    """Heavy ties: every bin holds one score, and scikit-learn's tie rule is exact."""
    y = np.array([a for a, _ in pairs], np.int8)
    p = np.array([b for _, b in pairs])
    got = {m.name: m.value for m in LAYOUT.metrics(_vec(y, p))}
    if y.any():
        assert got["pr_auc"] == pytest.approx(average_precision_score(y, p), abs=1e-12)
    else:
        assert math.isnan(got["pr_auc"])
