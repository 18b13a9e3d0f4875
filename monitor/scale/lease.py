"""The exporter lease: which instance exports the global quality series and sends SLO
alerts, decided by the order of records in the stats topic.

Every instance merges all partitions' statistics (``merge.py``), so any instance that has
read the stats topic to its end can export; the lease only picks one. It is a lease in
the sense of Gray and Cheriton (1989, "Leases: an efficient fault-tolerant mechanism for
distributed file cache consistency"): a grant valid for a bounded time, renewed by its
holder; and the grant is decided by a totally ordered log (Kafka's partition order),
so all readers agree on it without any other protocol.

Records (key ``<group>/exporter`` in the one partition of the compacted topic
``<group>-exporter``, small and apart from the statistics so a renewal is never queued
behind megabytes of them; JSON value
``{"op", "epoch", "holder", "seq", "after"}``):

- ``claim`` of epoch e, ``after`` = the latest accepted record its writer read: it wins
  only if that is still the latest accepted record when the claim lands (a
  compare-and-set in log order) — so the first of competing claims wins, and a claim
  that a renewal overtook loses; losers see that when they read the log and never renew;
- ``renew`` by the holder: only a writer that read its own winning claim renews, so a
  renewal is authoritative (a reader that started on a compacted log believes it);
- ``release`` on a clean shutdown: the lease is free at once.

Expiry and fencing, on monotonic clocks: a reader considers the lease expired
``lease_s`` after it *read* the holder's latest renewal; the holder considers it valid
only until ``lease_s - margin`` after it *sent* the renewal it then read back. Reading
follows sending, so the holder always stops before anyone may claim; a holder that was
paused (SIGSTOP) or cannot reach the broker stops exporting when its own lease runs out,
before another instance starts. Failover takes ``lease_s`` plus one renewal interval,
independent of the group's session timeout and rebalance.

The clock is Linux's ``CLOCK_BOOTTIME`` where there is one: like ``CLOCK_MONOTONIC``
it runs on while a process is stopped, and unlike it also while the machine or VM is
suspended — a holder that wakes from a suspend must see its lease as run out, as the
other instances do. Alert delivery asks ``valid`` again right before it writes a
request (``alerting/delivery.py``), so a holder paused with an alert in hand does not
send it when it resumes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from .. import kafka_compat
from ..state.topics import lease_topic

kafka_compat.install()

__all__ = ["ExporterLease", "LeaseLog", "lease_key"]

log = logging.getLogger(__name__)


def _boottime() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


# seconds that also count a suspended machine (Linux); elsewhere the monotonic clock
_lease_clock: Callable[[], float] = _boottime if hasattr(time, "CLOCK_BOOTTIME") else time.monotonic


def lease_key(group_id: str) -> str:
    return f"{group_id}/exporter"


@dataclass
class LeaseLog:
    """The lease as the log says it is: a pure state machine fed in log order."""

    epoch: int = 0
    holder: str | None = None
    seq: int = -1  # the holder's latest accepted record
    last: str = ""  # that record's token, "<holder>/<seq>": what a claim must cite
    seen_at: float = float("-inf")  # lease-clock time that record was read
    malformed: int = 0

    def apply(self, value: bytes | None, now: float) -> None:
        try:
            rec = json.loads(value or b"")
            op, epoch, holder = rec["op"], int(rec["epoch"]), str(rec["holder"])
            seq, after = int(rec["seq"]), str(rec.get("after", ""))
        except (ValueError, KeyError, TypeError, AttributeError):
            self.malformed += 1
            return
        # a reader that starts on a compacted log takes its first record as it is
        cited = after == self.last or not self.last
        if (op == "claim" and epoch > self.epoch and cited) or (
            op == "renew" and epoch >= self.epoch
        ):
            self.epoch, self.holder, self.seq, self.seen_at = epoch, holder, seq, now
        elif op == "release" and epoch == self.epoch and holder == self.holder:
            self.holder, self.seen_at = None, now
        else:
            return
        self.last = f"{holder}/{seq}"

    def expired(self, now: float, lease_s: float) -> bool:
        return self.holder is None or now - self.seen_at >= lease_s


class ExporterLease:
    """This instance's side of the lease: claim it when it has expired, renew it while it
    holds it, and say whether it may export *now* (``valid``).

    ``eligible`` says whether this instance can serve the global view (it has read every
    partition's statistics)."""

    def __init__(
        self,
        client_config: Mapping[str, Any],
        group_id: str,
        lease_s: float,
        eligible: Callable[[], bool],
        clock: Callable[[], float] = _lease_clock,
    ) -> None:
        self._client = dict(client_config)
        self.topic = lease_topic(group_id)
        self.key = lease_key(group_id).encode()
        self.lease_s = lease_s
        self.interval = lease_s / 4
        self._eligible = eligible
        self._log = LeaseLog()
        self._consumer: KafkaConsumer | None = None
        self._clock = clock
        self.me = f"{uuid.uuid4().hex[:12]}"
        self._lock = threading.Lock()
        self._epoch = 0  # the epoch this instance claimed (0: none)
        self._seq = 0
        self._sent: dict[int, float] = {}  # seq -> lease-clock time it was sent
        self._valid_until = float("-inf")
        self._producer: KafkaProducer | None = None
        self.acquired = 0  # times this instance started exporting

    def ensure_topic(self) -> None:
        """Create the lease topic (one partition, compacted) if missing."""
        from kafka.admin import KafkaAdminClient
        from kafka.errors import TopicAlreadyExistsError

        admin = KafkaAdminClient(**self._client)
        try:
            if self.topic not in admin.list_topics():
                with contextlib.suppress(TopicAlreadyExistsError):  # created by another
                    admin.create_topics(
                        {self.topic: {"num_partitions": 1, "replication_factor": -1,
                                      "configs": {"cleanup.policy": "compact"}}},
                        wait_for_metadata=True,
                    )  # fmt: skip
        finally:
            admin.close()

    def _read(self) -> LeaseLog:
        """The lease as of the topic's end (read since the last call)."""
        if self._consumer is None:
            consumer = KafkaConsumer(enable_auto_commit=False, **self._client)
            tp = TopicPartition(self.topic, 0)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            self._consumer = consumer
        deadline = self._clock() + self.interval
        while True:
            batches = self._consumer.poll(timeout_ms=50)
            now = self._clock()
            for records in batches.values():
                for rec in records:
                    if rec.key == self.key:
                        self._log.apply(rec.value, now)
            if not batches or now > deadline:
                return replace(self._log)

    def valid(self) -> bool:
        """Whether this instance may export the global series and send alerts now."""
        with self._lock:
            return self._clock() < self._valid_until

    def tick(self) -> None:
        """One round: read the log, then renew, or claim an expired lease; read what was
        sent back at once (it counts only once the log shows it accepted)."""
        state = self._read()
        self._settle(state)
        now = self._clock()
        if self._epoch and state.holder == self.me and state.epoch == self._epoch:
            self._send("renew", self._epoch, state.last)
        elif state.expired(now, self.lease_s) and self._eligible():
            self._epoch = state.epoch + 1
            self._send("claim", self._epoch, state.last)
        else:
            return
        self._settle(self._read())

    def run(self, stop: threading.Event) -> None:
        """Tick at a fixed rate until ``stop`` (a slow round does not delay the next)."""
        due = self._clock()
        while not stop.wait(max(0.0, due - self._clock())):
            due = max(due + self.interval, self._clock() - self.interval)
            try:
                self.tick()
            except Exception as err:
                log.warning("exporter lease: %s", err)

    def _settle(self, state: LeaseLog) -> None:
        """Validity from the latest record of ours the log accepted."""
        with self._lock:
            mine = self._epoch and state.holder == self.me and state.epoch == self._epoch
            was = self._clock() < self._valid_until
            if mine and state.seq in self._sent:
                margin = self.interval
                self._valid_until = max(
                    self._valid_until, self._sent[state.seq] + self.lease_s - margin
                )
                for seq in [s for s in self._sent if s < state.seq]:
                    del self._sent[seq]
            elif not mine:
                self._valid_until = float("-inf")
                self._sent.clear()
            now_valid = self._clock() < self._valid_until
        if now_valid and not was:
            self.acquired += 1
            log.info("exporter lease: this instance exports (epoch %d)", self._epoch)
        elif was and not now_valid:
            log.info("exporter lease: this instance no longer exports")

    def _send(self, op: str, epoch: int, after: str = "") -> None:
        with self._lock:
            self._seq += 1
            seq = self._seq
            self._sent[seq] = self._clock()  # before the send: the holder's side of expiry
        rec = {"op": op, "epoch": epoch, "holder": self.me, "seq": seq, "after": after}
        value = json.dumps(rec).encode()
        try:
            producer = self._producer_()
            producer.send(self.topic, key=self.key, value=value, partition=0).get(
                timeout=self.interval * 2
            )
        except Exception as err:
            log.warning("exporter lease: %s failed: %s", op, err)

    def release(self) -> None:
        """On a clean shutdown: stop exporting, then free the lease for the others."""
        with self._lock:
            held = self._clock() < self._valid_until
            self._valid_until = float("-inf")
        if held:
            self._send("release", self._epoch)
        self._epoch = 0

    def _producer_(self) -> KafkaProducer:
        if self._producer is None:
            self._producer = KafkaProducer(
                acks="all", **kafka_compat.producer_settings(), **self._client
            )
        return self._producer

    def close(self) -> None:
        """Close the clients, within a second or two even while no broker answers."""
        if self._producer is not None:
            try:
                self._producer.close(timeout=1)
            except Exception as err:  # a send still waiting for a broker that is gone
                log.warning("exporter lease: closing the producer: %s", err)
            self._producer = None
        if self._consumer is not None:
            self._consumer.close(autocommit=False, timeout_ms=1000)
            self._consumer = None
