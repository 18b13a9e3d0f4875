"""Dead-letter sinks: every rejected record, with its original bytes and the reason.

Delivery is at-least-once: a record rejected after the last checkpoint is rejected
again when the daemon replays from that checkpoint, so a crash can repeat a
dead-letter entry (each carries topic/partition/offset to de-duplicate on).
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import orjson

from ..engine.records import Rejection
from ..state.lock import FILE_MODE, private_dir

__all__ = ["DeadLetterSink", "FileDeadLetter", "dead_letter_json"]


class DeadLetterSink(Protocol):
    def write(self, rejections: Sequence[Rejection]) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


def dead_letter_json(r: Rejection, now: float) -> dict[str, Any]:
    out: dict[str, Any] = {
        "reason": r.reason,
        "detail": r.detail,
        "topic": r.topic,
        "partition": r.partition,
        "offset": r.offset,
        "rejected_at": round(now, 3),
        "value_b64": None if r.raw is None else base64.b64encode(r.raw).decode(),
    }
    return out


class FileDeadLetter:
    """Appends JSON lines to a file (by default ``<state dir>/dead-letter.jsonl``)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        private_dir(self.path.parent)
        # 0600: the file holds original record bytes
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
        os.fchmod(fd, FILE_MODE)
        self._fh = os.fdopen(fd, "ab")

    def write(self, rejections: Sequence[Rejection]) -> None:
        if not rejections:
            return
        now = time.time()
        self._fh.write(b"".join(orjson.dumps(dead_letter_json(r, now)) + b"\n" for r in rejections))

    def flush(self) -> None:
        self._fh.flush()

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            self._fh.close()
