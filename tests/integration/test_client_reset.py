"""A Kafka client's own out-of-range reset, seen by the source before any range check.

Both clients reset a fetch position past the end of the log (topic recreated) per
``auto_offset_reset`` by themselves, possibly before the daemon's lag check compares the
position with the high watermark. The pipeline only moves its offsets forward, so
without the source noticing, the offset stayed at the old log's position: a restart then
skipped the new log's records below it, or read them twice.

tansu answers a fetch past the end with no records rather than OFFSET_OUT_OF_RANGE, so
neither client resets there; the test moves the client's position back with the
client's own seek, the effect of its reset, behind the source's back. Only ``poll``
runs (no lag check), so nothing else can tell the daemon. The partitioned mode's source
(one engine and offsets per partition, restored from the state topic) is checked the
same way.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path
from typing import Any

import pytest

from monitor.app import Daemon
from monitor.config import settings_from_mapping
from monitor.engine.partition import Partition
from monitor.ingest.deadletter import FileDeadLetter
from monitor.ingest.kafka import open_source
from monitor.localbroker import LocalBroker
from monitor.scale.partitioned import GroupOwner, PartitionedSource
from monitor.scale.partitioned_ingest import PartitionedIngest
from monitor.state.positions import Resume
from monitor.wiring import build_engine, build_pipeline

from .daemon_harness import encode, produce

pytestmark = pytest.mark.integration


def _new_log(broker: LocalBroker) -> None:
    """The recreated topics: 300 predictions, fewer than the 500 the state says it read."""
    broker.create_topics(["predictions", "labels"])
    now = int(time.time() * 1000) - 60_000
    recs = [
        {"id": f"n{i}", "ts": now + i, "model": "fraud", "version": "v1", "score": 0.7}
        for i in range(300)
    ]
    produce(broker.bootstrap, [("predictions", (r["id"].encode(), encode(r))) for r in recs])


def test_client_reset_beyond_the_end_moves_the_offset_back(
    broker: LocalBroker, tmp_path: Path, kafka_client: str
) -> None:
    _new_log(broker)
    settings = settings_from_mapping(
        {
            "kafka": {
                "client": kafka_client,
                "bootstrap_servers": broker.bootstrap,
                "auto_offset_reset": "earliest",
                "session_timeout_ms": 6000,
                "heartbeat_interval_ms": 1000,
                "max_poll_interval_ms": 10_000,
            },
            "state": {"dir": str(tmp_path / "state")},
            "models": [{"name": "fraud", "threshold": 0.5, "windows": [{"size": "30d"}]}],
        }
    )
    engine = build_engine(settings)
    # the checkpoint of the old log: 500 records read, the new log holds 300
    offsets = {"predictions:0": 500}
    sink = FileDeadLetter(tmp_path / "dl.jsonl")
    pipeline = build_pipeline(settings, engine, sink, offsets=offsets)
    resumes: list[tuple[str, int, int, Resume]] = []

    def on_resume(topic: str, partition: int, was: int, resume: Resume) -> None:
        resumes.append((topic, partition, was, resume))
        with pipeline.lock:  # what the daemon does (app.py _on_resume)
            offsets[f"{topic}:{partition}"] = resume.offset

    source = open_source(settings.kafka, lambda: dict(offsets), on_resume)
    reset = False
    try:
        deadline = time.monotonic() + 60
        while engine.records["predictions", "accepted"] < 300:
            assert time.monotonic() < deadline, (resumes, offsets, dict(engine.records))
            for kind, batch in source.poll(500).items():
                pipeline.process(kind, batch)
            if not reset and ("predictions", 0) in source.assignment():
                reset = _client_seek(source, kafka_client, "predictions", 0, 0)
    finally:
        source.close()
        sink.close()
    assert resumes == [("predictions", 0, 500, Resume(0, "offset_beyond_end"))]
    # the offset a checkpoint would store: after the new log's last record, not 500
    assert offsets == {"predictions:0": 300}
    assert engine.records["predictions", "accepted"] == 300


def test_partitioned_client_reset_moves_the_partition_offset_back(
    broker: LocalBroker, tmp_path: Path
) -> None:
    """The partition's stored state says 500 records were read; the recreated log holds
    300. The partition's offsets must follow the client back (and the fault be counted),
    or its next store would resume past the new log's records. The consumer loop's step
    (``_poll_and_apply``) also must poll and apply with the cycle collector paused."""
    _new_log(broker)
    settings = settings_from_mapping(
        {
            "kafka": {
                "bootstrap_servers": broker.bootstrap,
                "auto_offset_reset": "earliest",
                "session_timeout_ms": 6000,
                "heartbeat_interval_ms": 1000,
                "max_poll_interval_ms": 10_000,
            },
            "scale": {"mode": "partitioned"},
            "state": {"dir": str(tmp_path / "state")},
            "models": [{"name": "fraud", "threshold": 0.5, "windows": [{"size": "30d"}]}],
        }
    )
    daemon = Daemon(settings, owner=GroupOwner)
    owner = daemon.owner
    assert isinstance(owner, GroupOwner)
    owner.state_store.ensure_topic(partitions=1)
    old, _ = owner._blob(Partition(0, daemon._new_engine(), {"predictions:0": 500}))
    with old:
        owner.state_store.store(0, old)  # the old log's state of partition 0
    sink = FileDeadLetter(tmp_path / "dl.jsonl")
    template = build_pipeline(settings, daemon._new_engine(), sink, lock=daemon.lock)
    owner._ingest = PartitionedIngest(template, sink, daemon.clock.now_ms, daemon.lock)
    source = owner._source = PartitionedSource(settings.kafka, owner)
    collector_on: list[bool] = []
    poll = source.poll

    def observed_poll(timeout_ms: int) -> Any:
        collector_on.append(gc.isenabled())
        return poll(timeout_ms)

    source.poll = observed_poll  # type: ignore[method-assign]
    reset = False
    try:
        deadline = time.monotonic() + 60
        while not (0 in owner.parts and owner.parts[0].offsets.get("predictions:0") == 300):
            offsets = owner.parts[0].offsets if 0 in owner.parts else None
            assert time.monotonic() < deadline, (offsets, dict(daemon._faults))
            assert daemon._poll_and_apply(source)
            if owner.paused:
                owner._restore_paused()
            if not reset and 0 in owner.parts:
                assert owner.parts[0].offsets == {"predictions:0": 500}  # restored
                reset = _client_seek(source, "kafka-python", "predictions", 0, 0)
        part = owner.parts[0]
    finally:
        source.close()  # (its revocation hands partition 0 over)
        sink.close()
        owner.state_store.close()
    assert part.offsets == {"predictions:0": 300}
    assert part.engine.records["predictions", "accepted"] == 300
    assert daemon._faults["offset_beyond_end"] == 1
    assert collector_on and not any(collector_on)
    assert gc.isenabled()


def _client_seek(source: Any, client: str, topic: str, partition: int, offset: int) -> bool:
    """Move the client's fetch position with the client's API (not the source's)."""
    if client == "confluent":
        from confluent_kafka import KafkaException, TopicPartition

        try:
            source.consumer.seek(TopicPartition(topic, partition, offset))
        except KafkaException:  # the partition's fetcher has not started yet
            return False
        return True
    from kafka import TopicPartition as KTopicPartition

    source.consumer.seek(KTopicPartition(topic, partition), offset)
    return True
