"""A zombie on a real tansu broker: the exporter is paused (SIGSTOP) past its session
timeout, the other instance takes over its partitions and the export, more records
arrive, then the zombie resumes (SIGCONT). It must never export again while the other
holds the lease, must drop the partitions it lost without storing them, and the end
state must still count every record once and equal one instance's reading of the same
topics (counts exactly, metrics 1e-9). With each Kafka client."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from monitor.localbroker import LocalBroker

from .daemon_harness import DaemonProcess, StreamProducer, wait_until
from .test_partitioned_failover import (
    PARTITIONS,
    config,
    global_results,
    owned,
    same_results,
    samples,
    settled,
    status,
    stream,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

N_PREDICTIONS = 3_000


def exporting(d: DaemonProcess) -> bool:
    m = d.scrape()
    return m.get("mlmon_exporter") == 1 and bool(m.find("mlmon_window_samples"))


def test_paused_exporter_is_fenced_and_the_end_state_is_exact(
    broker: LocalBroker, tmp_path: Path, kafka_client: str
) -> None:
    now = int(time.time() * 1000)
    messages, n_preds, n_labeled = stream(N_PREDICTIONS, seed=17, now=now)
    n_pred_records = sum(1 for kind, _, _ in messages if kind == "predictions")
    half = len(messages) // 2
    broker.create_topics(["predictions", "labels"], partitions=PARTITIONS)
    daemons = {n: DaemonProcess(config(broker, tmp_path, n, None, client=kafka_client),
                                tmp_path / f"{n}.log") for n in ("a", "b")}  # fmt: skip
    ref: DaemonProcess | None = None

    def logs() -> str:
        return "\n".join(f"--- {n}\n{d.log_tail(30)}" for n, d in daemons.items())

    try:
        for d in daemons.values():
            d.start()
        for d in daemons.values():
            d.wait_ready()
        first = StreamProducer(broker.bootstrap, messages[:half], 5.0)
        first.start()
        first.join(timeout=120)
        assert first.error is None, repr(first.error)
        both = list(daemons.values())
        wait_until(lambda: settled(both) and all(owned(d) for d in both), 90, logs)
        wait_until(lambda: sum(1 for d in both if exporting(d)) == 1, 60, logs)
        zombie = next(d for d in both if exporting(d))
        other = next(d for d in both if d is not zombie)
        held = owned(zombie)

        zombie.proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
        paused = time.monotonic()
        wait_until(lambda: exporting(other), 30, logs)
        failover = time.monotonic() - paused
        # the group notices after the session timeout and hands every partition over
        wait_until(lambda: owned(other) == list(range(PARTITIONS)), 90, logs)
        second = StreamProducer(broker.bootstrap, messages[half:], 5.0)
        second.start()
        second.join(timeout=120)
        assert second.error is None, repr(second.error)
        want = (n_preds, n_labeled)
        wait_until(lambda: samples(other) == want, 90, lambda: f"{samples(other)}\n{logs()}")

        os.kill(zombie.pid, signal.SIGCONT)
        resumed = time.monotonic()
        # the zombie never exports while the other holds the lease; it learns it was
        # evicted and drops what it held, unstored
        while time.monotonic() - resumed < 10:
            assert not exporting(zombie), logs()
            time.sleep(0.2)
        zlog = zombie._this_log()
        assert "dropped unstored" in zlog or "not stored" in zlog, logs()
        assert status(zombie)["scale"]["fenced"] >= 1, logs()

        wait_until(lambda: settled(both) and all(samples(d) == want for d in both), 120,
                   lambda: f"{[samples(d) for d in both]} want {want}\n{logs()}")  # fmt: skip
        time.sleep(3)  # a publication round after the last record
        assert sum(1 for d in both if exporting(d)) == 1, logs()
        total = sum(d.scrape().total("mlmon_records_total", topic="predictions") for d in both)
        assert total == n_pred_records, (total, n_pred_records, logs())
        view = global_results(other)
        same_results(global_results(zombie), view, "zombie")

        ref = DaemonProcess(config(broker, tmp_path, "ref", None, "reference", "single"),
                            tmp_path / "ref.log")  # fmt: skip
        ref.start()
        labels = sum(1 for kind, _, _ in messages if kind == "labels")
        ref.wait_consumed({"predictions": n_pred_records, "labels": labels}, 120)
        same_results(global_results(ref), view, "single instance")
        print(f"paused the exporter holding {held}; export failover {failover:.1f}s")
    finally:
        for d in daemons.values():
            if d.running():
                os.kill(d.pid, signal.SIGCONT)
            d.close()
        if ref is not None:
            ref.close()
