"""Bad input over a real broker: every rejection reason (docs/semantics.md) is counted,
dead-lettered with its exact original bytes, and leaves the statistics untouched."""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from monitor.ingest.decode import REASONS
from monitor.localbroker import LocalBroker
from monitor.synthetic import binary_traffic

from .daemon_harness import (
    DaemonProcess,
    assert_quality,
    base_config,
    encode,
    make_producer,
    produce,
    sklearn_oracle,
    write_config,
)

pytestmark = pytest.mark.integration

WINDOW = "30d"
MAX_RECORD_BYTES = 2048


def bad_records(
    now_ms: int, valid_pred: dict[str, Any], labeled: dict[str, Any]
) -> list[tuple[str, str, bytes | None]]:
    """(topic, expected reason, raw value) for every bad-input kind."""
    ts = now_ms - 60_000

    def pred(**changes: Any) -> dict[str, Any]:
        rec = {
            "id": "bad",
            "ts": ts,
            "model": "fraud",
            "version": "v1",
            "score": 0.7,
        }
        rec.update(changes)
        return {k: v for k, v in rec.items() if v is not _DROP}

    def raw(rec: dict[str, Any]) -> bytes:
        return orjson.dumps(rec)

    p = "predictions"
    lab = "labels"
    conflicting = dict(labeled, label=1 - int(labeled["label"]))
    out: list[tuple[str, str, bytes | None]] = [
        (p, "not_json", b'{"id": "x1", "ts": '),
        (p, "not_json", b"hello world"),
        (p, "not_utf8", b'{"id": "x2", "model": "fraud", "note": "\xff\xfe"}'),
        (p, "not_object", b"[1, 2, 3]"),
        (p, "not_object", b'"just a string"'),
        (p, "missing_field", raw(pred(id="m1", score=_DROP))),
        (p, "missing_field", raw(pred(id=_DROP))),
        (p, "missing_field", raw(pred(id="m3", model=_DROP))),
        (p, "wrong_type", raw(pred(id="w1", score="0.7"))),
        (p, "wrong_type", raw(pred(id="w2", ts=[2024]))),
        (p, "not_finite", b'{"id":"n1","ts":%d,"model":"fraud","version":"v1","score":NaN}' % ts),
        (
            p,
            "not_finite",
            b'{"id":"n2","ts":%d,"model":"fraud","version":"v1","score":Infinity}' % ts,
        ),
        (p, "out_of_range", raw(pred(id="r1", score=1.5))),
        (p, "out_of_range", raw(pred(id="r2", score=-0.01))),
        (p, "unknown_class", raw(pred(id="c1", prediction="maybe"))),
        (p, "bad_timestamp", raw(pred(id="t1", ts="yesterday at noon"))),
        (p, "future_timestamp", raw(pred(id="t2", ts=now_ms + 86_400_000))),
        (p, "unknown_model", raw(pred(id="u1", model="spam-filter"))),
        (p, "tombstone", None),
        (
            p,
            "oversize",
            raw(pred(id="big", features={"blob": "x" * (MAX_RECORD_BYTES + 100)})),
        ),
        (lab, "not_json", b"label: 1"),
        (lab, "not_utf8", b'{"id": "\xc3\x28", "label": 1}'),
        (lab, "tombstone", None),
        (lab, "missing_field", b'{"id": "%s", "ts": %d}' % (labeled["id"].encode(), ts)),
        (lab, "not_finite", b'{"id": "l5", "ts": %d, "label": NaN}' % ts),
        (lab, "unknown_class", raw({"id": valid_pred["id"], "ts": ts, "label": "maybe"})),
        (lab, "oversize", raw({"id": "l6", "ts": ts, "label": 1, "pad": "y" * MAX_RECORD_BYTES})),
        (lab, "conflicting_label", raw(conflicting)),
    ]
    return out


_DROP = object()


