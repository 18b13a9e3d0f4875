"""The dead-letter topic sink, built to outlive a broker outage.

Why: the producer used to be built at start, and kafka-python blocks ~30 s and raises
when no broker answers, so ``monitor run`` died in a crash loop whenever Kafka was
down — exactly when the consumer's own retry path would have kept it serving. Here the
producer is built and re-checked by a background thread with the consumer's backoff;
until it is up, rejected records go to a spool file in the state directory
(``dead-letter.spool.jsonl``, JSON lines as in the file sink, fsynced before every
checkpoint), so they are never lost. The same thread drains the spool to the topic
once the producer is up. Above ``max_spool_bytes`` the daemon pauses consumption
(``backlogged``): offsets stay behind and nothing is read that could not be kept.
Delivery stays at-least-once (each entry carries topic/partition/offset).
"""

from __future__ import annotations

import base64
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from ..engine.records import Rejection
from ..state.lock import FILE_MODE
from .deadletter import dead_letter_json

__all__ = ["TopicDeadLetter"]

log = logging.getLogger(__name__)

_SEND_TIMEOUT_S = 10.0


def _headers(entry: dict[str, Any]) -> list[tuple[str, bytes]]:
    return [
        ("mlmon-reason", str(entry["reason"]).encode()),
        ("mlmon-detail", str(entry["detail"]).encode()[:1000]),
        ("mlmon-source", f"{entry['topic']}/{entry['partition']}/{entry['offset']}".encode()),
    ]


class TopicDeadLetter:
    def __init__(
        self,
        connect: Callable[[], Any],
        topic: str,
        spool: Path,
        max_spool_bytes: int,
    ) -> None:
        self.topic = topic
        self.spool = Path(spool)
        self.draining = self.spool.with_suffix(".draining")
        self.max_spool_bytes = int(max_spool_bytes)
        self._connect = connect
        self._producer: Any = None
        self._lock = threading.Lock()  # the spool file and the producer reference
        self._fh = self._open_spool()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.error: str | None = "dead-letter topic not connected yet"
        self.spooled = self._count_lines(self.spool) + self._count_lines(self.draining)
        self._bytes = sum(p.stat().st_size for p in (self.spool, self.draining) if p.exists())
        self.spooled_total = 0
        self._inflight: list[tuple[Any, Rejection]] = []  # sent since the last flush
        self._thread = threading.Thread(target=self._run, name="dead-letter", daemon=True)
        self._thread.start()

    # -- the sink protocol (consumer thread) --------------------------------------
    def write(self, rejections: Sequence[Rejection]) -> None:
        if not rejections:
            return
        producer = self._producer
        sent = 0
        if producer is not None:
            try:
                now = time.time()
                for r in rejections:
                    entry = dead_letter_json(r, now)
                    fut = producer.send(self.topic, value=r.raw, headers=_headers(entry))
                    self._inflight.append((fut, r))
                    sent += 1
            except Exception as err:  # metadata timeout, buffer full: broker gone
                self._down(f"send failed: {err!r}")
        if sent < len(rejections):
            self._append(rejections[sent:])

    def flush(self) -> None:
        """Before a checkpoint: every record rejected so far is acknowledged by the
        broker or fsynced in the spool, so the checkpoint's offsets never pass a record
        that could still be lost."""
        producer = self._producer
        if producer is not None:
            try:
                producer.flush(timeout=_SEND_TIMEOUT_S)
            except Exception as err:
                self._down(f"flush failed: {err!r}")
        inflight, self._inflight = self._inflight, []
        undelivered = [r for fut, r in inflight if not (fut.is_done and fut.succeeded())]
        if undelivered:
            self._append(undelivered)
        with self._lock:
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=5)  # within the shutdown grace; the spool stays on disk
        try:
            self.flush()
        finally:
            with self._lock:
                self._fh.close()
                producer, self._producer = self._producer, None
            if producer is not None:
                producer.close(timeout=5)

    # -- state for readiness and metrics ------------------------------------------
    def connected(self) -> bool:
        return self._producer is not None

    def backlogged(self) -> bool:
        """The spool is over its limit: the consumer must pause."""
        return self._bytes > self.max_spool_bytes

    # -- internals -----------------------------------------------------------------
    def _open_spool(self) -> Any:
        self.spool.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.spool, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
        os.fchmod(fd, FILE_MODE)
        return os.fdopen(fd, "ab")

    @staticmethod
    def _count_lines(path: Path) -> int:
        try:
            with open(path, "rb") as fh:
                return sum(1 for _ in fh)
        except FileNotFoundError:
            return 0

    def _append(self, rejections: Sequence[Rejection]) -> None:
        now = time.time()
        data = b"".join(orjson.dumps(dead_letter_json(r, now)) + b"\n" for r in rejections)
        with self._lock:
            self._fh.write(data)
            self.spooled += len(rejections)
            self._bytes += len(data)
        self.spooled_total += len(rejections)

    def _down(self, why: str) -> None:
        with self._lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            log.warning(
                "dead-letter topic %s unreachable (%s): spooling to %s", self.topic, why, self.spool
            )
            threading.Thread(target=producer.close, kwargs={"timeout": 0}, daemon=True).start()
        self.error = f"dead-letter topic {self.topic} unreachable: {why}"
        self._wake.set()

    def _run(self) -> None:
        """Connect with backoff (0.5 s doubling to 30 s, as the consumer), then drain."""
        backoff = 0.5
        while not self._stop.is_set():
            if self._producer is None:
                try:
                    producer = self._connect()
                    producer.partitions_for(self.topic)  # metadata: the broker answers
                except Exception as err:
                    self.error = f"cannot reach the dead-letter topic {self.topic}: {err!r}"
                    log.warning("%s; retrying in %.1fs", self.error, backoff)
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 30.0)
                    continue
                with self._lock:
                    self._producer = producer
                self.error = None
                backoff = 0.5
                log.info("dead-letter topic %s connected", self.topic)
            if self.spooled:
                self._drain()
            self._wake.wait(1.0)
            self._wake.clear()

    def _drain(self) -> None:
        """Send the spool to the topic; the file goes only after the broker acked all."""
        with self._lock:
            if not self.draining.exists() and self._fh.tell() > 0:
                self._fh.close()
                os.replace(self.spool, self.draining)
                self._fh = self._open_spool()
        producer = self._producer
        if producer is None or not self.draining.exists():
            return
        sent = 0
        try:
            with open(self.draining, "rb") as fh:
                for line in fh:
                    entry = orjson.loads(line)
                    raw = entry.get("value_b64")
                    value = None if raw is None else base64.b64decode(raw)
                    producer.send(self.topic, value=value, headers=_headers(entry))
                    sent += 1
            producer.flush(timeout=_SEND_TIMEOUT_S)
        except Exception as err:
            self._down(f"draining the spool failed after {sent} record(s): {err!r}")
            return  # the .draining file stays; it is sent again (at-least-once)
        size = self.draining.stat().st_size
        self.draining.unlink()
        with self._lock:
            self.spooled = max(0, self.spooled - sent)
            self._bytes = max(0, self._bytes - size)
        log.info("sent %d spooled dead-letter record(s) to %s", sent, self.topic)
