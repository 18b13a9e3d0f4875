"""The column decoder equals the per-record decoder, row for row.

``PredictionDecoder.decode`` / ``LabelDecoder.decode`` clear most rows with column checks
and send the rest through the per-record path (``_decode_rows``), which is the reference:
for any mix of records, the batch (every column, in input order) and the rejections
(index, reason, detail) must be exactly what the per-record path alone gives.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.engine.models import ModelSpec
from monitor.engine.records import LabelBatch, PredictionBatch
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
REGRESSION = ModelSpec("price", task="regression", classes=())
DECODERS = [
    PredictionDecoder([BINARY], LIMITS),
    PredictionDecoder([FEATURED], LIMITS),
    PredictionDecoder([FEATURED, MULTI, REGRESSION], LIMITS),
]
CLASSES = {"legit", "fraud", "0", "1", "a", "b", "c"}
LABELS = [
    LabelDecoder(LIMITS, known_label=lambda t, v: None if t in CLASSES else "unknown_class"),
    LabelDecoder(LIMITS, known_label=lambda t, v: None if v == v or t in CLASSES else "wrong_type"),
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


def _same(a: Any, b: Any) -> None:
    for name in a.__slots__:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            assert x is not None and y is not None, name
            assert x.dtype == y.dtype and x.shape == y.shape, name
            np.testing.assert_array_equal(x, y, err_msg=name)
        else:
            assert x == y, name


@FUZZ
@given(
    st.integers(0, len(DECODERS) - 1),
    st.lists(
        st.one_of(
            traffic_prediction(),
            traffic_prediction(),
            traffic_prediction(),
            arbitrary("predictions"),
            bad_prediction().map(lambda x: x[1]),
        ),
        max_size=40,
    ),
    st.booleans(),
)
def test_prediction_columns_equal_rows(which: int, raws: list[bytes | None], keep: bool) -> None:
    dec = DECODERS[which]
    got, got_rejects = dec.decode(raws, NOW, keep_raw=keep)
    want, want_rejects = dec._decode_rows(raws, range(len(raws)), NOW, keep)
    assert isinstance(got, PredictionBatch)
    assert got_rejects == want_rejects
    _same(got, want)


@FUZZ
@given(
    st.integers(0, len(LABELS) - 1),
    st.lists(
        st.one_of(
            traffic_label(),
            traffic_label(),
            traffic_label(),
            arbitrary("labels"),
            bad_label().map(lambda x: x[1]),
        ),
        max_size=40,
    ),
)
def test_label_columns_equal_rows(which: int, raws: list[bytes | None]) -> None:
    dec = LABELS[which]
    got, got_rejects = dec.decode(raws, NOW)
    want, want_rejects = dec._decode_rows(raws, range(len(raws)), NOW, True)
    assert isinstance(got, LabelBatch)
    assert got_rejects == want_rejects
    _same(got, want)


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

    def counting(raw: bytes | None, now_ms: int) -> Any:
        calls.append(1)
        return original(raw, now_ms)

    dec._one = counting  # type: ignore[method-assign]
    batch, rejects = dec.decode(raws, NOW)
    assert len(batch) == 100 and not rejects and not calls
    assert batch.decision.tolist() == [int(i / 100 >= 0.3) for i in range(100)]
    assert batch.features[5] == {"x": 1.0} and batch.segments[5] == {"country": "US"}
    raws[7] = b"{oops"
    batch, rejects = dec.decode(raws, NOW)
    assert len(batch) == 99 and [r[:2] for r in rejects] == [(7, "not_json")] and len(calls) == 1
