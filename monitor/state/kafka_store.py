"""Partition state in a compacted Kafka topic, so any instance can take any partition.

The model is Kafka Streams' changelog topic: the state of input partition p lives in
Kafka, keyed by (group, partition), and the instance that is assigned p restores it before
consuming p. Our state is one opaque blob per partition (the engine's checkpoint of that
partition), which can exceed a broker's message size, so it is written as chunks.

Crash safety without transactions: chunks are written to one of two *slots* (generation
mod 2), so writing generation g+1 never overwrites the chunks of generation g, even after
log compaction keeps only the latest value per key. A generation counts only once every
chunk is present and the blob's CRC-32 matches, so a writer killed half way leaves the
previous generation as the latest complete one. Readers first reduce the log to what
compaction would leave (the latest value per key), then take the highest complete
generation; so the answer is the same whether or not the broker has compacted, and
compaction only bounds the topic's size.

Zombie fencing: an owner that restores a partition with its consumer-group generation
(``restore_many(..., group_generation=g)``) takes a *fence* one above every fence in the
partition's records and writes under its own slot names. Readers rank complete
generations by (fence, group generation, generation), so a former owner that lost its
membership without noticing (paused past its session timeout) can neither outrank nor
overwrite what the new owner wrote. The fence comes from the log, not from the group
generation, so a group whose generation restarts (a broker that forgot the group) does
not freeze its state; the group generation only orders two owners that took the same
fence (the first never wrote).

Record layout: key ``<group>/<partition>/<slot>/<chunk>``, slot = ``generation mod 2``, or
``<fence>-<group generation>-<generation mod 2>`` for a fenced owner; headers
``generation``, ``chunk`` (``i/n``), ``crc`` (CRC-32 of the whole blob), ``size`` and, for
a fenced owner, ``fence`` and ``group_generation``; value = bytes.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import TopicAlreadyExistsError

from .. import kafka_compat
from .topics import state_topic

kafka_compat.install()

__all__ = ["WHOLE", "Generations", "KafkaStateStore", "StoredState"]

log = logging.getLogger(__name__)

DEFAULT_CHUNK_BYTES = 512 * 1024  # under the broker's default max.message.bytes (1 MiB)
WHOLE = -1  # "partition" of a single instance's whole state (every partition it reads)


@dataclass(frozen=True)
class StoredState:
    generation: int
    blob: bytes
    fence: int = 0
    group_generation: int = 0
    crc: int = 0  # the blob's CRC-32, checked when its chunks were joined


@dataclass
class _Partial:
    n: int
    crc: int
    size: int
    chunks: dict[int, bytes]
    last: int = -1  # offset of the latest chunk

    def complete(self) -> bytes | None:
        if len(self.chunks) != self.n or set(self.chunks) != set(range(self.n)):
            return None
        blob = b"".join(self.chunks[i] for i in range(self.n))
        if len(blob) != self.size or zlib.crc32(blob) != self.crc:
            return None
        return blob


class KafkaStateStore:
    """Writes and restores one blob per (group, input partition) on a compacted topic.

    ``client_config`` holds the connection settings shared by producer, consumer and admin
    (``bootstrap_servers`` and security). The state topic's partition for input partition
    p is ``p % partitions`` so a restore reads only its own share of the topic.
    """

    def __init__(
        self,
        client_config: Mapping[str, Any],
        group_id: str,
        *,
        topic: str | None = None,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        timeout_s: float = 30.0,
    ) -> None:
        if chunk_bytes < 1:
            raise ValueError("chunk_bytes must be positive")
        self._client = dict(client_config)
        self.group_id = group_id
        self.topic = topic or state_topic(group_id)
        self.chunk_bytes = chunk_bytes
        self.timeout_s = timeout_s
        self._generation: dict[int, int] = {}  # newest generation seen or written
        self._complete: dict[int, int] = {}  # newest complete generation
        self._stale_counts: dict[tuple[int, int], int] = {}  # chunks per (partition, slot)
        self._owner: dict[int, tuple[int, int]] = {}  # partition -> (fence, group generation)
        self._foreign: dict[int, list[bytes]] = {}  # other owners' keys, dropped after a store
        # partition -> state-partition offset up to which this owner knows every record
        # (read on restore, or its own acknowledged writes): where ``unchanged`` reads from
        self._known_end: dict[int, int] = {}
        self._labels: dict[int, set[bytes]] = {}  # key prefixes this owner wrote p under
        self._partitions: int | None = None
        self._producer: KafkaProducer | None = None

    # -- topic ---------------------------------------------------------------------------

    def ensure_topic(self, partitions: int) -> None:
        """Create the state topic (compacted) if missing; an existing one is kept as is."""
        admin = KafkaAdminClient(**self._client)
        try:
            if self.topic not in admin.list_topics():
                # another instance may create it first
                with contextlib.suppress(TopicAlreadyExistsError):
                    admin.create_topics(
                        {
                            self.topic: {
                                "num_partitions": partitions,
                                "replication_factor": -1,
                                "configs": {"cleanup.policy": "compact"},
                            }
                        },
                        wait_for_metadata=True,
                    )
        finally:
            admin.close()

    def _state_partition(self, partition: int) -> int:
        if self._partitions is None:
            consumer = KafkaConsumer(enable_auto_commit=False, **self._client)
            try:
                parts = consumer.partitions_for_topic(self.topic)
            finally:
                consumer.close()
            if not parts:
                raise RuntimeError(f"state topic {self.topic!r} does not exist")
            self._partitions = len(parts)
        return partition % self._partitions

    def _key(
        self, partition: int, slot: int, chunk: int, owner: tuple[int, int] | None = None
    ) -> bytes:
        fence, ggen = owner or self._owner.get(partition, (0, 0))
        name = f"{fence}-{ggen}-{slot}" if fence else str(slot)
        return f"{self.group_id}/{partition}/{name}/{chunk}".encode()

    def owner(self, partition: int) -> tuple[int, int]:
        """(fence, group generation) this store writes ``partition`` with ((0, 0): unfenced)."""
        return self._owner.get(partition, (0, 0))

    def set_owner(self, partition: int, fence: int, group_generation: int) -> None:
        """Write ``partition`` as the owner holding ``fence`` (taken by a restore)."""
        self._owner[partition] = (fence, group_generation)
        label = f"{self.group_id}/{partition}/{fence}-{group_generation}-".encode()
        self._labels.setdefault(partition, set()).add(label)

    def forget(self, partition: int) -> None:
        """``partition`` was handed over: its next owner takes a new fence."""
        self._owner.pop(partition, None)
        self._foreign.pop(partition, None)
        self._known_end.pop(partition, None)
        self._labels.pop(partition, None)

    # -- write ---------------------------------------------------------------------------

    def store(
        self, partition: int, blob: bytes | mmap.mmap, owner: tuple[int, int] | None = None
    ) -> int:
        """Write ``blob`` (bytes, or a file's memory map) as the next generation of
        ``partition``; returns that generation.
        ``owner``: the (fence, group generation) the blob was taken under, when the
        store's own may have changed since (a hand-over written in the background).

        Returns only once every chunk is acknowledged by the broker (acks=all), so a caller
        may commit the partition's input offsets afterwards.
        """
        generation = self._generation.get(partition, 0) + 1
        if partition in self._complete and generation % 2 == self._complete[partition] % 2:
            generation += 1  # never overwrite the slot of the newest complete generation
        slot = generation % 2
        size = len(blob)
        starts = range(0, size, self.chunk_bytes) if size else range(1)
        n, crc = len(starts), zlib.crc32(blob)
        producer = self._producer_()
        sp = self._state_partition(partition)
        owner = owner or self.owner(partition)
        fence, ggen = owner
        futures = []
        for i, at in enumerate(starts):
            chunk = bytes(blob[at : at + self.chunk_bytes])  # one at a time: no second copy
            headers = [
                ("generation", str(generation).encode()),
                ("chunk", f"{i}/{n}".encode()),
                ("crc", str(crc).encode()),
                ("size", str(size).encode()),
            ]
            if fence:
                headers += [
                    ("fence", str(fence).encode()),
                    ("group_generation", str(ggen).encode()),
                ]
            futures.append(
                producer.send(
                    self.topic,
                    key=self._key(partition, slot, i, owner),
                    value=chunk,
                    partition=sp,
                    headers=headers,
                )
            )
        producer.flush(timeout=self.timeout_s)
        last = max(f.get(timeout=self.timeout_s).offset for f in futures)
        if partition in self._known_end:
            self._known_end[partition] = max(self._known_end[partition], last + 1)
        self._generation[partition] = self._complete[partition] = generation
        self._drop_stale(partition, slot, n)
        self._drop_foreign(partition)
        return generation

    def _drop_foreign(self, partition: int) -> None:
        """Tombstone the previous owners' keys once this owner's state is complete (best
        effort, for compaction: readers rank them below the new fence anyway)."""
        keys = self._foreign.pop(partition, [])
        if keys:
            producer = self._producer_()
            sp = self._state_partition(partition)
            for key in keys:
                producer.send(self.topic, key=key, value=None, partition=sp)
            producer.flush(timeout=self.timeout_s)

    def advance_generation(self, partition: int, at_least: int) -> None:
        """The next ``store`` of ``partition`` writes a generation above ``at_least``: a new
        owner continues the numbering of the previous one (learnt by a reader), or the
        previous owner's higher generations would keep winning."""
        self._generation[partition] = max(self._generation.get(partition, 0), at_least)

    def _drop_stale(self, partition: int, slot: int, n: int) -> None:
        """Tombstone chunks of this slot beyond ``n`` left by a larger older generation
        (best effort: readers ignore them anyway; this lets compaction remove them)."""
        old = self._stale_counts.get((partition, slot), 0)
        if old > n:
            producer = self._producer_()
            sp = self._state_partition(partition)
            for i in range(n, old):
                producer.send(
                    self.topic, key=self._key(partition, slot, i), value=None, partition=sp
                )
            producer.flush(timeout=self.timeout_s)
        self._stale_counts[(partition, slot)] = n

    def _producer_(self) -> KafkaProducer:
        if self._producer is None:
            self._producer = KafkaProducer(
                acks="all",
                max_block_ms=round(self.timeout_s * 1000),
                max_request_size=max(1024 * 1024, self.chunk_bytes + 64 * 1024),
                **kafka_compat.producer_settings(linger_ms=5, give_up_s=self.timeout_s),
                **self._client,
            )
        return self._producer

    # -- read ----------------------------------------------------------------------------

    def restore(self, partition: int) -> StoredState | None:
        """The latest complete generation of ``partition`` (``None``: nothing stored).

        Reads the state partition from its start to the high watermark of the first fetch
        (``end_offsets`` is not used: some brokers report the start of the last batch).
        Holds the latest value per key only (about two blobs), as compaction would.
        """
        found = self.restore_many([partition])[partition]
        return found[0] if found else None

    def restore_many(
        self, partitions: list[int], group_generation: int | None = None
    ) -> dict[int, list[StoredState]]:
        """Every complete generation of each partition, newest (best ranked) first: the
        caller takes the first it can use, so one unusable generation — garbage with a
        high fence, say — is skipped instead of pausing the partition forever. One
        consumer for all (a new owner of several partitions pays one connection and one
        round of fetches, not one each).

        With ``group_generation`` the caller becomes the fenced owner of every partition
        read: its writes outrank every record now in the topic, including later writes
        of the owners before it (and any garbage's fence)."""
        wanted = {p: self._state_partition(p) for p in partitions}
        tps = sorted({TopicPartition(self.topic, sp) for sp in wanted.values()})
        prefixes = {f"{self.group_id}/{p}/".encode(): p for p in partitions}
        found = {p: Generations() for p in partitions}
        consumer = KafkaConsumer(enable_auto_commit=False, **self._client)
        try:
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            deadline = time.monotonic() + self.timeout_s
            ends: dict[TopicPartition, int | None] = {tp: None for tp in tps}

            def done() -> bool:
                return all(e is not None and consumer.position(tp) >= e for tp, e in ends.items())

            while not done():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"restoring {self.topic}: no progress for {self.timeout_s}s")
                batches = consumer.poll(timeout_ms=200)
                if batches:  # a large uncompacted topic may take long: time out on stalls
                    deadline = time.monotonic() + self.timeout_s
                for records in batches.values():
                    for rec in records:
                        if rec.key is None:
                            continue
                        prefix = rec.key[: rec.key.find(b"/", len(self.group_id) + 1) + 1]
                        p = prefixes.get(prefix)
                        if p is not None:
                            found[p].add(rec)
                for tp in tps:
                    if ends[tp] is None:
                        ends[tp] = consumer.highwater(tp)
        finally:
            consumer.close()
        out: dict[int, list[StoredState]] = {}
        for p, gens in found.items():
            complete = gens.complete()
            for slot, n in gens.counts.items():
                self._stale_counts[(p, slot)] = n
            self._generation[p] = max(self._generation.get(p, 0), gens.newest)
            if complete:
                self._complete[p] = complete[0].generation
            if group_generation is not None:
                self._labels.pop(p, None)
                self.set_owner(p, gens.max_fence + 1, group_generation)
                self._foreign[p] = list(gens.latest)
                self._known_end[p] = ends[TopicPartition(self.topic, wanted[p])] or 0
            out[p] = complete
        return out

    def unchanged(self, partitions: list[int], group_generation: int) -> list[int]:
        """Of ``partitions`` (owned by this store before a rebalance), those nobody else
        wrote since: their newest state is what this owner holds in memory, so it may keep
        them without a restore. Each one kept is re-fenced for ``group_generation`` (one
        above every fence seen), so an owner that restored it meanwhile without writing
        (a zombie now) ranks below. Reads only the records after what this owner knows."""
        known = {p: self._known_end[p] for p in partitions if p in self._known_end}
        if not known:
            return []
        wanted = {p: self._state_partition(p) for p in known}
        tps = sorted({TopicPartition(self.topic, sp) for sp in wanted.values()})
        prefixes = {f"{self.group_id}/{p}/".encode(): p for p in known}
        mine = {p: tuple(self._labels.get(p, ())) for p in known}
        foreign: set[int] = set()
        fences = {p: self._owner.get(p, (0, 0))[0] for p in known}
        consumer = KafkaConsumer(enable_auto_commit=False, **self._client)
        try:
            consumer.assign(tps)
            for tp in tps:
                start = min(off for p, off in known.items() if wanted[p] == tp.partition)
                consumer.seek(tp, start)
            ends: dict[TopicPartition, int | None] = {tp: None for tp in tps}
            deadline = time.monotonic() + self.timeout_s
            while not all(e is not None and consumer.position(tp) >= e for tp, e in ends.items()):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"reading the tail of {self.topic}: no progress")
                for records in consumer.poll(timeout_ms=200).values():
                    for rec in records:
                        key = rec.key or b""
                        p = prefixes.get(key[: key.find(b"/", len(self.group_id) + 1) + 1])
                        if p is None or rec.offset < known[p] or key.startswith(mine[p]):
                            continue
                        foreign.add(p)
                        h = {k: v for k, v in rec.headers}
                        with contextlib.suppress(KeyError, ValueError):
                            fences[p] = max(fences[p], int(h["fence"]))
                for tp in tps:
                    if ends[tp] is None:
                        ends[tp] = consumer.highwater(tp)
        finally:
            consumer.close()
        kept = sorted(p for p in known if p not in foreign)
        for p in kept:
            self.set_owner(p, fences[p] + 1, group_generation)
        return kept

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close(timeout=self.timeout_s)
            self._producer = None


