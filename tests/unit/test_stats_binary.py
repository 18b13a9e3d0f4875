"""Binary layout: merge law, scikit-learn oracles, interval sanity."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import (
    accuracy_score,
    balanced_accuracy_score,
    cohen_kappa_score,
    confusion_matrix,
    f1_score,
    fbeta_score,
    matthews_corrcoef,
    precision_score,
    recall_score,
)

from monitor.stats.binary import BinaryLayout, fbeta_name
from monitor.stats.results import MetricValue

LAYOUT = BinaryLayout(betas=(2.0, 0.5, 3.0))


def _by_name(values: list[MetricValue]) -> dict[str, MetricValue]:
    return {m.name: m for m in values}


def assert_same_metrics(a: list[MetricValue], b: list[MetricValue], tol: float = 1e-9) -> None:
    assert [m.name for m in a] == [m.name for m in b]
    for x, y in zip(a, b, strict=True):
        assert x.n == y.n, x.name
        assert x.method == y.method
        for u, v in ((x.value, y.value), (x.lower, y.lower), (x.upper, y.upper)):
            assert (math.isnan(u) and math.isnan(v)) or u == pytest.approx(v, rel=tol, abs=tol), (
                x.name
            )


pairs = st.lists(st.tuples(st.integers(0, 1), st.integers(0, 1)), min_size=0, max_size=60)


@given(pairs, pairs)
@settings(max_examples=60, deadline=None)
def test_merge_equals_one_pass(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> None:
    def vec(rows: list[tuple[int, int]]) -> np.ndarray:
        v = LAYOUT.empty()
        arr = np.array(rows, dtype=np.int64).reshape(-1, 2)
        LAYOUT.add(v, arr[:, 0], arr[:, 1])
        return v

    merged = vec(a) + vec(b)
    assert_same_metrics(LAYOUT.metrics(merged), LAYOUT.metrics(vec(a + b)))


def test_add_rows_routes_rows_to_their_matrix_row() -> None:
    rng = np.random.default_rng(1)
    y, p = rng.integers(0, 2, 500), rng.integers(0, 2, 500)
    group = rng.integers(0, 3, 500)
    matrix = np.zeros((3, LAYOUT.width))
    LAYOUT.add_rows(matrix, group, y, p)
    for g in range(3):
        v = LAYOUT.empty()
        LAYOUT.add(v, y[group == g], p[group == g])
        np.testing.assert_array_equal(matrix[g], v)


def _cases() -> list[tuple[str, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(7)
    out = []
    y = rng.integers(0, 2, 5000)
    out.append(("balanced", y, np.where(rng.random(5000) < 0.8, y, 1 - y)))
    y = (rng.random(20000) < 0.01).astype(int)
    out.append(("rare", y, np.where(rng.random(20000) < 0.97, y, 1 - y)))
    y = (rng.random(3000) < 0.3).astype(int)
    out.append(("random", y, (rng.random(3000) < 0.5).astype(int)))
    return out


@pytest.mark.parametrize(
    ("label", "y", "p"), _cases(), ids=lambda x: x if isinstance(x, str) else ""
)
def test_values_match_sklearn(label: str, y: np.ndarray, p: np.ndarray) -> None:
    v = LAYOUT.empty()
    LAYOUT.add(v, y, p)
    m = _by_name(LAYOUT.metrics(v))
    tn, fp, fn, tp = confusion_matrix(y, p, labels=[0, 1]).ravel()
    expected = {
        "accuracy": accuracy_score(y, p),
        "error_rate": 1 - accuracy_score(y, p),
        "precision": precision_score(y, p),
        "recall": recall_score(y, p),
        "specificity": recall_score(y, p, pos_label=0),
        "fpr": fp / (fp + tn),
        "fnr": fn / (fn + tp),
        "prevalence": y.mean(),
        "predicted_positive_rate": p.mean(),
        "f1": f1_score(y, p),
        "f2": fbeta_score(y, p, beta=2.0),
        "f0_5": fbeta_score(y, p, beta=0.5),
        "f3": fbeta_score(y, p, beta=3.0),
        "balanced_accuracy": balanced_accuracy_score(y, p),
        "mcc": matthews_corrcoef(y, p),
        "cohen_kappa": cohen_kappa_score(y, p),
    }
    tpr, tnr = tp / (tp + fn), tn / (tn + fp)
    expected["hmean_class_accuracy"] = 2 * tpr * tnr / (tpr + tnr)
    for name, value in expected.items():
        assert m[name].value == pytest.approx(value, abs=1e-9), (label, name)
        assert m[name].lower <= m[name].value <= m[name].upper, (label, name)
        assert m[name].upper - m[name].lower > 0, (label, name)
    assert m["precision"].n == tp + fp and m["recall"].n == tp + fn and m["accuracy"].n == len(y)


def _delta_se_by_simulation(
    stat: Callable[..., float], counts: np.ndarray, reps: int = 20000
) -> float:
    rng = np.random.default_rng(11)
    n = int(counts.sum())
    draws = rng.multinomial(n, counts / n, size=reps)
    values = np.array([stat(*row) for row in draws])
    return float(np.nanstd(values))


@pytest.mark.parametrize("name", ["f2", "f0_5", "mcc", "cohen_kappa", "hmean_class_accuracy"])
def test_delta_se_matches_multinomial_spread(name: str) -> None:
    """The delta-method half-width matches the spread of the statistic under resampling."""
    counts = np.array([600.0, 90.0, 60.0, 250.0])  # TN, FP, FN, TP
    lay = BinaryLayout(betas=(2.0, 0.5))

    def stat(tn: float, fp: float, fn: float, tp: float) -> float:
        return _by_name(lay.metrics(np.array([tn, fp, fn, tp])))[name].value

    m = _by_name(lay.metrics(counts))[name]
    se_delta = (m.upper - m.lower) / (2 * 1.959963984540054)
    se_sim = _delta_se_by_simulation(stat, counts, reps=800)
    assert se_delta == pytest.approx(se_sim, rel=0.12)


def test_empty_and_degenerate_windows_are_nan_not_errors() -> None:
    m = _by_name(LAYOUT.metrics(LAYOUT.empty()))
    assert all(math.isnan(x.value) for x in m.values())
    only_negatives = np.array([10.0, 0.0, 0.0, 0.0])
    m = _by_name(LAYOUT.metrics(only_negatives))
    assert m["accuracy"].value == 1.0 and math.isnan(m["recall"].value)
    assert m["mcc"].value == 0.0  # sklearn's convention for an empty margin


def test_fbeta_names() -> None:
    assert fbeta_name(2.0) == "f2" and fbeta_name(0.5) == "f0_5" and fbeta_name(1) == "f1"


def test_metrics_many_equals_each_window_alone() -> None:
    """The batch path gives each row exactly its single-window result (same seeded
    posterior draws), whatever else is in the batch; Wilson ratios and MCC/kappa equal
    the per-window helpers they replace."""
    from monitor.stats.agreement import kappa_with_se, mcc_with_se
    from monitor.stats.binary import (
        balanced_accuracy,
        cohen_kappa,
        confusion_posterior,
        fbeta,
        mcc,
    )
    from monitor.stats.common import class_count_reason, ratio

    rng = np.random.default_rng(3)
    conf = rng.integers(0, 60, (80, 4)).astype(np.float64)
    conf[:5] = [[0, 0, 0, 0], [30, 0, 0, 0], [0, 0, 0, 25], [12, 0, 0, 11], [0, 9, 7, 0]]
    conf[5:20] *= rng.integers(0, 2, (15, 4))  # empty cells and margins
    many = LAYOUT.metrics_many(conf)
    assert len(many) == conf.shape[0]
    for row, got in zip(conf, many, strict=True):
        alone = LAYOUT.metrics(row)
        assert [(m.name, m.n, m.method, m.note) for m in got] == [
            (m.name, m.n, m.method, m.note) for m in alone
        ]
        for x, y in zip(got, alone, strict=True):
            for u, v in ((x.value, y.value), (x.lower, y.lower), (x.upper, y.upper)):
                assert (math.isnan(u) and math.isnan(v)) or u == v, x.name
        tn, fp, fn, tp = row
        by = _by_name(got)
        reason = class_count_reason(tp + fn, tn + fp)
        has_draws = not reason and tn + fp + fn + tp > 0
        draws = confusion_posterior(np.array([tn, fp, fn, tp])) if has_draws else None
        acc = ratio("accuracy", tp + tn, tn + fp + fn + tp, 0.95)
        assert (by["accuracy"].lower, by["accuracy"].upper) == (acc.lower, acc.upper) or (
            math.isnan(acc.lower) and math.isnan(by["accuracy"].lower)
        )
        # the one-metric functions (their own posterior draw) agree exactly
        one = {
            "f2": fbeta(tp, fp, fn, 2.0, 0.95, tn),
            "mcc": mcc(tp, fp, fn, tn, 0.95, draws, reason),
            "cohen_kappa": cohen_kappa(tp, fp, fn, tn, 0.95, draws, reason),
            "balanced_accuracy": balanced_accuracy(tp, fp, fn, tn, 0.95, draws, reason),
        }
        for name, mv in one.items():
            got_mv = by[name]
            for u, v in (
                (got_mv.value, mv.value),
                (got_mv.lower, mv.lower),
                (got_mv.upper, mv.upper),
            ):
                assert (math.isnan(u) and math.isnan(v)) or u == v, name
        cm = np.array([[tn, fp], [fn, tp]])
        for name, oracle in (("mcc", mcc_with_se(cm)[0]), ("cohen_kappa", kappa_with_se(cm)[0])):
            v = by[name].value
            assert (math.isnan(v) and math.isnan(oracle)) or v == pytest.approx(oracle, abs=1e-12)


def test_metrics_many_names_keeps_only_those_with_the_same_values() -> None:
    """Asking for some metrics returns exactly those, in catalog order, each equal to the
    whole catalog's (the unexported posteriors are not drawn, the others unchanged)."""
    rng = np.random.default_rng(4)
    conf = rng.integers(0, 80, (40, 4)).astype(np.float64)
    conf[0] = [3, 1, 0, 2]  # gated: few of each class
    whole = LAYOUT.metrics_many(conf)
    for names in ({"accuracy", "f1", "mcc"}, {"cohen_kappa", "f0_5", "prevalence"}, set()):
        some = LAYOUT.metrics_many(conf, names=names)
        for full, got in zip(whole, some, strict=True):
            assert list(map(repr, got)) == [repr(m) for m in full if m.name in names]  # NaN-aware
