"""``KafkaSource`` on confluent-kafka (librdkafka): the fast client (``kafka.client =
"confluent"``, ``pip install 'model-monitor[fast]'``).

Same semantics as the kafka-python source: no auto-commit (offsets are committed only
after a checkpoint), partitions start at their checkpointed offsets on assignment, lag
is the fetch responses' high watermark minus the checkpointed position, readiness
needs a broker connection that is up (librdkafka's statistics, once a second).

librdkafka fetches in its own threads into a local queue; ``poll`` takes whatever is
queued in one C call, so Python only touches each message to read its value.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from itertools import compress
from typing import Any

import orjson
from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from ..config import KafkaSettings
from ..state.positions import Resume, reset_by_client, resume_position
from .assignor import warn_unpaired
from .pipeline import RawBatch, offset_key
from .security import librdkafka_security as confluent_security

__all__ = ["ConfluentProducer", "ConfluentSource", "confluent_config", "confluent_security"]

log = logging.getLogger(__name__)

_value = Message.value
_topic = Message.topic
_partition = Message.partition
_offset = Message.offset
_error = Message.error

_FILL_S = 0.005
# librdkafka prefetch: up to a million messages / 256 MiB queued ahead of the pipeline
_QUEUED_MIN_MESSAGES = 1_000_000
_QUEUED_MAX_KBYTES = 256 * 1024


def confluent_config(k: KafkaSettings) -> dict[str, Any]:
    """The consumer's librdkafka properties (also the benchmark's baseline)."""
    return {
        "bootstrap.servers": k.bootstrap_servers,
        "group.id": k.group_id,
        "client.id": k.client_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": k.auto_offset_reset,
        "max.partition.fetch.bytes": k.max_partition_fetch_bytes,
        "fetch.max.bytes": k.fetch_max_bytes,
        "fetch.wait.max.ms": k.fetch_max_wait_ms,
        "queued.min.messages": _QUEUED_MIN_MESSAGES,
        "queued.max.messages.kbytes": _QUEUED_MAX_KBYTES,
        "max.poll.interval.ms": k.max_poll_interval_ms,
        "session.timeout.ms": k.session_timeout_ms,
        "heartbeat.interval.ms": k.heartbeat_interval_ms,
        "reconnect.backoff.max.ms": k.reconnect_backoff_max_ms,
        "socket.connection.setup.timeout.ms": max(1000, k.bootstrap_timeout_ms),
        # range co-partitions topics of equal partition counts (librdkafka runs no Python
        # assignor; roundrobin and cooperative-sticky do not co-partition): docs/scale-out.md
        "partition.assignment.strategy": "range",
        **confluent_security(k),
        **k.extra_consumer_config,
    }


class ConfluentSource:
    """``KafkaSource`` on confluent-kafka."""

    def __init__(
        self,
        k: KafkaSettings,
        stored_offsets: Callable[[], dict[str, int]],
        on_resume: Callable[[str, int, int, Resume], None] | None = None,
    ) -> None:
        self.settings = k
        self.kinds = {k.predictions_topic: "predictions", k.labels_topic: "labels"}
        self._stored_offsets = stored_offsets
        self.on_resume = on_resume
        # (topic, partition) -> next offset to hand out (assigned or after the last handed)
        self._position: dict[tuple[str, int], int] = {}
        self.unchecked: dict[tuple[str, int], int] = {}  # assigned offsets, low end unchecked
        self._up = False  # a broker connection is up (from the statistics)
        self._lock = threading.Lock()  # callbacks run inside poll; readers elsewhere
        self.consumer = Consumer(
            {
                **confluent_config(k),
                "statistics.interval.ms": 1000,
                "stats_cb": self._on_stats,
                "error_cb": self._on_error,
                "logger": logging.getLogger("monitor.ingest.rdkafka"),
            }
        )
        # the group join happens inside poll(); on_assign seeks before any message
        self.consumer.subscribe(
            list(self.kinds), on_assign=self._on_assign, on_revoke=self._on_revoke
        )

    # -- callbacks (run inside consume/poll, on the consumer loop's thread) --------------
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.info("assigned %s", sorted(f"{tp.topic}[{tp.partition}]" for tp in partitions))
        warn_unpaired({(tp.topic, tp.partition) for tp in partitions}, self.kinds)
        offsets = self._stored_offsets()
        for tp in partitions:
            off = offsets.get(offset_key(tp.topic, tp.partition))
            if off is not None:
                tp.offset = off
                self._position[tp.topic, tp.partition] = off
                self.unchecked[tp.topic, tp.partition] = off  # range-checked after the poll
                log.info("seek %s[%d] to checkpointed offset %d", tp.topic, tp.partition, off)
        consumer.assign(partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.info("revoked %s", sorted(f"{tp.topic}[{tp.partition}]" for tp in partitions))
        for tp in partitions:
            self._position.pop((tp.topic, tp.partition), None)
            self.unchecked.pop((tp.topic, tp.partition), None)
        consumer.unassign()

    def _on_stats(self, stats_json: str) -> None:
        stats = orjson.loads(stats_json)
        up = any(b.get("state") == "UP" for b in stats.get("brokers", {}).values())
        with self._lock:
            self._up = up

    def _on_error(self, err: KafkaError) -> None:
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            with self._lock:
                self._up = False
        log.warning("kafka: %s", err.str())

    # -- KafkaSource ---------------------------------------------------------------------
    def poll(self, timeout_ms: int) -> dict[str, RawBatch]:
        n = self.settings.max_poll_records
        msgs = self.consumer.consume(n, 0)  # what librdkafka has queued, at once
        if self.unchecked:
            self._check_starts()
        if not msgs:
            first = self.consumer.poll(timeout_ms / 1000)  # wait for one, not for n
            if self.unchecked:
                self._check_starts()
            if first is None:
                return {}
            msgs = [first]
        if len(msgs) < n:
            # a few ms for the fetchers to fill the batch: each batch costs the pipeline
            # a fixed amount (numpy passes, one engine apply), so fuller is cheaper
            msgs += self.consumer.consume(n - len(msgs), _FILL_S)
        if any(map(_error, msgs)):
            msgs = self._drop_errors(msgs)
            if not msgs:
                return {}
        topics = list(map(_topic, msgs))
        values = list(map(_value, msgs))
        parts = list(map(_partition, msgs))
        offs = list(map(_offset, msgs))
        position = self._position
        # messages of one partition come in order: its last offset seen is the highest
        last = _by_partition(topics, parts, offs)
        # ... and its first the lowest
        firsts = _by_partition(topics[::-1], parts[::-1], offs[::-1]) if position else {}
        for tp, o in firsts.items():  # each partition's first record where we expect it
            expected = position.get(tp)
            if expected is not None and o < expected:
                self._reset_by_client(tp, expected, o)
        for tp, o in last.items():
            position[tp] = o + 1
        kinds = self.kinds
        present = {t for t, _ in last}
        out: dict[str, RawBatch] = {}
        for topic in present:
            offsets = {offset_key(t, p): o + 1 for (t, p), o in last.items() if t == topic}
            if len(present) == 1:
                mine, vals = msgs, values
            else:  # C-level passes: a selector, then two compresses
                sel = list(map(topic.__eq__, topics))
                mine, vals = list(compress(msgs, sel)), list(compress(values, sel))
            out[kinds[topic]] = RawBatch(vals, _message_origin(mine), offsets)
        return out

    def _check_starts(self) -> None:
        """Checkpointed offsets below the log start (records deleted before we read them)
        are reported; the high end is checked against the fetch responses' high watermark
        (``_check_position``, from ``lag``): some brokers' end-offset answer is the start
        of the last batch, not the end of the log (kafka.py's source does the same)."""
        pending, self.unchecked = self.unchecked, {}
        for (topic, partition), off in pending.items():
            tp = TopicPartition(topic, partition)
            try:
                low, _ = self.consumer.get_watermark_offsets(tp, timeout=2.0, cached=False)
            except KafkaException as err:  # (no broker answers: the loop must not stall)
                log.warning("%s[%d]: log start unknown, not checked: %s", topic, partition, err)
                continue
            resume = resume_position(off, int(low), None, self.settings.auto_offset_reset)
            if resume.reason is None:
                continue
            try:
                self._resume(topic, partition, off, resume)
            except KafkaException as err:  # a seek before the fetcher started: next poll
                log.debug("%s[%d]: seek deferred: %s", topic, partition, err)
                self.unchecked.setdefault((topic, partition), off)

    def _check_position(self, tp: TopicPartition, high: int) -> None:
        """A position past the high watermark (topic recreated or truncated) is reset per
        auto_offset_reset, never left waiting with a lag of 0."""
        pos = self._position.get((tp.topic, tp.partition))
        if pos is None or pos <= high:
            return
        low, _ = self.consumer.get_watermark_offsets(tp, timeout=2.0, cached=False)
        resume = resume_position(pos, int(low), high, self.settings.auto_offset_reset)
        self._resume(tp.topic, tp.partition, pos, resume)

    def _resume(self, topic: str, partition: int, was: int, resume: Resume) -> None:
        """Move a partition to ``resume.offset`` (forward unless librdkafka's own reset is
        already past it; back from beyond the end) and tell the daemon."""
        pos = self._position.get((topic, partition), -1)
        if pos < resume.offset or resume.reason == "offset_beyond_end":
            self.consumer.seek(TopicPartition(topic, partition, resume.offset))
            self._position[topic, partition] = resume.offset
        if self.on_resume is not None:
            self.on_resume(topic, partition, was, resume)

    def _reset_by_client(self, tp: tuple[str, int], expected: int, first: int) -> None:
        resume = reset_by_client(expected, first)
        if resume is not None and self.on_resume is not None:
            self.on_resume(tp[0], tp[1], expected, resume)

    def _drop_errors(self, msgs: list[Message]) -> list[Message]:
        keep = []
        for m in msgs:
            err = m.error()
            if err is None:
                keep.append(m)
            elif err.code() != KafkaError._PARTITION_EOF:
                log.warning("consume: %s", err.str())
        return keep

    def assignment(self) -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in self.consumer.assignment()}

    def connected(self) -> bool:
        with self._lock:
            return self._up

    def lag(self) -> list[tuple[str, int, int]]:
        """High watermarks as the last fetch responses reported them (``cached``: no
        broker round trip), minus the checkpointed position."""
        offsets = self._stored_offsets()
        out = []
        for tp in sorted(self.consumer.assignment(), key=lambda t: (t.topic, t.partition)):
            _, high = self.consumer.get_watermark_offsets(tp, cached=True)
            if high is None or high < 0:
                continue  # no fetch response yet
            self._check_position(tp, int(high))
            pos = offsets.get(offset_key(tp.topic, tp.partition))
            if pos is None:
                (at,) = self.consumer.position([tp])
                if at.offset == OFFSET_INVALID or at.offset < 0:
                    continue
                pos = at.offset
            out.append((tp.topic, tp.partition, max(0, int(high) - int(pos))))
        return out

    def commit(self, offsets: dict[str, int]) -> None:
        commit = []
        for tp in self.consumer.assignment():
            off = offsets.get(offset_key(tp.topic, tp.partition))
            if off is not None:
                commit.append(TopicPartition(tp.topic, tp.partition, off))
        if commit:
            self.consumer.commit(offsets=commit, asynchronous=False)

    def close(self) -> None:
        self.consumer.close()  # auto-commit is off: closing commits nothing


