"""Partitioned state: engines fed one partition each, merged, evaluate exactly as one
engine fed the whole stream (counts exactly, metrics to 1e-9), also after the statistics
went through the stats topic's byte encoding."""

from __future__ import annotations

import math
import threading
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from monitor.config import Settings, settings_from_mapping
from monitor.engine import state_codec
from monitor.engine.core import Engine
from monitor.engine.snapshot import Snapshot
from monitor.ingest.deadletter import FileDeadLetter
from monitor.ingest.pipeline import IngestPipeline, RawRecord
from monitor.scale.global_view import GlobalView
from monitor.scale.merge import (
    decode,
    encode,
    merge,
    pack,
    partition_stats,
    store_layout,
    unpack,
)
from monitor.state.checkpoint import CheckpointStore
from monitor.synthetic import binary_traffic
from monitor.wiring import build_assembler, build_engine, build_pipeline

START = 1_700_000_000_000
PARTITIONS = 4


def _settings() -> Settings:
    return settings_from_mapping(
        {
            "evaluation": {"bucket_width": "1m"},
            "models": [
                {
                    "name": "fraud",
                    "windows": [{"size": "1h"}, {"size": "30d"}],
                    "slices": [{"dimensions": ["country"]}],
                }
            ],
            "comparisons": [
                {
                    "name": "canary",
                    "model": "fraud",
                    "control": "v1",
                    "treatment": "v2",
                    "min_samples": 100,
                    "min_events": 5,
                },
                {
                    "name": "canary-logloss",
                    "model": "fraud",
                    "control": "v1",
                    "treatment": "v2",
                    "loss": "log_loss",
                    "min_samples": 100,
                },
            ],
        }
    )


def _stream() -> list[tuple[str, dict[str, Any]]]:
    """Two versions split by id, late and early labels, duplicate and conflicting labels,
    in event order."""
    a = binary_traffic(3000, seed=1, start_ms=START, rate_per_s=2.0, version="v1", id_prefix="a")
    b = binary_traffic(1500, seed=2, start_ms=START, rate_per_s=1.0, version="v2",
                       id_prefix="b", separation=2.0)  # fmt: skip
    events: list[tuple[int, int, str, dict[str, Any]]] = []
    for t in (a, b):
        events += [(int(p["ts"]), 0, "predictions", p) for p in t.predictions]  # type: ignore[arg-type]
        events += [(int(x["ts"]), 1, "labels", x) for x in t.labels]  # type: ignore[arg-type]
    rng = np.random.default_rng(3)
    labels = [e for e in events if e[2] == "labels"]
    for i in rng.choice(len(labels), 200, replace=False).tolist():
        ts, _, _, lab = labels[i]
        events.append((ts + 1000, 1, "labels", dict(lab)))  # duplicate
        events.append((ts + 2000, 1, "labels", {**lab, "label": 1 - int(lab["label"])}))
    for ts, _, _, p in events[:100:7]:  # early labels: before their prediction
        if p.get("label") is None and "score" in p:
            events.append((ts - 5000, 1, "labels", {"id": p["id"], "ts": ts - 5000, "label": 1}))
    events.sort(key=lambda e: (e[0], e[1]))
    return [(kind, rec) for _, _, kind, rec in events]


def _partition(record_id: str) -> int:
    return zlib.crc32(record_id.encode()) % PARTITIONS


def _feed(pipes: dict[int, IngestPipeline], stream: list[tuple[str, dict[str, Any]]],
          route: bool) -> None:  # fmt: skip
    batch: dict[tuple[str, int], list[RawRecord]] = {}
    for i, (kind, rec) in enumerate(stream):
        p = _partition(str(rec["id"])) if route else 0
        batch.setdefault((kind, p), []).append(RawRecord(orjson.dumps(rec), kind, p, i))
        if i % 500 == 499 or i == len(stream) - 1:
            for (k, part), records in sorted(batch.items()):
                pipes[part].process(k, records)
            batch.clear()


