"""Every kind of bad input gets its reason; valid records are all accepted."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.engine.models import ModelSpec
from monitor.engine.records import hash_ids
from monitor.ingest.decode import DecodeLimits, LabelDecoder, PredictionDecoder, canonical_label

NOW = 1_800_000_000_000
SPEC = ModelSpec("fraud", classes=("legit", "fraud"), positive_class="fraud", threshold=0.5)
DEC = PredictionDecoder([SPEC], DecodeLimits(max_record_bytes=4096, max_future_skew_ms=300_000))
LAB = LabelDecoder(
    DecodeLimits(4096, 300_000),
    known_label=lambda t, v: None if SPEC.class_index(t) >= 0 else "unknown_class",
)


def good(**over: object) -> dict[str, object]:
    rec: dict[str, object] = {"id": "a1", "ts": "2026-11-21T10:00:00.123Z", "model": "fraud",
                              "version": "v1", "score": 0.8}  # fmt: skip
    rec.update(over)
    return {k: v for k, v in rec.items() if v is not DROP}


DROP = object()

BAD_PREDICTIONS = [
    (None, "tombstone"),
    (b"x" * 5000, "oversize"),
    (b"\xff\xfe{", "not_utf8"),
    (b"{not json", "not_json"),
    (b"[1, 2]", "not_object"),
    (b'"just a string"', "not_object"),
    (orjson.dumps(good(id=DROP)), "missing_field"),
    (orjson.dumps(good(ts=DROP)), "missing_field"),
    (orjson.dumps(good(version=DROP)), "missing_field"),
    (orjson.dumps(good(model=DROP)), "missing_field"),
    (orjson.dumps(good(score=DROP)), "missing_field"),
    (orjson.dumps(good(score="0.8")), "wrong_type"),
    (orjson.dumps(good(score=True)), "wrong_type"),
    (orjson.dumps(good(id=[1])), "wrong_type"),
    (orjson.dumps(good(version={"a": 1})), "wrong_type"),
    (b'{"id":"a","ts":1,"model":"fraud","version":"v1","score":NaN}', "not_finite"),
    (b'{"id":"a","ts":1,"model":"fraud","version":"v1","score":Infinity}', "not_finite"),
    (b'{"id":"a","ts":1,"model":"fraud","version":"v1","score":1e999}', "not_finite"),
    (orjson.dumps(good(score=1.5)), "out_of_range"),
    (orjson.dumps(good(score=-0.01)), "out_of_range"),
    (orjson.dumps(good(prediction="maybe")), "unknown_class"),
    (orjson.dumps(good(ts="yesterday")), "bad_timestamp"),
    (orjson.dumps(good(ts="2026-11-21T10:00:00")), "bad_timestamp"),
    (orjson.dumps(good(ts=-5)), "bad_timestamp"),
    (b'{"id":"a","ts":123456789012345678901234567890,"model":"fraud","version":"v1",'
     b'"score":0.5}', "bad_timestamp"),
    (orjson.dumps(good(ts=NOW + 3_600_000)), "future_timestamp"),
    (orjson.dumps(good(model="spam")), "unknown_model"),
    (orjson.dumps(good(model=7)), "wrong_type"),
]  # fmt: skip


@pytest.mark.parametrize(("raw", "reason"), BAD_PREDICTIONS)
def test_bad_prediction_reason(raw: bytes | None, reason: str) -> None:
    batch, rejects = DEC.decode([raw], NOW)
    assert len(batch) == 0
    assert [(i, r) for i, r, _ in rejects] == [(0, reason)]
    assert rejects[0][2]  # a human-readable detail


def test_deeply_nested_json_is_rejected_not_crashing() -> None:
    raw = b'{"a":' * 100_000 + b"1" + b"}" * 100_000
    _, rejects = DEC.decode([raw], NOW)
    assert rejects[0][1] in ("not_json", "oversize")
    big = PredictionDecoder([SPEC], DecodeLimits(max_record_bytes=10**7, max_future_skew_ms=0))
    _, rejects = big.decode([raw], NOW)
    assert rejects[0][1] == "not_json"


def test_valid_prediction_fields() -> None:
    recs = [
        orjson.dumps(good(ts=NOW - 1000, score=0.2)),
        orjson.dumps(good(id=17, ts="2026-11-21T10:00:00+01:00", score=0.5)),
        orjson.dumps(good(id="b", score=DROP, prediction="fraud")),
        orjson.dumps(good(id="c", score=0.9, prediction="legit")),
    ]
    batch, rejects = DEC.decode(recs, NOW)
    assert rejects == []
    assert batch.decision.tolist() == [0, 1, 1, 0]
    assert batch.ts_ms[0] == NOW - 1000
    assert batch.ts_ms[1] == int(datetime(2026, 11, 21, 9, tzinfo=UTC).timestamp()) * 1000
    assert batch.keys[1] == hash_ids(["17"])[0]


def test_nested_field_mapping() -> None:
    spec = ModelSpec("m", id_path="meta.request_id", score_path="out.p", model_path="meta.model")
    dec = PredictionDecoder([spec], DecodeLimits())
    raw = orjson.dumps({"meta": {"request_id": "r1", "model": "m"}, "ts": NOW, "version": "x",
                        "out": {"p": 0.7}})  # fmt: skip
    batch, rejects = dec.decode([raw], NOW)
    assert rejects == [] and batch.keys[0] == hash_ids(["r1"])[0]
    _, rejects = dec.decode([orjson.dumps({"meta": {"model": "m"}, "ts": NOW})], NOW)
    assert rejects[0][1] == "missing_field"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (None, "tombstone"),
        (b"{}", "missing_field"),
        (orjson.dumps({"id": "a", "ts": NOW, "label": "unknown"}), "unknown_class"),
        (orjson.dumps({"id": "a", "ts": NOW, "label": [1]}), "wrong_type"),
        (b'{"id": "a", "ts": 1, "label": NaN}', "not_finite"),
        (orjson.dumps({"id": "a", "ts": NOW + 10**7, "label": 1}), "future_timestamp"),
    ],
)
def test_bad_label_reason(raw: bytes | None, reason: str) -> None:
    batch, rejects = LAB.decode([raw], NOW)
    assert len(batch) == 0 and rejects[0][1] == reason


@pytest.mark.parametrize(
    ("value", "text"),
    [(True, "1"), (False, "0"), (1, "1"), (1.0, "1"), ("true", "1"), ("FALSE", "0"),
     ("fraud", "fraud"), (2.5, "2.5")],
)  # fmt: skip
def test_canonical_label(value: object, text: str) -> None:
    assert canonical_label(value) == text


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=20,
)


@settings(deadline=None)  # a fixed wall-clock budget fails on a loaded machine
@given(
    st.lists(
        st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v, allow_nan=True).encode()),
        max_size=30,
    )
)
def test_decoder_never_raises_and_accounts_for_every_record(raws: list[bytes]) -> None:
    for dec in (DEC, LAB):
        batch, rejects = dec.decode(raws, NOW)
        assert len(batch) + len(rejects) == len(raws)
        assert all(reason for _, reason, _ in rejects)


@settings(deadline=None)
@given(st.lists(st.tuples(st.text(min_size=1, max_size=12), st.floats(0, 1),
                          st.integers(0, NOW)), max_size=40))  # fmt: skip
def test_every_valid_prediction_is_accepted(rows: list[tuple[str, float, int]]) -> None:
    raws = [orjson.dumps({"id": i, "ts": t, "model": "fraud", "version": "v", "score": s})
            for i, s, t in rows]  # fmt: skip
    batch, rejects = DEC.decode(raws, NOW)
    assert rejects == []
    assert len(batch) == len(rows)
    assert batch.score.tolist() == [s for _, s, _ in rows]


def test_version_longer_than_a_name_is_out_of_range() -> None:
    ok = {"id": "a", "ts": 1_700_000_000_000, "model": "fraud", "version": "v" * 128, "score": 0.5}
    batch, rejects = DEC.decode([orjson.dumps(ok), orjson.dumps({**ok, "version": "v" * 129})],
                                NOW)  # fmt: skip
    assert len(batch) == 1
    assert [(i, r) for i, r, _ in rejects] == [(1, "out_of_range")]
