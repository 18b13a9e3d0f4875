"""The column decoder equals the per-record decoder, row for row.

``PredictionDecoder.decode`` / ``LabelDecoder.decode`` clear most rows with column checks
and send the rest through the per-record path (``_decode_rows``), which is the reference:
for any mix of records, the batch (every column, in input order) and the rejections
(index, reason, detail) must be exactly what the per-record path alone gives.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.engine.models import ModelSpec
from monitor.engine.records import Coded, LabelBatch, PredictionBatch
from monitor.ingest.decode import DecodeLimits, LabelDecoder, PredictionDecoder

from .test_fuzz_decode import (
    MAX_BYTES,
    NOW,
    SKEW_MS,
    arbitrary,
    bad_label,
    bad_prediction,
)

LIMITS = DecodeLimits(MAX_BYTES, SKEW_MS)
BINARY = ModelSpec("fraud", classes=("legit", "fraud"), positive_class="fraud", threshold=0.5)
FEATURED = ModelSpec(
    "fraud", classes=("legit", "fraud"), positive_class="fraud", threshold=0.3,
    wants_features=True, slices=(("country",),),
)  # fmt: skip
MULTI = ModelSpec("kind", task="multiclass", classes=("a", "b", "c"))
SEARCH = ModelSpec("search", task="ranking", classes=(), max_items=4, slices=(("region",),))
REGRESSION = ModelSpec("price", task="regression", classes=())
DECODERS = [
    PredictionDecoder([BINARY], LIMITS),
    PredictionDecoder([FEATURED], LIMITS),
    PredictionDecoder([FEATURED, MULTI, REGRESSION], LIMITS),
    # numeric drift features only: the typed parse fills the float block, no dictionaries
    PredictionDecoder([FEATURED], LIMITS, numeric_features=["y", "x"], feature_objects=False),
    PredictionDecoder([FEATURED], LIMITS, numeric_features=["x"]),
    # ranking: the typed parse (ranking models only), the orjson columns (mixed tasks)
    PredictionDecoder([SEARCH], LIMITS),
    PredictionDecoder([SEARCH, FEATURED], LIMITS),
]
CLASSES = {"legit", "fraud", "0", "1", "a", "b", "c"}
LABELS = [
    LabelDecoder(LIMITS, known_label=lambda t, v: None if t in CLASSES else "unknown_class"),
    LabelDecoder(LIMITS, known_label=lambda t, v: None if v == v or t in CLASSES else "wrong_type"),
    # ranking labels too: the grades' typed parse
    LabelDecoder(
        LIMITS, known_label=lambda t, v: None if t in CLASSES else "unknown_class", max_items=4
    ),
]
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# records shaped like production traffic, near every column check's edges
edge_ts = st.sampled_from([0, -1, NOW, NOW + SKEW_MS, NOW + SKEW_MS + 1, 2**63, 2**64, 1.0, True])
edge_score = st.sampled_from([0.0, 1.0, 0.5, 0.5, 0.3, 0.3, 1.0000001, -0.0, 1, 0, True, None, "x"])
edge_id = st.sampled_from(["a", "", "b" * 300, 7, None, ["x"], "p1"])
edge_version = st.sampled_from(["v1", "", "x" * 128, "x" * 129, 3, None, {"a": 1}])
edge_model = st.sampled_from(["fraud", "kind", "price", "nope", 3, None, ["fraud"]])


def _field(draw: st.DrawFn, usual: st.SearchStrategy[Any], edge: st.SearchStrategy[Any]) -> Any:
    """Mostly a usual value, one time in eight an edge case."""
    return draw(edge) if draw(st.integers(0, 7)) == 0 else draw(usual)


@st.composite
def traffic_prediction(draw: st.DrawFn) -> bytes:
    rec: dict[str, Any] = {
        "id": _field(draw, st.text(min_size=1, max_size=6), edge_id),
        "ts": _field(draw, st.integers(0, NOW), edge_ts),
        "model": _field(draw, st.just("fraud"), edge_model),
        "version": _field(draw, st.sampled_from(["v1", "v2"]), edge_version),
        "score": _field(
            draw, st.one_of(st.floats(0.0, 1.0), st.sampled_from([0.3, 0.5])), edge_score
        ),
    }
    if draw(st.integers(0, 7)) == 0:
        rec["prediction"] = draw(st.sampled_from(["fraud", "a", 1, None, 2.5]))
    if draw(st.integers(0, 7)) == 0:
        rec["scores"] = {"a": 0.5, "b": 0.5}
    if draw(st.booleans()):
        rec["features"] = _field(
            draw, st.dictionaries(st.sampled_from(["x", "y"]), st.floats(-2, 2)), st.just(1)
        )
    if draw(st.booleans()):
        rec["segments"] = _field(draw, st.just({"country": "US"}), st.just([1]))
    if draw(st.integers(0, 7)) == 0:
        del rec[draw(st.sampled_from(list(rec)))]
    return json.dumps(rec).encode()  # (orjson stops at 64-bit integers)


edge_entry = st.sampled_from(
    ["a", "", 3, True, None, 1.5, {"item": "a"}, {"score": 1.0}, {"item": 4, "score": 0.5},
     {"item": "", "score": 0.5}, {"item": "b", "score": True}, {"item": "b", "score": "1"},
     {"item": "c", "score": 10**30}, {"item": "d", "score": 2**70}, [1]]
)  # fmt: skip


@st.composite
def traffic_ranking(draw: st.DrawFn) -> bytes:
    """A ranking prediction: a scored or an already ranked list (some ties, some of
    length over max_items 4), now and then an edge entry or no list at all."""
    names = st.sampled_from(["a", "b", "c", "d", "e"])
    if draw(st.booleans()):
        entry: st.SearchStrategy[Any] = st.fixed_dictionaries(
            {"item": names, "score": st.one_of(st.sampled_from([0.5, 1, 2.0]), st.floats(-9, 9))}
        )
    else:
        entry = names
    items: Any = draw(st.lists(_entry(entry), max_size=6))
    if draw(st.integers(0, 9)) == 0:
        items = draw(st.sampled_from([None, "a", {"a": 1}, 3]))
    rec: dict[str, Any] = {
        "id": _field(draw, st.text(min_size=1, max_size=6), edge_id),
        "ts": _field(draw, st.integers(0, NOW), edge_ts),
        "model": _field(draw, st.just("search"), edge_model),
        "version": _field(draw, st.sampled_from(["v1", "v2"]), edge_version),
        "items": items,
    }
    if draw(st.booleans()):
        rec["segments"] = _field(draw, st.just({"region": "EU"}), st.just([1]))
    if draw(st.integers(0, 7)) == 0:
        del rec[draw(st.sampled_from(list(rec)))]
    return json.dumps(rec).encode()


def _entry(usual: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(usual, usual, usual, usual, usual, usual, usual, edge_entry)


@st.composite
def traffic_label(draw: st.DrawFn) -> bytes:
    rec: dict[str, Any] = {
        "id": _field(draw, st.text(min_size=1, max_size=6), edge_id),
        "ts": _field(draw, st.integers(0, NOW), edge_ts),
        "label": _field(
            draw,
            st.one_of(st.integers(0, 2), st.sampled_from(["fraud", "legit", "TRUE", "nope"])),
            st.sampled_from([True, 1.5, 10**30, None, "", [1]]),
        ),
    }
    if draw(st.integers(0, 7)) == 0:
        del rec[draw(st.sampled_from(list(rec)))]
    return json.dumps(rec).encode()


edge_grade = st.sampled_from([0, 3, 2.5, -1, -0.0, True, None, "1", 10**30, 2**70, 10**400, [1]])


@st.composite
def traffic_relevance(draw: st.DrawFn) -> bytes:
    """A ranking label: grades of up to five items (max_items 4), now and then an edge
    grade, an empty item id, clicks, a label beside them, or a field missing."""
    grades = draw(
        st.dictionaries(
            st.sampled_from(["a", "b", "c", "d", "e", ""]),
            st.one_of(st.integers(0, 3), st.floats(0, 3), st.integers(0, 3), edge_grade),
            max_size=5,
        )
    )
    rec: dict[str, Any] = {
        "id": _field(draw, st.text(min_size=1, max_size=6), edge_id),
        "ts": _field(draw, st.integers(0, NOW), edge_ts),
        "relevance": _field(draw, st.just(grades), st.sampled_from([[1], None, "a", 3])),
    }
    if draw(st.integers(0, 7)) == 0:
        rec[draw(st.sampled_from(["clicked", "label"]))] = draw(st.sampled_from([["a"], "a", 1]))
    if draw(st.integers(0, 7)) == 0:
        del rec[draw(st.sampled_from(list(rec)))]
    return json.dumps(rec).encode()


def _rows(column: Any) -> Any:
    return column[:] if isinstance(column, Coded) else column


def _same(a: Any, b: Any) -> None:
    for name in a.__slots__:
        x, y = getattr(a, name), getattr(b, name)
        if name == "ranked" and x is not None and y is not None:  # (lists holding arrays)
            assert [r and r.items for r in x] == [r and r.items for r in y]
            assert [r and r.scores.tolist() for r in x] == [r and r.scores.tolist() for r in y]
            continue
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            assert x is not None and y is not None, name
            assert x.dtype == y.dtype and x.shape == y.shape, name
            np.testing.assert_array_equal(x, y, err_msg=name)
        else:  # (a coded text column compares by its rows)
            assert _rows(x) == _rows(y), name


@FUZZ
@given(
    st.integers(0, len(DECODERS) - 1),
    st.lists(
        st.one_of(
            traffic_prediction(),
            traffic_prediction(),
            traffic_prediction(),
            traffic_ranking(),
            traffic_ranking(),
            arbitrary("predictions"),
            bad_prediction().map(lambda x: x[1]),
        ),
        max_size=40,
    ),
)
def test_prediction_columns_equal_rows(which: int, raws: list[bytes | None]) -> None:
    dec = DECODERS[which]
    got, got_rejects = dec.decode(raws, NOW)
    want, want_rejects = dec._decode_rows(raws, range(len(raws)), NOW)
    want = dec._finish(want)  # the numeric block from the per-record path's objects
    assert isinstance(got, PredictionBatch)
    assert got_rejects == want_rejects
    _same(got, want)


@FUZZ
@given(
    st.sampled_from([DECODERS[-2], DECODERS[-1]]),
    st.lists(
        st.one_of(traffic_ranking(), traffic_ranking(), traffic_ranking(), traffic_prediction()),
        max_size=40,
    ),
)
def test_ranking_columns_equal_rows(dec: PredictionDecoder, raws: list[bytes | None]) -> None:
    """Ranked lists read a batch at a time (the typed parse, or orjson's objects) are the
    lists the per-record path reads, and rejected with the same reasons."""
    got, got_rejects = dec.decode(raws, NOW)
    want, want_rejects = dec._decode_rows(raws, range(len(raws)), NOW)
    assert got_rejects == want_rejects
    _same(got, dec._finish(want))


def test_a_clean_ranking_batch_takes_no_per_record_path() -> None:
    raws = [
        orjson.dumps({"id": f"q{i}", "ts": NOW - i, "model": "search", "version": "v1",
                      "items": [{"item": "a", "score": 0.5}, {"item": "b", "score": i}]
                      if i % 2 else ["b", "a", "c"]})
        for i in range(50)
    ]  # fmt: skip
    for dec in (PredictionDecoder([SEARCH], LIMITS), PredictionDecoder([SEARCH, BINARY], LIMITS)):
        calls: list[int] = []

        def counting(raw: bytes | None, now_ms: int, *parsed: Any, one: Any = dec._one) -> Any:
            calls.append(1)  # noqa: B023 - called within this iteration only
            return one(raw, now_ms, *parsed)

        dec._one = counting  # type: ignore[method-assign]
        batch, rejects = dec.decode(raws, NOW)
        assert len(batch) == 50 and not rejects and not calls
        assert batch.ranked is not None and batch.ranked[3].items == ("a", "b")
        assert batch.ranked[3].scores.tolist() == [0.5, 3.0]
        assert batch.ranked[2].scores.tolist() == [3.0, 2.0, 1.0]


@FUZZ
@given(
    st.integers(0, len(DECODERS) - 1),
    st.integers(1, 6),
    st.lists(
        st.one_of(
            traffic_prediction(), arbitrary("predictions"), bad_prediction().map(lambda x: x[1])
        ),
        max_size=40,
    ),
)
def test_a_batch_decoded_in_pieces_equals_it_whole(
    which: int, piece: int, raws: list[bytes | None]
) -> None:
    """``decode`` takes a large batch a piece at a time: the joined pieces are the batch
    the per-record path gives, rejections at their index in the whole batch."""
    dec = copy.copy(DECODERS[which])
    dec.piece = piece
    got, got_rejects = dec.decode(raws, NOW)
    want, want_rejects = dec._decode_rows(raws, range(len(raws)), NOW)
    assert got_rejects == want_rejects
    _same(got, dec._finish(want))


@FUZZ
@given(
    st.integers(0, len(LABELS) - 1),
    st.lists(
        st.one_of(
            traffic_label(),
            traffic_label(),
            traffic_label(),
            traffic_relevance(),
            traffic_relevance(),
            arbitrary("labels"),
            bad_label().map(lambda x: x[1]),
        ),
        max_size=40,
    ),
)
def test_label_columns_equal_rows(which: int, raws: list[bytes | None]) -> None:
    dec = LABELS[which]
    got, got_rejects = dec.decode(raws, NOW)
    want, want_rejects = dec._decode_rows(raws, range(len(raws)), NOW)
    assert isinstance(got, LabelBatch)
    assert got_rejects == want_rejects
    _same(got, want)


@FUZZ
@given(
    st.integers(0, len(LABELS) - 1),
    st.integers(1, 6),
    st.lists(
        st.one_of(
            traffic_label(),
            traffic_label(),
            traffic_relevance(),
            arbitrary("labels"),
            bad_label().map(lambda x: x[1]),
        ),
        max_size=40,
    ),
)
def test_labels_decoded_in_pieces_equal_them_whole(
    which: int, piece: int, raws: list[bytes | None]
) -> None:
    """Labels too are decoded a piece at a time: the joined pieces are the batch the
    per-record path gives, rejections at their index in the whole batch."""
    dec = copy.copy(LABELS[which])
    dec.piece = piece
    got, got_rejects = dec.decode(raws, NOW)
    want, want_rejects = dec._decode_rows(raws, range(len(raws)), NOW)
    assert got_rejects == want_rejects
    _same(got, want)


@FUZZ
@given(st.lists(st.one_of(traffic_relevance(), traffic_relevance(), traffic_label()), max_size=40))
def test_relevance_columns_equal_rows(raws: list[bytes | None]) -> None:
    """Batches that start with a ranking label take the grades' typed parse first."""
    dec = LABELS[-1]
    raws = [b'{"id": "q", "ts": 5, "relevance": {"a": 1}}', *raws]
    got, got_rejects = dec.decode(raws, NOW)
    want, want_rejects = dec._decode_rows(raws, range(len(raws)), NOW)
    assert got_rejects == want_rejects
    _same(got, want)


def test_a_clean_relevance_batch_takes_no_per_record_path() -> None:
    raws = [
        orjson.dumps({"id": f"q{i}", "ts": NOW - i, "relevance": {"a": 1, "b": i % 3}})
        for i in range(50)
    ]
    dec = LabelDecoder(LIMITS, max_items=4)
    dec._decode_rows = None  # type: ignore[assignment,method-assign]  # (must not be called)
    batch, rejects = dec.decode(raws, NOW)
    assert len(batch) == 50 and not rejects and set(batch.label) == {"relevance"}
    assert batch.relevance is not None and batch.relevance[4] == {"a": 1.0, "b": 1.0}
    want, _ = LabelDecoder(LIMITS, max_items=4)._decode_rows(raws, range(50), NOW)
    assert batch.value.tolist() == want.value.tolist()


def test_a_clean_batch_takes_the_column_path_whole() -> None:
    """No row of a clean batch goes through the per-record path."""
    raws = [
        orjson.dumps({"id": f"p{i}", "ts": NOW - i, "model": "fraud", "version": "v1",
                      "score": i / 100, "features": {"x": 1.0}, "segments": {"country": "US"}})
        for i in range(100)
    ]  # fmt: skip
    dec = PredictionDecoder([FEATURED], LIMITS)
    calls: list[int] = []
    original = dec._one

    def counting(raw: bytes | None, now_ms: int, *parsed: Any) -> Any:
        calls.append(1)
        return original(raw, now_ms, *parsed)

    dec._one = counting  # type: ignore[method-assign]
    batch, rejects = dec.decode(raws, NOW)
    assert len(batch) == 100 and not rejects and not calls
    assert batch.decision.tolist() == [int(i / 100 >= 0.3) for i in range(100)]
    assert batch.features[5] == {"x": 1.0} and batch.segments[5] == {"country": "US"}
    raws[7] = b"{oops"
    batch, rejects = dec.decode(raws, NOW)
    assert len(batch) == 99 and [r[:2] for r in rejects] == [(7, "not_json")] and len(calls) == 1


@FUZZ
@given(
    st.lists(
        st.one_of(
            st.none(),
            st.dictionaries(
                st.sampled_from(["x", "y", "z"]),
                st.one_of(
                    st.floats(allow_nan=False, allow_infinity=False),
                    st.integers(-(10**20), 10**20),
                    st.sampled_from([True, None, "1.5", [1], 10**400]),
                ),
            ),
        ),
        max_size=30,
    ),
    st.booleans(),
)
def test_numeric_block_is_the_per_value_rule(
    features: list[dict[str, Any] | None], objects: bool
) -> None:
    """A number where the feature is a JSON int or float (within a float's range), NaN
    for anything else — the rule drift applies to a numeric feature value by value,
    whether the decoder keeps the features objects or parses straight into the block."""
    raws = [
        json.dumps({"id": f"p{i}", "ts": NOW, "model": "fraud", "version": "v1",
                    "score": 0.5, **({"features": f} if f is not None else {})}).encode()
        for i, f in enumerate(features)
    ]  # fmt: skip
    dec = PredictionDecoder(
        [FEATURED], LIMITS, numeric_features=["y", "x", "w"], feature_objects=objects
    )
    batch, rejects = dec.decode(raws, NOW)
    assert not rejects and batch.numeric_names == ("y", "x", "w")
    assert len(batch.features) == (len(raws) if objects else 0)
    assert batch.numeric is not None and batch.numeric.shape == (len(raws), 3)

    def rule(v: Any) -> float:
        if type(v) is float or (type(v) is int and abs(v) < 2**1000):
            return float(v)
        return float("nan")

    want = np.array(
        [[rule((f or {}).get(k)) for k in ("y", "x", "w")] for f in features], np.float64
    ).reshape(len(features), 3)
    np.testing.assert_array_equal(batch.numeric, want)


@pytest.mark.parametrize("categorical", [True, False])
def test_drift_counts_from_the_block_equal_the_per_record_lookup(
    tmp_path: Any, categorical: bool
) -> None:
    """The engine's drift histograms are the same whether the numeric features come in
    the decoded block or are looked up record by record (without a categorical feature
    the block is all the decoder builds)."""
    from monitor.config import settings_from_mapping
    from monitor.drift.reference import ReferenceProfile
    from monitor.ingest.deadletter import FileDeadLetter
    from monitor.wiring import build_engine, build_pipeline

    rng = np.random.default_rng(4)
    ref = ReferenceProfile.from_columns(
        numeric={"x": rng.normal(0, 1, 5000), "y": rng.normal(0, 1, 5000)},
        categorical={"c": rng.choice(["a", "b"], 5000)} if categorical else None,
    )
    (tmp_path / "ref.json").write_bytes(
        orjson.dumps(ref.to_json(), option=orjson.OPT_SERIALIZE_NUMPY)
    )
    settings = settings_from_mapping(
        {"models": [{"name": "fraud", "windows": [{"size": "1h"}],
                     "drift": {"reference": str(tmp_path / "ref.json")}}]}
    )  # fmt: skip
    values = [1.5, -0.3, 7, None, "2", True, 2**62, 0.0]
    raws = [
        orjson.dumps({"id": f"p{i}", "ts": NOW - 1000 * i, "model": "fraud", "version": "v1",
                      "score": float(rng.random()),
                      "features": {"x": values[i % 8], "y": float(rng.normal()),
                                   "c": ["a", "b", "z"][i % 3]}})
        for i in range(2000)
    ]  # fmt: skip
    counts = []
    for columns in (True, False):
        engine = build_engine(settings)
        pipe = build_pipeline(settings, engine, FileDeadLetter(tmp_path / "dl.jsonl"), lambda: NOW)
        if not columns:
            dec = pipe.predictions
            pipe.predictions = PredictionDecoder(dec.models, dec.limits)  # objects only
        else:
            assert pipe.predictions.numeric_names == ("x", "y")
            assert pipe.predictions.feature_objects == categorical
        for lo in range(0, 2000, 500):
            out = pipe.process("predictions", [_Raw(r) for r in raws[lo : lo + 500]])
            assert out == []
        (d,) = engine.drift.by_model.values()
        counts.append(engine.wide[0].view()[f"m.{d.matrix}"].sum(axis=0))
    assert counts[0].sum() > 0
    np.testing.assert_array_equal(counts[0], counts[1])


class _Raw:
    def __init__(self, value: bytes) -> None:
        self.value, self.topic, self.partition, self.offset = value, "p", 0, -1


def test_names_msgspec_cannot_rename_to_take_the_untyped_paths() -> None:
    """A feature or field name with a quote or a control character (msgspec refuses to
    rename to those) leaves the decoders on their untyped paths, with the same results."""
    raws = [
        json.dumps({"id": f"p{i}", "ts": NOW, "model": "fraud", "version": "v1",
                    "score": 0.5, "features": {'a"b': i, "x\n": 2.5}}).encode()
        for i in range(5)
    ]  # fmt: skip
    dec = PredictionDecoder(
        [FEATURED], LIMITS, numeric_features=['a"b', "x\n"], feature_objects=False
    )
    batch, rejects = dec.decode(raws, NOW)
    assert not rejects and batch.numeric is not None and batch.features == []
    np.testing.assert_array_equal(batch.numeric, [[float(i), 2.5] for i in range(5)])
    labels = LabelDecoder(LIMITS, id_path='i"d', known_label=lambda t, v: None)
    got, rejects = labels.decode([json.dumps({'i"d': "p1", "ts": NOW, "label": 1}).encode()], NOW)
    assert not rejects and list(got.label) == ["1"] and labels._typed is None


def test_a_label_integer_beyond_64_bits_is_read_as_the_per_record_path_reads_it() -> None:
    """msgspec keeps 10**30 exact, orjson (the per-record path) makes it a float: such a
    label takes the per-record path, so both give the float's text."""
    raws = [
        orjson.dumps({"id": f"l{i}", "ts": NOW, "label": 1}).replace(b"1}", str(v).encode() + b"}")
        for i, v in enumerate([10**30, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 1])
    ]
    dec = LABELS[1]
    got, got_rejects = dec.decode(raws, NOW)
    want, want_rejects = dec._decode_rows(raws, range(len(raws)), NOW)
    assert got_rejects == want_rejects == []
    _same(got, want)
    assert got.label[0] == str(int(1e30)) and got.label[1] == str(2**64 - 1)


def test_labels_come_coded_and_read_as_their_texts() -> None:
    """A batch of known labels comes as a code per row and each text once (the engine
    codes labels without hashing every row's string); pieces merge their texts."""
    labels = LabelDecoder(LIMITS, known_label=lambda t, v: None)
    labels.piece = 3
    raws = [
        json.dumps({"id": f"p{i}", "ts": NOW, "label": x}).encode()
        for i, x in enumerate([1, 0, 0, 1, "fraud", 1, 0])
    ]
    got, rejects = labels.decode(raws[:4] + raws[5:], NOW)
    assert not rejects and isinstance(got.label, Coded)
    assert got.label[:] == ["1", "0", "0", "1", "1", "0"] and sorted(got.label.values) == ["0", "1"]
    mixed, _ = labels.decode(raws, NOW)  # ints and a string: each piece its own texts
    assert mixed.label[:] == ["1", "0", "0", "1", "fraud", "1", "0"]
