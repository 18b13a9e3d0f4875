"""The broker goes away: the daemon stays up, keeps serving /metrics, reports not-ready,
and becomes ready again when a broker is back on the same address. The broker stalls
(its process stopped: connections open, nothing answered): the same."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from monitor.localbroker import LocalBroker
from monitor.synthetic import binary_traffic

from .daemon_harness import DaemonProcess, base_config, encode, produce, wait_until, write_config

pytestmark = pytest.mark.integration

FAST_GROUP = {
    "reconnect_backoff_max_ms": 1000,
    "session_timeout_ms": 3000,
    "heartbeat_interval_ms": 600,
}


def test_broker_outage_flips_readiness_and_recovers(
    broker: LocalBroker, tmp_path: Path, kafka_client: str
) -> None:
    broker.create_topics(["predictions", "labels"])
    cfg = base_config(
        broker.bootstrap,
        tmp_path / "state",
        client=kafka_client,
        kafka=FAST_GROUP,
    )
    daemon = DaemonProcess(write_config(tmp_path / "monitor.toml", cfg), tmp_path / "d.log")
    t = binary_traffic(300, seed=2, start_ms=int(time.time() * 1000) - 600_000, rate_per_s=1)
    replacement: LocalBroker | None = None
    try:
        daemon.start()
        daemon.wait_ready()
        produce(
            broker.bootstrap,
            [("predictions", (p["id"].encode(), encode(p))) for p in t.predictions],
        )
        daemon.wait_consumed({"predictions": 300})
        port = broker.port
        broker.kill()

        def not_ready() -> bool:
            status, body = daemon.get("/readyz")
            return status == 503 and b"no connection to Kafka" in body

        wait_until(not_ready, 30, lambda: daemon.log_tail())
        status, _ = daemon.get("/metrics")
        assert status == 200
        assert daemon.scrape().get("mlmon_consuming") == 0
        assert daemon.running()
        status, _ = daemon.get("/healthz")
        assert status == 200

        replacement = LocalBroker(port=port, log_path=tmp_path / "tansu2.log")
        replacement.start()
        replacement.create_topics(["predictions", "labels"])

        def ready() -> bool:
            status, _ = daemon.get("/readyz")
            return status == 200

        wait_until(ready, 60, lambda: daemon.log_tail())
        assert daemon.scrape().get("mlmon_consuming") == 1
        assert daemon.terminate() == 0
    finally:
        daemon.close()
        if replacement is not None:
            replacement.stop()


def test_a_stalled_broker_flips_readiness_and_recovers(
    broker: LocalBroker, tmp_path: Path, kafka_client: str
) -> None:
    """A stopped broker keeps its connections open (the kernel still holds them), so the
    clients' connection counts and broker states stay up; readiness must still turn
    false once the broker has not answered for the session timeout plus a heartbeat
    (3.6 s here), say so, and turn true again when the broker answers."""
    broker.create_topics(["predictions", "labels"])
    cfg = base_config(broker.bootstrap, tmp_path / "state", client=kafka_client, kafka=FAST_GROUP)
    daemon = DaemonProcess(write_config(tmp_path / "monitor.toml", cfg), tmp_path / "d.log")
    t = binary_traffic(400, seed=3, start_ms=int(time.time() * 1000) - 600_000, rate_per_s=1)
    stopped = False
    try:
        daemon.start()
        daemon.wait_ready()
        first, rest = t.predictions[:200], t.predictions[200:]
        produce(broker.bootstrap, [("predictions", (p["id"].encode(), encode(p))) for p in first])
        daemon.wait_consumed({"predictions": 200})
        os.killpg(broker.pid, signal.SIGSTOP)
        stopped = True
        since = time.monotonic()

        def not_ready() -> bool:
            status, body = daemon.get("/readyz")
            return status == 503 and b"has not answered for" in body

        wait_until(not_ready, 90, lambda: daemon.log_tail())
        # not before the limit, counted from the broker's last answer: at most a heartbeat
        # (0.6 s) or a statistics interval (1 s) before the stop
        assert time.monotonic() - since >= 3.6 - 1.0
        assert daemon.scrape().get("mlmon_consuming") == 0
        status, _ = daemon.get("/healthz")
        assert status == 200

        os.killpg(broker.pid, signal.SIGCONT)
        stopped = False

        def ready() -> bool:
            status, _ = daemon.get("/readyz")
            return status == 200

        wait_until(ready, 90, lambda: daemon.log_tail())
        produce(broker.bootstrap, [("predictions", (p["id"].encode(), encode(p))) for p in rest])
        daemon.wait_consumed({"predictions": 400}, timeout=90)
        assert daemon.scrape().get("mlmon_consuming") == 1
        assert daemon.terminate() == 0
    finally:
        if stopped:
            os.killpg(broker.pid, signal.SIGCONT)
        daemon.close()


def test_a_partitioned_instance_stops_storing_when_the_broker_stalls(
    broker: LocalBroker, tmp_path: Path, kafka_client: str
) -> None:
    """A partitioned instance stores each owned partition's state at a checkpoint, each
    store waiting up to 10 s for the broker. When the broker stalls, the checkpoint stops
    at the first store that found no broker answering instead of waiting out every
    partition's (six here: a minute of a held consumer loop), and readiness turns false
    and back to true when the broker answers again."""
    from .test_partitioned_failover import config, stream

    broker.create_topics(["predictions", "labels"], partitions=6)
    messages, _, _ = stream(6_000, seed=4, now=int(time.time() * 1000))
    produce(broker.bootstrap, [(k, (key, v)) for k, key, v in messages])
    n = sum(1 for kind, _, _ in messages if kind == "predictions")
    daemon = DaemonProcess(
        config(broker, tmp_path, "stall", None, client=kafka_client), tmp_path / "d.log"
    )
    stopped = False
    try:
        daemon.start()
        daemon.wait_consumed({"predictions": n}, timeout=120)
        wait_until(lambda: daemon.get("/readyz")[0] == 200, 60, lambda: daemon.log_tail())
        os.killpg(broker.pid, signal.SIGSTOP)
        stopped = True

        def not_ready() -> bool:
            status, body = daemon.get("/readyz")
            return status == 503 and b"has not answered for" in body

        wait_until(not_ready, 90, lambda: daemon.log_tail())
        # every later checkpoint is refused at once: wait for one, then count the waits
        log_at = daemon.log_path.read_text("utf-8", "replace").count("partition states not")
        wait_until(
            lambda: (
                daemon.log_path.read_text("utf-8", "replace").count("partition states not") > log_at
            ),
            60,
            lambda: daemon.log_tail(),
        )
        text = daemon.log_path.read_text("utf-8", "replace")
        waited = text.count("storing the state of partition")
        assert waited <= 2, f"{waited} stores waited for a stalled broker\n{daemon.log_tail()}"

        os.killpg(broker.pid, signal.SIGCONT)
        stopped = False
        wait_until(lambda: daemon.get("/readyz")[0] == 200, 90, lambda: daemon.log_tail())
        assert daemon.terminate() == 0
    finally:
        if stopped:
            os.killpg(broker.pid, signal.SIGCONT)
        daemon.close()