def _pipeline(s: Settings, engine: Engine, tmp: Path, name: str) -> IngestPipeline:
    return build_pipeline(s, engine, FileDeadLetter(tmp / f"{name}.jsonl"), lambda: NOW)


NOW = START + 40 * 60_000


def _results(snap: Snapshot) -> dict[tuple[str, ...], Any]:
    return {(r.model, r.version, r.window, r.slice): r for r in snap.results}


def _assert_same(single: Snapshot, merged: Snapshot) -> None:
    a, b = _results(single), _results(merged)
    assert a.keys() == b.keys()
    assert len(a) >= 16  # 2 versions x 2 windows x (all + 4 countries), minus empty
    for key, ra in a.items():
        rb = b[key]
        assert (ra.predictions, ra.labeled, ra.confusion) == (
            rb.predictions,
            rb.labeled,
            rb.confusion,
        ), key
        va = {m.name: m.value for m in ra.metrics}
        vb = {m.name: m.value for m in rb.metrics}
        assert va.keys() == vb.keys(), key
        for name, x in va.items():
            y = vb[name]
            assert (math.isnan(x) and math.isnan(y)) or x == pytest.approx(y, rel=1e-9, abs=1e-9), (
                key,
                name,
            )
    assert single.ops is not None and merged.ops is not None
    for field in ("records", "invalid", "join_events", "pending_predictions", "orphan_labels",
                  "outcomes", "prediction_watermark_ms"):  # fmt: skip
        a_ops, b_ops = getattr(single.ops, field), getattr(merged.ops, field)
        if isinstance(a_ops, tuple):  # the merge sorts what one engine keeps in arrival order
            a_ops, b_ops = sorted(a_ops), sorted(b_ops)
        assert a_ops == b_ops, field
    da, db = dict(single.ops.label_delay.by_model), dict(merged.ops.label_delay.by_model)
    assert da.keys() == db.keys() == {"fraud"} and sum(da["fraud"].counts) > 0
    for model, h in da.items():
        assert h.counts == db[model].counts, model
        assert h.total == pytest.approx(db[model].total, rel=1e-12), model
    ca = {c.name: c for c in single.comparisons}
    cb = {c.name: c for c in merged.comparisons}
    assert ca.keys() == cb.keys() == {"canary", "canary-logloss"}
    for name, c in ca.items():
        # A split comparison counts from the treatment's first prediction, which each
        # partition engine sees on its own: control predictions of a partition before the
        # treatment reached it are left out (docs/scale-out.md, known differences).
        d = cb[name]
        assert (c.decision, c.n_treatment) == (d.decision, d.n_treatment), name
        assert 0 <= c.n_control - d.n_control <= 0.005 * c.n_control, name
        assert c.effect == pytest.approx(d.effect, abs=0.01), name
    fa = {(f.version, f.window, f.metric): f.gap for f in single.fairness}
    fb = {(f.version, f.window, f.metric): f.gap for f in merged.fairness}
    assert fa.keys() == fb.keys()
    assert all(fa[k] == pytest.approx(fb[k], rel=1e-9, abs=1e-12) for k in fa)


