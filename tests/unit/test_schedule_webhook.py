"""A scheduled job's webhook post is fenced like alert delivery: an instance paused in the
middle of a job (SIGSTOP, a VM freeze) that resumes after another instance took the
exporter lease posts nothing — the lease is asked once the connection is up, right before
the first byte — and the run counts ``skipped``."""

from __future__ import annotations

import socket
import threading
from datetime import UTC, datetime
from typing import Any

import orjson

from monitor.config import settings_from_mapping
from monitor.schedule.jobs import ScheduledJobs

NOW = datetime(2026, 11, 27, 6, 0, tzinfo=UTC)


class _Overview:
    """What the summary job reads from the daemon."""

    def __init__(self, url: str) -> None:
        self.settings = settings_from_mapping(
            {
                "models": [{"name": "fraud", "windows": [{"size": "1h"}]}],
                "schedules": [
                    {"name": "daily", "job": "summary", "cron": "0 6 * * *", "webhook_url": url}
                ],
            }
        )

    def overview(self) -> dict[str, Any]:
        return {"ready": True, "slos": [], "drift": [], "comparisons": []}


class _Server:
    """A loopback socket that records what each connection wrote and answers 200."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.sock.settimeout(10)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"
        self.received: list[bytes] = []
        self.done = threading.Event()

    def serve_one(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            conn.settimeout(5)
            data = b""
            while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _length(data):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            self.received.append(data)
            if data:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        self.done.set()


def _length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 0


def _run(server: _Server, guard: Any) -> tuple[str, str]:
    monitor = _Overview(server.url)
    jobs = ScheduledJobs(monitor, monitor.settings.schedules, guard=guard).jobs()  # type: ignore[arg-type]
    t = threading.Thread(target=server.serve_one, daemon=True)
    t.start()
    try:
        return jobs["daily"](NOW)
    finally:
        t.join(10)
        server.sock.close()


def test_the_holder_posts_the_summary() -> None:
    server = _Server()
    outcome, detail = _run(server, lambda: True)
    assert outcome == "ok", detail
    (request,) = server.received
    body = orjson.loads(request.split(b"\r\n\r\n", 1)[1])
    assert body["schedule"] == "daily" and body["problems"] == []


def test_a_lease_lost_before_the_first_byte_posts_nothing() -> None:
    server = _Server()
    asked: list[bool] = []

    def lease_gone_once_connected() -> bool:
        asked.append(server.done.is_set())
        return False

    outcome, detail = _run(server, lease_gone_once_connected)
    assert outcome == "skipped", detail
    assert "nothing was posted" in detail
    assert asked == [False]  # asked while the connection was open, before it closed
    assert server.received == [b""]  # connected, then closed with nothing written
