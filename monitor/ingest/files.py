"""JSONL file source for ``monitor replay``: the same pipeline, no Kafka.

Files are read in large chunks and split into lines in C (``bytes.split``): no per-line
Python object besides the line's own bytes, which the decoder needs anyway. A gzip file
(recognised by its magic bytes, whatever its name) is decompressed on the fly.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from .pipeline import RawBatch, offset_key

__all__ = ["JsonlReader", "LineOrigin", "SpanReader", "interleave", "open_reader", "read_span"]

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
        lines, numbers = _records(lines, start, cr)
        if self._numbers is None and numbers is None:
            if not self._lines:
                self._first = start
            self._lines.extend(lines)
            return
        # rare: blank lines to skip, so each kept line's number is listed
        if self._numbers is None:
            self._numbers = list(range(self._first, self._first + len(self._lines)))
        self._lines.extend(lines)
        self._numbers.extend(range(start, start + len(lines)) if numbers is None else numbers)

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


def _records(lines: list[bytes], start: int, cr: bool) -> tuple[list[bytes], list[int] | None]:
    """The records among ``lines`` (numbered from ``start``): CR stripped (``cr``: whether
    any line may end in one), blank lines skipped; with the kept lines' numbers when
    some were skipped (None: all kept)."""
    if cr:
        lines = [x[:-1] if x.endswith(b"\r") else x for x in lines]
    # a blank line is empty or starts with a space, tab or CR: all sort below "!", so the
    # smallest line (one C-level pass) clears the usual chunk
    if not lines or min(lines) >= b"!":
        return lines, None
    kept, numbers = [], []
    for n, x in enumerate(lines, start):
        if x.strip(_BLANK):
            kept.append(x)
            numbers.append(n)
    return kept, numbers


class SpanReader:
    """Batches of an uncompressed JSONL file as byte ranges of whole lines, each about
    ``batch_size`` lines long: a span ends at the first newline after its share of bytes
    (the file's first 256 KiB give the bytes per line). So where every batch starts is
    known from a few small reads near its boundary, without reading what comes before:
    several processes can each decode their own spans of one file (``file_feed``).

    ``next_span`` only plans (it reads near the boundary); ``next_batch`` also reads and
    splits the span into records, as :class:`JsonlReader` does; ``read_span`` reads one."""

    def __init__(self, path: Path, topic: str, batch_size: int = 20_000) -> None:
        self.path = Path(path)
        self.topic = topic
        self.size = self.path.stat().st_size
        self._fd = os.open(self.path, os.O_RDONLY)
        head = os.pread(self._fd, _CHUNK_BYTES, 0)
        per_line = len(head) / max(head.count(b"\n"), 1)
        self.span_bytes = max(4096, round(batch_size * per_line))
        self._key = offset_key(topic, 0)
        self._at = 0  # where the next span starts
        self._line = 0  # line number of its first line
        self.lines = 0  # non-blank lines handed out so far (``next_batch``)
        self.done = self.size == 0

    @property
    def fraction(self) -> float:
        return 1.0 if self.done or self.size == 0 else self._at / self.size

    @property
    def bytes_read(self) -> int:
        return self._at

    def next_span(self) -> tuple[int, int]:
        """The next span's (start, end) byte offsets, planned without reading it."""
        start, end = self._at, self.size
        target = start + self.span_bytes
        while target < self.size:  # the span ends after the first newline from target on
            window = os.pread(self._fd, 65_536, target)
            cut = window.find(b"\n")
            if cut >= 0:
                end = target + cut + 1
                break
            target += len(window)
        self._at = end
        self.done = end >= self.size
        if self.done:
            self.close()
        return start, end

    def next_batch(self) -> RawBatch:
        start, end = self.next_span()
        batch, lines = read_span(self.path, self.topic, start, end, self._line)
        self._line += lines
        self.lines += len(batch.values)
        return batch

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def read_span(
    path: Path, topic: str, start: int, end: int, first_line: int
) -> tuple[RawBatch, int]:
    """The records of a file's byte range of whole lines, numbered from ``first_line``,
    and how many lines the range holds (blank ones included)."""
    with open(path, "rb") as fh:
        fh.seek(start)
        data = fh.read(end - start)
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # (after the last newline: nothing)
    values, numbers = _records(lines, first_line, b"\r" in data)
    if numbers is None:
        numbers = range(first_line, first_line + len(values))  # type: ignore[assignment]
    next_offsets = {offset_key(topic, 0): numbers[-1] + 1} if values else {}
    return RawBatch(values, LineOrigin(topic, numbers), next_offsets), len(lines)


def open_reader(path: Path, topic: str, batch_size: int) -> JsonlReader | SpanReader:
    """A :class:`SpanReader` for a plain file, a :class:`JsonlReader` for a gzip one."""
    with open(path, "rb") as fh:
        compressed = fh.read(2) == _GZIP_MAGIC
    return (
        JsonlReader(path, topic, batch_size) if compressed else SpanReader(path, topic, batch_size)
    )


def interleave(
    a: JsonlReader | SpanReader, b: JsonlReader | SpanReader
) -> Iterator[tuple[str, RawBatch]]:
    """Batches from both files, advancing each by its share of bytes, so predictions and
    labels move forward together (as they would on two live topics)."""
    while not (a.done and b.done):
        if not a.done and (b.done or a.fraction <= b.fraction):
            yield "predictions", a.next_batch()
        else:
            yield "labels", b.next_batch()
