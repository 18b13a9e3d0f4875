"""Fuzzing the ingest edge: decoder, engine and dead-letter sink together.

Properties, over random mixes of valid records and garbage:

- nothing raises, anywhere on the path a poll's records take (decode -> engine -> the
  dead-letter file): one poison record must never stop the daemon;
- every record is accounted for (a row of the batch or a rejection) and every rejection
  carries a reason from the documented set (docs/semantics.md, "Bad input");
- every valid record is accepted, and every garbage record of a known kind is rejected
  with exactly that kind's reason;
- the engine fed the mixed stream holds exactly the statistics of the clean stream alone.

Documented edge cases pinned here: duplicate keys in one object — the **last** occurrence
wins (orjson and the stdlib fallback parser agree); a JSON integer id of any size is
accepted as its decimal text; integers too large for a float are ``not_finite`` as a
score and ``bad_timestamp`` as a time; a string holding a lone UTF-16 surrogate escape
(``"\\ud800"``) cannot be UTF-8 and is ``not_utf8``; segment values that are not scalars
(objects, arrays) fold into ``__other__``.
"""

from __future__ import annotations

import base64
import json
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from monitor.config import Settings, settings_from_mapping
from monitor.engine import state_codec
from monitor.engine.core import Engine
from monitor.ingest.deadletter import FileDeadLetter
from monitor.ingest.decode import REASONS
from monitor.ingest.pipeline import IngestPipeline, RawRecord
from monitor.wiring import build_engine, build_pipeline

NOW = 1_800_000_000_000  # 2027-01-15T08:00:00Z
SKEW_MS = 300_000
MAX_BYTES = 8192
MAX_TS_MS = 7_258_118_400_000  # 2200-01-01: later epoch-ms times are implausible
CLASSES = ("legit", "fraud")
COUNTRIES = ("US", "DE", "BR")


def make_settings(max_record_bytes: int = MAX_BYTES) -> Settings:
    return settings_from_mapping(
        {
            "evaluation": {"max_record_bytes": max_record_bytes, "max_future_skew": "5m"},
            "models": [
                {
                    "name": "fraud",
                    "classes": list(CLASSES),
                    "positive_class": "fraud",
                    "windows": [{"size": "1d"}],
                    "slices": [{"dimensions": ["country"], "top_k": 2, "min_samples": 1}],
                }
            ],
        }
    )


class Harness:
    """A real engine + pipeline + file dead-letter sink, as the daemon wires them."""

    def __init__(self, directory: Path, max_record_bytes: int = MAX_BYTES) -> None:
        s = make_settings(max_record_bytes)
        self.engine: Engine = build_engine(s)
        self.dead_letter_path = directory / "dead-letter.jsonl"
        self.sink = FileDeadLetter(self.dead_letter_path)
        self.pipeline: IngestPipeline = build_pipeline(s, self.engine, self.sink, lambda: NOW)

    def feed(self, kind: str, values: Sequence[bytes | None]) -> list[tuple[str, str]]:
        records = [RawRecord(v, kind) for v in values]
        out = self.pipeline.process(kind, records)
        return [(r.reason, r.detail) for r in out]

    def dead_letters(self) -> list[dict[str, Any]]:
        self.sink.close()
        return [orjson.loads(line) for line in self.dead_letter_path.read_bytes().splitlines()]


def decode(kind: str, values: Sequence[bytes | None], max_record_bytes: int = MAX_BYTES) -> Any:
    with tempfile.TemporaryDirectory() as tmp:
        h = Harness(Path(tmp), max_record_bytes)
        dec = h.pipeline.predictions if kind == "predictions" else h.pipeline.labels
        return dec.decode(list(values), NOW)