def test_every_bad_input_is_counted_dead_lettered_and_harmless(
    broker: LocalBroker, tmp_path: Path, kafka_client: str
) -> None:
    now_ms = int(time.time() * 1000)
    rng = np.random.default_rng(7)
    traffic = binary_traffic(1500, seed=11, start_ms=now_ms - 8 * 60_000, rate_per_s=10.0)
    preds, labels = traffic.predictions, traffic.labels
    assert max(lab["ts"] for lab in labels) < now_ms
    oracle = sklearn_oracle(preds, labels)

    bad = bad_records(now_ms, preds[0], labels[0])
    covered = {reason for _, reason, _ in bad}
    assert covered == set(REASONS), f"not covered: {set(REASONS) - covered}"
    for _, reason, value in bad:
        if reason != "oversize" and value is not None:
            assert len(value) <= MAX_RECORD_BYTES, reason

    # Valid records of both topics in a random mix; each bad record at a random place,
    # the conflicting label after the label it contradicts.
    messages: list[tuple[str, tuple[bytes | None, bytes | None], str | None]] = [
        ("predictions", (str(p["id"]).encode(), encode(p)), None) for p in preds
    ] + [("labels", (str(lab["id"]).encode(), encode(lab)), None) for lab in labels]
    contradicted = messages[len(preds)]  # labels[0]
    stream = [messages[i] for i in rng.permutation(len(messages))]
    for topic, reason, value in bad:
        lo = stream.index(contradicted) + 1 if reason == "conflicting_label" else 0
        stream.insert(int(rng.integers(lo, len(stream) + 1)), (topic, (b"bad-key", value), reason))

    broker.create_topics(["predictions", "labels"])
    state = tmp_path / "state"
    cfg = write_config(
        tmp_path / "monitor.toml",
        base_config(
            broker.bootstrap,
            state,
            client=kafka_client,
            windows=[{"size": WINDOW}],
            evaluation={"max_record_bytes": MAX_RECORD_BYTES},
        ),
    )
    daemon = DaemonProcess(cfg, tmp_path / "daemon.log")
    try:
        daemon.start()
        daemon.wait_ready()
        producer = make_producer(broker.bootstrap)
        try:
            sent = produce(broker.bootstrap, [(t, kv) for t, kv, _ in stream], producer)
        finally:
            producer.close(timeout=10)
        expected_bad = {
            (topic, partition, offset): (reason, kv[1])
            for (topic, kv, reason), (_, partition, offset) in zip(stream, sent, strict=True)
            if reason is not None
        }
        assert len(expected_bad) == len(bad)
        n_topic = {t: sum(1 for m in stream if m[0] == t) for t in ("predictions", "labels")}
        m, _ = daemon.wait_consumed(n_topic, timeout=60)
        ctx = daemon.log_tail()

        # Counted under its reason, per topic.
        want_invalid: dict[tuple[str, str], int] = {}
        for topic, reason, _ in bad:
            want_invalid[topic, reason] = want_invalid.get((topic, reason), 0) + 1
        got_invalid = m.by_labels("mlmon_invalid_records_total", "topic", "reason")
        assert got_invalid == want_invalid, ctx
        for topic in ("predictions", "labels"):
            n_bad = sum(1 for t, _, _ in bad if t == topic)
            assert m.get("mlmon_records_total", topic=topic, outcome="invalid") == n_bad, ctx
        assert m.get("mlmon_records_total", topic="predictions", outcome="accepted") == len(preds)
        assert m.get("mlmon_records_total", topic="labels", outcome="accepted") == len(labels)
        join = m.by_label("mlmon_join_events_total", "event")
        assert join.get("conflicting_label") == 1, (join, ctx)

        # The statistics are exactly those of the clean stream.
        assert_quality(m, oracle, WINDOW, ctx)

        code, body = daemon.get("/readyz")
        assert code == 200, (body, ctx)

        # The dead-letter file: each bad record once, exact bytes, right reason, source.
        code = daemon.terminate(timeout=20)  # flushes the dead-letter file
        assert code == 0, daemon.log_tail()
    finally:
        daemon.close()

    lines = (state / "dead-letter.jsonl").read_bytes().splitlines()
    entries = [orjson.loads(line) for line in lines]
    got: dict[tuple[str, int, int], dict[str, Any]] = {}
    for e in entries:
        key = (e["topic"], e["partition"], e["offset"])
        assert key not in got, f"dead-lettered twice: {e}"
        got[key] = e
    assert set(got) == set(expected_bad), (
        f"missing {set(expected_bad) - set(got)}, unexpected {set(got) - set(expected_bad)}"
    )
    for key, (reason, value) in expected_bad.items():
        e = got[key]
        assert e["reason"] == reason, (key, e, value)
        assert isinstance(e["detail"], str) and e["detail"], e
        if value is None:
            assert e["value_b64"] is None, e
        else:
            assert e["value_b64"] is not None, e
            assert base64.b64decode(e["value_b64"]) == value, (reason, e)
