"""Wall-clock jumps (libfaketime on the daemon process only) and the event clock's
watermark, against the real daemon and a real tansu broker.

libfaketime moves CLOCK_REALTIME only (FAKETIME_DONT_FAKE_MONOTONIC=1), as an NTP step
or ``date -s`` would; the offset is re-read from a file on every call, so the test moves
the daemon's clock while it runs.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from monitor.localbroker import LocalBroker

from .daemon_harness import (
    DaemonProcess,
    Metrics,
    base_config,
    encode,
    produce,
    write_config,
)

pytestmark = pytest.mark.integration

DAY_MS = 86_400_000


def _pairs(n: int, start_ms: int, prefix: str) -> list[tuple[str, tuple[bytes, bytes]]]:
    out = []
    for i in range(n):
        pid = f"{prefix}{i}"
        pred = {"id": pid, "ts": start_ms + i, "model": "fraud", "version": "v1", "score": 0.8}
        label = {"id": pid, "ts": start_ms + i + 1000, "label": i % 2}
        out.append(("predictions", (pid.encode(), encode(pred))))
        out.append(("labels", (pid.encode(), encode(label))))
    return out


def _samples(m: Metrics) -> float:
    return m.total("mlmon_window_samples", model="fraud")


def _evaluated_after(daemon: DaemonProcess, real_after: float) -> Metrics:
    """A scrape whose snapshot was evaluated after ``real_after`` (real Unix time)."""
    deadline = time.monotonic() + 20
    while True:
        m = daemon.scrape()
        at = m.get("mlmon_last_evaluation_timestamp_seconds")
        if at is not None and at > real_after:
            return m
        assert time.monotonic() < deadline, f"no evaluation after {real_after}\n{daemon.log_tail()}"
        time.sleep(0.2)


class _ReadinessWatch:
    """Probes ``/readyz`` every 0.2 s on a thread while the block runs; keeps failures."""

    def __init__(self, daemon: DaemonProcess) -> None:
        self.daemon = daemon
        self.probes = 0
        self.failed: list[tuple[int, bytes]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._probe, daemon=True)

    def _probe(self) -> None:
        while not self._stop.wait(0.2):
            code, body = self.daemon.get("/readyz")
            self.probes += 1
            if code != 200:
                self.failed.append((code, body))

    def __enter__(self) -> _ReadinessWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def test_wall_clock_jumps_lose_nothing_and_never_stall(
    broker: LocalBroker, tmp_path: Path, libfaketime: str
) -> None:
    """Reported: +2 d for 6 s emptied every window and checkpointed the loss; -1 h
    rejected every new record as future_timestamp; a jump back stalled evaluation."""
    lib = libfaketime
    broker.create_topics(["predictions", "labels"])
    offset = tmp_path / "faketime"
    offset.write_text("+0\n")
    cfg = base_config(
        broker.bootstrap,
        tmp_path / "state",
        windows=({"size": "1h"},),
        state={"checkpoint_interval": "1s"},
    )
    path = write_config(tmp_path / "monitor.toml", cfg)
    env = {
        "LD_PRELOAD": lib,
        "FAKETIME_TIMESTAMP_FILE": str(offset),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
    daemon = DaemonProcess(path, tmp_path / "d.log", env=env)
    now_ms = int(time.time() * 1000)
    try:
        daemon.start()
        daemon.wait_ready()
        produce(broker.bootstrap, _pairs(200, now_ms - 300_000, "a"))
        m, _ = daemon.wait_consumed({"predictions": 200, "labels": 200})
        assert _samples(m) == 200, daemon.log_tail()  # one scrape, one evaluation

        # kafka-python times its poll on the wall clock: a jump back can fail one poll
        # (EINVAL, a negative timeout), which is transient (kafka.poll_error_grace):
        # the daemon stays ready through every jump
        with _ReadinessWatch(daemon) as ready:
            offset.write_text("+2d\n")  # forward two days, for six seconds
            time.sleep(6)
            offset.write_text("+0\n")
            time.sleep(1)
            m = _evaluated_after(daemon, time.time())
            assert _samples(m) == 200, daemon.log_tail()
            assert m.total("mlmon_fault_events_total", event="wall_clock_jump_refused") >= 1

            offset.write_text("-1h\n")  # back one hour: new records are not "in the future"
            time.sleep(1)
            produce(broker.bootstrap, _pairs(100, int(time.time() * 1000) - 60_000, "b"))
            m, _ = daemon.wait_consumed({"predictions": 300, "labels": 300})
            assert m.total("mlmon_invalid_records_total") == 0, daemon.log_tail()
            assert _samples(m) == 300
        assert ready.probes >= 20 and not ready.failed, (ready.failed, daemon.log_tail())
        first = _evaluated_after(daemon, time.time()).get("mlmon_last_evaluation_timestamp_seconds")
        time.sleep(3)  # evaluations continue on monotonic time, stamped with real time
        later = _evaluated_after(daemon, time.time()).get("mlmon_last_evaluation_timestamp_seconds")
        assert first is not None and later is not None and later > first
        assert abs(later - time.time()) < 30
        code, body = daemon.get("/readyz")
        assert code == 200, body
        assert daemon.terminate() == 0
        offset.write_text("+0\n")
        daemon.start()  # the checkpoint kept everything
        daemon.wait_ready()
        m = _evaluated_after(daemon, time.time())
        assert _samples(m) == 300
        assert daemon.terminate() == 0
    finally:
        daemon.close()


def test_event_clock_survives_an_outlier_and_counts_too_late(
    broker: LocalBroker, tmp_path: Path
) -> None:
    """Reported: a 3-day-old backfill then one record at now+4 min -> windows 1000 -> 1,
    the next backfill counted nowhere (also after a restart)."""
    broker.create_topics(["predictions", "labels"])
    cfg = base_config(
        broker.bootstrap,
        tmp_path / "state",
        windows=({"size": "1d"},),
        evaluation={"clock": "event"},
    )
    daemon = DaemonProcess(write_config(tmp_path / "monitor.toml", cfg), tmp_path / "d.log")
    now_ms = int(time.time() * 1000)
    backfill = now_ms - 3 * DAY_MS
    outlier = {"id": "o", "ts": now_ms + 240_000, "model": "fraud", "version": "v1", "score": 0.1}
    try:
        daemon.start()
        daemon.wait_ready()
        produce(broker.bootstrap, _pairs(300, backfill, "a"))
        produce(broker.bootstrap, [("predictions", (b"o", encode(outlier)))])
        m, _ = daemon.wait_consumed({"predictions": 301, "labels": 300})
        assert _samples(m) == 300, daemon.log_tail()
        produce(broker.bootstrap, _pairs(300, backfill + 600_000, "b"))
        m, _ = daemon.wait_consumed({"predictions": 601, "labels": 600})
        assert _samples(m) == 600
        five_years = [
            ("predictions", (f"old{i}".encode(), encode({
                "id": f"old{i}", "ts": now_ms - 5 * 365 * DAY_MS, "model": "fraud",
                "version": "v1", "score": 0.5,
            })))
            for i in range(5)
        ]  # fmt: skip
        produce(broker.bootstrap, five_years)
        m, _ = daemon.wait_consumed({"predictions": 606, "labels": 600})
        assert m.get("mlmon_join_events_total", event="too_late") == 5
        assert daemon.terminate() == 0
        daemon.start()
        daemon.wait_ready()
        m = _evaluated_after(daemon, time.time())
        assert _samples(m) == 600
        assert m.get("mlmon_join_events_total", event="too_late") == 5
        assert daemon.terminate() == 0
    finally:
        daemon.close()
