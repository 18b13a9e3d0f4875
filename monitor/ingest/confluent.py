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
import time
from collections.abc import Callable
from itertools import compress, repeat
from operator import add, eq
from typing import Any

import numpy as np
import orjson
from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from ..config import KafkaSettings
from ..state.positions import Resume, reset_by_client, resume_position
from .assignor import warn_unpaired
from .kafka import CLOSE_TIMEOUT_MS, METADATA_MAX_AGE_MS, STALE_METADATA_S, silence_limit_s
from .pipeline import RawBatch, offset_key
from .security import librdkafka_security as confluent_security
from .topic_watch import TopicWatch

__all__ = ["ConfluentProducer", "ConfluentSource", "confluent_config", "confluent_security"]

log = logging.getLogger(__name__)

_value = Message.value
_topic = Message.topic
_partition = Message.partition
_offset = Message.offset
_error = Message.error

_FILL_S = 0.005
# a poll's values are cut into runs of one topic when the runs average this many or more
_RUN_MIN = 16
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
        "topic.metadata.refresh.interval.ms": METADATA_MAX_AGE_MS,
        # range co-partitions topics of equal partition counts (librdkafka runs no Python
        # assignor; roundrobin and cooperative-sticky do not co-partition): docs/scale-out.md
        "partition.assignment.strategy": "range",
        **confluent_security(k),
        **k.extra_consumer_config,
    }


class BrokerSilence:
    """How long a broker with requests waiting has gone without answering any, from
    librdkafka's statistics (``brokers``: ``state``, ``rx`` responses received,
    ``waitresp_cnt`` and ``outbuf_cnt`` requests in flight and queued).

    librdkafka keeps a broker that stopped answering "UP" until a request times out
    (``socket.timeout.ms``, a minute) and then connects to it again: measured against a
    stopped broker, "UP" for 68 s with one request waiting and ``rx`` frozen. A broker
    with nothing asked of it is not silent, whatever its ``rx``."""

    def __init__(self) -> None:
        self._answered: dict[str, tuple[int, float]] = {}  # name -> (rx, since when)

    def observe(self, brokers: dict[str, Any], now: float) -> float | None:
        """The longest time (s) a broker that is up has left waiting requests unanswered
        until ``now``; ``None`` when none has."""
        seen: dict[str, tuple[int, float]] = {}
        worst: float | None = None
        for name, b in brokers.items():
            if b.get("state") != "UP":
                continue
            rx = int(b.get("rx", 0))
            waiting = b.get("waitresp_cnt", 0) + b.get("outbuf_cnt", 0)
            last = self._answered.get(name)
            if last is None or last[0] != rx or not waiting:
                seen[name] = (rx, now)
                continue
            seen[name] = last
            worst = max(worst or 0.0, now - last[1])
        self._answered = seen
        return worst