def test_merged_partitions_evaluate_like_one_engine(tmp_path: Path) -> None:
    s = _settings()
    stream = _stream()
    single = build_engine(s)
    _feed({0: _pipeline(s, single, tmp_path, "single")}, stream, route=False)
    parts = {p: build_engine(s) for p in range(PARTITIONS)}
    _feed({p: _pipeline(s, e, tmp_path, f"p{p}") for p, e in parts.items()}, stream, route=True)
    assert all(len(e.preds) for e in parts.values())  # every partition got work

    want = single.snapshot(NOW, at_ms=NOW)
    for e in parts.values():
        e.retain(NOW)
    stats = [partition_stats(parts[p]) for p in sorted(parts)]
    width = single.buckets.width_ms
    view = GlobalView(build_assembler(s))
    got = view.snapshot(merge(stats, width), NOW, at_ms=NOW, confidence=0.95)
    _assert_same(want, got)
    assert want.ops is not None and dict(want.ops.join_events).get("conflicting_label", 0) > 0

    # copied beside the writer in short holds of the daemon's lock (as evaluation and
    # publication take them), the look under it: the same
    lock = threading.RLock()
    beside = [partition_stats(parts[p], lock) for p in sorted(parts)]
    for a, b in zip(stats, beside, strict=True):
        assert a.ops == b.ops
        assert a.view.buckets.keys() == b.view.buckets.keys()
        assert all(np.array_equal(a.view.buckets[k], b.view.buckets[k]) for k in a.view.buckets)
    locked = GlobalView(build_assembler(s)).snapshot(
        merge(beside, width), NOW, at_ms=NOW, confidence=0.95, lock=lock
    )
    _assert_same(want, locked)

    # the same through the stats topic's bytes, merged in another order
    names = [m.name for m in single.models]
    layout = store_layout(build_engine(s))
    wire = [
        decode(encode(st, names, p), names, width, p, layout)
        for p, st in reversed(list(enumerate(stats)))
    ]
    again = GlobalView(build_assembler(s)).snapshot(
        merge(wire, width), NOW, at_ms=NOW, confidence=0.95
    )
    _assert_same(want, again)


def test_decode_refuses_foreign_or_broken_stats() -> None:
    s = _settings()
    engine = build_engine(s)
    blob = encode(partition_stats(engine), ["fraud"], 0)
    with pytest.raises(ValueError, match="bucket width"):
        decode(blob, ["fraud"], 1000)
    with pytest.raises(ValueError, match="not a packed blob"):
        decode(b"garbage", ["fraud"], engine.buckets.width_ms)
    # a peer still on format 2 (one label delay histogram of every model): read, that
    # histogram taken as the fleet prior; a format this build does not know: refused
    meta, arrays = unpack(blob)
    ops = meta["ops"]
    ops["label_delay"] = [[0, 3, 1] + [0] * 13, 9.5]
    del ops["label_delays"]
    ops["join_events"] = [["joined", 4]]
    old = decode(pack({**meta, "format": 2}, arrays), ["fraud"], engine.buckets.width_ms)
    delays = old.ops.label_delay
    assert delays.prior is not None and list(delays.prior.counts) == ops["label_delay"][0]
    assert delays.prior.total == 9.5 and delays.of("fraud") == delays.prior
    with pytest.raises(ValueError, match=r"stats format 4, this reads 1\.\.3"):
        decode(pack({**meta, "format": 4}, arrays), ["fraud"], engine.buckets.width_ms)


def test_blobs_and_checkpoints_hold_plain_arrays_only(tmp_path: Path) -> None:
    """One rule for both writers: plain arrays round-trip, object arrays are refused."""
    meta, arrays = {"k": [1, 2]}, {"a": np.arange(3), "b": np.ones((2, 2), np.float32)}
    got_meta, got = unpack(pack(meta, arrays))
    assert got_meta == meta and got.keys() == arrays.keys()
    assert all(np.array_equal(got[k], arrays[k]) for k in arrays)
    bad = {"x": np.array([{"a": 1}], dtype=object)}
    with pytest.raises(TypeError, match="'x' has dtype object"):
        pack(meta, bad)
    store = CheckpointStore(tmp_path)
    with pytest.raises(TypeError, match="'x' has dtype object"):
        store.write(meta, bad)
    assert not store.path.exists()


def test_partitioned_mode_refuses_what_it_cannot_merge() -> None:
    from monitor.config import ConfigError

    base: dict[str, Any] = {"models": [{"name": "fraud"}], "scale": {"mode": "partitioned"}}
    settings_from_mapping(base)  # kafka-python, wall clock: accepted
    settings_from_mapping({**base, "kafka": {"client": "confluent"}})  # librdkafka too
    with pytest.raises(ConfigError, match=r"evaluation\.clock"):
        settings_from_mapping({**base, "evaluation": {"clock": "event"}})
    assert settings_from_mapping({"models": [{"name": "fraud"}]}).scale.mode == "single"
    # the exporter must fail over within one session timeout
    lease = {**base, "scale": {"mode": "partitioned", "exporter_lease": "10s"}}
    with pytest.raises(ConfigError, match=r"scale\.exporter_lease: 10s must be below"):
        settings_from_mapping(lease)
    settings_from_mapping({**lease, "kafka": {"session_timeout_ms": 15_000}})