def _by_partition(
    topics: list[str], parts: list[int], offs: list[int]
) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the offset of its last message in the lists. Keyed by topic
    alone when one partition number is all there is (single-partition topics, or a
    consumer of one partition each): no tuple per message to build and hash."""
    if parts.count(parts[0]) == len(parts):
        part = parts[0]
        return {(t, part): o for t, o in dict(zip(topics, offs, strict=True)).items()}
    return dict(zip(zip(topics, parts, strict=True), offs, strict=True))


def _message_origin(msgs: list[Message]) -> Callable[[int], tuple[str, int, int]]:
    def origin(i: int) -> tuple[str, int, int]:
        m = msgs[i]
        return m.topic(), m.partition(), m.offset()

    return origin


class _Delivery:
    """kafka-python's send future, as much of it as the dead-letter sink reads."""

    __slots__ = ("error", "is_done")

    def __init__(self) -> None:
        self.is_done = False
        self.error: str | None = None

    def succeeded(self) -> bool:
        return self.is_done and self.error is None


class ConfluentProducer:
    """The dead-letter producer on librdkafka, with kafka-python's producer interface
    (what ``TopicDeadLetter`` calls): ``send`` returns a future-like delivery report, so a
    record librdkafka could not deliver is spooled again by the sink, never lost."""

    def __init__(self, k: KafkaSettings) -> None:
        self.producer = Producer(
            {
                "bootstrap.servers": k.bootstrap_servers,
                "client.id": f"{k.client_id}-dead-letter",
                "acks": "all",
                "linger.ms": 50,
                "error_cb": lambda err: log.warning("dead-letter producer: %s", err.str()),
                "logger": logging.getLogger("monitor.ingest.rdkafka"),
                **confluent_security(k),
            }
        )

    def partitions_for(self, topic: str) -> set[int]:
        """Metadata of ``topic``; raises while no broker answers (connection check)."""
        meta = self.producer.list_topics(topic, timeout=5)
        t = meta.topics.get(topic)
        if t is None or t.error is not None:
            raise RuntimeError(f"no metadata for topic {topic}: {t.error if t else 'absent'}")
        return set(t.partitions)

    def send(self, topic: str, value: bytes | None, headers: list[tuple[str, bytes]]) -> _Delivery:
        delivery = _Delivery()

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            delivery.error = None if err is None else err.str()
            delivery.is_done = True

        while True:
            try:
                self.producer.produce(topic, value=value, headers=headers, on_delivery=delivered)
                break
            except BufferError:  # local queue full: let deliveries drain
                self.producer.poll(0.1)
        self.producer.poll(0)
        return delivery

    def flush(self, timeout: float) -> None:
        left = self.producer.flush(timeout)
        if left:
            raise TimeoutError(f"{left} dead-letter record(s) not delivered within {timeout}s")

    def close(self, timeout: float) -> None:
        self.producer.flush(timeout)
