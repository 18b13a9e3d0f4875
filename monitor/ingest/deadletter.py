"""Dead-letter sinks: every rejected record, with its original bytes and the reason.

Delivery is at-least-once: a record rejected after the last checkpoint is rejected
again when the daemon replays from that checkpoint, so a crash can repeat a
dead-letter entry (each carries topic/partition/offset to de-duplicate on).

The dead letters are a side path: a full disk, a read-only directory or a broker that
refuses a record must never stop the consumer loop (a bad record would otherwise crash
the daemon again on every restart). Every sink therefore never raises: a failure is
counted in its ``faults`` (``mlmon_fault_events_total``), the entries it could not keep
are counted as ``dead_letter_lost``, and the last error is kept for ``/api/v1/status``.
Values above ``MAX_VALUE_BYTES`` (an ``oversize`` record, say) are cut to their first
``MAX_VALUE_BYTES`` with ``truncated_from`` saying how long they were, so one entry fits
any Kafka broker's default message size and no file fills with megabyte records.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import orjson

from ..engine.records import Rejection
from ..state.lock import FILE_MODE, private_dir

__all__ = [
    "MAX_VALUE_BYTES",
    "DeadLetterSink",
    "FileDeadLetter",
    "dead_letter_json",
    "dead_letter_value",
]

log = logging.getLogger(__name__)

MAX_VALUE_BYTES = 512 * 1024  # of a rejected record's bytes kept in its dead letter


class DeadLetterSink(Protocol):
    faults: Counter[str]  # handled faults by event (mlmon_fault_events_total)
    error: str | None  # the last failure, None once writes succeed again

    def write(self, rejections: Sequence[Rejection]) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


def dead_letter_value(raw: bytes | None) -> tuple[bytes | None, int | None]:
    """The bytes a dead letter keeps of a record, and its original size when cut."""
    if raw is None or len(raw) <= MAX_VALUE_BYTES:
        return raw, None
    return raw[:MAX_VALUE_BYTES], len(raw)


def dead_letter_json(r: Rejection, now: float) -> dict[str, Any]:
    value, cut_from = dead_letter_value(r.raw)
    out: dict[str, Any] = {
        "reason": r.reason,
        "detail": r.detail,
        "topic": r.topic,
        "partition": r.partition,
        "offset": r.offset,
        "rejected_at": round(now, 3),
        "value_b64": None if value is None else base64.b64encode(value).decode(),
    }
    if cut_from is not None:
        out["truncated_from"] = cut_from
    return out


def log_failure(count: int, message: str, *args: Any) -> None:
    """Log a recurring failure at its 1st, 2nd, 4th, 8th… occurrence (not every record)."""
    if count & (count - 1) == 0:
        log.error(message + " (failure %d; later ones logged at powers of two)", *args, count)


class FileDeadLetter:
    """JSON lines appended to a file (``state.dead_letter_file``, by default
    ``<state dir>/dead-letter.jsonl``), rotated like logrotate: above ``max_bytes`` the
    file becomes ``<name>.1`` (``.1`` becomes ``.2``…, at most ``keep`` old files), so
    the dead letters never take more than ``(keep + 1) × max_bytes`` of disk. ``None``:
    one file without a cap (``monitor replay --dead-letter``, an explicit output)."""

    def __init__(self, path: Path, max_bytes: int | None = None, keep: int = 3) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.keep = keep
        self.faults: Counter[str] = Counter()
        self.error: str | None = None
        self._fd: int | None = None
        self._size = 0
        self._failures = 0
        self._retry_at = 0.0  # monotonic: when to try opening the file again
        self._open()

    def _open(self) -> bool:
        if self._fd is not None:
            return True
        if time.monotonic() < self._retry_at:
            return False
        try:
            private_dir(self.path.parent)
            # 0600: the file holds original record bytes
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
            os.fchmod(fd, FILE_MODE)
            self._size = os.fstat(fd).st_size
        except OSError as err:
            self._retry_at = time.monotonic() + 1.0
            self._failed(f"cannot open {self.path}: {err}")
            return False
        self._fd = fd
        return True

    def _failed(self, error: str) -> None:
        self._failures += 1
        self.faults["dead_letter_write_failed"] += 1
        self.error = error
        log_failure(self._failures, "dead letters: %s; rejected records are counted, not kept",
                    error)  # fmt: skip

    def write(self, rejections: Sequence[Rejection]) -> None:
        if not rejections:
            return
        now = time.time()
        lines = [orjson.dumps(dead_letter_json(r, now)) + b"\n" for r in rejections]
        self.faults["dead_letter_truncated"] += sum(
            1 for r in rejections if r.raw is not None and len(r.raw) > MAX_VALUE_BYTES
        )
        kept = 0
        while kept < len(lines):
            if not self._open():
                break
            # as many lines as fit under the cap (at least one: a line is never split)
            room = None if self.max_bytes is None else self.max_bytes - self._size
            end, size = kept, 0
            while end < len(lines) and (room is None or size + len(lines[end]) <= room):
                size += len(lines[end])
                end += 1
            if end == kept:
                if self._size > 0:
                    if not self._rotate():
                        break
                    continue
                end, size = kept + 1, len(lines[kept])
            if not self._append(b"".join(lines[kept:end])):
                break
            kept = end
        if kept < len(lines):
            self.faults["dead_letter_lost"] += len(lines) - kept

    def _append(self, data: bytes) -> bool:
        """Write ``data`` whole or not at all (a partial line is cut off again)."""
        assert self._fd is not None
        start = self._size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as err:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, start)
            self._failed(f"writing {self.path}: {err}")
            return False
        self._size += len(data)
        self.error = None
        return True

    def _rotate(self) -> bool:
        """``name`` -> ``name.1`` -> ``name.2``…; the oldest beyond ``keep`` is deleted."""
        self._close_fd()
        try:
            old = self.path.with_name(f"{self.path.name}.{self.keep}")
            if self.keep == 0:
                old = self.path
            old.unlink(missing_ok=True)
            for i in range(self.keep - 1, 0, -1):
                src = self.path.with_name(f"{self.path.name}.{i}")
                if src.exists():
                    os.replace(src, self.path.with_name(f"{self.path.name}.{i + 1}"))
            if self.keep and self.path.exists():
                os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        except OSError as err:
            self._failed(f"rotating {self.path}: {err}")
            return False
        self.faults["dead_letter_rotated"] += 1
        return True

    def flush(self) -> None:
        """Make what was written durable (before a checkpoint); a failure is counted."""
        if self._fd is None:
            return
        try:
            os.fsync(self._fd)
        except OSError as err:
            self._failed(f"syncing {self.path}: {err}")

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, None
        self._size = 0
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        self.flush()
        self._close_fd()
