"""With kafka.dead_letter_topic set, rejected records go to that topic with their original
bytes and the reason in headers."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from monitor.localbroker import LocalBroker

from .daemon_harness import DaemonProcess, base_config, encode, produce, read_topic, write_config

pytestmark = pytest.mark.integration


def test_rejects_go_to_the_dead_letter_topic(
    broker: LocalBroker, tmp_path: Path, kafka_client: str
) -> None:
    broker.create_topics(["predictions", "labels", "monitor-dlq"])
    cfg = base_config(
        broker.bootstrap,
        tmp_path / "state",
        client=kafka_client,
        kafka={"dead_letter_topic": "monitor-dlq"},
    )
    daemon = DaemonProcess(write_config(tmp_path / "monitor.toml", cfg), tmp_path / "d.log")
    good = {
        "id": "g1",
        "ts": int(time.time() * 1000) - 1000,
        "model": "fraud",
        "version": "v1",
        "score": 0.7,
    }
    bad = [b"{not json", b'{"id": "x", "ts": 1, "model": "nope", "version": "v", "score": 0.1}']
    try:
        daemon.start()
        daemon.wait_ready()
        sent = produce(
            broker.bootstrap,
            [("predictions", (b"g1", encode(good)))]
            + [("predictions", (b"k", value)) for value in bad]
            + [("labels", (b"k", b"[1, 2]"))],
        )
        daemon.wait_consumed({"predictions": 3, "labels": 1})
        assert not (tmp_path / "state" / "dead-letter.jsonl").exists()
    finally:
        assert daemon.terminate() == 0  # flushes the dead-letter producer
        daemon.close()
    got = [(m.value, dict(m.headers)) for m in read_topic(broker.bootstrap, "monitor-dlq")]
    assert sorted(v for v, _ in got) == sorted([*bad, b"[1, 2]"])
    by_value = {v: h for v, h in got}
    assert by_value[b"{not json"]["mlmon-reason"] == b"not_json"
    assert by_value[bad[1]]["mlmon-reason"] == b"unknown_model"
    assert by_value[b"[1, 2]"]["mlmon-reason"] == b"not_object"
    offsets = {(t, o) for t, _, o in sent}
    for value, headers in got:
        topic, partition, offset = headers["mlmon-source"].decode().split("/")
        assert (topic, int(offset)) in offsets and partition == "0", value
