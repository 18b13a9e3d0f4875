"""The batch ranking path (typed decode of many lists, relevance digests of many maps, and
the side table scoring every joined query in one call) against a per-query reference:
each query's list and grades read alone, split into ranked and unranked grades item by
item, scored alone; NDCG against scikit-learn's ``ndcg_score`` (ties averaged), the other
metrics against their textbook formulas averaged over every order of the ties."""

from __future__ import annotations

import random

import numpy as np
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import ndcg_score

from monitor.engine.models import ModelSpec
from monitor.engine.ranking import RankingState
from monitor.ingest.decode import DecodeLimits, LabelDecoder, PredictionDecoder
from monitor.ingest.ranking import parse_ranked_items, relevance_digest, relevance_digests
from monitor.stats.ranking import RankingLayout, grades_for, query_metrics

from .test_stats_ranking import _oracle

NOW = 1_700_000_000_000
LIMITS = DecodeLimits(1 << 20, 10**12)
KS = (1, 3, 5)
ITEMS = [f"d{j}" for j in range(9)]

query = st.tuples(
    st.lists(st.sampled_from(ITEMS), min_size=0, max_size=7, unique=True),
    st.lists(st.sampled_from([0.1, 0.4, 0.4, 0.7, 0.9, 2.0]), min_size=7, max_size=7),
    st.dictionaries(st.sampled_from(ITEMS), st.sampled_from([0, 0, 1, 2, 3, 0.5]), max_size=5),
    st.booleans(),  # scored entries, or bare ids already ranked
)


@settings(max_examples=120, deadline=None)
@given(st.lists(query, min_size=1, max_size=12))
def test_batch_rows_equal_each_query_scored_alone(batch) -> None:
    spec = ModelSpec("search", task="ranking", classes=(), max_items=10)
    preds, labels = [], []
    for i, (items, scores, grades, scored) in enumerate(batch):
        entries = (
            [{"item": it, "score": s} for it, s in zip(items, scores, strict=False)]
            if scored
            else list(items)
        )
        preds.append(orjson.dumps({"id": f"q{i}", "ts": NOW - 1, "model": "search",
                                   "version": "v1", "items": entries}))  # fmt: skip
        labels.append(orjson.dumps({"id": f"q{i}", "ts": NOW, "relevance": grades}))
    pb, p_rejects = PredictionDecoder([spec], LIMITS).decode(preds, NOW)
    lb, l_rejects = LabelDecoder(LIMITS, max_items=10).decode(labels, NOW)
    assert not p_rejects and not l_rejects and pb.ranked is not None
    assert lb.relevance is not None and lb.value is not None
    state = RankingState()
    groups = np.zeros(len(batch), np.int64)
    state.add_lists(pb.keys, groups, pb.ranked)
    state.add_relevance(lb.keys, lb.value, lb.relevance)
    layout = RankingLayout(KS)
    rows = state.contributions(layout, pb.keys, groups, lb.value)
    assert not state.lists  # every list released at its join
    for row, (items, _, grades, _), raw in zip(rows, batch, preds, strict=True):
        alone = parse_ranked_items(orjson.loads(raw)["items"], max_items=10)
        relevance = {k: float(v) for k, v in grades.items()}
        ranked, unranked = grades_for(alone, relevance)
        want = query_metrics(alone.scores, ranked, KS, unranked)
        np.testing.assert_allclose(row, want, rtol=0, atol=1e-12)
        n_rel = sum(g > 0 for g in relevance.values())
        assert row[0] == 1.0 and row[1] == float(n_rel == 0)
        if n_rel == 0 or not items or (unranked > 0).any():
            continue  # the references below know ranked items only
        got = {m.name: m.value for m in layout.metrics(row)}
        plain = alone.scores.tolist()
        for k in KS:
            want_k = _oracle(plain, ranked.tolist(), n_rel, k)  # every order of the ties
            for stem, key in (("precision", "precision"), ("recall", "recall"),
                              ("hit_rate", "hit"), ("map", "ap")):  # fmt: skip
                assert abs(got[f"{stem}_at_{k}"] - want_k[key]) <= 1e-12
            if len(items) > 1:  # (ndcg_score needs two items)
                ndcg = ndcg_score([ranked], [alone.scores], k=k)  # ties averaged
                assert abs(got[f"ndcg_at_{k}"] - ndcg) <= 1e-12
        assert abs(got["mrr"] - _oracle(plain, ranked.tolist(), n_rel, 1)["rr"]) <= 1e-12


grade_maps = st.dictionaries(
    st.text(min_size=1, max_size=4), st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0]), max_size=6
)


@settings(max_examples=100, deadline=None)
@given(st.lists(grade_maps, min_size=1, max_size=8), st.randoms(use_true_random=False))
def test_digests_of_a_batch_are_each_maps_and_free_of_item_order(
    maps: list[dict[str, float]], rnd: random.Random
) -> None:
    together = relevance_digests(maps)
    shuffled = []
    for grades in maps:
        pairs = list(grades.items())
        rnd.shuffle(pairs)
        shuffled.append(dict(pairs))
    assert together.tolist() == [relevance_digest(g) for g in shuffled]
    assert all(0 <= d < 2**52 and d == int(d) for d in together.tolist())  # exact as floats
    distinct = {tuple(sorted(g.items())) for g in maps}
    assert len(set(together.tolist())) == len(distinct)  # equal maps agree, others differ
