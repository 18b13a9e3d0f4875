"""Kafka sources: both topics in one consumer group, polled in batches.

Offsets are owned by the checkpoint, not by Kafka: on assignment we seek each partition
to the offset stored with the restored state, so replaying after a crash re-applies
exactly the records the state does not contain yet. Kafka commits happen only after a
checkpoint, for lag visibility and for partitions we hold no state for.

Two client libraries sit behind one protocol, ``KafkaSource`` (``kafka.client``):
kafka-python (pure Python, here) and confluent-kafka (librdkafka, ``confluent.py``),
with the same semantics; docs/kafka.md maps the settings onto each.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from kafka import ConsumerRebalanceListener, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.structs import OffsetAndMetadata

from .. import kafka_compat
from ..config import KafkaSettings
from ..kafka_compat import (
    await_join,
    metadata_fetched_at,
    request_metadata,
    topic_metadata,
)
from ..state.positions import Resume, reset_by_client, resume_position
from .assignor import CoPartitionAssignor, warn_unpaired
from .pipeline import RawBatch, offset_key
from .security import kafka_python_security as client_security
from .topic_watch import TopicWatch

kafka_compat.install()

__all__ = [
    "KafkaPythonSource",
    "KafkaSource",
    "client_security",
    "consumer_config",
    "make_producer",
    "open_source",
    "silence_limit_s",
]

log = logging.getLogger(__name__)

# offsets are owned by the checkpoint: a commit is for lag visibility, never worth a stall
COMMIT_TIMEOUT_MS = 5_000
CLOSE_TIMEOUT_MS = 3_000
# how often the clients refresh topic metadata: new partitions and recreated topics are
# seen within seconds (the clients' default is five minutes)
METADATA_MAX_AGE_MS = 5_000
# records polled with metadata older than this are fetched again after a refresh
STALE_METADATA_S = 2 * METADATA_MAX_AGE_MS / 1000
# a group join due or in flight is awaited up to this long per poll: past a broker's 3 s
# delay of a group's first rebalance, short enough not to hold a stop request for long
JOIN_WAIT_MS = 5_000

StoredOffsets = Callable[[], dict[str, int]]
# told when a checkpointed/current position is outside the log (state/positions.py)
OnResume = Callable[[str, int, int, Resume], None]


def silence_limit_s(k: KafkaSettings) -> float:
    """How long the brokers may leave our requests unanswered before the source says it
    is not connected: a stalled or black-holed broker keeps its TCP connections open, so
    the connection count alone would call it up. Past a session timeout (plus one
    heartbeat's slack) the group would have declared this member dead anyway."""
    return (k.session_timeout_ms + k.heartbeat_interval_ms) / 1000


class KafkaSource(Protocol):
    """What the daemon's consumer loop needs from a Kafka client."""

    def poll(self, timeout_ms: int) -> dict[str, RawBatch]:
        """One poll, split by kind ("predictions", "labels"); an empty dict when idle."""
        ...

    def assignment(self) -> set[tuple[str, int]]: ...

    def connected(self) -> bool:
        """Whether a broker connection is live and answering (assignments outlive an
        outage; connections outlive a stalled broker)."""
        ...

    def silent_for(self) -> float | None:
        """Seconds the brokers have left our requests unanswered, once past
        ``silence_limit_s`` (``connected()`` is then false); ``None`` otherwise."""
        ...

    def lag(self) -> list[tuple[str, int, int]]:
        """(topic, partition, messages behind the high watermark) per assigned partition."""
        ...

    def commit(self, offsets: dict[str, int]) -> None:
        """Commit checkpointed offsets ("topic:partition" -> next offset) we are assigned:
        for lag and for partitions without state only, so it is skipped while no broker
        answers and never blocks for long (``COMMIT_TIMEOUT_MS``)."""
        ...

    def close(self) -> None:
        """Leave the group within ``CLOSE_TIMEOUT_MS`` (a shutdown during an outage)."""
        ...

    def topic_ids(self) -> dict[str, str]:
        """The ids of the topics the current positions are positions in (checkpointed
        beside the offsets: ``topic_watch.py``)."""
        ...


def open_source(
    k: KafkaSettings,
    stored_offsets: StoredOffsets,
    on_resume: OnResume | None = None,
    topic_ids: dict[str, str] | None = None,
) -> KafkaSource:
    """The configured client's source; raises while the cluster cannot be reached.
    ``on_resume`` is told of positions outside the log or in a recreated topic (both
    clients); ``topic_ids``: the topics the stored offsets belong to."""
    if k.client == "confluent":
        from .confluent import ConfluentSource

        return ConfluentSource(k, stored_offsets, on_resume, topic_ids)
    return KafkaPythonSource(k, stored_offsets, on_resume, topic_ids)


def make_producer(k: KafkaSettings) -> Any:
    """The dead-letter producer of the configured client (kafka-python's interface:
    ``send(topic, value=, headers=)``, ``flush(timeout=)``, ``close(timeout=)``)."""
    if k.client == "confluent":
        from .confluent import ConfluentProducer

        return ConfluentProducer(k)
    return KafkaProducer(
        bootstrap_servers=k.bootstrap_servers.split(","),
        client_id=f"{k.client_id}-dead-letter",
        acks="all",
        max_block_ms=10_000,  # a send never blocks the consumer loop for long
        reconnect_backoff_max_ms=k.reconnect_backoff_max_ms,
        bootstrap_timeout_ms=k.bootstrap_timeout_ms,
        **kafka_compat.producer_settings(linger_ms=50),
        **client_security(k),
    )


def consumer_config(k: KafkaSettings) -> dict[str, Any]:
    """Everything the daemon's KafkaConsumer is built with (also the benchmark's baseline,
    so both sides consume with the same settings)."""
    return {
        "bootstrap_servers": k.bootstrap_servers.split(","),
        "group_id": k.group_id,
        "client_id": k.client_id,
        "enable_auto_commit": False,
        "auto_offset_reset": k.auto_offset_reset,
        "max_poll_records": k.max_poll_records,
        "max_partition_fetch_bytes": k.max_partition_fetch_bytes,
        "fetch_max_bytes": k.fetch_max_bytes,
        "fetch_max_wait_ms": k.fetch_max_wait_ms,
        "max_poll_interval_ms": k.max_poll_interval_ms,
        "session_timeout_ms": k.session_timeout_ms,
        "heartbeat_interval_ms": k.heartbeat_interval_ms,
        "reconnect_backoff_max_ms": k.reconnect_backoff_max_ms,
        "bootstrap_timeout_ms": k.bootstrap_timeout_ms,
        "metadata_max_age_ms": METADATA_MAX_AGE_MS,
        # co-partitioned, sticky; range (which also co-partitions equal counts) lets a
        # group mix these members with older ones or with librdkafka members
        "partition_assignment_strategy": (CoPartitionAssignor, RangePartitionAssignor),
        **client_security(k),
        **k.extra_consumer_config,
    }


class KafkaPythonSource:
    """``KafkaSource`` on kafka-python."""

    def __init__(
        self,
        k: KafkaSettings,
        stored_offsets: StoredOffsets,
        on_resume: OnResume | None = None,
        topic_ids: dict[str, str] | None = None,
    ) -> None:
        self.settings = k
        self.on_resume = on_resume
        self.watch = TopicWatch(topic_ids)
        self.faults = self.watch.faults
        self.unchecked: dict[TopicPartition, int] = {}  # seeks not range-checked yet
        # the offset each partition's next record must have: sought to, or after the last
        # record handed out (absent: the client chose the start, nothing to compare)
        self._position: dict[TopicPartition, int] = {}
        self.kinds = {k.predictions_topic: "predictions", k.labels_topic: "labels"}
        self._stored_offsets = stored_offsets
        self.consumer = KafkaConsumer(**consumer_config(k))
        self.consumer.subscribe(topics=list(self.kinds), listener=_SeekOnAssign(self))

    def assignment(self) -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in self.consumer.assignment()}

    def poll(self, timeout_ms: int) -> dict[str, RawBatch]:
        batches = self._poll_records(timeout_ms)
        if self.unchecked:
            self._check_starts()
        split: dict[str, tuple[list[Any], dict[str, int]]] = {}
        for tp, records in batches.items():
            if not records:
                continue
            self._handed_out(tp, records)
            records_of_kind, offsets = split.setdefault(self.kinds[tp.topic], ([], {}))
            records_of_kind.extend(records)
            offsets[offset_key(tp.topic, tp.partition)] = records[-1].offset + 1
        return {
            kind: RawBatch([r.value for r in records], record_origin(records), offsets)
            for kind, (records, offsets) in split.items()
        }

    def _poll_records(self, timeout_ms: int) -> dict[Any, list[Any]]:
        """One client poll, less the records of recreated topics; a group join due or in
        flight is awaited first (``await_join``, up to ``JOIN_WAIT_MS``)."""
        await_join(self.consumer, JOIN_WAIT_MS)
        polled = self.consumer.poll(
            timeout_ms=timeout_ms, max_records=self.settings.max_poll_records
        )
        return self._without_recreated(polled)

    def topic_ids(self) -> dict[str, str]:
        return dict(self.watch.ids)

    def current_topic_id(self, topic: str) -> str | None:
        """``topic``'s id as the client's cached metadata says now (None: not known)."""
        return topic_metadata(self.consumer, topic)[0]

    def new_log_start(self, topic: str, partition: int) -> int:
        """Where reading a new log of ``topic`` starts (``kafka.auto_offset_reset``)."""
        return self._new_log_starts([TopicPartition(topic, partition)])[
            TopicPartition(topic, partition)
        ]

    def _new_log_starts(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        if self.settings.auto_offset_reset == "earliest":
            starts = self.consumer.beginning_offsets(tps)
        else:
            starts = self.consumer.end_offsets(tps)
        return {tp: int(off) for tp, off in starts.items()}

    def _restarted(self, topic: str) -> None:
        """A reset to a new log's start by the offset checks: fresh metadata says which."""
        self.watch.restarted(topic, time.monotonic())
        request_metadata(self.consumer)

    def _without_recreated(self, batches: dict[Any, list[Any]]) -> dict[Any, list[Any]]:
        """``batches`` less the records of partitions of a topic found recreated now: their
        positions move to the new log's start and the records there are read next (what
        this poll returned of them may be of either log: the old one is gone).

        Metadata older than ``STALE_METADATA_S`` (the process was paused, or the broker
        away) cannot vouch for the records: they are given back (each partition sought
        to its first one) and fetched again once fresh metadata has said which log
        they are in (``TopicWatch.hold_back``: not for ever)."""
        fetched = metadata_fetched_at(self.consumer)
        now = time.monotonic()
        if self.watch.hold_back(now - fetched, STALE_METADATA_S, now) and batches:
            request_metadata(self.consumer)
            for tp, records in batches.items():
                if records:
                    self.consumer.seek(tp, records[0].offset)
            return {}
        reset: set[TopicPartition] = set()
        for topic in self.kinds:
            topic_id, partitions = topic_metadata(self.consumer, topic)
            if self.watch.observe(topic, topic_id, partitions, fetched).recreated:
                reset |= self._restart_recreated(topic)
        if not reset:
            return batches
        return {tp: records for tp, records in batches.items() if tp not in reset}

    def _restart_recreated(self, topic: str) -> set[TopicPartition]:
        """Every partition of the recreated ``topic`` that is assigned or has a stored
        offset restarts at its new log's start (or end, ``auto_offset_reset = latest``):
        the daemon's offsets follow, so a partition assigned later is sought there too."""
        stored = self._stored_offsets()
        assigned = {tp for tp in self.consumer.assignment() if tp.topic == topic}
        tps = assigned | {
            TopicPartition(topic, int(key.rpartition(":")[2]))
            for key in stored
            if key.rpartition(":")[0] == topic
        }
        if not tps:
            return set()
        for tp, off in self._new_log_starts(list(tps)).items():
            was = self._position.get(tp, stored.get(offset_key(tp.topic, tp.partition), -1))
            if tp in assigned:
                self.consumer.seek(tp, off)
                self._position[tp] = off
            self.unchecked.pop(tp, None)
            if self.on_resume is not None:
                self.on_resume(tp.topic, tp.partition, was, Resume(off, "topic_recreated"))
        return assigned

    def connected(self) -> bool:
        """kafka-python's own ``connection-count`` metric, and the group coordinator
        answering heartbeats (``kafka_compat.heartbeat_silence``)."""
        try:
            metrics = self.consumer.metrics()
        except Exception:
            return False
        if not any(v.get("connection-count", 0) > 0 for v in metrics.values()):
            return False
        return self.silent_for() is None

    def silent_for(self) -> float | None:
        silent = kafka_compat.heartbeat_silence(self.consumer)
        return silent if silent is not None and silent > silence_limit_s(self.settings) else None

    def lag(self) -> list[tuple[str, int, int]]:
        """Uses the high watermark carried by fetch responses (``highwater``) rather than
        ``end_offsets()``: on some Kafka-protocol brokers (tansu) ``end_offsets`` returns
        the start of the last record batch, not the end of the log."""
        offsets = self._stored_offsets()
        out = []
        for tp in sorted(self.consumer.assignment()):
            high = self.consumer.highwater(tp)
            if high is None:
                continue  # no fetch response yet
            self._check_position(tp, int(high))
            pos = offsets.get(offset_key(tp.topic, tp.partition))
            if pos is None:
                pos = self.consumer.position(tp)
            out.append((tp.topic, tp.partition, max(0, int(high) - int(pos))))
        return out

    def _check_starts(self) -> None:
        """Checkpointed offsets below the log start (records deleted before we read
        them) are reported; the high end is checked once a fetch has told the high
        watermark (_check_position): some brokers' end_offsets() is the start of the
        last batch. Not in the rebalance listener: it must not block."""
        pending, self.unchecked = self.unchecked, {}
        lows = self.consumer.beginning_offsets(list(pending))
        for tp, off in pending.items():
            resume = resume_position(off, lows.get(tp), None, self.settings.auto_offset_reset)
            if resume.reason is None:
                continue
            if self.consumer.position(tp) < resume.offset:  # the client did not reset itself
                self.consumer.seek(tp, resume.offset)
                self._position[tp] = resume.offset
            if self.on_resume is not None:
                self.on_resume(tp.topic, tp.partition, off, resume)

    def _check_position(self, tp: TopicPartition, high: int) -> None:
        """A fetch position past the high watermark (topic recreated or truncated) is
        reset per auto_offset_reset, never left waiting with a lag of 0. The position is
        the one we expect (the client may have reset its own already, records not yet
        handed out: the daemon's offset must still follow)."""
        pos = self._position.get(tp)
        if pos is None:
            pos = int(self.consumer.position(tp))
        if pos <= high:
            return
        low = int(self.consumer.beginning_offsets([tp]).get(tp, 0))
        resume = resume_position(pos, low, high, self.settings.auto_offset_reset)
        self.consumer.seek(tp, resume.offset)
        self._position[tp] = resume.offset
        self._restarted(tp.topic)
        if self.on_resume is not None:
            self.on_resume(tp.topic, tp.partition, pos, resume)

    def _handed_out(self, tp: TopicPartition, records: list[Any]) -> None:
        """Move ``tp``'s expected position past ``records``, telling the daemon first when
        they start below it: the client's own reset (``reset_by_client``)."""
        expected = self._position.get(tp)
        if expected is not None and records[0].offset < expected:
            self._reset_by_client(tp, expected, records[0].offset)
        self._position[tp] = records[-1].offset + 1

    def _reset_by_client(self, tp: TopicPartition, expected: int, first: int) -> None:
        resume = reset_by_client(expected, first)
        if resume is not None:
            self._restarted(tp.topic)
        if resume is not None and self.on_resume is not None:
            self.on_resume(tp.topic, tp.partition, expected, resume)

    def commit(self, offsets: dict[str, int]) -> None:
        if not self.connected():
            raise ConnectionError("no broker connection: commit skipped")
        commit = {}
        for tp in self.consumer.assignment():
            off = offsets.get(offset_key(tp.topic, tp.partition))
            if off is not None:
                commit[tp] = OffsetAndMetadata(off, "", -1)
        if commit:
            self.consumer.commit(offsets=commit, timeout_ms=COMMIT_TIMEOUT_MS)

    def close(self) -> None:
        timeout = CLOSE_TIMEOUT_MS if self.connected() else 0
        self.consumer.close(autocommit=False, timeout_ms=timeout)


def record_origin(records: list[Any]) -> Callable[[int], tuple[str, int, int]]:
    """(topic, partition, offset) of a polled batch's i-th record, for dead letters."""

    def origin(i: int) -> tuple[str, int, int]:
        r = records[i]
        return r.topic, r.partition, r.offset

    return origin


class _SeekOnAssign(ConsumerRebalanceListener):
    def __init__(self, source: KafkaPythonSource) -> None:
        self.source = source

    def on_partitions_revoked(self, revoked: Any) -> None:
        log.info("revoked %s", sorted(f"{tp.topic}[{tp.partition}]" for tp in revoked))
        for tp in revoked:
            self.source._position.pop(tp, None)

    def on_partitions_assigned(self, assigned: Any) -> None:
        log.info("assigned %s", sorted(f"{tp.topic}[{tp.partition}]" for tp in assigned))
        warn_unpaired(
            {(tp.topic, tp.partition) for tp in self.source.consumer.assignment()},
            self.source.kinds,
        )
        offsets = self.source._stored_offsets()
        for tp in assigned:
            off = offsets.get(offset_key(tp.topic, tp.partition))
            self.source._position.pop(tp, None)
            if off is not None:
                self.source.consumer.seek(tp, off)
                self.source._position[tp] = off
                self.source.unchecked[tp] = off  # range-checked after the poll
                log.info("seek %s[%d] to checkpointed offset %d", tp.topic, tp.partition, off)
