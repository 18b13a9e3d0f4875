"""A topic deleted and created again while a partitioned instance was stopped: the
partitions' stored states hold positions in the old log, and the new log is already
longer than them (only its topic id can tell; they were skipped silently: 3,000 of 4,000
counted). Every record of the new log must be counted exactly once and the recreation
counted as a fault. With each client; the topic is recreated while the instance is
stopped because confluent-kafka 2.16 (librdkafka) crashes in its metadata cache when
tansu answers for a topic deleted under a running consumer."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.localbroker import LocalBroker

from .daemon_harness import DaemonProcess, base_config, produce, wait_until, write_config
from .test_topic_recreated import NEW, OLD, _faults, _predictions, _recreate

pytestmark = pytest.mark.integration

PARTITIONS = 2


def test_a_topic_recreated_while_a_partitioned_instance_was_stopped_is_read_once(
    broker: LocalBroker, tmp_path: Path, kafka_client: str
) -> None:
    broker.create_topics(["predictions", "labels"], partitions=PARTITIONS)
    cfg = base_config(broker.bootstrap, tmp_path / "state", client=kafka_client,
                      state={"checkpoint_interval": "1s", "single_instance": False})  # fmt: skip
    cfg["scale"] = {"mode": "partitioned", "stats_interval": "1s"}
    daemon = DaemonProcess(write_config(tmp_path / "c.toml", cfg), tmp_path / "d.log")
    try:
        daemon.start()
        daemon.wait_ready()
        produce(broker.bootstrap, _predictions("old", OLD))  # keyed: both partitions
        daemon.wait_consumed({"predictions": OLD})
        assert daemon.terminate() == 0, daemon.log_tail()  # stores both partitions' states

        _recreate(broker, ["predictions"], partitions=PARTITIONS)
        produce(broker.bootstrap, _predictions("new", NEW))  # each partition past its position
        daemon.start()
        m, _ = daemon.wait_consumed({"predictions": OLD + NEW}, timeout=120)
        assert m.get("mlmon_pending_predictions") == OLD + NEW
        wait_until(lambda: _faults(daemon).get("topic_recreated", 0) > 0, 30, daemon.log_tail)
        # nothing of the new log is read twice (a restart at its start after reading on)
        wait_until(lambda: daemon.scrape().total("mlmon_consumer_lag") == 0, 30, daemon.log_tail)
        m, _ = daemon.wait_consumed({"predictions": OLD + NEW}, timeout=30)
        assert m.get("mlmon_pending_predictions") == OLD + NEW
        assert "the topic was recreated" in daemon._this_log(), daemon.log_tail()
        assert daemon.terminate() == 0, daemon.log_tail()
    finally:
        daemon.close()