# -- valid records ------------------------------------------------------------------------
ids = st.one_of(
    st.sampled_from([f"id{i}" for i in range(12)]),  # repeats: duplicates and joins
    st.integers(0, 11),
    st.text(min_size=1, max_size=30),
)
rfc3339 = st.builds(
    lambda dt, off: (dt.replace(tzinfo=UTC).astimezone(timezone(timedelta(minutes=off)))).isoformat(
        timespec="milliseconds"
    ),
    st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2027, 1, 15, 7, 59)),
    st.integers(-14 * 60, 14 * 60),
)
ts_values = st.one_of(st.integers(0, NOW + SKEW_MS), rfc3339, st.just(0), st.just(NOW + SKEW_MS))
scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=8))


@st.composite
def valid_prediction(draw: st.DrawFn) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "id": draw(ids),
        "ts": draw(ts_values),
        "model": "fraud",
        "version": draw(st.one_of(st.sampled_from(["v1", "v2"]), st.integers(0, 3))),
    }
    if draw(st.booleans()):
        rec["score"] = draw(st.floats(0.0, 1.0))
        if draw(st.integers(0, 4)) == 0:
            rec["prediction"] = draw(st.sampled_from([*CLASSES, 1, 0, True, "FALSE"]))
    else:
        rec["prediction"] = draw(st.sampled_from([*CLASSES, 1, 0, True, "FALSE"]))
    if draw(st.booleans()):
        rec["segments"] = {"country": draw(st.one_of(st.sampled_from(COUNTRIES), scalars))}
    if draw(st.integers(0, 3)) == 0:
        rec["extra"] = draw(st.dictionaries(st.text(max_size=4), scalars, max_size=3))
    return rec


@st.composite
def valid_label(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "id": draw(ids),
        "ts": draw(ts_values),
        "label": draw(st.sampled_from([*CLASSES, 0, 1, True, False, "true", "FALSE", 1.0])),
    }


def encoded(rec: dict[str, Any], style: int) -> bytes:
    """The same record in different valid spellings."""
    if style == 0:
        return orjson.dumps(rec)
    if style == 1:
        return json.dumps(rec, indent=1).encode()  # whitespace, \\uXXXX escapes
    return json.dumps(rec, ensure_ascii=False).encode("utf-8")


# -- garbage of a known kind: (kind, expected reason, bytes) -----------------------------
_DROP = object()


