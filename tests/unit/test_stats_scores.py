"""Score-histogram layout: merge law, scikit-learn oracles, bin-error bound, economics."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.calibration import calibration_curve
from sklearn.metrics import average_precision_score, brier_score_loss, log_loss, roc_auc_score

from monitor.stats.scores import ScoreLayout, ValueMatrix

from .test_stats_binary import assert_same_metrics

LAYOUT = ScoreLayout()
EXACT = ScoreLayout(eps=float(np.finfo(np.float64).eps))  # sklearn >= 1.3 clips at machine eps


def _vec(y: np.ndarray, s: np.ndarray, layout: ScoreLayout = LAYOUT) -> np.ndarray:
    v = layout.empty()
    layout.add(v, y, s)
    return v


def _by_name(vec: np.ndarray, layout: ScoreLayout = LAYOUT) -> dict:
    return {m.name: m for m in layout.metrics(vec)}


def _dataset(kind: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    if kind == "balanced":
        n = 20000
        y = (rng.random(n) < 0.5).astype(int)
        s = 1 / (1 + np.exp(-(rng.normal(size=n) + (2 * y - 1))))
    elif kind == "rare":
        n = 50000
        y = (rng.random(n) < 0.01).astype(int)
        s = 1 / (1 + np.exp(-(rng.normal(size=n) - 4 + 1.5 * y)))
    elif kind == "concentrated":  # every score in [0.001, 0.01]
        n = 50000
        y = (rng.random(n) < 0.01).astype(int)
        s = 0.001 + 0.009 * rng.beta(2 + 1.5 * y, 3, size=n)
    elif kind == "ties":  # 2-decimal scores: heavy ties
        n = 20000
        y = (rng.random(n) < 0.3).astype(int)
        s = np.round(np.clip(rng.normal(0.3 + 0.2 * y, 0.15), 0, 1), 2)
    elif kind == "extreme":  # exact 0/1 scores and values beyond the logit range
        n = 10000
        y = (rng.random(n) < 0.4).astype(int)
        s = rng.choice([0.0, 1e-9, 0.2, 0.7, 1 - 1e-9, 1.0], size=n)
    else:
        raise ValueError(kind)
    return y, s


KINDS = ["balanced", "rare", "concentrated", "ties", "extreme"]


labels_scores = st.lists(
    st.tuples(st.integers(0, 1), st.floats(0.0, 1.0, allow_nan=False)), min_size=0, max_size=40
)


@given(labels_scores, labels_scores)
@settings(max_examples=40, deadline=None)
def test_merge_equals_one_pass(a: list, b: list) -> None:
    def vec(rows: list) -> np.ndarray:
        arr = np.array(rows, dtype=np.float64).reshape(-1, 2)
        return _vec(arr[:, 0].astype(int), arr[:, 1])

    merged, single = vec(a) + vec(b), vec(a + b)
    # every column is a sum, the within-bin ones (Σp of the positives, Σp²) too
    np.testing.assert_allclose(merged, single, rtol=1e-12, atol=1e-12)
    assert_same_metrics(LAYOUT.metrics(merged), LAYOUT.metrics(single))
    values = ValueMatrix(tp=5.0, fp=-1.0, fn=-3.0, tn=0.0)
    t1, t2 = LAYOUT.best_threshold(merged, values), LAYOUT.best_threshold(single, values)
    assert (math.isnan(t1.threshold) and math.isnan(t2.threshold)) or t1.threshold == t2.threshold
    fields = [[tuple(vars_of(b)) for b in LAYOUT.reliability(x)] for x in (merged, single)]
    np.testing.assert_allclose(np.array(fields[0]), np.array(fields[1]), atol=1e-12)


@given(
    st.lists(
        st.tuples(st.integers(0, 1), st.floats(0.0, 1.0), st.sampled_from([0, 1, 40])),
        min_size=1,
        max_size=40,
    )
)
@settings(max_examples=40, deadline=None)
def test_rows_far_apart_take_the_same_sums_as_each_row_alone(rows: list) -> None:
    """A batch whose rows are far apart in the matrix takes the sparse path (one
    unbuffered add of every cell); each row holds what its events alone would give."""
    arr = np.array(rows, dtype=np.float64).reshape(-1, 3)
    y, s, at = arr[:, 0].astype(int), arr[:, 1], arr[:, 2].astype(int)
    matrix = np.zeros((41, LAYOUT.width))
    strided = np.zeros((41, 2 * LAYOUT.width))[:, ::2]  # a view: the per-column adds
    for out in (matrix, strided):
        LAYOUT.add_rows(out, at, y, s)
        for r in (0, 1, 40):
            mine = at == r
            want = _vec(y[mine], s[mine]) if mine.any() else LAYOUT.empty()
            np.testing.assert_allclose(out[r], want, rtol=1e-12, atol=1e-12)
        assert not out[2:40].any()


tied_rows = st.lists(
    st.tuples(st.integers(0, 1), st.sampled_from([0.0, 0.003, 0.2, 0.9, 1.0])),
    min_size=1, max_size=40,
)  # fmt: skip


@given(tied_rows, labels_scores, labels_scores)
@settings(max_examples=40, deadline=None)
def test_a_window_of_running_sums_reads_like_its_rows(a: list, b: list, c: list) -> None:
    """A window's sums are running sums (buckets added, old ones subtracted): the
    within-bin statistics average precision reads (Σp of the positives, Σp²) must
    survive the subtraction, tied bins staying tied despite the float residue."""

    def vec(rows: list) -> np.ndarray:
        arr = np.array(rows, dtype=np.float64).reshape(-1, 2)
        return _vec(arr[:, 0].astype(int), arr[:, 1])

    window = ((vec(b) + vec(c)) + vec(a)) - vec(b) - vec(c)
    got, want = _by_name(window)["pr_auc"].value, _by_name(vec(a))["pr_auc"].value
    assert (math.isnan(got) and math.isnan(want)) or got == pytest.approx(want, abs=1e-9)
    y = np.array([r[0] for r in a])
    if y.any():
        assert want == pytest.approx(average_precision_score(y, [r[1] for r in a]), abs=1e-12)


def vars_of(b: object) -> list[float]:
    return [float(getattr(b, f)) for f in b.__slots__]  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", [0, 1])
def test_values_match_sklearn(kind: str, seed: int) -> None:
    y, s = _dataset(kind, seed)
    v = _vec(y, s, EXACT)
    m = _by_name(v, EXACT)
    exact_auc = roc_auc_score(y, s)
    assert m["roc_auc"].value == pytest.approx(exact_auc, abs=0.002)
    assert abs(m["roc_auc"].value - exact_auc) <= EXACT.roc_auc_bound(v) + 1e-12
    assert m["pr_auc"].value == pytest.approx(average_precision_score(y, s), abs=0.002)
    assert m["log_loss"].value == pytest.approx(log_loss(y, s), abs=1e-9)
    assert m["brier"].value == pytest.approx(brier_score_loss(y, s), abs=1e-9)
    assert m["base_rate"].value == pytest.approx(y.mean(), abs=1e-12)
    for name in ("roc_auc", "pr_auc", "log_loss", "brier"):
        assert m[name].lower < m[name].value < m[name].upper, name


def test_a_row_whose_within_bin_sums_miss_rows_reads_bins_as_ties() -> None:
    """A window reaching into a checkpoint written before the within-bin sums: its
    average precision is scikit-learn's on the binned scores (each bin one group of tied
    scores), not a reading of sums that miss rows."""
    layout = ScoreLayout(bins=128, logit_range=8.0)
    y, s = _dataset("rare", 3)
    old, new = layout.empty(), layout.empty()
    layout.add(old, y[:20000], s[:20000])
    layout.add(new, y[20000:], s[20000:])
    old[layout.legacy_widths[1] :] = 0.0  # as loaded from the earlier format
    got = layout.pr_auc(old + new).value
    assert got == pytest.approx(average_precision_score(y, layout.bin_of(s)), abs=1e-12)
    assert layout.pr_auc(layout.empty() + new).value != pytest.approx(
        average_precision_score(y[20000:], layout.bin_of(s[20000:])), abs=1e-4
    )


def test_default_log_loss_clips_at_1e_15() -> None:
    y = np.array([1, 0, 1, 0])
    s = np.array([0.0, 0.0, 1.0, 0.5])
    expected = (-math.log(1e-15) + 0.0 + -math.log(1 - 1e-15) + math.log(2)) / 4
    assert _by_name(_vec(y, s))["log_loss"].value == pytest.approx(expected, rel=1e-9)


def test_auc_is_exact_when_every_bin_holds_one_distinct_score() -> None:
    """Ties that sit in one bin are halves for sklearn too: the bound is not needed."""
    y, s = _dataset("ties", 5)
    v = _vec(y, s)
    assert _by_name(v)["roc_auc"].value == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert _by_name(v)["pr_auc"].value == pytest.approx(average_precision_score(y, s), abs=1e-12)


@pytest.mark.parametrize("kind", ["balanced", "concentrated", "ties"])
def test_ece_mce_and_reliability_match_direct_binning(kind: str) -> None:
    y, s = _dataset(kind, 2)
    v = _vec(y, s)
    m = _by_name(v)
    prob_true, prob_pred = calibration_curve(y, s, n_bins=10, strategy="uniform")
    counts = np.bincount(np.floor(s * 10 - 1e-12).clip(0, 9).astype(int), minlength=10)
    nonempty = counts[counts > 0]
    gaps = np.abs(prob_true - prob_pred)
    assert m["ece"].value == pytest.approx(float(nonempty @ gaps) / len(y), abs=1e-9)
    assert m["mce"].value == pytest.approx(float(gaps.max()), abs=1e-9)
    rel = [b for b in LAYOUT.reliability(v) if b.count > 0]
    assert [b.count for b in rel] == list(nonempty)
    np.testing.assert_allclose([b.observed for b in rel], prob_true, atol=1e-12)
    np.testing.assert_allclose([b.mean_predicted for b in rel], prob_pred, atol=1e-12)
    assert all(b.observed_lower <= b.observed <= b.observed_upper for b in rel)
    # equal-mass ECE against quantile bins on the raw scores (fine-bin granularity differs)
    if kind != "ties":
        t_q, p_q = calibration_curve(y, s, n_bins=10, strategy="quantile")
        assert m["ece_equal_mass"].value == pytest.approx(
            float(np.mean(np.abs(t_q - p_q))), abs=0.01
        )


def _brute_ev(y: np.ndarray, s: np.ndarray, t: float, v: ValueMatrix) -> float:
    pred = s >= t
    tp = np.sum(pred & (y == 1))
    fp = np.sum(pred & (y == 0))
    fn = np.sum(~pred & (y == 1))
    tn = np.sum(~pred & (y == 0))
    return float(v.tp * tp + v.fp * fp + v.fn * fn + v.tn * tn) / len(y)


@pytest.mark.parametrize("kind", ["balanced", "rare", "ties"])
def test_threshold_economics(kind: str) -> None:
    y, s = _dataset(kind, 3)
    values = ValueMatrix(tp=40.0, fp=-5.0, fn=-20.0, tn=0.5)
    v = _vec(y, s)
    best = LAYOUT.best_threshold(v, values)
    assert best.value.value == pytest.approx(_brute_ev(y, s, best.threshold, values), abs=1e-9)
    edges = LAYOUT.lower_edges()
    rng = np.random.default_rng(0)
    for t in rng.choice(edges, 25):
        ev = LAYOUT.expected_value(v, values, float(t))
        assert ev.threshold == t
        assert ev.value.value == pytest.approx(_brute_ev(y, s, float(t), values), abs=1e-9)
        assert ev.value.value <= best.value.value + 1e-12
    # the best over all raw scores can only be slightly better than the best bin edge
    raw = max(_brute_ev(y, s, float(t), values) for t in np.quantile(s, np.linspace(0, 1, 201)))
    assert best.value.value >= raw - 0.05 * abs(raw) - 1e-9
    assert best.value.lower < best.value.value < best.value.upper


def test_bins_resolve_concentrated_scores() -> None:
    bins = LAYOUT.bin_of(np.linspace(0.001, 0.01, 10000))
    assert len(np.unique(bins)) > 100


def test_calibration_test_rejects_certainty_contradicted_without_a_float_warning() -> None:
    """A group whose only variance is subnormal (scores exactly 1 and one score of 1e-310)
    and whose outcomes contradict it: χ² overflows to inf, p = 0, and no warning escapes
    (the daemon runs with warnings as log lines; this was one on every such window)."""
    import warnings

    from monitor.stats.scores import calibration_test_many

    count = np.array([[10.0, 10.0], [10.0, 10.0]])
    sum_p = np.array([[10.0, 1e-310], [10.0, 1e-310]])
    sum_y = np.array([[10.0, 1.0], [10.0, 0.0]])  # row 0: a positive the model ruled out
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p, testable, n = calibration_test_many(count, sum_p, sum_y)
    assert testable.tolist() == [True, True]
    assert p[0] == 0.0
    assert p[1] > 0.99  # outcomes exactly as predicted: χ² = 0
    assert n.tolist() == [20.0, 20.0]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.floats(0.0, 1.0) | st.floats(allow_nan=True), min_size=1, max_size=60),
    st.sampled_from([(2048, 16.0), (64, 8.0), (3, 5.0)]),
    st.integers(1, 20),
)
def test_bins_are_the_binary_searchs(xs: list[float], layout: tuple[int, float], mc: int) -> None:
    """The fine bin guessed from the logit, and the calibration bin from the score, are
    what searching the edges gives — at the edges and a float away from them too."""
    lay = ScoreLayout(bins=layout[0], logit_range=layout[1], calibration_bins=mc)
    edges = lay.interior_edges()
    pick = np.arange(0, edges.shape[0], max(1, edges.shape[0] // 7))
    near = edges[pick]
    x = np.concatenate([xs, near, np.nextafter(near, 0.0), np.nextafter(near, 1.0)])
    assert np.array_equal(lay.bin_of(x), np.searchsorted(edges, x, side="right"))
    y = np.zeros(x.shape[0])
    cal = np.linspace(0.0, 1.0, mc + 1)[1:-1]
    cols, _ = lay.cells(y, x).dense()
    p = np.clip(x, 0.0, 1.0)
    assert np.array_equal(cols[2] - 3 * lay.bins, np.searchsorted(cal, p, side="left"))


def _one_bincount(matrix: np.ndarray, rows: np.ndarray, cols: np.ndarray, w: np.ndarray) -> None:
    """Cells added as one weighted bincount over every part (np.add.at for rows far
    apart): the reference the per-part adds must equal bit for bit."""
    lo, hi = int(rows.min()), int(rows.max()) + 1
    width = matrix.shape[1]
    if (hi - lo) * width > 4 * cols.size + 65_536:
        if matrix.flags.c_contiguous:
            np.add.at(matrix.reshape(-1), (rows * width + cols).ravel(), w.ravel())
            return
        for c, x in zip(cols, w, strict=True):
            np.add.at(matrix, (rows, c), x)
        return
    flat = ((rows - lo) * width + cols).ravel()
    matrix[lo:hi] += np.bincount(flat, w.ravel(), (hi - lo) * width).reshape(hi - lo, width)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 1), st.floats(0.0, 1.0), st.integers(0, 5)), max_size=80),
    st.integers(0, 3),
    st.booleans(),
)
def test_cells_add_as_one_bincount_over_every_part(
    pairs: list[tuple[int, float, int]], spread: int, fortran: bool
) -> None:
    """Each cell gets its pairs' weights added in pair order, bit for bit as one weighted
    bincount over the (16, pairs) columns and weights adds them — rows near together
    (bincounts) and far apart (np.add.at), into C and Fortran matrices."""
    lay = ScoreLayout(bins=64, logit_range=8.0)
    y = np.array([a for a, _, _ in pairs], np.int8)
    score = np.array([s for _, s, _ in pairs])
    rows = np.array([r * 10**spread for _, _, r in pairs], np.int64)
    rng = np.random.default_rng(len(pairs))
    start = rng.normal(size=(5 * 10**spread + 1, lay.width))
    got = np.array(start, order="F" if fortran else "C")
    lay.add_rows(got, rows, y, score)
    want = np.array(start, order="F" if fortran else "C")
    cells = lay.cells(y, score)
    if len(cells):
        _one_bincount(want, rows, *cells.dense())
    assert np.array_equal(got, want)
    if len(cells) > 3:  # a slice of the pairs: the same parts, fewer pairs
        part, whole = cells.take(1, 3).dense(), cells.dense()
        assert np.array_equal(part[0], whole[0][:, 1:3])
        assert np.array_equal(part[1], whole[1][:, 1:3])