def test_decode_once_ingest_equals_a_pipeline_per_partition(tmp_path: Path) -> None:
    """PartitionedIngest (one decode per poll, rows split by partition) leaves every
    partition engine, its offsets and the dead letters exactly as a pipeline per
    partition would."""
    from monitor.ingest.pipeline import RawBatch
    from monitor.scale.partitioned_ingest import PartitionedIngest

    s = _settings()
    stream = [(k, orjson.dumps(r)) for k, r in _stream()[:3000]]
    for i in range(0, 3000, 97):  # garbage, and a prediction of an unknown model
        stream.insert(i, ("predictions", b"{not json"))
        stream.insert(i, ("labels", orjson.dumps({"id": "x", "ts": START})))
    per = {p: build_engine(s) for p in range(PARTITIONS)}
    pipes = {p: _pipeline(s, e, tmp_path, f"per{p}") for p, e in per.items()}
    one = {p: build_engine(s) for p in range(PARTITIONS)}
    offsets: dict[int, dict[str, int]] = {p: {} for p in range(PARTITIONS)}
    sink = FileDeadLetter(tmp_path / "one.jsonl")
    ingest = PartitionedIngest(_pipeline(s, build_engine(s), tmp_path, "t"), sink, lambda: NOW,
                               threading.RLock())  # fmt: skip
    for lo in range(0, len(stream), 400):
        chunk = stream[lo : lo + 400]
        for kind in ("predictions", "labels"):
            by_p: dict[int, list[RawRecord]] = {}
            for i, (k, raw) in enumerate(chunk):
                if k == kind:
                    p = zlib.crc32(raw) % PARTITIONS
                    by_p.setdefault(p, []).append(RawRecord(raw, kind, p, lo + i))
            for p, records in by_p.items():
                pipes[p].process(kind, records)
            batches = {p: RawBatch.of_records(r) for p, r in by_p.items()}
            ingest.process(kind, batches, {p: (one[p], offsets[p]) for p in one})
    for p in range(PARTITIONS):
        meta_a, arrays_a = state_codec.encode(per[p])
        meta_b, arrays_b = state_codec.encode(one[p])
        assert meta_a == meta_b, p
        assert arrays_a.keys() == arrays_b.keys()
        assert all(np.array_equal(arrays_a[k], arrays_b[k]) for k in arrays_a), p
        assert pipes[p].offsets == offsets[p]
    assert sum(per[p].invalid.total() for p in per) > 30  # the garbage was counted
    for sink_ in [sink, *(pipe.dead_letter for pipe in pipes.values())]:
        sink_.close()
    want = sorted(
        line for p in per for line in (tmp_path / f"per{p}.jsonl").read_text().splitlines()
    )
    got = sorted((tmp_path / "one.jsonl").read_text().splitlines())
    assert len(got) == len(want) > 30

    def origin(line: str) -> tuple[Any, ...]:
        d = orjson.loads(line)
        return tuple(d.get(k) for k in ("reason", "topic", "partition", "offset"))

    assert sorted(map(origin, got)) == sorted(map(origin, want))


def test_take_splits_coded_columns() -> None:
    """A coded column (labels as the decoder gives them) is split with the rows."""
    from monitor.engine.records import Coded, LabelBatch
    from monitor.scale.partitioned_ingest import take

    batch = LabelBatch(
        np.arange(4, dtype=np.uint64), np.arange(4, dtype=np.int64),
        Coded(["1", "0"], np.array([0, 1, 1, 0])), np.full(4, np.nan),
    )  # fmt: skip
    sub = take(batch, np.array([1, 3]))
    assert sub.keys.tolist() == [1, 3] and list(sub.label) == ["0", "1"]
