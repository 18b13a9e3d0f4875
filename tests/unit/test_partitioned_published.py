"""A partitioned instance that does not hold the exporter lease serves only operational
series on /metrics, and renders that page once per evaluation like the exporter does,
not once per scrape (the exposition re-renders when it is given another snapshot)."""

from __future__ import annotations

import time
from pathlib import Path

import orjson

from monitor.app import Daemon
from monitor.config import settings_from_mapping
from monitor.ingest.deadletter import FileDeadLetter
from monitor.ingest.pipeline import RawRecord
from monitor.scale.partitioned import GroupOwner
from monitor.wiring import build_pipeline


def _settings(tmp_path: Path, mode: str):  # type: ignore[no-untyped-def]
    return settings_from_mapping(
        {
            # nothing listens there: this test never connects
            "kafka": {"bootstrap_servers": "127.0.0.1:9"},
            "scale": {"mode": mode},
            "http": {"port": 0},
            "state": {"dir": str(tmp_path / mode)},
            "models": [{"name": "fraud", "windows": [{"size": "1d"}]}],
        }
    )


def test_non_exporter_renders_metrics_once_per_evaluation(tmp_path: Path) -> None:
    # a real snapshot with quality series, from one instance's evaluation
    single = Daemon(_settings(tmp_path, "single"))
    pipe = build_pipeline(single.settings, single.engine, FileDeadLetter(tmp_path / "dl.jsonl"))
    start = int(time.time() * 1000) - 3_600_000
    preds = [{"id": f"p{i}", "ts": start + i, "model": "fraud", "version": "v1",
              "score": (i % 10) / 10} for i in range(200)]  # fmt: skip
    labels = [{"id": f"p{i}", "ts": start + i + 1, "label": i % 2} for i in range(200)]
    for kind, records in (("predictions", preds), ("labels", labels)):
        pipe.process(kind, [RawRecord(orjson.dumps(r), kind) for r in records])
    first = single.evaluate_now()
    assert first is not None and first.results

    daemon = Daemon(_settings(tmp_path, "partitioned"), owner=GroupOwner)
    assert not daemon.owner.exports()
    daemon._publish_snapshot(first, first.ops)
    exp = daemon.exposition
    renders = exp.renders
    assert daemon.published().snapshot is daemon.published().snapshot
    assert daemon.published().snapshot.results == ()  # type: ignore[union-attr]
    pages = [exp.page(), exp.page(gzip=True), exp.page()]
    assert exp.renders == renders, "a scrape rendered the snapshot part again"
    assert b"mlmon_accuracy" not in pages[0]  # quality series: the exporter's only
    assert b"mlmon_records_total" in pages[0]

    second = single.evaluate_now()
    assert second is not None and second is not first
    daemon._publish_snapshot(second, second.ops)
    exp.page()
    assert exp.renders == renders + 1  # the next evaluation: one render
