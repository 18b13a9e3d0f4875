"""Partitioned mode against poisoned state and statistics topics, on a real tansu broker.

Anyone who can write to ``<group>-state`` or ``<group>-stats`` can put any bytes there;
the real writer (``KafkaStateStore``) is used here to put them, so they are complete,
correctly chunked generations that outrank the honest ones (a high fence):

- a state generation whose header nests 200,000 deep (it raised RecursionError and
  crash-looped every instance the partition moved to) or that is plain garbage: skipped
  for the older good generation, counted; nothing lost or counted twice;
- a partition with no usable generation at all: it stays paused and ``/readyz`` says so
  (it said 200 while the partition was never consumed); ``scale.on_unusable_state =
  "reset"`` starts it fresh;
- the statistics of partition 0 published again as phantom partition 7 (merged: 1.5×
  the samples), and a zip bomb (RSS 207 → 970 MB): refused and counted.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from monitor.localbroker import LocalBroker
from monitor.scale.stats_topic import stats_store
from monitor.state.kafka_store import Generations, KafkaStateStore
from tests.unit.poisoned_blobs import deep_json_blob, zip_bomb

from .daemon_harness import (
    DaemonProcess,
    base_config,
    encode,
    peak_rss_mb,
    produce,
    read_topic,
    wait_until,
    write_config,
)

pytestmark = pytest.mark.integration

GROUP = "model-monitor"
N = 400  # predictions, each labeled, over 2 partitions
HIGH_FENCE = 10**6


def _daemon(broker: LocalBroker, tmp_path: Path, **scale: Any) -> DaemonProcess:
    cfg = base_config(
        broker.bootstrap,
        tmp_path / "state",
        windows=[{"size": "30d"}],
        state={"checkpoint_interval": "1s", "single_instance": False},
    )
    cfg["scale"] = {"mode": "partitioned", "stats_interval": "1s", **scale}
    return DaemonProcess(write_config(tmp_path / "c.toml", cfg), tmp_path / "daemon.log")


def _traffic(start: int, n: int) -> list[tuple[str, tuple[bytes, bytes | None]]]:
    now = int(time.time() * 1000)
    out = []
    for i in range(start, start + n):
        key = f"p{i}".encode()
        pred = {"id": f"p{i}", "ts": now - 60_000, "model": "fraud", "version": "v1",
                "score": (i % 10) / 10}  # fmt: skip
        out.append(("predictions", (key, encode(pred))))
        out.append(("labels", (key, encode({"id": f"p{i}", "ts": now, "label": i % 2}))))
    return out


def _store(broker: LocalBroker, topic: str = "state") -> KafkaStateStore:
    client = {"bootstrap_servers": [broker.bootstrap]}
    if topic == "stats":
        return stats_store(client, GROUP, 512 * 1024)
    return KafkaStateStore(client, GROUP)


def _poison(store: KafkaStateStore, partition: int, blob: bytes, fence: int = HIGH_FENCE) -> None:
    """A complete generation that outranks everything an honest owner wrote so far."""
    store.set_owner(partition, fence, 1)
    store.advance_generation(partition, 10**9)
    store.store(partition, blob)


def _consuming(broker: LocalBroker, tmp_path: Path) -> DaemonProcess:
    """A partitioned instance on two partitions that has counted N labeled predictions."""
    broker.create_topics(["predictions", "labels"], partitions=2)
    daemon = _daemon(broker, tmp_path)
    try:
        daemon.start()
        daemon.wait_ready()
        produce(broker.bootstrap, _traffic(0, N))
        daemon.wait_consumed({"predictions": N, "labels": N})
    except BaseException:
        daemon.close()
        raise
    return daemon


def _samples(d: DaemonProcess) -> tuple[int, int]:
    _, body = d.get("/api/v1/status")
    snap = json.loads(body)["snapshot"] or {"results": []}
    for r in snap["results"]:
        if (r["version"], r["window"], r["slice"]) == ("v1", "30d", "all"):
            return r["predictions"], r["labeled"]
    return 0, 0


def _faults(d: DaemonProcess) -> dict[str, float]:
    return d.scrape().by_label("mlmon_fault_events_total", "event")


def test_unusable_state_generations_are_skipped_for_the_last_good_one(
    broker: LocalBroker, tmp_path: Path
) -> None:
    daemon = _consuming(broker, tmp_path)
    try:
        assert daemon.terminate() == 0, daemon.log_tail()  # every partition stored

        store = _store(broker)
        _poison(store, 0, deep_json_blob(200_000))
        _poison(store, 1, b"garbage, not a blob" * 100)
        store.close()

        daemon.start()
        daemon.wait_ready()
        produce(broker.bootstrap, _traffic(N, N))
        # exact totals: both partitions restored from their last good generation (a
        # fresh start would have counted only what came after the committed offsets)
        m, _ = daemon.wait_consumed({"predictions": 2 * N, "labels": 2 * N})
        assert m.by_label("mlmon_join_events_total", "event") == {"joined": 2 * N}
        faults = _faults(daemon)
        assert faults.get("partition_state_skipped", 0) >= 2, faults
        assert "partition_state_mismatch" not in faults, faults
        assert daemon.terminate() == 0, daemon.log_tail()

        # the daemon's own generations now outrank the poison (their fence is above it)
        daemon.start()
        daemon.wait_ready()
        m, _ = daemon.wait_consumed({"predictions": 2 * N, "labels": 2 * N})
        assert "partition_state_skipped" not in _faults(daemon)
        assert daemon.terminate() == 0, daemon.log_tail()
    finally:
        daemon.close()


def test_a_partition_without_usable_state_is_not_ready_until_reset(
    broker: LocalBroker, tmp_path: Path
) -> None:
    broker.create_topics(["predictions", "labels"], partitions=2)
    store = _store(broker)
    store.ensure_topic(partitions=2)
    _poison(store, 1, b"garbage" * 1000)
    store.close()
    produce(broker.bootstrap, _traffic(0, N))
    daemon = _daemon(broker, tmp_path)
    try:
        daemon.start()

        def paused() -> bool:
            code, body = daemon.get("/readyz")
            return code == 503 and b"partition 1 paused" in body

        wait_until(paused, 60, daemon.log_tail)
        _, body = daemon.get("/api/v1/status")
        scale = json.loads(body)["scale"]
        assert scale["restoring_partitions"] == [1] and "1" in scale["unusable_partitions"]
        time.sleep(3)  # still paused, and logged at powers of two, not every second
        assert daemon.get("/readyz")[0] == 503
        assert daemon._this_log().count("partition 1 paused: stored state") <= 3
        assert daemon.terminate() == 0, daemon.log_tail()

        # the documented recovery: start it fresh from the group's committed offsets
        reset = _daemon(broker, tmp_path, on_unusable_state="reset")
        reset.start()
        try:
            reset.wait_ready()
            reset.wait_consumed({"predictions": N, "labels": N})
            assert _faults(reset).get("partition_state_reset", 0) >= 1
            assert reset.terminate() == 0, reset.log_tail()
        finally:
            reset.close()
    finally:
        daemon.close()


def _newest_stats_blob(broker: LocalBroker, partition: int) -> bytes:
    found = Generations()
    prefix = f"{GROUP}/{partition}/".encode()
    for rec in read_topic(broker.bootstrap, f"{GROUP}-stats"):
        if rec.key and rec.key.startswith(prefix):
            found.add(rec)
    best = found.resolve()
    assert best is not None, "no statistics of the partition published"
    return best.blob


def test_phantom_partitions_and_zip_bombs_in_the_stats_topic_are_refused(
    broker: LocalBroker, tmp_path: Path
) -> None:
    daemon = _consuming(broker, tmp_path)
    try:
        wait_until(lambda: _samples(daemon) == (N, N), 30, daemon.log_tail)
        time.sleep(2)  # published at least once more
        rss_before = peak_rss_mb(daemon.pid)

        stats = _store(broker, "stats")
        _poison(stats, 7, _newest_stats_blob(broker, 0))  # a phantom partition
        _poison(stats, 1, zip_bomb(1 << 30, "buckets.labeled"))
        _poison(stats, 0, _newest_stats_blob(broker, 1))  # partition 1's under key 0
        stats.close()

        wait_until(
            lambda: (
                {"stats_record_rejected", "stats_generation_rejected"} <= _faults(daemon).keys()
            ),
            30,
            daemon.log_tail,
        )
        for _ in range(5):  # several evaluations: the truth, never more
            assert _samples(daemon) == (N, N), daemon.log_tail()
            time.sleep(0.5)
        assert daemon.get("/readyz")[0] == 200
        grown = peak_rss_mb(daemon.pid) - rss_before
        assert grown < 200, f"peak RSS grew {grown:.0f} MB"
        assert daemon.terminate() == 0, daemon.log_tail()
    finally:
        daemon.close()
