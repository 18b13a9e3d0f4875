"""A failed poll is transient until failures persist for ``kafka.poll_error_grace``.

kafka-python computes its poll timeout from ``time.time()``: when the wall clock steps
back, one poll fails with ``OSError(EINVAL)`` and the next one works. Readiness must not
flip for that; a source that keeps failing must make the daemon not ready.
"""

from __future__ import annotations

import errno
import threading
from pathlib import Path
from typing import Any

from monitor.app import Daemon
from monitor.config import settings_from_mapping
from monitor.ingest.kafka import KafkaSource


class _Source:
    """A connected source with one partition whose polls fail ``failures`` times (all of
    them when None), then return nothing; it records whether the daemon was consuming
    at each poll and stops the daemon after ``polls`` polls."""

    def __init__(self, daemon: Daemon, failures: int | None, polls: int) -> None:
        self.daemon, self.failures, self.polls = daemon, failures, polls
        self.calls = 0
        self.consuming_seen: list[bool] = []
        self.not_ready = threading.Event()

    def poll(self, timeout_ms: int) -> dict[str, Any]:
        self.calls += 1
        st = self.daemon.published().status
        self.consuming_seen.append(st.consuming)
        if not st.consuming:
            self.not_ready.set()
        if self.calls >= self.polls:
            self.daemon.request_stop()
        if self.failures is None or self.calls <= self.failures:
            raise OSError(errno.EINVAL, "Invalid argument")
        return {}

    def assignment(self) -> set[tuple[str, int]]:
        return {("predictions", 0)}

    def connected(self) -> bool:
        return True

    def silent_for(self) -> float | None:
        return None

    def lag(self) -> list[tuple[str, int, int]]:
        return []

    def commit(self, offsets: dict[str, int]) -> None:
        pass

    def close(self) -> None:
        pass


def _daemon(tmp_path: Path, failures: int | None, polls: int, grace: str) -> tuple[Daemon, _Source]:
    settings = settings_from_mapping(
        {
            "http": {"port": 0},
            "kafka": {"poll_error_grace": grace, "bootstrap_servers": "127.0.0.1:1"},
            "state": {"dir": str(tmp_path / "state")},
            "models": [{"name": "fraud"}],
        }
    )
    daemon = Daemon(settings)
    source = _Source(daemon, failures, polls)

    def connect() -> KafkaSource:
        return source  # type: ignore[return-value]

    daemon._connect = connect  # type: ignore[method-assign]
    return daemon, source


def _faults(daemon: Daemon) -> dict[str, int]:
    return dict(daemon.published().status.fault_events)


def test_one_failed_poll_keeps_the_daemon_consuming(tmp_path: Path) -> None:
    daemon, source = _daemon(tmp_path, failures=1, polls=5, grace="5s")
    assert daemon.run() == 0
    assert source.calls == 5
    assert all(source.consuming_seen), source.consuming_seen
    assert _faults(daemon)["poll_failed"] == 1


def test_persisting_poll_failures_make_the_daemon_not_ready(tmp_path: Path) -> None:
    daemon, source = _daemon(tmp_path, failures=None, polls=4, grace="0.5s")
    assert daemon.run() == 0
    # polls 1 s apart: the first failure is within the grace, the second one is past it
    assert source.consuming_seen[:2] == [True, True], source.consuming_seen
    assert not any(source.consuming_seen[2:]), source.consuming_seen
    assert _faults(daemon)["poll_failed"] == 4
    assert daemon.published().status.source_error == "poll failed: [Errno 22] Invalid argument"
