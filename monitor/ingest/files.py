"""JSONL file source for ``monitor replay``: the same pipeline, no Kafka.

Files are read in large chunks and split into lines in C (``bytes.split``): no per-line
Python object besides the line's own bytes, which the decoder needs anyway. A gzip file
(recognised by its magic bytes, whatever its name) is decompressed on the fly.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from .pipeline import RawBatch, offset_key

__all__ = ["JsonlReader", "LineOrigin", "interleave"]

_CHUNK_BYTES = 256 * 1024  # (4 MiB reads were slower: fresh pages for every copy)
_GZIP_MAGIC = b"\x1f\x8b"
# a line holding nothing but spaces, tabs or a CR: layout, not a record
_BLANK = b" \t\r"


class LineOrigin:
    """Where a batch's record ``i`` came from: (file's topic, 0, its line number); a
    plain object (not a closure), so a batch can cross to another process."""

    __slots__ = ("numbers", "topic")

    def __init__(self, topic: str, numbers: list[int] | range) -> None:
        self.topic = topic
        self.numbers = numbers

    def __call__(self, i: int) -> tuple[str, int, int]:
        return self.topic, 0, self.numbers[i]


class JsonlReader:
    """Reads a JSONL (or gzip-compressed JSONL) file in batches of raw lines; a record's
    offset is its line number (0-based), blank lines are skipped."""

    def __init__(self, path: Path, topic: str, batch_size: int = 20_000) -> None:
        self.path = Path(path)
        self.topic = topic
        self.batch_size = batch_size
        self.size = self.path.stat().st_size
        self._raw: BinaryIO = open(self.path, "rb")  # noqa: SIM115 - closed in close()
        self.compressed = self._raw.read(2) == _GZIP_MAGIC
        self._raw.seek(0)
        self._fh: BinaryIO = (
            gzip.GzipFile(fileobj=self._raw, mode="rb") if self.compressed else self._raw  # type: ignore[assignment]
        )
        self._key = offset_key(topic, 0)
        self._lines: list[bytes] = []  # split, not yet handed out
        self._numbers: list[int] | None = None  # their line numbers when some were skipped
        self._first = 0  # line number of self._lines[0] when _numbers is None
        self._next_line = 0  # line number of the next line read from the file
        self._tail: list[bytes] = []  # the unfinished last line, in pieces
        self._eof = False
        self.lines = 0  # non-blank lines handed out so far
        self.done = False

    @property
    def fraction(self) -> float:
        return 1.0 if self.done or self.size == 0 else self.bytes_read / self.size

    @property
    def bytes_read(self) -> int:
        """Bytes of the file (compressed, for gzip) read so far."""
        return self.size if self.done else self._raw.tell()

    def _fill(self) -> None:
        """Read chunks until at least ``batch_size`` lines are buffered or the file ends.
        Each chunk is split as read, its first line completed by the previous chunks'
        unfinished one: no copy of a whole chunk (a fresh multi-megabyte copy costs page
        faults: with the copies and 4 MiB chunks, reading took a quarter of replay's time)."""
        while len(self._lines) < self.batch_size and not self._eof:
            chunk = self._fh.read(_CHUNK_BYTES)
            if not chunk:
                self._eof = True
                if self._tail:
                    last = b"".join(self._tail)
                    self._tail = []
                    self._append([last], b"\r" in last)
                continue
            lines = chunk.split(b"\n")
            rest = lines.pop()  # after the chunk's last newline: a line still unfinished
            if not lines:  # no newline in the chunk: one long line goes on
                self._tail.append(rest)
                continue
            cr = b"\r" in chunk
            if self._tail:
                self._tail.append(lines[0])
                lines[0] = b"".join(self._tail)
                cr = cr or b"\r" in lines[0]
            self._tail = [rest] if rest else []
            self._append(lines, cr)

    def _append(self, lines: list[bytes], cr: bool) -> None:
        """Buffer ``lines`` (whole lines, without their newline; ``cr``: whether any of
        them may end in a carriage return)."""
        start = self._next_line
        self._next_line += len(lines)
        if cr:
            lines = [x[:-1] if x.endswith(b"\r") else x for x in lines]
        # a blank line is empty or starts with a space, tab or CR: all sort below "!",
        # so the smallest line (one C-level pass) clears the usual chunk
        blank = bool(lines) and min(lines) < b"!"
        if self._numbers is None and not blank:
            if not self._lines:
                self._first = start
            self._lines.extend(lines)
            return
        # rare: blank lines to skip, so each kept line's number is listed
        if self._numbers is None:
            self._numbers = list(range(self._first, self._first + len(self._lines)))
        for n, x in enumerate(lines, start):
            if x.strip(_BLANK):
                self._lines.append(x)
                self._numbers.append(n)

    def next_batch(self) -> RawBatch:
        self._fill()
        k = min(self.batch_size, len(self._lines))
        values, self._lines = self._lines[:k], self._lines[k:]
        if self._numbers is None:
            numbers: list[int] | range = range(self._first, self._first + k)
            self._first += k
        else:
            numbers, self._numbers = self._numbers[:k], self._numbers[k:]
            if not self._numbers:
                self._numbers = None
                self._first = self._next_line - len(self._lines)
        self.lines += k
        if not self._lines and self._eof:
            self.close()
            self.done = True
        next_offsets = {self._key: numbers[-1] + 1} if k else {}
        return RawBatch(values, LineOrigin(self.topic, numbers), next_offsets)

    def close(self) -> None:
        if not self._raw.closed:
            if self._fh is not self._raw:
                self._fh.close()
            self._raw.close()


def interleave(a: JsonlReader, b: JsonlReader) -> Iterator[tuple[str, RawBatch]]:
    """Batches from both files, advancing each by its share of bytes, so predictions and
    labels move forward together (as they would on two live topics)."""
    while not (a.done and b.done):
        if not a.done and (b.done or a.fraction <= b.fraction):
            yield "predictions", a.next_batch()
        else:
            yield "labels", b.next_batch()
