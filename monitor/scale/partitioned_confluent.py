"""The partitioned daemon's source on confluent-kafka (librdkafka), ``kafka.client =
"confluent"`` with ``scale.mode = "partitioned"``.

What the partitioned daemon needs from a source, as ``PartitionedSource`` gives it on
kafka-python (docs/scale-out.md):

- co-partitioning: librdkafka runs no Python assignor; its ``range`` assignor (set by
  ``confluent_config``) gives each member the same partition numbers of both topics when
  their partition counts are equal (checked at start) — not sticky: a membership change
  may move every partition, and each moved partition is stored and restored;
- hand-over: librdkafka calls the rebalance callbacks inside ``consume``, on the consumer
  loop's thread, while its own threads keep heartbeating; a revocation hands the
  partitions to the group owner (taken under the lock, stored by its hand-over thread), an
  eviction (``on_lost``) drops them unstored, an assignment pauses what must be restored;
- the group generation of the membership (zombie fencing): read from the consumer group
  metadata librdkafka serialises for transactional producers;
- a partition is consumed only once its state is restored: messages of a partition still
  paused (fetched before the pause took effect) are dropped, and its first dropped
  offset is where consumption resumes when no stored state says otherwise.
"""

from __future__ import annotations

import logging
import struct
from itertools import compress
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException, TopicPartition

from ..config import KafkaSettings
from ..ingest.assignor import warn_unpaired
from ..ingest.confluent import ConfluentSource, _offset, _Origin, _partition, _topic, _value
from ..ingest.pipeline import RawBatch, offset_key

if TYPE_CHECKING:
    from .partitioned import GroupOwner

__all__ = ["PartitionedConfluentSource", "group_generation"]

log = logging.getLogger("monitor.scale")

_METADATA_MAGIC = b"CGMDv2:"


def group_generation(metadata: bytes) -> int:
    """The generation id in librdkafka's serialised consumer group metadata
    (``rd_kafka_consumer_group_metadata_write``: the magic ``CGMDv2:``, then the
    generation as a 32-bit integer in the host's byte order); -1 when not a member."""
    if not metadata.startswith(_METADATA_MAGIC) or len(metadata) < len(_METADATA_MAGIC) + 4:
        return -1
    (generation,) = struct.unpack_from("=i", metadata, len(_METADATA_MAGIC))
    return int(generation)


class PartitionedConfluentSource(ConfluentSource):
    """The confluent source whose batches are split per (kind, partition number) and whose
    rebalance callbacks hand partitions over through the owner."""

    def __init__(self, k: KafkaSettings, owner: GroupOwner) -> None:
        self.owner = owner
        # (topic, partition) -> the first offset dropped while the partition was paused
        self._dropped: dict[tuple[str, int], int] = {}
        super().__init__(k, self._offsets, owner.d._on_resume)

    def _subscribe(self) -> None:
        self.consumer.subscribe(
            list(self.kinds),
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )

    def _offsets(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for part in list(self.owner.parts.values()):
            out.update(part.offsets)
        return out

    # -- rebalance callbacks (inside consume, on the consumer loop's thread) --------------
    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        log.info("assigned %s", sorted(f"{tp.topic}[{tp.partition}]" for tp in partitions))
        for tp in partitions:
            self._forget(tp.topic, tp.partition)
        consumer.assign(partitions)
        warn_unpaired({(tp.topic, tp.partition) for tp in partitions}, self.kinds)
        self.owner.on_assigned({tp.partition for tp in partitions})

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        log.info("revoked %s", sorted(f"{tp.topic}[{tp.partition}]" for tp in partitions))
        for tp in partitions:
            self._forget(tp.topic, tp.partition)
        self.owner.on_revoked({tp.partition for tp in partitions})
        consumer.unassign()

    def _on_lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        log.warning("lost %s", sorted(f"{tp.topic}[{tp.partition}]" for tp in partitions))
        for tp in partitions:
            self._forget(tp.topic, tp.partition)
        self.owner.on_lost({tp.partition for tp in partitions})
        consumer.unassign()

    def _forget(self, topic: str, partition: int) -> None:
        self._position.pop((topic, partition), None)
        self.unchecked.pop((topic, partition), None)
        self._dropped.pop((topic, partition), None)

    # -- what the partitioned daemon calls ------------------------------------------------
    def poll(self, timeout_ms: int) -> dict[tuple[str, int], RawBatch]:  # type: ignore[override]
        """One poll split by (kind, partition number); a paused partition's messages
        (fetched before its pause took effect) are dropped, its first offset kept."""
        if self._held_back(timeout_ms):  # paused, or a recreated topic restarted
            return {}
        msgs = self._consumed(timeout_ms)
        if not msgs:
            return {}
        keys = list(zip(map(_topic, msgs), map(_partition, msgs), strict=True))
        paused = self.owner.paused
        out: dict[tuple[str, int], RawBatch] = {}
        for topic, part in dict.fromkeys(keys):
            mine = list(compress(msgs, map((topic, part).__eq__, keys)))
            first, last = _offset(mine[0]), _offset(mine[-1])
            if part in paused:
                self._dropped.setdefault((topic, part), first)
                continue
            expected = self._position.get((topic, part))
            if expected is not None and first < expected:  # the client went back
                self._reset_by_client((topic, part), expected, first)
            self._position[topic, part] = last + 1
            out[(self.kinds[topic], part)] = RawBatch(
                list(map(_value, mine)),
                _Origin(mine, None, True),
                {offset_key(topic, part): last + 1},
            )
        return out

    def generation(self) -> int:
        """The consumer's group generation (-1: not a member)."""
        try:
            return group_generation(self.consumer.consumer_group_metadata())
        except KafkaException:
            return -1

    def start(self, number: int, offsets: dict[str, int]) -> None:
        """Start partition ``number`` of both topics where its restored state says, or
        where the first message dropped while it was paused was (nothing said: where the
        group's committed offset or the reset policy put it)."""
        for topic in self.kinds:
            off = offsets.get(offset_key(topic, number), self._dropped.pop((topic, number), None))
            self._position.pop((topic, number), None)
            if off is None:
                continue
            self.consumer.seek(TopicPartition(topic, number, off))
            self._position[topic, number] = off
            self.unchecked[topic, number] = off  # the log start is checked after the poll

    def pause_only(self, numbers: set[int]) -> None:
        assigned = self.consumer.assignment()
        pause = [tp for tp in assigned if tp.partition in numbers]
        resume = [tp for tp in assigned if tp.partition not in numbers]
        if resume:
            self.consumer.resume(resume)
        if pause:
            self.consumer.pause(pause)

    def lag(self) -> list[tuple[str, int, int]]:
        """Lag of the partitions owned with a restored state, from the high watermarks the
        fetch responses reported (no broker round trip on the consumer loop)."""
        offsets = self._offsets()
        out = []
        for tp in sorted(self.consumer.assignment(), key=lambda t: (t.topic, t.partition)):
            pos = offsets.get(offset_key(tp.topic, tp.partition))
            _, high = self.consumer.get_watermark_offsets(tp, cached=True)
            if pos is not None and high is not None and high >= 0:
                out.append((tp.topic, tp.partition, max(0, int(high) - int(pos))))
        return out
