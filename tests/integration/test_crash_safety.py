"""SIGKILL the daemon at random moments while a real broker streams to it: the final
counts and metrics equal an uninterrupted run's — nothing lost, nothing counted twice."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from monitor.localbroker import LocalBroker
from monitor.state.checkpoint import CheckpointError, CheckpointStore
from monitor.synthetic import binary_traffic

from .daemon_harness import (
    DaemonProcess,
    StreamProducer,
    assert_counted_once,
    assert_quality,
    event_ordered,
    load_factor,
    restored_checkpoint,
    sklearn_oracle,
    stream_daemon,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WINDOW = "30d"
N_PREDICTIONS = 50_000
PRODUCE_SECONDS = 60.0  # the stream is spread over this long, so kills land mid-stream


def _kill_while_busy(
    daemon: DaemonProcess, store: CheckpointStore, rng: np.random.Generator, total: int
) -> dict[str, Any]:
    """SIGKILL at a random moment after this incarnation has been consuming for a while,
    at an instant when it has processed records that its checkpoint does not hold yet.

    The process is frozen (SIGSTOP) before the checkpoint on disk is read, so what the
    test reads is exactly what the next incarnation will restore; if the checkpoint holds
    everything processed (or nothing yet), the process is thawed and tried again.
    """
    base = daemon.scrape().total("mlmon_records_total")
    deadline = time.monotonic() + 60 * load_factor()
    while daemon.scrape().total("mlmon_records_total") <= base:
        daemon.assert_alive()
        assert time.monotonic() < deadline, f"not consuming\n{daemon.log_tail()}"
        time.sleep(0.1)
    time.sleep(float(rng.uniform(0.5, 4.0)))
    while True:
        daemon.assert_alive()
        consumed = daemon.scrape().total("mlmon_records_total")
        assert consumed < total, "the stream ended before the kill; make it longer"
        assert time.monotonic() < deadline, f"no busy moment found\n{daemon.log_tail()}"
        os.kill(daemon.pid, signal.SIGSTOP)
        try:
            loaded = store.load()
        except CheckpointError:
            loaded = None
        checkpointed = sum(loaded.meta["offsets"].values()) if loaded is not None else 0
        if 0 < checkpointed < consumed:
            daemon.kill()
            return {"mode": "busy", "consumed": consumed, "checkpointed": checkpointed}
        os.kill(daemon.pid, signal.SIGCONT)
        time.sleep(float(rng.uniform(0.05, 0.3)))


def _restored_records(daemon: DaemonProcess) -> int:
    """Records covered by the checkpoint this incarnation restored (0 if none)."""
    restored = restored_checkpoint(daemon)
    if restored is None:
        assert "no checkpoint" in daemon._this_log(), daemon.log_tail()
        return 0
    return restored[1]


def test_sigkill_at_random_moments_loses_and_duplicates_nothing(
    broker: LocalBroker, tmp_path: Path, kafka_client: str
) -> None:
    rng = np.random.default_rng(424242)
    now_ms = int(time.time() * 1000)
    traffic = binary_traffic(
        N_PREDICTIONS,
        seed=99,
        start_ms=now_ms - 20 * 60_000,
        rate_per_s=150.0,
        delay_mean_s=15.0,
        label_fraction=0.9,
    )
    preds, labels = traffic.predictions, traffic.labels
    assert len(labels) >= 44_000
    assert max(lab["ts"] for lab in labels) < now_ms
    oracle = sklearn_oracle(preds, labels)
    # Realistic order: both streams by event time, each label when it happens (a bit
    # behind its prediction).
    messages = event_ordered(preds, labels)

    broker.create_topics(["predictions", "labels"])
    daemon = stream_daemon(broker.bootstrap, tmp_path, "daemon", client=kafka_client, window=WINDOW)
    # a loaded machine restarts the daemon slower: the stream lasts longer, so the kills
    # still land mid-stream (the rest is sent unpaced after them)
    producer = StreamProducer(broker.bootstrap, messages, PRODUCE_SECONDS * load_factor())
    store = CheckpointStore(tmp_path / "state")
    kills: list[dict[str, Any]] = []
    # Two kills while records are flowing and some are processed but not yet
    # checkpointed (they must be re-read, and counted once); one at any moment at all
    # (starting up, restoring, joining the group, consuming, checkpointing).
    modes = [str(x) for x in rng.permutation(["busy", "busy", "any"])]
    try:
        daemon.start()
        producer.start()
        for mode in modes:
            started = time.monotonic()
            if mode == "any":
                time.sleep(float(rng.uniform(0.3, 8.0)))
                daemon.assert_alive()
                try:
                    consumed = daemon.scrape().total("mlmon_records_total")
                except OSError:
                    consumed = float("nan")
                daemon.kill()
                kills.append(
                    {"mode": mode, "consumed": consumed, "after_s": time.monotonic() - started}
                )
            else:
                kills.append(_kill_while_busy(daemon, store, rng, len(messages)))
                kills[-1]["after_s"] = time.monotonic() - started
            kills[-1]["sent"] = producer.sent
            daemon.start()
            kills[-1]["restored"] = _restored_records(daemon)
        for k in kills:
            if k["mode"] == "busy":
                # The daemon restored exactly the checkpoint the test saw, and it had
                # processed records beyond it: those were read again after the restart.
                assert k["restored"] == k["checkpointed"] > 0, kills
                assert k["consumed"] > k["checkpointed"], kills

        producer.hurry()  # every kill landed mid-stream: the rest needs no pacing
        producer.join(timeout=120)
        assert not producer.is_alive(), "producer did not finish"
        assert producer.error is None, repr(producer.error)
        assert producer.sent == len(messages)

        m, _ = daemon.wait_consumed({"predictions": len(preds), "labels": len(labels)}, timeout=120)
        ctx = f"kills: {kills}\n{daemon.log_tail(60)}"
        assert_counted_once(m, len(preds), len(labels), ctx)
        assert m.by_labels("mlmon_invalid_records_total", "topic", "reason") == {}, ctx
        assert m.get("mlmon_orphan_labels") == 0, ctx
        assert m.total("mlmon_label_delay_seconds_count") == len(labels), ctx
        assert oracle["v1"]["samples"] == len(labels)
        assert_quality(m, oracle, WINDOW, ctx)
        # Restarts really happened: four incarnations in the log, three restores.
        log = daemon.log_path.read_text()
        assert log.count("===== starting daemon") == 4

        code = daemon.terminate(timeout=20)
        assert code == 0, daemon.log_tail()
    finally:
        daemon.close()