def _changed(rec: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = {**rec, **changes}
    return {k: v for k, v in out.items() if v is not _DROP}


def _with_literal(rec: dict[str, Any], field: str, literal: bytes) -> bytes:
    """``rec`` with ``field`` set to a raw JSON token (NaN, 1e400, 10**400 ...)."""
    marker = "__LITERAL__"
    return orjson.dumps({**rec, field: marker}).replace(b'"' + marker.encode() + b'"', literal)


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


BIG_INT = b"1" + b"0" * 400


@st.composite
def bad_prediction(draw: st.DrawFn) -> tuple[str, bytes | None]:
    base = {"id": "g", "ts": NOW - 1000, "model": "fraud", "version": "v1", "score": 0.5}
    raw = orjson.dumps(base)
    cases: list[Callable[[], tuple[str, bytes | None]]] = [
        lambda: ("tombstone", None),
        lambda: ("oversize", orjson.dumps({**base, "pad": "x" * MAX_BYTES})),
        lambda: ("not_utf8", raw[:-1] + b',"note":"\xff\xfe"}'),
        lambda: ("not_utf8", raw[:-1] + b',"note":"\xc3\x28"}'),
        lambda: ("not_utf8", orjson.dumps(base).replace(b'"g"', b'"\\ud800"')),
        lambda: ("not_utf8", raw[:-1] + b',"note":"a\\udfffb", "x": NaN}'),
        lambda: ("not_json", raw[: draw(st.integers(1, len(raw) - 1))]),
        lambda: ("not_json", b"{" * draw(st.integers(2000, MAX_BYTES))),
        lambda: ("not_json", b"\x00" + raw),
        lambda: ("not_object", orjson.dumps([base])),
        lambda: ("not_object", draw(st.sampled_from([b"null", b"1", b'"x"', b"true", b"[]"]))),
        lambda: (
            "missing_field",
            orjson.dumps(
                _changed(
                    base,
                    **{draw(st.sampled_from(["id", "ts", "model", "version", "score"])): _DROP},
                )
            ),
        ),
        lambda: ("missing_field", orjson.dumps(_changed(base, id=""))),
        lambda: ("missing_field", orjson.dumps(_changed(base, score=None))),
        lambda: (
            "wrong_type",
            orjson.dumps(
                _changed(base, score=draw(st.sampled_from(["0.5", True, [0.5], {"p": 0.5}])))
            ),
        ),
        lambda: (
            "wrong_type",
            orjson.dumps(_changed(base, id=draw(st.sampled_from([[1], {"a": 1}, 1.5, True])))),
        ),
        lambda: (
            "wrong_type",
            orjson.dumps(
                _changed(base, version=draw(st.sampled_from([[1], {"a": 1}, 1.5, False, ""])))
            ),
        ),
        lambda: (
            "wrong_type",
            orjson.dumps(_changed(base, ts=draw(st.sampled_from([True, [1], {"t": 1}])))),
        ),
        lambda: ("wrong_type", orjson.dumps(_changed(base, model=7))),
        lambda: (
            "not_finite",
            _with_literal(
                base,
                "score",
                draw(
                    st.sampled_from(
                        [
                            b"NaN",
                            b"Infinity",
                            b"-Infinity",
                            b"1e400",
                            b"-1e999",
                            BIG_INT,
                            b"-" + BIG_INT,
                        ]
                    )
                ),
            ),
        ),
        lambda: (
            "not_finite",
            _with_literal(base, "ts", draw(st.sampled_from([b"NaN", b"Infinity", b"1e400"]))),
        ),
        lambda: (
            "out_of_range",
            orjson.dumps(
                _changed(
                    base,
                    score=draw(
                        st.one_of(
                            st.floats(1.0, 1e300, exclude_min=True),
                            st.floats(-1e300, 0.0, exclude_max=True),
                            st.integers(2, 10**18),
                            st.integers(-(10**18), -1),
                        )
                    ),
                )
            ),
        ),
        lambda: (
            "unknown_class",
            orjson.dumps(
                _changed(base, prediction=draw(st.sampled_from(["maybe", 2, 0.5, "FRAUD"])))
            ),
        ),
        lambda: (
            "unknown_model",
            orjson.dumps(
                _changed(base, model=draw(st.sampled_from(["spam", "", "Fraud", "fraud "])))
            ),
        ),
        lambda: (
            "bad_timestamp",
            orjson.dumps(
                _changed(
                    base,
                    ts=draw(
                        st.sampled_from(
                            [
                                -1,
                                -(10**15),
                                MAX_TS_MS,
                                10**18,
                                "yesterday",
                                "2026-11-21T10:00:00",
                                "2026-11-21",
                                "9999-12-31T23:59:59Z",
                                "10000-01-01T00:00:00Z",
                                "1969-12-31T23:59:59.999Z",
                                "0001-01-01T00:00:00+01:00",
                                "",
                            ]
                        )
                    ),
                )
            ),
        ),
        lambda: ("bad_timestamp", _with_literal(base, "ts", BIG_INT)),
        lambda: (
            "future_timestamp",
            orjson.dumps(
                _changed(
                    base,
                    ts=draw(
                        st.one_of(
                            st.integers(NOW + SKEW_MS + 1, MAX_TS_MS - 1),
                            st.just("2100-01-01T00:00:00+00:00"),
                        )
                    ),
                )
            ),
        ),
    ]
    return draw(st.sampled_from(cases))()


@st.composite
def bad_label(draw: st.DrawFn) -> tuple[str, bytes | None]:
    base = {"id": "g", "ts": NOW - 1000, "label": "fraud"}
    raw = orjson.dumps(base)
    cases: list[Callable[[], tuple[str, bytes | None]]] = [
        lambda: ("tombstone", None),
        lambda: ("oversize", orjson.dumps({**base, "pad": "y" * MAX_BYTES})),
        lambda: ("not_utf8", raw[:-1] + b',"note":"\xff"}'),
        lambda: ("not_utf8", orjson.dumps(base).replace(b'"g"', b'"\\udbff"')),
        lambda: ("not_utf8", orjson.dumps(base).replace(b'"fraud"', b'"\\ud800"')),
        lambda: ("not_json", raw[: draw(st.integers(1, len(raw) - 1))]),
        lambda: ("not_json", _nested(draw(st.integers(1100, MAX_BYTES // 2)))[:-1]),
        lambda: ("not_object", b"[]"),
        lambda: (
            "missing_field",
            orjson.dumps(_changed(base, **{draw(st.sampled_from(["id", "ts", "label"])): _DROP})),
        ),
        lambda: ("missing_field", orjson.dumps(_changed(base, label=""))),
        lambda: (
            "wrong_type",
            orjson.dumps(_changed(base, label=draw(st.sampled_from([[1], {"c": 1}])))),
        ),
        lambda: (
            "not_finite",
            _with_literal(
                base, "label", draw(st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"1e400"]))
            ),
        ),
        lambda: (
            "unknown_class",
            orjson.dumps(_changed(base, label=draw(st.sampled_from(["maybe", 2, 0.5, -1, "yes"])))),
        ),
        lambda: ("unknown_class", _with_literal(base, "label", BIG_INT)),
        lambda: (
            "bad_timestamp",
            orjson.dumps(
                _changed(
                    base,
                    ts=draw(
                        st.sampled_from([-5, "noon", "9999-12-31T23:59:59Z", "2026-01-01T00:00:00"])
                    ),
                )
            ),
        ),
        lambda: ("future_timestamp", orjson.dumps(_changed(base, ts=NOW + SKEW_MS + 1))),
    ]
    return draw(st.sampled_from(cases))()


# -- arbitrary garbage: only "never raises, always a documented reason" -------------------
nasty_text = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", "\ud800", "\udfff", "a\ud83d", "\x00", "é", "😀", "x" * 500]),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | nasty_text,
    lambda c: st.lists(c, max_size=4) | st.dictionaries(nasty_text, c, max_size=4),
    max_leaves=12,
)


@st.composite
def arbitrary(draw: st.DrawFn, kind: str) -> bytes | None:
    rec = draw(valid_prediction() if kind == "predictions" else valid_label())
    choice = draw(st.integers(0, 6))
    if choice == 0:
        return draw(st.binary(max_size=300))
    if choice == 1:  # a valid record with a random value at a random (maybe nested) key
        key = draw(st.sampled_from([*rec, "segments", "features", "model", "x"]))
        value = draw(json_values)
        if key == "segments" and draw(st.booleans()):
            value = {"country": value}
        return json.dumps({**rec, key: value}, allow_nan=True).encode()
    if choice == 2:  # byte-level mutation of a valid record
        raw = bytearray(orjson.dumps(rec))
        for _ in range(draw(st.integers(1, 4))):
            pos = draw(st.integers(0, len(raw) - 1))
            op = draw(st.integers(0, 2))
            if op == 0:
                raw[pos] = draw(st.integers(0, 255))
            elif op == 1:
                del raw[pos]
            else:
                raw[pos:pos] = draw(st.binary(min_size=1, max_size=3))
            if not raw:
                break
        return bytes(raw)
    if choice == 3:
        return json.dumps(draw(json_values), allow_nan=True).encode()
    if choice == 4:  # deep nesting inside an otherwise valid record
        depth = draw(st.integers(900, 1100))
        field = draw(st.sampled_from(["segments", "features", "extra"]))
        inner = b'{"country":' + _nested(depth) + b"}" if field == "segments" else _nested(depth)
        return orjson.dumps({**rec, field: 0}).replace(b'"%s":0' % field.encode(), b'"%s":%s' % (
            field.encode(), inner))  # fmt: skip
    if choice == 5:
        return None
    return encoded(rec, draw(st.integers(0, 2)))


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check_rejections(out: list[tuple[str, str]]) -> None:
    for reason, detail in out:
        assert reason in REASONS, (reason, detail)
        assert isinstance(detail, str) and detail


@FUZZ
@given(st.lists(arbitrary("predictions"), max_size=25), st.lists(arbitrary("labels"), max_size=25))
@example(  # found by this test: an unhashable "prediction" crashed the typed column path
    [b'{"id": "id0", "ts": 0, "model": "fraud", "version": "v1", "score": 0.0, "prediction": []}'],
    [],
)
def test_nothing_escapes_the_ingest_path(
    preds: list[bytes | None], labels: list[bytes | None]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        h = Harness(Path(tmp))
        for kind, values in (("predictions", preds), ("labels", labels), ("predictions", preds)):
            dec = h.pipeline.predictions if kind == "predictions" else h.pipeline.labels
            batch, rejects = dec.decode(values, NOW)
            assert len(batch) + len(rejects) == len(values)
            assert [i for i, _, _ in rejects] == sorted({i for i, _, _ in rejects})
            out = h.feed(kind, values)
            check_rejections(out)
        accepted = sum(c for (_, o), c in h.engine.records.items() if o != "invalid")
        invalid = sum(c for (_, o), c in h.engine.records.items() if o == "invalid")
        assert accepted + invalid == 2 * len(preds) + len(labels)
        # the exports survive whatever was accepted: state is plain JSON, the dead-letter
        # file is readable JSON lines
        meta, _ = state_codec.encode(h.engine)
        json.dumps(meta, ensure_ascii=False).encode("utf-8")
        assert len(h.dead_letters()) == invalid


@FUZZ
@given(
    st.lists(st.tuples(valid_prediction(), st.integers(0, 2)), max_size=30),
    st.lists(st.tuples(valid_label(), st.integers(0, 2)), max_size=30),
    st.lists(bad_prediction(), max_size=15),
    st.lists(bad_label(), max_size=15),
    st.randoms(use_true_random=False),
    st.integers(1, 4),
)
def test_mixed_stream_equals_clean_stream(
    preds: list[tuple[dict[str, Any], int]],
    labels: list[tuple[dict[str, Any], int]],
    bad_preds: list[tuple[str, bytes | None]],
    bad_labels: list[tuple[str, bytes | None]],
    rnd: Any,
    n_chunks: int,
) -> None:
    streams: dict[str, list[tuple[str | None, bytes | None]]] = {}
    for kind, good, bad in (("predictions", preds, bad_preds), ("labels", labels, bad_labels)):
        mixed: list[tuple[str | None, bytes | None]] = [(None, encoded(r, s)) for r, s in good]
        for reason, raw in bad:
            mixed.insert(rnd.randint(0, len(mixed)), (reason, raw))
        streams[kind] = mixed

    with tempfile.TemporaryDirectory() as tmp:
        dirty = Harness(Path(tmp) / "dirty")
        clean = Harness(Path(tmp) / "clean")
        # the same chunks (cut at the same valid records) for both; kinds alternate
        for c in range(n_chunks):
            for kind in ("predictions", "labels"):
                mixed = streams[kind]
                lo, hi = len(mixed) * c // n_chunks, len(mixed) * (c + 1) // n_chunks
                chunk = mixed[lo:hi]
                dec = dirty.pipeline.predictions if kind == "predictions" else dirty.pipeline.labels
                # every valid record is accepted; every garbage record gets its reason
                _, rejects = dec.decode([raw for _, raw in chunk], NOW)
                got = {i: reason for i, reason, _ in rejects}
                want = {i: reason for i, (reason, _) in enumerate(chunk) if reason is not None}
                diff = [
                    (i, got.get(i), want.get(i), chunk[i][1] and chunk[i][1][:100])
                    for i in sorted(got.keys() | want.keys())
                    if got.get(i) != want.get(i)
                ]
                assert not diff, diff
                dirty.feed(kind, [raw for _, raw in chunk])
                clean.feed(kind, [raw for reason, raw in chunk if reason is None])

        expected = Counter(
            (kind, reason)
            for kind in ("predictions", "labels")
            for reason, _ in streams[kind]
            if reason is not None
        )
        assert dirty.engine.invalid - clean.engine.invalid == expected
        assert clean.engine.invalid - dirty.engine.invalid == Counter()
        for kind in ("predictions", "labels"):
            for outcome in ("accepted", "duplicate"):
                assert dirty.engine.records[kind, outcome] == clean.engine.records[kind, outcome]
        dm, da = state_codec.encode(dirty.engine)
        cm, ca = state_codec.encode(clean.engine)
        for key in ("records", "invalid"):
            dm.pop(key)
            cm.pop(key)
        assert dm == cm
        assert da.keys() == ca.keys()
        for name in da:
            assert np.array_equal(da[name], ca[name], equal_nan=da[name].dtype.kind == "f"), name
        # the dead-letter file holds each garbage record's exact bytes with its reason
        # (plus the engine's own rejections, which both runs share)
        extra = Counter((e["reason"], e["value_b64"]) for e in dirty.dead_letters())
        extra.subtract(Counter((e["reason"], e["value_b64"]) for e in clean.dead_letters()))
        want_dl = Counter(
            (reason, None if raw is None else base64.b64encode(raw).decode())
            for kind in ("predictions", "labels")
            for reason, raw in streams[kind]
            if reason is not None
        )
        assert +extra == want_dl


# -- documented edge cases ------------------------------------------------------------------
BASE = {"id": "e", "ts": NOW - 1000, "model": "fraud", "version": "v1", "score": 0.25}


def one(kind: str, raw: bytes | None, max_record_bytes: int = MAX_BYTES) -> tuple[Any, list]:
    return decode(kind, [raw], max_record_bytes)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (None, "tombstone"),
        (b"\xff\xfe\xfd", "not_utf8"),
        (orjson.dumps(BASE)[:-1] + b',"x":"\xed\xa0\x80"}', "not_utf8"),  # CESU surrogate
        (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "not_json"),
        (b"[" * 100_000 + b"]" * 100_000, "not_json"),
        (_with_literal(BASE, "score", b"1e400"), "not_finite"),
        (_with_literal(BASE, "score", BIG_INT), "not_finite"),
        (_with_literal(BASE, "score", b"NaN"), "not_finite"),
        (_with_literal(BASE, "score", b"-Infinity"), "not_finite"),
        (_with_literal(BASE, "ts", BIG_INT), "bad_timestamp"),
        (_with_literal(BASE, "ts", b"-" + BIG_INT), "bad_timestamp"),
        (_with_literal(BASE, "ts", b"1e400"), "not_finite"),
        (orjson.dumps({**BASE, "ts": -1}), "bad_timestamp"),
        (orjson.dumps({**BASE, "ts": "1969-12-31T23:59:59.999Z"}), "bad_timestamp"),
        (orjson.dumps({**BASE, "ts": "9999-12-31T23:59:59Z"}), "bad_timestamp"),
        (orjson.dumps({**BASE, "ts": "10000-01-01T00:00:00Z"}), "bad_timestamp"),
        (orjson.dumps({**BASE, "ts": MAX_TS_MS}), "bad_timestamp"),
        (orjson.dumps({**BASE, "ts": MAX_TS_MS - 1}), "future_timestamp"),
        (orjson.dumps({**BASE, "ts": NOW + SKEW_MS + 1}), "future_timestamp"),
        (orjson.dumps(BASE).replace(b'"e"', b'"\\ud800"'), "not_utf8"),
    ],
)
def test_edge_case_prediction_reasons(raw: bytes | None, reason: str) -> None:
    batch, rejects = one("predictions", raw, max_record_bytes=16 * 1024 * 1024)
    assert len(batch) == 0
    assert [r for _, r, _ in rejects] == [reason]


@pytest.mark.parametrize(
    "ts",
    [0, "1970-01-01T00:00:00Z", "1970-01-01T01:00:00+01:00", NOW + SKEW_MS,
     datetime.fromtimestamp((NOW + SKEW_MS) / 1000, UTC).isoformat(), float(NOW - 1)],
)  # fmt: skip
def test_timestamps_at_the_limits_are_accepted(ts: Any) -> None:
    batch, rejects = one("predictions", orjson.dumps({**BASE, "ts": ts}))
    assert rejects == []
    assert batch.ts_ms.tolist() in ([0], [NOW + SKEW_MS], [NOW - 1])


def test_ten_megabyte_records() -> None:
    pad = "z" * (10 * 1024 * 1024)
    pred = orjson.dumps({**BASE, "pad": pad})
    label = orjson.dumps({"id": "e", "ts": NOW, "label": 1, "pad": pad})
    assert len(pred) > 10 * 1024 * 1024
    # the default limit (1 MiB) refuses them before parsing ...
    s = settings_from_mapping({"models": [{"name": "fraud"}]})
    assert s.evaluation.max_record_bytes == 1_048_576
    for kind, raw in (("predictions", pred), ("labels", label)):
        _, rejects = one(kind, raw, s.evaluation.max_record_bytes)
        assert [r for _, r, _ in rejects] == ["oversize"]
        assert "max_record_bytes" in rejects[0][2]
    # ... and a limit above their size accepts them
    for kind, raw in (("predictions", pred), ("labels", label)):
        batch, rejects = one(kind, raw, 16 * 1024 * 1024)
        assert rejects == [] and len(batch) == 1
    # exactly at the limit is accepted, one byte over is not
    rec = orjson.dumps({**BASE, "pad": ""})
    at = orjson.dumps({**BASE, "pad": "p" * (4096 - len(rec))})
    assert len(at) == 4096
    assert one("predictions", at, 4096)[1] == []
    assert [r for _, r, _ in one("predictions", at + b" ", 4096)[1]] == ["oversize"]


def test_duplicate_keys_last_wins_on_both_parsers() -> None:
    fast = b'{"id":"e","ts":%d,"model":"fraud","version":"v1","score":0.1,"score":0.9}' % NOW
    # a NaN elsewhere sends the record to the stdlib fallback parser: same answer
    slow = fast[:-1] + b',"extra":NaN}'
    for raw in (fast, slow):
        batch, rejects = one("predictions", raw)
        assert rejects == []
        assert batch.score.tolist() == [0.9]
        assert batch.decision.tolist() == [1]
    batch, rejects = one("labels", b'{"id":"e","ts":1,"label":"legit","label":"fraud"}')
    assert rejects == [] and list(batch.label) == ["fraud"]


def test_huge_integer_id_is_its_decimal_text() -> None:
    from monitor.engine.records import hash_ids

    raw = _with_literal(BASE, "id", BIG_INT)
    batch, rejects = one("predictions", raw)
    assert rejects == []
    assert batch.keys.tolist() == hash_ids([BIG_INT.decode()]).tolist()


def test_non_scalar_and_deeply_nested_segment_values_fold_into_other(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    recs = [
        orjson.dumps({**BASE, "id": "n1", "segments": {"country": "US"}}),
        orjson.dumps({**BASE, "id": "n2", "segments": {"country": [1, 2]}}),
        orjson.dumps({**BASE, "id": "n3", "segments": {"country": {"a": "US"}}}),
        orjson.dumps({**BASE, "id": "n4", "segments": {"country": 0}}).replace(
            b'"country":0', b'"country":' + _nested(1000)
        ),
    ]
    assert h.feed("predictions", recs) == []
    assert h.engine.records["predictions", "accepted"] == 4
    segments = {g[2] for g in h.engine.groups if g[2]}
    assert segments <= {("US",), ("__other__",)}, segments
