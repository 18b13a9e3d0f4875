"""The daemon's published status is replaced by three threads (consumer loop, evaluation
scheduler, shutdown); no thread may undo another's change. A lost update would make
``mlmon_checkpoint_failures_total`` go backwards or resurrect a cleared checkpoint error."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from monitor.app import Daemon
from monitor.config import settings_from_mapping


def test_concurrent_status_updates_are_never_lost(tmp_path: Path) -> None:
    daemon = Daemon(
        settings_from_mapping({"state": {"dir": str(tmp_path)}, "models": [{"name": "m"}]})
    )
    n = 20_000
    stop = threading.Event()

    def publisher() -> None:  # what the consumer loop does every 0.25 s, as fast as it can
        while not stop.is_set():
            daemon._publish_ops()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    thread = threading.Thread(target=publisher)
    thread.start()
    try:
        for _ in range(n):  # what a failing checkpoint does
            failures = daemon.published().status.checkpoint_failures
            daemon._set_status(checkpoint_failures=failures + 1, last_checkpoint_error="x")
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)
    assert daemon.published().status.checkpoint_failures == n
