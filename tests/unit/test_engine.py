"""The engine's join and accumulation against a plain-Python reference model."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.engine import state_codec
from monitor.engine.core import Engine
from monitor.engine.models import ModelSpec, WindowSpec
from monitor.engine.records import LabelBatch, PredictionBatch, hash_ids
from monitor.engine.state_codec import StateMismatch

MODEL = ModelSpec("m", windows=(WindowSpec("1h", 3_600_000),))
BASE = 1_700_000_000_000


def make_engine(**kw: int) -> Engine:
    args = dict(bucket_width_ms=60_000, label_ttl_ms=10**12, orphan_label_ttl_ms=10**12,
                max_pending=10**6, max_orphan_labels=10**6)  # fmt: skip
    args.update(kw)
    return Engine([MODEL], **args)


def preds(rows: list[tuple[str, int, str, float]]) -> PredictionBatch:
    """rows of (id, ts offset ms, version, score); decision = score >= 0.5."""
    score = np.array([r[3] for r in rows], float)
    return PredictionBatch(
        hash_ids([r[0] for r in rows]),
        np.array([BASE + r[1] for r in rows], np.int64),
        np.zeros(len(rows), np.int16),
        [r[2] for r in rows],
        score,
        (score >= 0.5).astype(np.int8),
    )


def labels(rows: list[tuple[str, int, str]]) -> LabelBatch:
    return LabelBatch(
        hash_ids([r[0] for r in rows]),
        np.array([BASE + r[1] for r in rows], np.int64),
        [r[2] for r in rows],
    )


def confusion_by_version(engine: Engine) -> dict[str, list[int]]:
    view = engine.buckets.view()
    out: dict[str, list[int]] = {}
    for g, cm in zip(view["group"].tolist(), view["confusion"], strict=True):
        version = engine.groups[g][1]
        acc = out.setdefault(version, [0, 0, 0, 0])
        for i in range(4):
            acc[i] += int(cm[i])
    return {v: c for v, c in out.items() if sum(c)}


event = st.one_of(
    st.tuples(st.just("p"), st.integers(0, 40), st.integers(0, 600_000),
              st.sampled_from(["v1", "v2"]), st.floats(0, 1)),
    st.tuples(st.just("l"), st.integers(0, 40), st.integers(0, 600_000),
              st.sampled_from(["0", "1"])),
)  # fmt: skip


def reference(events: list[tuple]) -> tuple[dict[str, list[int]], dict[str, int]]:
    """First prediction per (id, version) and first label per id win.

    Two versions scoring the same id (shadow mode) are two predictions sharing a label.
    """
    first_pred: dict[tuple[int, str], tuple] = {}
    first_label: dict[int, int] = {}
    counts = {"duplicate_prediction": 0, "duplicate_label": 0, "conflicting_label": 0}
    for e in events:
        if e[0] == "p":
            if (e[1], e[3]) in first_pred:
                counts["duplicate_prediction"] += 1
            else:
                first_pred[e[1], e[3]] = e
        else:
            y = int(e[3])
            if e[1] in first_label:
                key = "duplicate_label" if first_label[e[1]] == y else "conflicting_label"
                counts[key] += 1
            else:
                first_label[e[1]] = y
    cms: dict[str, list[int]] = {}
    for (pid, _), p in first_pred.items():
        if pid in first_label:
            cm = cms.setdefault(p[3], [0, 0, 0, 0])
            cm[2 * first_label[pid] + int(p[4] >= 0.5)] += 1
    return cms, counts


def feed(engine: Engine, events: list[tuple], cuts: list[int]) -> None:
    """Apply events in order, in batches of consecutive same-kind events split at cuts."""
    bounds = sorted({c % (len(events) + 1) for c in cuts} | {len(events)})
    start = 0
    for end in bounds:
        chunk = events[start:end]
        start = end
        j = 0
        while j < len(chunk):
            kind = chunk[j][0]
            k = j
            while k < len(chunk) and chunk[k][0] == kind:
                k += 1
            run = chunk[j:k]
            if kind == "p":
                engine.apply_predictions(preds([(f"id{e[1]}", e[2], e[3], e[4]) for e in run]))
            else:
                engine.apply_labels(labels([(f"id{e[1]}", e[2], e[3]) for e in run]))
            j = k


@settings(max_examples=150, deadline=None)
@given(st.lists(event, max_size=120), st.lists(st.integers(0, 200), max_size=6))
def test_join_matches_reference(events: list[tuple], cuts: list[int]) -> None:
    engine = make_engine()
    feed(engine, events, cuts)
    expected, counts = reference(events)
    assert confusion_by_version(engine) == expected
    for key, value in counts.items():
        assert engine.join_events[key] == value, key
    joined = sum(sum(c) for c in expected.values())
    assert engine.join_events["joined"] == joined
    n_pred = len({(e[1], e[3]) for e in events if e[0] == "p"})
    assert engine.pending == n_pred - joined
    assert engine.records["predictions", "accepted"] == n_pred
    n_labels = sum(1 for e in events if e[0] == "l")
    assert (
        engine.records["labels", "accepted"]
        + engine.records["labels", "duplicate"]
        + engine.records["labels", "invalid"]
        == n_labels
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(event, min_size=1, max_size=120), st.integers(0, 120))
def test_state_round_trip_mid_stream_equals_one_pass(events: list[tuple], split: int) -> None:
    split = split % len(events)
    one = make_engine()
    feed(one, events, [])
    first = make_engine()
    feed(first, events[:split], [])
    meta, arrays = state_codec.encode(first)
    second = make_engine()
    state_codec.decode(second, meta, arrays)
    feed(second, events[split:], [])
    assert confusion_by_version(second) == confusion_by_version(one)
    assert second.join_events == one.join_events
    assert second.records == one.records
    assert second.pending == one.pending
    assert second.delay.counts.tolist() == one.delay.counts.tolist()


def test_labels_before_predictions_join() -> None:
    e = make_engine()
    e.apply_labels(labels([("a", 5_000, "1"), ("b", 5_000, "0")]))
    assert len(e.orphans) == 2
    e.apply_predictions(preds([("a", 0, "v1", 0.9), ("b", 0, "v1", 0.9)]))
    assert len(e.orphans) == 0
    assert confusion_by_version(e) == {"v1": [0, 1, 0, 1]}
    assert e.pending == 0
    # label delay 5 s lands in the (1, 5] bucket
    assert e.delay.counts[0, 1] == 2  # its only model's row


def test_prediction_expires_when_label_watermark_passes_ttl() -> None:
    e = make_engine(label_ttl_ms=60_000)
    e.apply_predictions(preds([("a", 0, "v1", 0.9), ("b", 100_000, "v1", 0.9)]))
    e.apply_labels(labels([("zzz", 70_000, "1")]))  # label stream at 70 s: "a" expires
    assert e.join_events["expired_prediction"] == 1
    assert e.pending == 1
    e.apply_labels(labels([("a", 71_000, "1")]))  # too late: waits as an orphan
    assert e.join_events["joined"] == 0
    assert len(e.orphans) == 2


def test_orphan_label_expires_with_prediction_watermark() -> None:
    e = make_engine(orphan_label_ttl_ms=60_000)
    e.apply_labels(labels([("x", 0, "1")]))
    e.apply_predictions(preds([("y", 30_000, "v1", 0.2)]))
    assert len(e.orphans) == 1
    e.apply_predictions(preds([("z", 61_000, "v1", 0.2)]))
    assert len(e.orphans) == 0
    assert e.join_events["expired_orphan_label"] == 1


def test_max_pending_evicts_oldest_first() -> None:
    e = make_engine(max_pending=10)
    e.apply_predictions(preds([(f"p{i}", 1000 * (15 - i), "v1", 0.5) for i in range(15)]))
    assert len(e.preds) == 10
    assert e.pending == 10
    assert e.join_events["evicted_prediction"] == 5
    # the five oldest (largest i) are gone: their labels now wait as orphans
    e.apply_labels(labels([(f"p{i}", 20_000, "1") for i in range(15)]))
    assert e.join_events["joined"] == 10
    assert len(e.orphans) == 5


def test_max_orphan_labels_bounds_a_flood() -> None:
    e = make_engine(max_orphan_labels=100)
    for chunk in range(20):
        e.apply_labels(labels([(f"u{chunk}-{i}", chunk * 1000 + i, "1") for i in range(50)]))
    assert len(e.orphans) == 100
    assert e.join_events["evicted_orphan_label"] == 900


def test_conflicting_label_is_returned_and_first_wins() -> None:
    e = make_engine()
    e.apply_predictions(preds([("a", 0, "v1", 0.9)]))
    assert e.apply_labels(labels([("a", 1000, "1")])) == []
    rejects = e.apply_labels(labels([("a", 2000, "0"), ("a", 2000, "1")]))
    assert [(i, r) for i, r, _ in rejects] == [(0, "conflicting_label")]
    assert e.join_events["duplicate_label"] == 1
    assert confusion_by_version(e) == {"v1": [0, 0, 0, 1]}
    assert e.invalid["labels", "conflicting_label"] == 1


def test_unknown_class_label_for_model_is_rejected() -> None:
    e = make_engine()
    e.apply_predictions(preds([("a", 0, "v1", 0.9)]))
    rejects = e.apply_labels(labels([("a", 1000, "maybe")]))
    assert [r for _, r, _ in rejects] == ["unknown_class"]
    assert e.pending == 1


def test_load_refuses_other_bucket_width() -> None:
    meta, arrays = state_codec.encode(make_engine())
    with pytest.raises(StateMismatch, match="bucket_width"):
        state_codec.decode(make_engine(bucket_width_ms=30_000), meta, arrays)


def test_load_refuses_inconsistent_state() -> None:
    e = make_engine()
    e.apply_predictions(preds([("a", 0, "v1", 0.9)]))
    meta, arrays = state_codec.encode(e)
    meta["pending"] = 5
    with pytest.raises(StateMismatch, match="pending"):
        state_codec.decode(make_engine(), meta, arrays)
    meta, arrays = state_codec.encode(e)
    arrays["preds.group"] = np.array([7], np.int32)
    with pytest.raises(StateMismatch, match="groups"):
        state_codec.decode(make_engine(), meta, arrays)


def test_retain_drops_only_unreachable_buckets() -> None:
    e = make_engine()
    e.apply_predictions(preds([("old", 0, "v1", 0.9), ("new", 7_200_000, "v1", 0.9)]))
    assert len(e.buckets) == 2
    e.retain(BASE + 7_200_000)
    assert len(e.buckets) == 1


def test_comparison_arms_match_sklearn_and_start_with_the_treatment() -> None:
    from sklearn.metrics import brier_score_loss, log_loss, mean_absolute_error

    from monitor.engine.models import ComparisonSpec

    rng = np.random.default_rng(9)
    n = 3000
    score = rng.random(n)
    y = (rng.random(n) < score).astype(int)
    version = np.where(np.arange(n) % 3 == 0, "v2", "v1")
    version[:300] = "v1"  # control history before the canary: not part of the comparison
    spec = ComparisonSpec("c", 0, "v1", "v2")
    e = Engine([MODEL], 60_000, 10**12, 10**12, 10**6, 10**6, comparisons=[spec])
    e.apply_predictions(preds([(f"i{i}", i, str(version[i]), float(score[i])) for i in range(n)]))
    e.apply_labels(labels([(f"i{i}", n + i, str(y[i])) for i in range(n)]))
    start = int(np.flatnonzero(version == "v2")[0])
    assert e.arms.sums.start["c"] == BASE + start
    for arm, v in enumerate(("v1", "v2")):
        sel = (version == v) & (np.arange(n) >= start)
        yy, ss = y[sel], score[sel]
        moments = e.arms.sums.loss["c"][arm]
        k = int(sel.sum())
        assert moments[:, 0].tolist() == [k] * 4 + [0, 0]  # ranking, estimated: other specs
        mean = moments[:, 1] / k
        assert mean[0] == pytest.approx(np.mean(yy != (ss >= 0.5)), abs=1e-12)
        assert mean[1] == pytest.approx(log_loss(yy, ss, labels=[0, 1]), abs=1e-9)
        assert mean[2] == pytest.approx(brier_score_loss(yy, ss), abs=1e-12)
        assert mean[3] == pytest.approx(mean_absolute_error(yy, ss), abs=1e-12)
        assert e.arms.sums.predictions["c"][arm] == k
    meta, arrays = state_codec.encode(e)
    again = Engine([MODEL], 60_000, 10**12, 10**12, 10**6, 10**6, comparisons=[spec])
    state_codec.decode(again, meta, arrays)
    assert again.arms.sums.loss["c"].tolist() == e.arms.sums.loss["c"].tolist()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.integers(0, 1)),
                min_size=1, max_size=40), st.randoms())  # fmt: skip
def test_shadow_pairs_are_counted_once_whatever_the_order(cases: list, rnd: object) -> None:
    from monitor.engine.models import ComparisonSpec

    shadow = ComparisonSpec("s", 0, "v1", "v2", mode="shadow")
    e = Engine([MODEL], 60_000, 10**12, 10**12, 10**6, 10**6, comparisons=[shadow])
    events: list[tuple] = []
    expected = np.zeros(6)
    for i, (sa, sb, y) in enumerate(cases):
        events += [("p", f"i{i}", "v1", sa), ("p", f"i{i}", "v2", sb), ("l", f"i{i}", str(y))]
        wa, wb = int((sa >= 0.5) != y), int((sb >= 0.5) != y)
        expected += [1, wb - wa, (wb - wa) ** 2, wa and not wb, wb and not wa, y]
    rnd.shuffle(events)  # type: ignore[attr-defined]
    for ev in events:
        if ev[0] == "p":
            e.apply_predictions(preds([(ev[1], 0, ev[2], ev[3])]))
        else:
            e.apply_labels(labels([(ev[1], 1000, ev[2])]))
    assert e.pairs.sums.by_name["s"].tolist() == expected.tolist()
    assert e.join_events["joined"] == 2 * len(cases)
    assert e.join_events["duplicate_prediction"] == 0


def test_one_batch_creating_many_bucket_rows() -> None:
    """A batch that adds more (group, bucket) rows than the store's capacity."""
    from monitor.engine.buckets import BucketStore

    store = BucketStore(1000)
    ts = np.arange(5000, dtype=np.int64) * 1000  # 5,000 distinct buckets in one batch
    group = np.zeros(5000, np.int32)
    store.add_predictions(group, ts)
    store.add_joined(group, ts, np.ones(5000, np.int8), np.ones(5000, np.int8))
    view = store.view()
    assert len(store) == 5000
    assert view["predicted"].sum() == 5000 and view["labeled"].sum() == 5000
    assert view["confusion"][:, 3].sum() == 5000
