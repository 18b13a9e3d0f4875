"""On stop the daemon checkpoints (and commits) first, then does no more evaluation work.

A big configuration's daemon used to run one more evaluation and render of /metrics
after the final checkpoint: over 20 s under load, racing ``state.shutdown_grace`` for a
page that nobody would read (the HTTP server stops right after).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from monitor.app import Daemon
from monitor.config import settings_from_mapping
from monitor.engine.snapshot import Snapshot
from monitor.ingest.deadletter import DeadLetterSink
from monitor.ingest.kafka import KafkaSource


class _RecordingDaemon(Daemon):
    """A consumer loop that only waits for the stop, and a log of what ran when."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.events: list[str] = []
        self.evaluated = threading.Event()

    def _consume(self, sink: DeadLetterSink) -> KafkaSource | None:
        self._stop.wait()
        return None

    def evaluate_now(self) -> Snapshot | None:
        self.events.append(f"evaluate in {threading.current_thread().name}")
        snap = super().evaluate_now()
        self.evaluated.set()
        return snap

    def checkpoint(self, sink: DeadLetterSink | None, source: KafkaSource | None) -> bool:
        ok = super().checkpoint(sink, source)
        self.events.append("checkpoint" if ok else "checkpoint failed")
        return ok


def test_no_evaluation_after_the_final_checkpoint(tmp_path: Path) -> None:
    settings = settings_from_mapping(
        {
            "http": {"port": 0},
            "evaluation": {"interval": "0.2s"},
            "state": {"dir": str(tmp_path / "state"), "shutdown_grace": "8s"},
            "models": [{"name": "fraud"}],
        }
    )
    daemon = _RecordingDaemon(settings)
    thread = threading.Thread(target=daemon.run, name="run")
    thread.start()
    assert daemon.evaluated.wait(30), "the scheduler never evaluated"
    daemon.request_stop()
    started = time.monotonic()
    thread.join(30)
    assert not thread.is_alive()
    assert daemon.stopped.is_set()
    assert "evaluate in evaluation" in daemon.events  # the scheduler's thread
    assert daemon.events.count("checkpoint") == 1, daemon.events
    # the stopping thread evaluates nothing (a pass the scheduler began before the stop
    # may still be finishing: it is not waited for beyond the bound below)
    assert "evaluate in run" not in daemon.events, daemon.events
    # the scheduler is waited for at most shutdown_grace / 4
    assert time.monotonic() - started < 8, daemon.events
