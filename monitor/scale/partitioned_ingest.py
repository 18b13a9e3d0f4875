"""Ingestion for partitioned state: decode a poll once, apply each partition's rows to
its own engine.

Decoding is the per-record cost of ingestion; the engine's apply has a per-call cost.
Decoding every partition's records separately would multiply the calls of both by the
number of owned partitions, so one poll's records of a kind are decoded together (as
``IngestPipeline`` does for one engine) and only the decoded columns are split by
partition. Within a partition the order is the log's, as with one engine.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from typing import Any

import numpy as np

from ..engine.port import EnginePort
from ..engine.records import Coded, Rejection
from ..ingest.deadletter import DeadLetterSink
from ..ingest.pipeline import IngestPipeline, RawBatch

__all__ = ["PartitionedIngest", "take"]


def take(batch: Any, rows: np.ndarray) -> Any:
    """The rows ``rows`` of a decoded batch (a dataclass of per-row columns: arrays,
    lists and coded columns of the batch's length; other fields are carried as they
    are)."""
    n = len(batch)
    if rows.shape[0] == n:
        return batch
    changes: dict[str, Any] = {}
    picked = rows.tolist()
    for f in fields(batch):
        v = getattr(batch, f.name)
        if isinstance(v, np.ndarray) and v.ndim >= 1 and v.shape[0] == n:
            changes[f.name] = v[rows]
        elif isinstance(v, Coded) and len(v) == n:
            changes[f.name] = v.take(rows)
        elif isinstance(v, list) and len(v) == n and n:
            changes[f.name] = [v[i] for i in picked]
    return replace(batch, **changes)


class PartitionedIngest:
    """Decoders shared by every partition engine (same configuration: ``template``'s)."""

    def __init__(
        self,
        template: IngestPipeline,
        dead_letter: DeadLetterSink,
        clock_ms: Callable[[], int],
        lock: threading.RLock,
    ) -> None:
        self.predictions = template.predictions
        self.labels = template.labels
        self.dead_letter = dead_letter
        self.clock_ms = clock_ms
        self.lock = lock

    def process(
        self,
        kind: str,
        batches: Mapping[int, RawBatch],
        engines: Mapping[int, tuple[EnginePort, dict[str, int]]],
    ) -> list[Rejection]:
        """Decode ``batches`` (partition -> records of ``kind``) and apply each
        partition's rows to its (engine, offsets); partitions without an engine are
        skipped (revoked within the poll: the next owner reads them)."""
        order = [p for p in sorted(batches) if p in engines and batches[p].values]
        if not order:
            return []
        values: list[bytes | None] = []
        owner_list: list[int] = []
        for p in order:
            values.extend(batches[p].values)
            owner_list.extend([p] * len(batches[p].values))
        owner = np.asarray(owner_list, np.int32)
        now = self.clock_ms()
        if kind == "predictions":
            decoded, rejects = self.predictions.decode(values, now)
        elif kind == "labels":
            decoded, rejects = self.labels.decode(values, now)
        else:
            raise ValueError(f"unknown record kind {kind!r}")
        valid = np.ones(len(values), bool)
        for i, _, _ in rejects:
            valid[i] = False
        valid_idx = np.flatnonzero(valid)
        valid_owner = owner[valid_idx]
        late_rows: list[tuple[int, str, str]] = []
        with self.lock:
            for p in order:
                engine, offsets = engines[p]
                rows = np.flatnonzero(valid_owner == p)
                sub = take(decoded, rows)
                apply = engine.apply_predictions if kind == "predictions" else engine.apply_labels
                late = apply(sub)  # type: ignore[arg-type]
                late_rows += [(int(valid_idx[rows[j]]), why, detail) for j, why, detail in late]
                mine = Counter(reason for i, reason, _ in rejects if owner_list[i] == p)
                for reason, k in mine.items():
                    engine.count_invalid(kind, reason, k)
                for key, off in batches[p].next_offsets.items():
                    if off > offsets.get(key, 0):
                        offsets[key] = off
        if not rejects and not late_rows:
            return []
        out = []
        for i, reason, detail in [*rejects, *late_rows]:
            batch = batches[owner_list[i]]
            start = sum(len(batches[q].values) for q in order if q < owner_list[i])
            out.append(Rejection(reason, detail, values[i], *batch.origin(i - start)))
        self.dead_letter.write(out)
        return out
