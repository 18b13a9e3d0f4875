"""SIGKILL *during* a checkpoint write (tests/integration/test_crash_safety.py kills at
random moments, which rarely land inside a write).

The checkpoint here is about 10-20 MB (score histograms of some 400 one-minute buckets),
so a write takes tens of milliseconds. The test watches the state directory for the
temporary file, freezes the daemon (SIGSTOP) the moment it exists, checks that the write
is really in flight (the temporary file is still there), reads the last good checkpoint
the next incarnation must restore, and SIGKILLs it. Then: the restart restores exactly
that checkpoint (the partial temporary file is ignored and later replaced), re-reads
what came after it, and the end result equals an uninterrupted run (scikit-learn oracle,
exact counts) — nothing lost, nothing counted twice.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from monitor.localbroker import LocalBroker
from monitor.state.checkpoint import CheckpointError, CheckpointStore, read_checkpoint
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
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WINDOW = "30d"
N_PREDICTIONS = 20_000
PRODUCE_SECONDS = 25.0


def kill_mid_write(daemon: DaemonProcess, store: CheckpointStore) -> dict[str, Any]:
    """SIGKILL while ``checkpoint.npz.tmp`` exists (a write in flight)."""
    deadline = time.monotonic() + 30 * load_factor()
    misses = 0
    while time.monotonic() < deadline:
        if not store.tmp_path.exists():
            time.sleep(0.0005)
            continue
        os.kill(daemon.pid, signal.SIGSTOP)
        if store.tmp_path.exists():
            tmp_size = store.tmp_path.stat().st_size
            good = store.load()  # what a restart will restore (maybe prev, between renames)
            assert good is not None
            daemon.kill()
            return {
                "tmp_size": tmp_size,
                "good_path": str(good.path),
                "good_records": sum(good.meta["offsets"].values()),
                "misses": misses,
            }
        os.kill(daemon.pid, signal.SIGCONT)  # the write finished in between: try again
        misses += 1
    raise AssertionError(f"never caught a checkpoint write in flight\n{daemon.log_tail()}")


def test_sigkill_during_checkpoint_write_restores_last_good_and_equals_oracle(
    broker: LocalBroker, tmp_path: Path, kafka_client: str
) -> None:
    now = int(time.time() * 1000)
    traffic = binary_traffic(
        N_PREDICTIONS,
        seed=17,
        start_ms=now - 420 * 60_000,
        rate_per_s=N_PREDICTIONS / (400 * 60),  # ~400 one-minute buckets
        delay_mean_s=20.0,
    )
    preds, labels = traffic.predictions, traffic.labels
    assert max(lab["ts"] for lab in labels) < now
    oracle = sklearn_oracle(preds, labels)
    messages = event_ordered(preds, labels)
    broker.create_topics(["predictions", "labels"])
    daemon = stream_daemon(broker.bootstrap, tmp_path, "daemon", client=kafka_client, window=WINDOW)
    store = CheckpointStore(tmp_path / "state")
    # a loaded machine restarts the daemon slower: the stream lasts longer, so the kills
    # still land mid-stream (the rest is sent unpaced after them)
    producer = StreamProducer(broker.bootstrap, messages, PRODUCE_SECONDS * load_factor())
    try:
        daemon.start()
        daemon.wait_ready()
        producer.start()
        # arm once the state is big (a write takes measurable time) and records still flow
        wait_until(
            lambda: daemon.scrape().total("mlmon_records_total") >= 0.4 * len(messages),
            60,
            lambda: daemon.log_tail(),
        )
        consumed = daemon.scrape().total("mlmon_records_total")
        kill = kill_mid_write(daemon, store)
        kill["consumed_before"] = consumed
        assert store.tmp_path.exists(), kill  # the interrupted write left its temp file
        assert 0 < kill["good_records"] < len(messages), kill
        print(f"killed mid-write: {kill}")

        killed_at = time.time()
        daemon.start()
        restored = restored_checkpoint(daemon)
        assert restored is not None, daemon.log_tail()
        assert restored == (kill["good_path"], kill["good_records"]), kill

        producer.hurry()  # the kill landed mid-stream: the rest needs no pacing
        producer.join(timeout=120)
        assert producer.error is None, repr(producer.error)
        assert producer.sent == len(messages)
        m, _ = daemon.wait_consumed({"predictions": len(preds), "labels": len(labels)}, 120)
        ctx = f"kill: {kill}\n{daemon.log_tail(60)}"
        assert_counted_once(m, len(preds), len(labels), ctx)
        assert m.total("mlmon_label_delay_seconds_count") == len(labels), ctx
        assert_quality(m, oracle, WINDOW, ctx)

        # checkpoints go on after the crash: a newer complete one replaces the stale temp
        def caught_up() -> bool:
            try:
                newest = read_checkpoint(store.path)
            except CheckpointError:  # being replaced right now
                return False
            covered = sum(newest.meta["offsets"].values())
            return store.path.stat().st_mtime > killed_at and covered == len(messages)

        wait_until(caught_up, 20, ctx)
        assert daemon.terminate() == 0, daemon.log_tail()
        assert not store.tmp_path.exists()
    finally:
        daemon.close()
