"""Ranking record fields: both list forms, both label forms, and every rejection reason."""

from __future__ import annotations

import math

import numpy as np
import orjson
import pytest
from sklearn.metrics import ndcg_score

from monitor.ingest.ranking import (
    RANKING_REASONS,
    RankingReject,
    grades_for,
    parse_ranked_items,
    parse_relevance,
)
from monitor.stats.ranking import RankingLayout


def test_scored_and_ordered_lists_and_labels_feed_the_metrics() -> None:
    pred = orjson.loads(
        b'{"id": "q1", "items": [{"item": "a", "score": 0.2}, {"item": "b", "score": 0.9},'
        b' {"item": 7, "score": 0.2}]}'
    )
    ranked = parse_ranked_items(pred["items"], max_items=10)
    assert ranked.items == ("a", "b", "7")
    grades, unranked = grades_for(ranked, parse_relevance({"relevance": {"a": 2, "z": 1}}, 10))
    assert grades.tolist() == [2.0, 0.0, 0.0] and unranked.tolist() == [1.0]
    ordered = parse_ranked_items(["x", "y", "z"], max_items=3)
    assert ordered.scores.tolist() == [3.0, 2.0, 1.0]
    clicked = parse_relevance({"clicked": ["y"]}, 10)
    assert clicked == {"y": 1.0}
    layout = RankingLayout((2,))
    vec = layout.empty()
    layout.add_query(vec, ranked.scores, *grades_for(ranked, {"a": 2, "7": 1}))
    ndcg = next(m for m in layout.metrics(vec) if m.name == "ndcg_at_2")
    assert ndcg.value == pytest.approx(ndcg_score([[2, 0, 1]], [[0.2, 0.9, 0.2]], k=2), abs=1e-12)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "missing_field"),
        ("a,b", "wrong_type"),
        (["a"] * 3 + ["b"] * 3, "oversize"),
        (["a", "b", "a"], "duplicate_item"),
        ([{"item": "a", "score": 1.0}, {"item": "a", "score": 0.5}], "duplicate_item"),
        ([{"item": "a"}], "missing_field"),
        ([{"item": "a", "score": "high"}], "wrong_type"),
        ([{"item": "a", "score": float("nan")}], "not_finite"),
        ([{"item": "a", "score": 10**400}], "not_finite"),
        ([{"item": "a", "score": 1}, "b"], "wrong_type"),
        ([""], "missing_field"),
        ([True], "wrong_type"),
        ([1.5], "wrong_type"),
    ],
)
def test_bad_lists_get_their_reason(value: object, reason: str) -> None:
    with pytest.raises(RankingReject) as err:
        parse_ranked_items(value, max_items=5)
    assert err.value.reason == reason and err.value.reason in RANKING_REASONS
    assert err.value.detail


@pytest.mark.parametrize(
    ("label", "reason"),
    [
        ({}, "missing_field"),
        ({"relevance": {"a": 1}, "clicked": ["a"]}, "wrong_type"),
        ({"relevance": ["a"]}, "wrong_type"),
        ({"relevance": {"a": -1}}, "out_of_range"),
        ({"relevance": {"a": math.inf}}, "not_finite"),
        ({"relevance": {"a": "2"}}, "wrong_type"),
        ({"relevance": {"": 1}}, "missing_field"),
        ({"relevance": {str(i): 1 for i in range(6)}}, "oversize"),
        ({"clicked": "a"}, "wrong_type"),
        ({"clicked": ["a", "a"]}, "duplicate_item"),
        ({"clicked": [str(i) for i in range(6)]}, "oversize"),
    ],
)
def test_bad_labels_get_their_reason(label: dict, reason: str) -> None:
    with pytest.raises(RankingReject) as err:
        parse_relevance(label, max_items=5)
    assert err.value.reason == reason


def test_empty_list_is_a_query_with_nothing_ranked() -> None:
    ranked = parse_ranked_items([], max_items=5)
    grades, unranked = grades_for(ranked, {"a": 1.0})
    layout = RankingLayout((3,))
    vec = layout.empty()
    layout.add_query(vec, ranked.scores, grades, unranked)
    got = {m.name: m.value for m in layout.metrics(vec)}
    assert got["recall_at_3"] == 0.0 and got["mrr"] == 0.0 and got["ndcg_at_3"] == 0.0
    assert np.isfinite(list(got.values())).all()


def test_ranking_labels_keep_their_place_in_a_mixed_label_batch() -> None:
    from monitor.engine.records import hash_ids
    from monitor.ingest.decode import DecodeLimits, LabelDecoder
    from monitor.ingest.ranking import relevance_digest

    decoder = LabelDecoder(DecodeLimits(1 << 20, 10**12), max_items=5)
    raws = [
        b'{"id": "a", "ts": 1000, "label": 1}',
        b'{"id": "q1", "ts": 1000, "relevance": {"x": 2, "y": 0}}',
        b'{"id": "b", "ts": 1000, "label": "0"}',
        b'{"id": "q2", "ts": 1000, "clicked": ["z"]}',
        b'{"id": "q3", "ts": 1000, "clicked": ["z", "z"]}',
        b'{"id": "c", "ts": 1000, "label": 0}',
    ]
    batch, rejects = decoder.decode(raws, now_ms=10**12)
    assert [(i, r) for i, r, _ in rejects] == [(4, "duplicate_item")]
    assert batch.keys.tolist() == hash_ids(["a", "q1", "b", "q2", "c"]).tolist()
    assert batch.relevance == [None, {"x": 2.0, "y": 0.0}, None, {"z": 1.0}, None]
    assert batch.value is not None
    assert batch.value[1] == relevance_digest({"y": 0.0, "x": 2.0})  # order-free
    assert batch.value[3] == relevance_digest({"z": 1.0}) != batch.value[1]
    # without ranking models the same record is a label without its field
    _, plain = LabelDecoder(DecodeLimits(1 << 20, 10**12)).decode(raws[1:2], now_ms=10**12)
    assert [r for _, r, _ in plain] == ["missing_field"]