class ConfluentSource:
    """``KafkaSource`` on confluent-kafka."""

    def __init__(
        self,
        k: KafkaSettings,
        stored_offsets: Callable[[], dict[str, int]],
        on_resume: Callable[[str, int, int, Resume], None] | None = None,
        topic_ids: dict[str, str] | None = None,
    ) -> None:
        self.settings = k
        self.kinds = {k.predictions_topic: "predictions", k.labels_topic: "labels"}
        self._stored_offsets = stored_offsets
        self.on_resume = on_resume
        self.watch = TopicWatch(topic_ids)
        self.faults = self.watch.faults
        # topic -> (id, partitions, when) as an admin client last described them:
        # librdkafka's consumer metadata has no topic ids (a thread asks, the poll compares)
        self._described: dict[str, tuple[str | None, int | None, float]] = {}
        self._described_tried = time.monotonic()  # the describer's last attempt
        self._stop_describing = threading.Event()
        self._describer = threading.Thread(
            target=self._describe_every, args=(k,), name="topic-ids", daemon=True
        )
        self._describer.start()
        # (topic, partition) -> next offset to hand out (assigned or after the last handed)
        self._position: dict[tuple[str, int], int] = {}
        self.unchecked: dict[tuple[str, int], int] = {}  # assigned offsets, low end unchecked
        self._up = False  # a broker connection is up (from the statistics)
        self._silence = BrokerSilence()
        self._silent: float | None = None  # past silence_limit_s, from the statistics
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
        self._subscribe()

    def _subscribe(self) -> None:
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
        brokers = stats.get("brokers", {})
        up = any(b.get("state") == "UP" for b in brokers.values())
        silent = self._silence.observe(brokers, time.monotonic())
        if silent is not None and silent <= silence_limit_s(self.settings):
            silent = None
        with self._lock:
            self._up, self._silent = up, silent

    def _on_error(self, err: KafkaError) -> None:
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            with self._lock:
                self._up = False
        log.warning("kafka: %s", err.str())

    # -- topic identity -------------------------------------------------------------------
    def _describe_every(self, k: KafkaSettings) -> None:
        """Describe the input topics every second (ids and partition counts)."""
        admin: AdminClient | None = None
        while not self._stop_describing.wait(1.0):
            self._described_tried = time.monotonic()
            try:
                if admin is None:
                    admin = AdminClient(
                        {"bootstrap.servers": k.bootstrap_servers, **confluent_security(k)}
                    )
                asked = time.monotonic()
                futures = admin.describe_topics(
                    TopicCollection(list(self.kinds)), request_timeout=5
                )
                for topic, fut in futures.items():
                    d = fut.result(timeout=10)
                    tid = str(d.topic_id) if d.topic_id else None
                    described = (tid, len(d.partitions), asked)
                    with self._lock:
                        self._described[topic] = described
            except Exception as err:  # no broker, a topic not created yet: next round
                log.debug("describing the input topics: %s", err)

    def topic_ids(self) -> dict[str, str]:
        return dict(self.watch.ids)

    def current_topic_id(self, topic: str) -> str | None:
        """``topic``'s id as the describer last saw it (None: not described yet)."""
        with self._lock:
            return self._described.get(topic, (None, None, 0.0))[0]

    def new_log_start(self, topic: str, partition: int) -> int:
        """Where reading a new log of ``topic`` starts (``kafka.auto_offset_reset``)."""
        tp = TopicPartition(topic, partition)
        low, high = self.consumer.get_watermark_offsets(tp, timeout=5.0, cached=False)
        return int(low if self.settings.auto_offset_reset == "earliest" else high)

    def _restart_recreated(self) -> None:
        """Partitions of a topic found recreated since the last poll — assigned, or with
        a stored offset — restart at the new log's start (or end, ``auto_offset_reset =
        latest``) before anything more is consumed: a seek drops what librdkafka fetched
        of them at the old position, and the daemon's offsets follow (a partition
        assigned later is sought there)."""
        with self._lock:
            described = dict(self._described)
        for topic, (topic_id, partitions, asked) in described.items():
            old = self.watch.ids.get(topic)
            if not self.watch.observe(topic, topic_id, partitions, asked).recreated:
                continue
            stored = self._stored_offsets()
            assigned = {tp.partition for tp in self.consumer.assignment() if tp.topic == topic}
            numbers = assigned | {
                int(key.rpartition(":")[2]) for key in stored if key.rpartition(":")[0] == topic
            }
            try:
                for p in sorted(numbers):
                    off = self.new_log_start(topic, p)
                    was = self._position.get((topic, p), stored.get(offset_key(topic, p), -1))
                    if p in assigned:
                        self.consumer.seek(TopicPartition(topic, p, off))
                        self._position[topic, p] = off
                    self.unchecked.pop((topic, p), None)
                    if self.on_resume is not None:
                        self.on_resume(topic, p, was, Resume(off, "topic_recreated"))
            except KafkaException as err:  # a seek before the fetcher started: next poll
                log.debug("%s: restart deferred: %s", topic, err)
                if old is not None:
                    self.watch.ids[topic] = old

    # -- KafkaSource ---------------------------------------------------------------------
    def poll(self, timeout_ms: int) -> dict[str, RawBatch]:
        if self._held_back(timeout_ms):
            return {}
        msgs = self._consumed(timeout_ms)
        return self._split(msgs) if msgs else {}

    def _held_back(self, timeout_ms: int) -> bool:
        """Before each poll: whether to consume nothing now — the process was paused, and
        which log the next messages are in is not known until the describer has run
        again (a second) — else partitions of a topic found recreated are restarted."""
        now = time.monotonic()
        if not self._described:
            # positions known to be in a log of a given id: wait for the first
            # description to say it is still that log (bounded like a stale one)
            if self.watch.ids and self.watch.hold_back(float("inf"), STALE_METADATA_S, now):
                self._stop_describing.wait(timeout_ms / 1000)
                return True
            return False
        if self.watch.hold_back(now - self._described_tried, STALE_METADATA_S, now):
            self._stop_describing.wait(timeout_ms / 1000)
            return True
        self._restart_recreated()
        return False

    def _consumed(self, timeout_ms: int) -> list[Message]:
        """One poll's messages (none: idle), errors dropped (logged)."""
        n = self.settings.max_poll_records
        msgs = self.consumer.consume(n, 0)  # what librdkafka has queued, at once
        if self.unchecked:
            self._check_starts()
        if not msgs:
            first = self.consumer.poll(timeout_ms / 1000)  # wait for one, not for n
            if self.unchecked:
                self._check_starts()
            if first is None:
                return []
            msgs = [first]
        if len(msgs) < n:
            # a few ms for the fetchers to fill the batch: each batch costs the pipeline
            # a fixed amount (numpy passes, one engine apply), so fuller is cheaper
            msgs += self.consumer.consume(n - len(msgs), _FILL_S)
        if any(map(_error, msgs)):
            msgs = self._drop_errors(msgs)
        return msgs

    def _split(self, msgs: list[Message]) -> dict[str, RawBatch]:
        """A poll's messages as one ``RawBatch`` per kind, and the partitions' positions
        moved past them. A handful of C-level passes over the messages (their values,
        partitions, whether each is of the first message's topic); offsets are read only
        at each partition's first and last message."""
        n = len(msgs)
        values = list(map(_value, msgs))
        parts = list(map(_partition, msgs))
        topics = list(map(_topic, msgs))
        first_topic = topics[0]
        sel: np.ndarray | None = None  # whether each is of the first topic (None: all are)
        other = None
        if topics.count(first_topic) < n:  # (two are subscribed: the rest is the other one)
            other = next(t for t in self.kinds if t != first_topic)
            sel = np.fromiter(map(eq, topics, repeat(first_topic)), bool, n)
        del topics
        ends = _partition_ends(sel, parts)
        position = self._position
        out: dict[str, RawBatch] = {}
        for topic, mine in ((first_topic, True), (other, False)):
            if topic is None:
                continue
            offsets: dict[str, int] = {}
            for (is_first, part), (i, j) in ends.items():
                if is_first is not mine:
                    continue
                start, last = _offset(msgs[i]), _offset(msgs[j])
                expected = position.get((topic, part))
                if expected is not None and start < expected:  # the client went back
                    self._reset_by_client((topic, part), expected, start)
                position[topic, part] = last + 1
                offsets[offset_key(topic, part)] = last + 1
            vals = values if sel is None else _selected(values, sel, mine)
            origin = _Origin(msgs, sel, mine)
            out[self.kinds[topic]] = RawBatch(vals, origin, offsets)
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
        if resume.reason == "offset_beyond_end":
            self.watch.restarted(topic, time.monotonic())
        if self.on_resume is not None:
            self.on_resume(topic, partition, was, resume)

    def _reset_by_client(self, tp: tuple[str, int], expected: int, first: int) -> None:
        resume = reset_by_client(expected, first)
        if resume is not None:
            self.watch.restarted(tp[0], time.monotonic())
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
            return self._up and self._silent is None

    def silent_for(self) -> float | None:
        with self._lock:
            return self._silent

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
        if not self.connected():
            raise ConnectionError("no broker connection: commit skipped")
        commit = []
        for tp in self.consumer.assignment():
            off = offsets.get(offset_key(tp.topic, tp.partition))
            if off is not None:
                commit.append(TopicPartition(tp.topic, tp.partition, off))
        if commit:  # asynchronous: a synchronous commit waits for a coordinator forever
            self.consumer.commit(offsets=commit, asynchronous=True)

    def close(self) -> None:
        """librdkafka's close leaves the group and waits for the broker: bounded by
        ``CLOSE_TIMEOUT_MS`` in a helper thread (the process exits after it anyway)."""
        self._stop_describing.set()
        closer = threading.Thread(target=self.consumer.close, name="consumer-close", daemon=True)
        closer.start()  # auto-commit is off: closing commits nothing
        closer.join((CLOSE_TIMEOUT_MS if self.connected() else 0) / 1000)
        if closer.is_alive():
            log.warning("consumer close did not finish within %d ms (no broker?): leaving it",
                        CLOSE_TIMEOUT_MS)  # fmt: skip


