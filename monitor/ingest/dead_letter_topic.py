"""The dead-letter topic sink, built to outlive a broker outage and never to block.

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

A record the broker refuses for itself — larger than its message size limit — is not a
broker outage: sent again it would fail again, and spooled it would block the spool
head-of-line forever (and readiness would flap with every attempt). Values are cut to
``MAX_VALUE_BYTES`` before sending (header ``mlmon-truncated``: the original size);
a record still refused is sent once more as a placeholder without its value, and one
refused even so is dropped and counted (``dead_letter_lost``). Spool writes that fail
(a full disk) are counted and lose those entries; they never stop the consumer loop.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson

from ..engine.records import Rejection
from ..state.lock import FILE_MODE
from .deadletter import dead_letter_json, log_failure

__all__ = ["TopicDeadLetter"]

log = logging.getLogger(__name__)

_SEND_TIMEOUT_S = 10.0
_CLOSE_TIMEOUT_S = 2.0  # each step of close(): a shutdown must not wait out an outage

Entry = dict[str, Any]  # dead_letter_json: what the spool holds per record


def _headers(entry: Entry, truncated_from: int | None = None) -> list[tuple[str, bytes]]:
    out = [
        ("mlmon-reason", str(entry["reason"]).encode()),
        ("mlmon-detail", str(entry["detail"]).encode()[:1000]),
        ("mlmon-source", f"{entry['topic']}/{entry['partition']}/{entry['offset']}".encode()),
    ]
    size = truncated_from if truncated_from is not None else entry.get("truncated_from")
    if size is not None:
        out.append(("mlmon-truncated", str(size).encode()))
    return out


def _value(entry: Entry) -> bytes | None:
    raw = entry.get("value_b64")
    return None if raw is None else base64.b64decode(raw)


def _placeholder(entry: Entry) -> Entry:
    """The entry without its value (the header says how long the value was)."""
    value = _value(entry)
    size = entry.get("truncated_from") or (len(value) if value is not None else 0)
    return {**entry, "placeholder": True, "truncated_from": size}


def _too_large(err: object) -> bool:
    """The broker or client refuses this record for its size (kafka-python's
    MessageSizeTooLargeError, librdkafka's MSG_SIZE_TOO_LARGE, a broker's
    RecordTooLarge): sending it again cannot succeed."""
    text = f"{type(err).__name__} {err}".lower().replace("_", " ")
    return "too large" in text or "toolarge" in text


def _failure(fut: Any) -> object | None:
    """Why a finished send failed (None: delivered, or not finished)."""
    if not getattr(fut, "is_done", False):
        return "not acknowledged in time"
    error = getattr(fut, "exception", None)  # kafka-python
    if error is None:
        error = getattr(fut, "error", None)  # confluent's delivery report
    return error


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
        self.faults: Counter[str] = Counter()
        self._connect = connect
        self._producer: Any = None
        self._lock = threading.Lock()  # the spool file and the producer reference
        self._failures = 0
        self._fh: Any = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.error: str | None = "dead-letter topic not connected yet"
        self.spooled = self._count_lines(self.spool) + self._count_lines(self.draining)
        self._bytes = sum(p.stat().st_size for p in (self.spool, self.draining) if p.exists())
        self.spooled_total = 0
        self._inflight: list[tuple[Any, Entry]] = []  # sent since the last flush
        self._open_spool()
        self._thread = threading.Thread(target=self._run, name="dead-letter", daemon=True)
        self._thread.start()

    # -- the sink protocol (consumer thread) --------------------------------------
    def write(self, rejections: Sequence[Rejection]) -> None:
        if not rejections:
            return
        now = time.time()
        entries = [dead_letter_json(r, now) for r in rejections]
        self.faults["dead_letter_truncated"] += sum("truncated_from" in e for e in entries)
        producer = self._producer
        sent = 0
        if producer is not None:
            try:
                for entry in entries:
                    self._inflight += self._send(producer, [entry])
                    sent += 1
            except Exception as err:  # metadata timeout, buffer full: broker gone
                self._down(f"send failed: {err!r}")
        if sent < len(entries):
            self._append(entries[sent:])

    def flush(self, timeout: float = _SEND_TIMEOUT_S) -> None:
        """Before a checkpoint: every record rejected so far is acknowledged by the
        broker or fsynced in the spool, so the checkpoint's offsets never pass a record
        that could still be lost (short of a failed spool write, which is counted)."""
        inflight, self._inflight = self._inflight, []
        producer = self._producer
        undelivered = [e for _, e in inflight]
        if producer is not None:
            try:
                producer.flush(timeout=timeout)
                undelivered = self._settle(producer, inflight)
            except Exception as err:
                self._down(f"flush failed: {err!r}")
        if undelivered:
            self._append(undelivered)
        with self._lock:
            if self._fh is None:
                return
            try:
                self._fh.flush()
                os.fsync(self._fh.fileno())
            except OSError as err:
                self._spool_failed(f"syncing {self.spool}: {err}")

    def _send(self, producer: Any, entries: Iterable[Entry]) -> list[tuple[Any, Entry]]:
        """Send each entry; one the client refuses for its size at once goes as a
        placeholder (its metadata without the value), one refused even so is dropped
        and counted. Returns the sends to check; raises when the broker is unreachable."""
        out = []
        for entry in entries:
            placeholder = entry.get("placeholder", False)
            value = b"" if placeholder else _value(entry)
            self.faults["dead_letter_placeholder"] += placeholder
            try:
                out.append((producer.send(self.topic, value=value, headers=_headers(entry)), entry))
                continue
            except Exception as err:
                if not _too_large(err):
                    raise
                if placeholder:
                    self._lost(1, f"record at {entry['topic']}/{entry['offset']}: {err!r}")
                    continue
            out += self._send(producer, [_placeholder(entry)])
        return out

    def _settle(self, producer: Any, sent: list[tuple[Any, Entry]]) -> list[Entry]:
        """After a flush: the entries not acknowledged, to keep (spool). Those refused
        for their size are sent again as placeholders (and checked): never kept, since
        they could never be sent as they are."""
        refused: list[Entry] = []
        undelivered: list[Entry] = []
        for fut, entry in sent:
            error = _failure(fut)
            if error is None:
                continue
            if not _too_large(error):
                undelivered.append(entry)
            elif entry.get("placeholder"):
                self._lost(1, f"record at {entry['topic']}/{entry['offset']}: {error}")
            else:
                refused.append(_placeholder(entry))
        if refused:
            again = self._send(producer, refused)
            producer.flush(timeout=_SEND_TIMEOUT_S)
            undelivered += self._settle(producer, again)
        return undelivered

    def close(self) -> None:
        """Stop within a few seconds even while the broker is unreachable: what is not
        acknowledged by then stays in the spool, sent after the next start."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=_CLOSE_TIMEOUT_S)
        try:
            self.flush(timeout=_CLOSE_TIMEOUT_S)
        finally:
            with self._lock:
                if self._fh is not None:
                    with contextlib.suppress(OSError):
                        self._fh.close()
                    self._fh = None
                producer, self._producer = self._producer, None
            if producer is not None:
                producer.close(timeout=_CLOSE_TIMEOUT_S)

    # -- state for readiness and metrics ------------------------------------------
    def connected(self) -> bool:
        return self._producer is not None

    def backlogged(self) -> bool:
        """The spool is over its limit: the consumer must pause."""
        return self._bytes > self.max_spool_bytes

    # -- internals -----------------------------------------------------------------
    def _open_spool(self) -> bool:
        """The spool file, opened for appending (again after a failure)."""
        if self._fh is not None:
            return True
        try:
            self.spool.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.spool, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
            os.fchmod(fd, FILE_MODE)
            self._fh = os.fdopen(fd, "ab")
        except OSError as err:
            self._spool_failed(f"cannot open {self.spool}: {err}")
            return False
        return True

    @staticmethod
    def _count_lines(path: Path) -> int:
        try:
            with open(path, "rb") as fh:
                return sum(1 for _ in fh)
        except FileNotFoundError:
            return 0

    def _spool_failed(self, error: str) -> None:
        self._failures += 1
        self.faults["dead_letter_write_failed"] += 1
        log_failure(self._failures, "dead-letter spool: %s", error)

    def _lost(self, n: int, why: str) -> None:
        self.faults["dead_letter_lost"] += n
        log.error("dead-letter topic %s: %d record(s) lost: %s", self.topic, n, why)

    def _append(self, entries: Sequence[Entry]) -> None:
        data = b"".join(orjson.dumps(e) + b"\n" for e in entries)
        with self._lock:
            if not self._open_spool():
                self.faults["dead_letter_lost"] += len(entries)
                return
            start = self._fh.tell()
            try:
                self._fh.write(data)
                self._fh.flush()
            except OSError as err:  # a full disk: a partial line is cut off again
                with contextlib.suppress(OSError, ValueError):
                    self._fh.close()
                self._fh = None
                with contextlib.suppress(OSError):
                    os.truncate(self.spool, start)
                self.faults["dead_letter_lost"] += len(entries)
                self._spool_failed(f"writing {self.spool}: {err}")
                return
            self.spooled += len(entries)
            self._bytes += len(data)
        self.spooled_total += len(entries)

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
        """Send the spool to the topic; the file goes only once every entry is
        acknowledged (or, refused for its size, replaced by a placeholder)."""
        with self._lock:
            fh = self._fh
            if not self.draining.exists() and fh is not None and fh.tell() > 0:
                fh.close()
                os.replace(self.spool, self.draining)
                self._fh = None
                self._open_spool()
        producer = self._producer
        if producer is None or not self.draining.exists():
            return
        count = 0
        try:
            with open(self.draining, "rb") as fh:
                entries = [orjson.loads(line) for line in fh]
            sent = self._send(producer, entries)
            count = len(sent)
            producer.flush(timeout=_SEND_TIMEOUT_S)
            undelivered = self._settle(producer, sent)
            if undelivered:
                raise RuntimeError(f"{len(undelivered)} record(s) not acknowledged")
        except Exception as err:
            self._down(f"draining the spool failed after {count} record(s): {err!r}")
            return  # the .draining file stays; it is sent again (at-least-once)
        size = self.draining.stat().st_size
        self.draining.unlink()
        with self._lock:
            self.spooled = max(0, self.spooled - len(entries))
            self._bytes = max(0, self._bytes - size)
        log.info("sent %d spooled dead-letter record(s) to %s", len(entries), self.topic)
