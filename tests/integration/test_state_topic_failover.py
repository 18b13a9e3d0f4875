"""``state.kafka_store``: a replacement instance with an *empty* state directory (no shared
disk) restores the state from the compacted state topic and ends exactly where an
uninterrupted run ends — nothing lost, nothing counted twice (real tansu broker, SIGKILL
while the stream flows, exact counts, scikit-learn oracle)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from monitor.localbroker import LocalBroker
from monitor.state.kafka_store import WHOLE, KafkaStateStore
from monitor.synthetic import binary_traffic

from .daemon_harness import (
    DaemonProcess,
    StreamProducer,
    assert_counted_once,
    assert_quality,
    event_ordered,
    restored_checkpoint,
    sklearn_oracle,
    stream_daemon,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WINDOW = "30d"
N_PREDICTIONS = 6_000


def test_replacement_with_empty_state_dir_restores_from_state_topic(
    broker: LocalBroker, tmp_path: Path, kafka_client: str
) -> None:
    now = int(time.time() * 1000)
    traffic = binary_traffic(
        N_PREDICTIONS, seed=5, start_ms=now - 200 * 60_000, rate_per_s=1.0, delay_mean_s=20.0
    )
    preds, labels = traffic.predictions, traffic.labels
    oracle = sklearn_oracle(preds, labels)
    messages = event_ordered(preds, labels)
    broker.create_topics(["predictions", "labels"], partitions=3)

    def daemon_with(state_dir: Path, name: str) -> DaemonProcess:
        return stream_daemon(
            broker.bootstrap, tmp_path, name, client=kafka_client, window=WINDOW,
            state_dir=state_dir, state={"kafka_store": True, "kafka_chunk_bytes": 65536},
        )  # fmt: skip

    first = daemon_with(tmp_path / "pod-a", "a")
    second = daemon_with(tmp_path / "pod-b", "b")  # another pod: its own, empty directory
    producer = StreamProducer(broker.bootstrap, messages, 12.0)
    try:
        first.start()
        first.wait_ready()
        producer.start()
        wait_until(
            lambda: first.scrape().total("mlmon_records_total") >= 0.4 * len(messages),
            60,
            lambda: first.log_tail(),
        )
        time.sleep(1.5)  # at least one checkpoint with part of the stream
        first.kill()

        stored = KafkaStateStore({"bootstrap_servers": [broker.bootstrap]}, "model-monitor")
        latest = stored.restore(WHOLE)
        assert latest is not None and latest.generation >= 1
        assert len(latest.blob) > 65536  # several chunks

        second.start()
        assert "restored from state topic model-monitor-state" in second._this_log()
        restored = restored_checkpoint(second)
        assert restored is not None, second.log_tail()
        covered = restored[1]
        assert 0 < covered < len(messages), covered

        producer.join(timeout=120)
        assert producer.error is None, repr(producer.error)
        m, _ = second.wait_consumed({"predictions": len(preds), "labels": len(labels)}, 120)
        ctx = second.log_tail(60)
        assert_counted_once(m, len(preds), len(labels), ctx)
        assert_quality(m, oracle, WINDOW, ctx)

        # the replacement keeps writing generations: a clean stop stores the final state
        assert second.terminate() == 0, second.log_tail()
        final = KafkaStateStore({"bootstrap_servers": [broker.bootstrap]}, "model-monitor")
        last = final.restore(WHOLE)
        assert last is not None and last.generation > latest.generation
    finally:
        first.close()
        second.close()
