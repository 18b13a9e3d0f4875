"""Replay in event time: both files merged by timestamp and evaluated every
``evaluation.interval`` of replayed time, as a daemon consuming them live would have.

Why: "what would have paged, and when" needs the SLOs (and the comparisons) evaluated
over replayed time with only what had arrived by then — predictions stamped at or before
the step, and labels stamped at or before it. The files are read in batches (in either
order of the two); each batch's rows wait until the merged stream's clock — the older of
the two files' newest timestamps — has passed them, then go to the engine in the step of
their timestamp. Input that is not in time order is applied when read, and counted
(``out_of_order``): bounded memory wins over exactness there, and the report says so.

A step costs an evaluation of the SLO windows, one look of each comparison and an
engine batch per file (about 20 ms), so a long input is evaluated at a multiple of the
interval that keeps about ``max_steps`` steps (its span estimated from the share of the
files read when the first step is due); the report gives the interval used.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import overload

import numpy as np

from .engine.records import LabelBatch, PredictionBatch
from .ingest.file_feed import DecodedBatch
from .ingest.pipeline import IngestPipeline, RawBatch

__all__ = ["StepFeed"]

_MAX_WAITING = 400_000  # rows held back for their step, both files together


@dataclass(eq=False)  # identity: found and removed by itself, never compared by value
class _Waiting:
    kind: str
    decoded: PredictionBatch | LabelBatch
    raw_rows: np.ndarray  # the raw record of each decoded row
    raw: RawBatch
    left: np.ndarray  # decoded rows not applied yet
    ordered: bool  # stamped in time order: ``left`` is a run to the end, due rows its head


@dataclass
class StepFeed:
    """Applies decoded batches in steps of ``interval_ms``; ``on_step(t)`` runs after
    everything stamped at or before ``t`` that has been read is applied."""

    pipeline: IngestPipeline
    interval_ms: int  # the configured interval; the one used once the first step is due
    on_step: Callable[[int], None]
    total_bytes: int = 0  # of both files (the span estimate); 0: keep the interval
    max_steps: int = 0  # 0: no bound
    head: dict[str, float] = field(default_factory=lambda: {"predictions": -math.inf,
                                                              "labels": -math.inf})  # fmt: skip
    waiting: list[_Waiting] = field(default_factory=list)
    next_step: int | None = None
    last_ts: int = -(2**62)
    out_of_order: int = 0  # rows applied after their step had been evaluated
    steps: int = 0
    configured_ms: int = 0
    _first: int | None = None
    _bytes: int = 0

    def add(self, b: DecodedBatch) -> None:
        """One batch from the feed: its rejects counted now, its rows queued."""
        empty = PredictionBatch.empty() if b.kind == "predictions" else LabelBatch.empty()
        self.pipeline.apply(b.kind, empty, b.rejects, b.raw)  # decode rejects, dead-lettered
        decoded = b.decoded
        if decoded is None or len(decoded) == 0:
            return
        kept = np.ones(len(b.raw.values), bool)
        kept[[i for i, _, _ in b.rejects]] = False
        raw_rows = np.flatnonzero(kept)
        ts = decoded.ts_ms
        self.head[b.kind] = max(self.head[b.kind], float(ts.max()))
        self.last_ts = max(self.last_ts, int(ts.max()))
        self._bytes = b.bytes_read
        if b.kind == "predictions":
            low = int(ts.min())
            self._first = low if self._first is None else min(self._first, low)
        ordered = bool((ts[1:] >= ts[:-1]).all())
        item = _Waiting(b.kind, decoded, raw_rows, b.raw, np.arange(len(decoded)), ordered)
        if self.next_step is not None:
            late = ts <= self.next_step - self.interval_ms
            self.out_of_order += int(np.count_nonzero(late))
        self.waiting.append(item)
        self._run(min(self.head.values()))
        while sum(w.left.shape[0] for w in self.waiting) > _MAX_WAITING:
            biggest = max(self.waiting, key=lambda w: w.left.shape[0])
            self.out_of_order += int(biggest.left.shape[0])
            self._apply(biggest, biggest.left, biggest.left[:0])

    def finish(self) -> None:
        """End of both files: every step up to the last record, then whatever is left."""
        self._run(math.inf)
        for w in list(self.waiting):
            self._apply(w, w.left, w.left[:0])

    def _start(self) -> None:
        """Fix the interval (a multiple of the configured one keeping about
        ``max_steps`` steps over the span the files are estimated to cover) and the
        first step."""
        assert self._first is not None
        self.configured_ms = self.interval_ms
        if self.max_steps and self.total_bytes and self._bytes:
            share = min(1.0, self._bytes / self.total_bytes)
            span = (self.last_ts - self._first) / max(share, 1e-9)
            k = math.ceil(span / (self.max_steps * self.interval_ms))
            self.interval_ms *= max(1, k)
        self.next_step = -(-self._first // self.interval_ms) * self.interval_ms

    def _run(self, clock: float) -> None:
        """Steps up to the merged clock (``inf``: the last record)."""
        if self.next_step is None:
            if self._first is None or (clock < self._first and clock != math.inf):
                return
            self._start()
            assert self.next_step is not None
        end = min(clock, float(self.last_ts))
        while self.next_step <= end or (
            clock == math.inf and self.next_step - self.interval_ms < self.last_ts
        ):
            t = self.next_step
            for kind in ("predictions", "labels"):
                for w in [x for x in self.waiting if x.kind == kind]:
                    if w.ordered:  # a search, not a comparison of every row left
                        k = int(np.searchsorted(w.decoded.ts_ms[int(w.left[0]) :], t, "right"))
                        if k:
                            self._apply(w, w.left[:k], w.left[k:])
                        continue
                    now = w.decoded.ts_ms[w.left] <= t
                    if now.any():
                        self._apply(w, w.left[now], w.left[~now])
            self.on_step(t)
            self.steps += 1
            self.next_step = t + self.interval_ms

    def _apply(self, w: _Waiting, rows: np.ndarray, rest: np.ndarray) -> None:
        """Apply ``rows`` of a waiting batch; ``rest`` (the others, in order) waits on."""
        raw_rows = w.raw_rows[rows]
        origin = w.raw.origin
        sub = RawBatch(_Picked(w.raw.values, raw_rows), lambda j: origin(int(raw_rows[j])),
                       w.raw.next_offsets)  # fmt: skip
        self.pipeline.apply(w.kind, w.decoded.take(_contiguous(rows)), [], sub)
        w.left = rest
        if w.left.shape[0] == 0:
            self.waiting.remove(w)


def _contiguous(rows: np.ndarray) -> np.ndarray | slice:
    """Increasing rows as a slice when they are a run (input in time order: a step takes
    the head of what waits), so the step's part of a batch is views of its columns, not
    copies."""
    n = rows.shape[0]
    return slice(int(rows[0]), int(rows[0]) + n) if n and rows[-1] - rows[0] + 1 == n else rows


class _Picked(Sequence[bytes | None]):
    """Some of a batch's raw records, looked up only when one is asked for (a late
    record's bytes, for the dead-letter sink): a step applies a batch in many parts."""

    __slots__ = ("_rows", "_values")

    def __init__(self, values: Sequence[bytes | None], rows: np.ndarray) -> None:
        self._values, self._rows = values, rows

    def __len__(self) -> int:
        return int(self._rows.shape[0])

    @overload
    def __getitem__(self, i: int) -> bytes | None: ...
    @overload
    def __getitem__(self, i: slice) -> list[bytes | None]: ...
    def __getitem__(self, i: int | slice) -> bytes | list[bytes | None] | None:
        if isinstance(i, slice):
            return [self._values[j] for j in self._rows[i].tolist()]
        return self._values[int(self._rows[i])]
