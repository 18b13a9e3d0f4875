"""One way for data to flow: raw records -> decode -> engine -> dead-letter.

Decoding (the expensive, per-record part) runs outside the engine lock; applying a
decoded batch, counting rejections and advancing the source offsets happen together
under it, so a checkpoint always pairs the state with exactly the offsets it covers.

The offsets are the source side's: ``IngestPipeline.offsets`` ("topic:partition" -> next
offset) is what the daemon writes into the checkpoint next to the engine's state and
what the Kafka source seeks to on assignment.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..engine.core import Engine
from ..engine.records import LabelBatch, PredictionBatch, Rejection
from .deadletter import DeadLetterSink
from .decode import LabelDecoder, PredictionDecoder

__all__ = [
    "IngestPipeline",
    "RawBatch",
    "RawRecord",
    "SourceRecord",
    "load_offsets",
    "offset_key",
]


class SourceRecord(Protocol):
    """What a source hands over; kafka-python's ConsumerRecord fits as it is."""

    @property
    def value(self) -> bytes | None: ...
    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...


@dataclass(frozen=True, slots=True)
class RawRecord:
    value: bytes | None
    topic: str
    partition: int = 0
    offset: int = -1


@dataclass(frozen=True, slots=True)
class RawBatch:
    """One kind's records of one poll, as the pipeline needs them: the values in a plain
    list (no per-record objects on the way to the decoder), where a record came from
    (asked only for the rejected ones) and the offset after the batch per partition."""

    values: Sequence[bytes | None]
    origin: Callable[[int], tuple[str, int, int]]  # index -> (topic, partition, offset)
    next_offsets: Mapping[str, int]

    @staticmethod
    def of_records(
        records: Sequence[SourceRecord], next_offsets: Mapping[str, int] | None = None
    ) -> RawBatch:
        def origin(i: int) -> tuple[str, int, int]:
            r = records[i]
            return r.topic, r.partition, r.offset

        return RawBatch(
            [r.value for r in records],
            origin,
            next_offsets if next_offsets is not None else _next_offsets(records),
        )


def offset_key(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


def load_offsets(meta: Mapping[str, Any]) -> dict[str, int]:
    """The source offsets stored in a checkpoint's metadata (``meta["offsets"]``)."""
    return {str(k): int(v) for k, v in meta.get("offsets", {}).items()}


class IngestPipeline:
    def __init__(
        self,
        engine: Engine,
        predictions: PredictionDecoder,
        labels: LabelDecoder,
        dead_letter: DeadLetterSink,
        clock_ms: Callable[[], int],
        lock: threading.RLock | None = None,
        offsets: dict[str, int] | None = None,
    ) -> None:
        self.engine = engine
        self.predictions = predictions
        self.labels = labels
        self.dead_letter = dead_letter
        self.clock_ms = clock_ms
        self.lock = lock or threading.RLock()
        # next offset per "topic:partition" covered by the engine's state; changed only
        # under ``lock`` together with the state (the caller may share the dict)
        self.offsets: dict[str, int] = offsets if offsets is not None else {}

    def process(
        self,
        kind: str,
        records: Sequence[SourceRecord] | RawBatch,
        next_offsets: Mapping[str, int] | None = None,
    ) -> list[Rejection]:
        """Decode and apply one batch of ``kind`` ("predictions" or "labels").

        ``next_offsets`` ("topic:partition" -> offset after the batch) saves a pass over
        the records when the source knows them; otherwise they are derived here.
        """
        if isinstance(records, RawBatch):
            return self.process_batch(kind, records)
        if not records:
            return []
        return self.process_batch(kind, RawBatch.of_records(records, next_offsets))

    def process_batch(self, kind: str, batch: RawBatch) -> list[Rejection]:
        """Decode and apply one ``RawBatch``; returns the rejections (dead-lettered)."""
        if not batch.values:
            return []
        decoded, rejects = self.decode(kind, batch.values)
        return self.apply(kind, decoded, rejects, batch)

    def decode(
        self, kind: str, values: Sequence[bytes | None]
    ) -> tuple[PredictionBatch | LabelBatch, list[tuple[int, str, str]]]:
        """The per-record half, which reads no engine state (replay may run it in another
        process): the valid rows in columns, and ``(index, reason, detail)`` rejects."""
        now = self.clock_ms()
        if kind == "predictions":
            return self.predictions.decode(values, now)
        if kind == "labels":
            return self.labels.decode(values, now)
        raise ValueError(f"unknown record kind {kind!r}")

    def apply(
        self,
        kind: str,
        decoded: PredictionBatch | LabelBatch,
        rejects: list[tuple[int, str, str]],
        batch: RawBatch,
    ) -> list[Rejection]:
        """Apply a decoded batch, count its rejections and advance the offsets, together
        under the lock; rejected and late records go to the dead-letter sink with their
        original bytes (``batch.values``)."""
        values = batch.values
        apply = self.engine.apply_predictions if kind == "predictions" else self.engine.apply_labels
        with self.lock:
            late = apply(decoded)  # type: ignore[arg-type]
            for reason, k in Counter(reason for _, reason, _ in rejects).items():
                self.engine.count_invalid(kind, reason, k)
            offsets = self.offsets
            for key, off in batch.next_offsets.items():
                if off > offsets.get(key, 0):
                    offsets[key] = off
        if not rejects and not late:
            return []
        origin = batch.origin
        out = [Rejection(reason, detail, values[i], *origin(i)) for i, reason, detail in rejects]
        if late:
            rejected = {j for j, _, _ in rejects}
            valid = [i for i in range(len(values)) if i not in rejected]
            for j, reason, detail in late:
                i = valid[j]
                out.append(Rejection(reason, detail, values[i], *origin(i)))
        self.dead_letter.write(out)
        return out


def _next_offsets(records: Sequence[SourceRecord]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in records:
        if r.offset >= 0:
            key = offset_key(r.topic, r.partition)
            if r.offset + 1 > out.get(key, 0):
                out[key] = r.offset + 1
    return out