# a chunk record's headers, as a writer of this module writes them (a record outside
# these bounds is ignored, never allocated for or ranked)
_MAX_CHUNKS = 1 << 20
_MAX_SIZE = 1 << 40
_MAX_RANK = 1 << 53  # generations and fences: far beyond any real count

# (fence, group generation, generation, chunk count, crc, size)
GenerationIdent = tuple[int, int, int, int, int, int]


class Generations:
    """The partition's state records as log compaction leaves them: the latest value per
    key (a tombstone deletes it). Reading this view makes the result the same whether or
    not the broker has compacted yet, and holds about two blobs (the two slots).

    Chunks are then grouped by (fence, group generation, generation, n, crc, size) and
    ranked in that order: a fenced-off owner's writes never outrank its successor's; a
    generation number can be reused by a writer that died before anyone saw it, and ties
    go to the later write. Headers outside their bounds (a negative generation, a chunk
    index beyond its count, a size of a terabyte) make the record ignored and counted."""

    def __init__(self) -> None:
        self.latest: dict[bytes, Any] = {}
        self.newest = 0
        self.max_fence = 0
        self.counts: dict[int, int] = {}  # chunks per slot, for tombstoning stale ones
        self.malformed = 0

    def add(self, rec: Any) -> None:
        if rec.value is None:
            self.latest.pop(rec.key, None)
        else:
            self.latest[rec.key] = rec

    def resolve(self) -> StoredState | None:
        """The newest complete generation (also sets ``newest`` and ``counts``)."""
        complete = self.complete()
        return complete[0] if complete else None

    def complete(self) -> list[StoredState]:
        """Every complete generation, best ranked first (also sets ``newest``,
        ``max_fence`` and ``counts``)."""
        partial: dict[GenerationIdent, _Partial] = {}
        self.malformed = 0
        for rec in self.latest.values():
            chunk = _chunk_of(rec)
            if isinstance(chunk, str):
                log.warning("ignoring %s at offset %d", chunk, rec.offset)
                self.malformed += 1
                continue
            ident, i = chunk
            fence, _, generation, n, crc, size = ident
            self.newest = max(self.newest, generation)
            self.max_fence = max(self.max_fence, fence)
            self.counts[generation % 2] = max(self.counts.get(generation % 2, 0), n)
            p = partial.setdefault(ident, _Partial(n, crc, size, {}))
            p.chunks[i] = rec.value
            p.last = max(p.last, rec.offset)
        out = []
        for ident in sorted(partial, key=lambda k: (*k[:3], partial[k].last), reverse=True):
            blob = partial[ident].complete()
            if blob is not None:
                fence, ggen, generation, _, crc, _ = ident
                out.append(StoredState(generation, blob, fence, ggen, crc))
        return out

    def discard(self, unwanted: Callable[[GenerationIdent], bool]) -> None:
        """Forget the records of the generations ``unwanted`` names (a reader that keeps
        what it decoded from them needs their bytes no longer). ``newest`` and
        ``max_fence`` keep counting them; malformed records stay, to be counted."""
        for key, rec in list(self.latest.items()):
            chunk = _chunk_of(rec)
            if not isinstance(chunk, str) and unwanted(chunk[0]):
                del self.latest[key]


def _chunk_of(rec: Any) -> tuple[GenerationIdent, int] | str:
    """A state record's generation (fence, group generation, generation, chunk count,
    crc, size) and chunk index, or what is wrong with it."""
    try:
        h = {k: v.decode() for k, v in rec.headers}
        generation = int(h["generation"])
        i, n = (int(x) for x in h["chunk"].split("/"))
        crc, size = int(h["crc"]), int(h["size"])
        fence, ggen = int(h.get("fence", 0)), int(h.get("group_generation", 0))
    except (KeyError, ValueError, UnicodeDecodeError, AttributeError, TypeError):
        return "a malformed state record"
    if not (
        0 <= i < n <= _MAX_CHUNKS
        and 0 <= size <= _MAX_SIZE
        and 0 <= crc < 1 << 32
        and 0 <= generation <= _MAX_RANK
        and 0 <= fence <= _MAX_RANK
        and -1 <= ggen <= _MAX_RANK
    ):
        return "a state chunk with impossible headers"
    return (fence, ggen, generation, n, crc, size), i
