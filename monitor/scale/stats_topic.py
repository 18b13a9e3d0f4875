"""The stats topic: every partition's latest mergeable statistics, readable by everyone.

Each instance publishes, per owned partition, the partition's ``PartitionStats`` bytes
to the compacted topic ``<group_id>-stats`` with the state topic's chunked, two-slot
layout (``KafkaStateStore``). Every instance reads the whole topic continuously with a
consumer outside the group (``StatsReader``) and keeps the newest complete generation of
each partition; merged with its own live partitions they give the global view, the same
on every instance once the latest publications are read.

Nothing in the topic is trusted: a record whose key is not ``<group>/<p>/<slot>/<chunk>``
with ``p`` one of the input topics' partitions (a phantom partition 7 of six would be
merged as extra data) is ignored; a generation that does not decode — another
partition's statistics under this key, a zip bomb, impossible counts (``merge.decode``)
— is skipped for the next older complete one. Both are counted
(``mlmon_fault_events_total{event="stats_record_rejected"|"stats_generation_rejected"}``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kafka import KafkaConsumer, TopicPartition

from .. import kafka_compat
from ..state.kafka_store import Generations, KafkaStateStore
from ..state.topics import stats_topic
from .merge import Layout, PartitionStats, decode

kafka_compat.install()

__all__ = ["StatsReader", "stats_store"]

log = logging.getLogger(__name__)


def stats_store(
    client_config: Mapping[str, Any], group_id: str, chunk_bytes: int
) -> KafkaStateStore:
    """The publisher: the state store's layout on the stats topic."""
    return KafkaStateStore(
        client_config,
        group_id,
        topic=stats_topic(group_id),
        chunk_bytes=chunk_bytes,
        timeout_s=10.0,
    )


