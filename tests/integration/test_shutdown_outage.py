"""SIGTERM while Kafka is unreachable: the daemon writes its final checkpoint and exits 0
promptly — reported: it spent the whole ``shutdown_grace`` (20 s) in the offset commit
and the consumer's close, and the watchdog exited 1. Both clients; with a dead-letter
topic too (its producer must not hold the exit either)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from monitor.localbroker import LocalBroker
from monitor.state.checkpoint import CheckpointStore

from .daemon_harness import DaemonProcess, base_config, encode, produce, wait_until, write_config

pytestmark = pytest.mark.integration

GRACE_S = 20.0
N = 50


@pytest.mark.parametrize("dead_letter_topic", [False, True], ids=["file", "topic"])
def test_sigterm_during_an_outage_checkpoints_and_exits_0_promptly(
    broker: LocalBroker, tmp_path: Path, kafka_client: str, dead_letter_topic: bool
) -> None:
    broker.create_topics(["predictions", "labels", "dlq"])
    kafka = {"reconnect_backoff_max_ms": 1000}
    if dead_letter_topic:
        kafka["dead_letter_topic"] = "dlq"  # type: ignore[assignment]
    cfg = base_config(
        broker.bootstrap,
        tmp_path / "state",
        client=kafka_client,
        kafka=kafka,
        state={"shutdown_grace": f"{GRACE_S}s", "checkpoint_interval": "60s"},
    )
    daemon = DaemonProcess(write_config(tmp_path / "c.toml", cfg), tmp_path / "d.log")
    now = int(time.time() * 1000)
    preds = [
        ("predictions", (f"p{i}".encode(), encode({"id": f"p{i}", "ts": now, "model": "fraud",
                                                   "version": "v1", "score": 0.4})))
        for i in range(N)
    ]  # fmt: skip
    bad = [("predictions", (b"x", b"{not json"))]  # one dead letter in flight
    try:
        daemon.start()
        daemon.wait_ready()
        produce(broker.bootstrap, preds + bad)
        daemon.wait_consumed({"predictions": N + 1})
        broker.kill()
        wait_until(lambda: daemon.get("/readyz")[0] == 503, 60, daemon.log_tail)
        signalled = time.time()
        code = daemon.terminate(timeout=GRACE_S + 15)
        assert code == 0, daemon.log_tail()
        # promptly: well inside the grace (every Kafka-side step is bounded or skipped)
        assert daemon.stop_seconds < GRACE_S / 2, (daemon.stop_seconds, daemon.log_tail())
        loaded = CheckpointStore(tmp_path / "state").load()
        assert loaded is not None and loaded.written_at >= signalled, daemon.log_tail()
        assert sum(loaded.meta["offsets"].values()) == N + 1
    finally:
        daemon.close()


def test_partitioned_mode_exits_0_promptly_during_an_outage(
    broker: LocalBroker, tmp_path: Path
) -> None:
    """No local checkpoint in this mode: the partitions' last stored states stand (each
    consistent with its own offsets); nothing may wait out a store, a publication or
    the lease's release against a broker that is gone."""
    broker.create_topics(["predictions", "labels"])
    cfg = base_config(
        broker.bootstrap,
        tmp_path / "state",
        kafka={"reconnect_backoff_max_ms": 1000},
        state={"shutdown_grace": f"{GRACE_S}s", "single_instance": False},
    )
    cfg["scale"] = {"mode": "partitioned", "stats_interval": "1s"}
    daemon = DaemonProcess(write_config(tmp_path / "c.toml", cfg), tmp_path / "d.log")
    now = int(time.time() * 1000)
    try:
        daemon.start()
        daemon.wait_ready()
        produce(
            broker.bootstrap,
            [("predictions", (b"a", encode({"id": "a", "ts": now, "model": "fraud",
                                            "version": "v1", "score": 0.4})))],
        )  # fmt: skip
        daemon.wait_consumed({"predictions": 1})
        broker.kill()
        wait_until(lambda: daemon.get("/readyz")[0] == 503, 60, daemon.log_tail)
        assert daemon.terminate(timeout=GRACE_S + 15) == 0, daemon.log_tail()
        assert daemon.stop_seconds < GRACE_S / 2, (daemon.stop_seconds, daemon.log_tail())
        assert "partition states not stored" in daemon._this_log()
    finally:
        daemon.close()
