"""Ranking metrics vs scikit-learn's ndcg_score and a brute-force oracle over tie orders."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import ndcg_score

from monitor.stats.ranking import (
    RankingLayout,
    batch_query_metrics,
    query_metrics,
    ranking_metric_names,
)

KS = (1, 3, 5)


def _plain(order_grades: list[float], n_rel: int, k: int) -> dict[str, float]:
    """Textbook metrics of one strict order (grade list in rank order)."""
    rel = [g > 0 for g in order_grades]
    top = rel[:k]
    hits = sum(top)
    ap = sum(sum(rel[: i + 1]) / (i + 1) for i in range(len(top)) if top[i]) / min(n_rel, k)
    first = next((i for i, r in enumerate(rel) if r), None)
    return {
        "precision": hits / k,
        "recall": hits / n_rel,
        "hit": float(hits > 0),
        "ap": ap,
        "rr": 0.0 if first is None else 1.0 / (first + 1),
    }


def _oracle(scores: list[float], grades: list[float], n_rel: int, k: int) -> dict[str, float]:
    """Average of the textbook metrics over every order of the tie groups (each distinct
    arrangement of a group's grades is equally likely, so averaging over them is exact)."""
    groups: dict[float, list[float]] = {}
    for s, g in zip(scores, grades, strict=True):
        groups.setdefault(s, []).append(g)
    keys = sorted(groups, reverse=True)
    perms = [list(set(itertools.permutations(groups[key]))) for key in keys]
    total: dict[str, float] = {}
    count = 0
    for combo in itertools.product(*perms):
        order = [g for part in combo for g in part]
        for name, value in _plain(order, n_rel, k).items():
            total[name] = total.get(name, 0.0) + value
        count += 1
    return {name: value / count for name, value in total.items()}


lists = st.integers(2, 7).flatmap(
    lambda n: st.tuples(
        st.lists(st.sampled_from([0.1, 0.4, 0.4, 0.7, 0.9]), min_size=n, max_size=n),
        st.lists(st.sampled_from([0, 0, 1, 2, 3]), min_size=n, max_size=n),
    )
)


@settings(max_examples=150, deadline=None)
@given(lists)
def test_query_metrics_match_sklearn_and_the_brute_force_oracle(case) -> None:
    scores, grades = case
    row = query_metrics(np.array(scores), np.array(grades), KS)
    n_rel = sum(g > 0 for g in grades)
    if n_rel == 0:
        assert row is not None and row[1] == 1.0 and row[2:].sum() == 0.0
        return
    assert row is not None and row[1] == 0.0
    layout = RankingLayout(KS)
    names = ranking_metric_names(KS)
    got = {mv.name: mv.value for mv in layout.metrics(row)}
    assert list(got) == names
    for k in KS:
        expected_ndcg = ndcg_score([grades], [scores], k=k)
        assert got[f"ndcg_at_{k}"] == pytest.approx(expected_ndcg, abs=1e-9)
        oracle = _oracle(scores, [float(g) for g in grades], n_rel, k)
        assert got[f"precision_at_{k}"] == pytest.approx(oracle["precision"], abs=1e-9)
        assert got[f"recall_at_{k}"] == pytest.approx(oracle["recall"], abs=1e-9)
        assert got[f"hit_rate_at_{k}"] == pytest.approx(oracle["hit"], abs=1e-9)
        assert got[f"map_at_{k}"] == pytest.approx(oracle["ap"], abs=1e-9)
    assert got["mrr"] == pytest.approx(_oracle(scores, grades, n_rel, 1)["rr"], abs=1e-9)


def test_window_means_equal_sklearn_over_many_queries() -> None:
    rng = np.random.default_rng(7)
    layout = RankingLayout((3, 10))
    vec = layout.empty()
    y_true, y_score = [], []
    for _ in range(200):
        grades = rng.integers(0, 4, size=12) * (rng.random(12) < 0.4)
        grades[rng.integers(0, 12)] = 1 + rng.integers(0, 3)
        scores = np.round(rng.random(12), 1)  # ties
        layout.add_query(vec, scores, grades)
        y_true.append(grades)
        y_score.append(scores)
    got = {mv.name: mv for mv in layout.metrics(vec)}
    for k in (3, 10):
        assert got[f"ndcg_at_{k}"].value == pytest.approx(
            ndcg_score(y_true, y_score, k=k), abs=1e-9
        )
        mv = got[f"ndcg_at_{k}"]
        assert mv.n == 200 and mv.lower < mv.value < mv.upper


def test_rows_merge_by_addition_and_unranked_relevant_items_count() -> None:
    layout = RankingLayout((2,))
    a, b, both = layout.empty(), layout.empty(), layout.empty()
    layout.add_query(a, np.array([0.9, 0.5]), np.array([1, 0]), np.array([3.0]))
    layout.add_query(b, np.array([0.9, 0.5]), np.array([0, 0]))
    matrix = np.zeros((1, layout.width))
    layout.add_rows(matrix, 0, np.vstack([a, b]))
    layout.add_query(both, np.array([0.9, 0.5]), np.array([1, 0]), np.array([3.0]))
    layout.add_query(both, np.array([0.9, 0.5]), np.array([0, 0]))
    np.testing.assert_array_equal(matrix[0], both)
    got = {mv.name: mv.value for mv in layout.metrics(both)}
    # one query counted: relevant items {first: 1, unranked: 3} -> recall 1/2, idcg 3 + 1/log2(3)
    assert got["recall_at_2"] == pytest.approx(0.5)
    assert got["ndcg_at_2"] == pytest.approx(1.0 / (3.0 + 1.0 / math.log2(3.0)))
    assert got["map_at_2"] == pytest.approx(0.5)
    assert layout.excluded(both) == {"without_relevant": 1}
    assert got["mrr"] == 1.0


def test_precision_penalises_short_lists_and_bad_ks_are_refused() -> None:
    layout = RankingLayout((5,))
    vec = layout.empty()
    layout.add_query(vec, np.array([1.0]), np.array([1]))
    got = {mv.name: mv.value for mv in layout.metrics(vec)}
    assert got["precision_at_5"] == pytest.approx(0.2)
    assert got["recall_at_5"] == 1.0
    for ks in ((), (0,), (3, 3)):
        with pytest.raises(ValueError):
            RankingLayout(ks)


queries = st.lists(
    st.tuples(
        st.integers(0, 6).flatmap(
            lambda n: st.tuples(
                st.lists(st.sampled_from([0.1, 0.4, 0.4, 0.7, 0.9]), min_size=n, max_size=n),
                st.lists(st.sampled_from([0, 0, 1, 2, 3]), min_size=n, max_size=n),
            )
        ),
        st.lists(st.sampled_from([0.0, 1.0, 2.0]), max_size=2),  # unranked judged grades
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(queries)
def test_a_batch_of_queries_equals_each_query_and_the_oracle(batch) -> None:
    """The batched computation (one pass over every item of many queries, no loop over
    queries) gives each query the row it gets alone, and the oracle's values: queries of
    different lengths, empty lists, all ties, unranked relevant items."""
    ks = (1, 3, 5)
    scores = np.array([s for (sc, _), _ in batch for s in sc], np.float64)
    grades = np.array([g for (_, gr), _ in batch for g in gr], np.float64)
    lengths = np.array([len(sc) for (sc, _), _ in batch])
    extra = np.array([g for _, ex in batch for g in ex], np.float64)
    extra_lengths = np.array([len(ex) for _, ex in batch])
    rows = batch_query_metrics(scores, grades, lengths, extra, extra_lengths, ks)
    assert rows.shape == (len(batch), RankingLayout(ks).width)
    # given every judged grade of each query (its ranked items' too) instead of the
    # unranked ones: the same rows
    judged = np.array([g for (_, gr), ex in batch for g in [*gr, *ex]], np.float64)
    judged_lengths = lengths + extra_lengths
    whole = batch_query_metrics(
        scores, grades, lengths, judged, judged_lengths, ks, all_judged=True
    )
    np.testing.assert_allclose(whole, rows, rtol=0, atol=1e-12)
    names = ranking_metric_names(ks)
    for row, ((sc, gr), ex) in zip(rows, batch, strict=True):
        alone = query_metrics(np.array(sc, float), np.array(gr, float), ks, np.array(ex))
        np.testing.assert_allclose(row, alone, rtol=0, atol=1e-12)
        n_rel = sum(g > 0 for g in gr) + sum(g > 0 for g in ex)
        assert row[0] == 1.0 and row[1] == float(n_rel == 0)
        if n_rel == 0 or ex or not sc:
            continue  # the oracle below knows ranked items only
        got = dict(zip(names, RankingLayout(ks).metrics(row), strict=True))
        for k in ks:
            want = _oracle(sc, [float(g) for g in gr], n_rel, k)
            for stem, key in (("precision", "precision"), ("recall", "recall"),
                              ("hit_rate", "hit"), ("map", "ap")):  # fmt: skip
                assert got[f"{stem}_at_{k}"].value == pytest.approx(want[key], abs=1e-9)
            if len(sc) > 1:  # sklearn's ndcg_score needs two items
                ndcg = ndcg_score([gr], [sc], k=k)
                assert got[f"ndcg_at_{k}"].value == pytest.approx(ndcg, abs=1e-9)
        rr = _oracle(sc, [float(g) for g in gr], n_rel, 1)["rr"]
        assert got["mrr"].value == pytest.approx(rr, abs=1e-9)