def _partition_ends(
    sel: np.ndarray | None, parts: list[int]
) -> dict[tuple[bool, int], tuple[int, int]]:
    """(of the first topic, partition) -> indices of its first and last message in the
    lists (messages of one partition come in order); ``sel``: whether each message is of
    the first topic (None: all are). Keyed without a tuple per message: by the topic
    flag alone when one partition number is all there is, else by 2 * partition + flag
    (small ints) in two C-level dict builds."""
    n = len(parts)
    if parts.count(parts[0]) == n:
        part = parts[0]
        if sel is None:
            return {(True, part): (0, n - 1)}
        out = {}
        for flag in (True, False):
            at = np.flatnonzero(sel == flag)
            if at.shape[0]:
                out[flag, part] = (int(at[0]), int(at[-1]))
        return out
    flags = [True] * n if sel is None else sel.tolist()
    keys = list(map(add, map(add, parts, parts), flags))
    last = dict(zip(keys, range(n), strict=True))
    first = dict(zip(keys[::-1], range(n - 1, -1, -1), strict=True))
    return {(bool(k & 1), k >> 1): (first[k], i) for k, i in last.items()}


def _selected(values: list[bytes | None], sel: np.ndarray, mine: bool) -> list[bytes | None]:
    """The values where ``sel`` is ``mine``, in order. librdkafka hands a partition's
    messages over in runs (a fetched batch at a time), so the list is cut into its runs
    and the kind's runs joined — slices, not a test per message; ``compress`` when the
    topics alternate too often for runs to pay."""
    edges = np.flatnonzero(sel[1:] != sel[:-1]) + 1
    if edges.shape[0] * _RUN_MIN > sel.shape[0]:
        return list(compress(values, sel if mine else ~sel))
    bounds = [0, *edges.tolist(), sel.shape[0]]
    start = 0 if bool(sel[0]) is mine else 1  # the kind's runs alternate with the other's
    out: list[bytes | None] = []
    for k in range(start, len(bounds) - 1, 2):
        out += values[bounds[k] : bounds[k + 1]]
    return out


class _Origin:
    """Where record ``i`` of a kind's batch came from, worked out only when asked (for
    rejected records): the poll's messages and which of them are of that kind."""

    __slots__ = ("_index", "_mine", "_msgs", "_sel")

    def __init__(self, msgs: list[Message], sel: np.ndarray | None, mine: bool) -> None:
        self._msgs = msgs
        self._sel = sel  # None: every message is of the kind
        self._mine = mine
        self._index: list[int] | None = None

    def __call__(self, i: int) -> tuple[str, int, int]:
        if self._sel is not None:
            if self._index is None:
                self._index = np.flatnonzero(self._sel == self._mine).tolist()
            i = self._index[i]
        m = self._msgs[i]
        return m.topic(), m.partition(), m.offset()


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