class StatsReader:
    """Follows the whole stats topic; ``latest()`` is each partition's newest usable
    statistics. Thread-safe (one lock): the evaluation thread reads, the consumer loop
    asks for generations before it publishes a newly assigned partition. ``partitions``
    (the input topics' partition count, set by the daemon) bounds the partition numbers
    accepted; ``layout`` is this configuration's store layout (``merge.store_layout``)."""

    def __init__(
        self,
        client_config: Mapping[str, Any],
        group_id: str,
        model_names: Sequence[str],
        width_ms: int,
        layout: Layout | None = None,
    ) -> None:
        self._client = dict(client_config)
        self.group_id = group_id
        self.topic = stats_topic(group_id)
        self.model_names = tuple(model_names)
        self.width_ms = width_ms
        self.layout = layout
        self.partitions: int | None = None
        self._lock = threading.Lock()
        self._consumer: KafkaConsumer | None = None
        self._found: dict[int, Generations] = {}
        self._dirty: set[int] = set()
        self._latest: dict[int, tuple[tuple[int, int, int], PartitionStats]] = {}
        self._refused: set[tuple[int, int, int, int, int]] = set()  # never decoded again
        self.faults: Counter[str] = Counter()
        # read up to the end of the topic as it was at the first refresh: until then the
        # merged view may hold old generations of other instances' partitions
        self.caught_up = False
        self._targets: dict[TopicPartition, int] | None = None
        self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stats-reader")

    def _consumer_(self) -> KafkaConsumer:
        if self._consumer is None:
            consumer = KafkaConsumer(enable_auto_commit=False, **self._client)
            parts = consumer.partitions_for_topic(self.topic)
            if not parts:
                consumer.close()
                raise RuntimeError(f"stats topic {self.topic!r} does not exist")
            tps = [TopicPartition(self.topic, p) for p in sorted(parts)]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            self._consumer = consumer
        return self._consumer

    def _partition_of(self, key: bytes | None) -> int | None:
        """The input partition a record's key names: ``<group>/<p>/<slot>/<chunk>``
        (None: another group's record)."""
        text = key.decode(errors="replace") if key else ""
        if not text.startswith(f"{self.group_id}/"):
            return None
        parts = text[len(self.group_id) + 1 :].split("/")
        try:
            p = int(parts[0])
        except ValueError:
            p = -1
        if len(parts) != 3 or p < 0 or (self.partitions is not None and p >= self.partitions):
            self.faults["stats_record_rejected"] += 1
            if (
                self.faults["stats_record_rejected"] & (self.faults["stats_record_rejected"] - 1)
                == 0
            ):
                log.error("stats record with key %r ignored: no partition of the input "
                          "topics (%s) has that number", text[:200], self.partitions)  # fmt: skip
            return None
        return p

    def refresh(self, budget_s: float = 2.0) -> None:
        """Read what was published since the last call (bounded in time: a large backlog
        is read over several calls; ``caught_up`` tells when the first one is done).

        The reading runs on the reader's own thread, the caller waiting for it: the
        client's timed-out waits are exceptions in reference cycles that hold the
        calling thread's frames until the fetch in flight answers, and a frame keeps
        its locals — an evaluation's merged statistics, a publication's copy of a
        partition (see ``monitor.collector``). The reader thread's frames hold only
        what it read."""
        self._reader.submit(self._refresh, budget_s).result()

    def _refresh(self, budget_s: float) -> None:
        with self._lock:
            consumer = self._consumer_()
            deadline = time.monotonic() + budget_s
            while time.monotonic() < deadline:
                batches = consumer.poll(timeout_ms=100)
                self._check_caught_up(consumer)
                if not batches:
                    break
                for records in batches.values():
                    self._add(records)
            self._decode_dirty()

    def _add(self, records: Iterable[Any]) -> None:
        for rec in records:
            p = self._partition_of(rec.key)
            if p is None:
                continue
            self._found.setdefault(p, Generations()).add(rec)
            self._dirty.add(p)

    def _decode_dirty(self) -> None:
        for p in sorted(self._dirty):
            self._decode_newest(p)
        self._dirty.clear()

    def _decode_newest(self, p: int) -> None:
        """Keep p's newest generation that decodes and outranks the one kept (refused ones
        are never tried again), then forget the bytes of the generations that will never
        be decoded: those ranked at or below the one kept, and the refused. Without that
        the reader held both slots' bytes of every partition beside their decoded
        statistics — twice what it decoded."""
        found_p = self._found[p]
        kept = self._latest.get(p)
        for found in found_p.complete():
            rank = (found.fence, found.group_generation, found.generation)
            if kept is not None and rank <= kept[0]:
                break  # what is kept already outranks it
            ident = (p, *rank, found.crc)
            if ident in self._refused:
                continue
            try:
                stats = decode(found.blob, self.model_names, self.width_ms, p, self.layout)
            except ValueError as err:
                self._refused.add(ident)
                self.faults["stats_generation_rejected"] += 1
                log.error("stats of partition %d (generation %d, fence %d) skipped: %s", p,
                          found.generation, found.fence, err)  # fmt: skip
                continue
            kept = self._latest[p] = (rank, stats)
            break
        refused = self._refused
        top = kept[0] if kept is not None else None
        found_p.discard(
            lambda g: (top is not None and g[:3] <= top) or (p, *g[:3], g[4]) in refused
        )

    def _check_caught_up(self, consumer: KafkaConsumer) -> None:
        """The end of every stats partition is known from a fetch response (highwater:
        some brokers' end_offsets is the start of the last batch) and reached."""
        if self.caught_up:
            return
        if self._targets is None:
            highs = {tp: consumer.highwater(tp) for tp in consumer.assignment()}
            if any(h is None for h in highs.values()):
                return
            self._targets = {tp: int(h) for tp, h in highs.items() if h is not None}
        self.caught_up = all(consumer.position(tp) >= h for tp, h in self._targets.items())

    def latest(self) -> dict[int, PartitionStats]:
        with self._lock:
            return {p: stats for p, (_, stats) in self._latest.items()}

    def newest_generation(self, partition: int) -> int:
        with self._lock:
            found = self._found.get(partition)
            if found is None:
                return 0
            found.resolve()
            return found.newest

    def close(self) -> None:
        self._reader.shutdown(wait=True)
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None
