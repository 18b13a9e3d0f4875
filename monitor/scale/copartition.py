"""Co-partitioned consumption of the predictions and labels topics.

A prediction and its labels meet only if one instance reads both: producers key both
topics by prediction id, so with equal partition counts and the same (default, murmur2)
partitioner the id lands in partition p of each topic, and the instance that owns p of
predictions must own p of labels. This is the co-partitioning requirement of Kafka Streams
joins (Kafka Streams docs, "Joining: co-partitioning requirements"): we check it at start
and enforce it with an assignor that hands out *partition numbers*, not topic-partitions.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from kafka import KafkaConsumer
from kafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)

from ..config import KafkaSettings
from ..ingest.kafka import client_security

__all__ = [
    "CoPartitionAssignor",
    "LayoutError",
    "check_layout",
    "copartition_plan",
    "copartition_violations",
    "metadata_config",
    "partition_counts",
]

log = logging.getLogger(__name__)


class LayoutError(Exception):
    """The topics cannot be joined partition by partition; the message says why."""


def check_layout(predictions: str, labels: str, counts: Mapping[str, int | None]) -> None:
    """Refuse a topic layout on which a partition-local join would lose matches.

    A topic missing from the broker is not refused here: it may be created later (by
    auto-creation or by the producer's deployment) and is checked again on the next start.
    """
    p, lab = counts.get(predictions), counts.get(labels)
    if p is None or lab is None:
        missing = [t for t, n in ((predictions, p), (labels, lab)) if n is None]
        log.warning("topic(s) %s not found on the broker: co-partitioning unchecked", missing)
        return
    if p != lab:
        smaller = labels if lab < p else predictions
        raise LayoutError(
            f"kafka: predictions topic {predictions!r} has {p} partitions but labels topic "
            f"{labels!r} has {lab}; the join needs both topics co-partitioned (equal "
            f"partition counts, both keyed by prediction id). Repartition one topic to the "
            f"other's count, e.g. kafka-topics --alter --topic {smaller} "
            f"--partitions {max(p, lab)} (keys then move: start from an empty state)"
        )


def metadata_config(k: KafkaSettings) -> dict[str, Any]:
    """kafka-python settings for a metadata-only client: connection and security, nothing
    of ``extra_consumer_config`` (which holds librdkafka names when kafka.client is
    confluent); the check reads metadata with kafka-python whichever client consumes."""
    return {
        "bootstrap_servers": k.bootstrap_servers.split(","),
        "client_id": f"{k.client_id}-layout-check",
        "reconnect_backoff_max_ms": k.reconnect_backoff_max_ms,
        "bootstrap_timeout_ms": k.bootstrap_timeout_ms,
        **client_security(k),
    }


def partition_counts(k: KafkaSettings, topics: Iterable[str]) -> dict[str, int | None]:
    """Partition count of each topic from broker metadata (``None``: no such topic).

    Uses a group-less consumer so it joins no group and commits nothing.
    """
    consumer = KafkaConsumer(group_id=None, enable_auto_commit=False, **metadata_config(k))
    try:
        existing = consumer.topics()
        out: dict[str, int | None] = {}
        for t in topics:
            parts = consumer.partitions_for_topic(t) if t in existing else None
            out[t] = len(parts) if parts else None
        return out
    finally:
        consumer.close()


def copartition_violations(assigned: Iterable[tuple[str, int]], topics: Iterable[str]) -> set[int]:
    """Partition numbers owned for some but not all of ``topics`` (empty: co-partitioned)."""
    wanted = list(topics)
    by_topic: dict[str, set[int]] = {t: set() for t in wanted}
    for topic, partition in assigned:
        if topic in by_topic:
            by_topic[topic].add(partition)
    union = set().union(*by_topic.values()) if by_topic else set()
    common = set.intersection(*by_topic.values()) if by_topic else set()
    return union - common


def copartition_plan(
    members: Mapping[str, Iterable[str]],
    partitions: Mapping[str, int],
    previous: Mapping[str, Iterable[int]] | None = None,
) -> dict[str, dict[str, list[int]]]:
    """Assign partition *numbers* to members: member -> topic -> sorted partitions.

    Every member owning number p gets p of every topic it subscribes to, so a member owns
    both halves of a join. Balanced (owned counts differ by at most one) and sticky: a
    member keeps the numbers it owned before up to its fair share, so a rebalance moves
    only the partitions it must, and with them only their state (the "sticky" goal of
    KIP-54, applied to partition numbers).
    """
    ids = sorted(members)
    if not ids:
        return {}
    subs = {m: set(members[m]) for m in ids}
    n = max((partitions.get(t, 0) for m in ids for t in subs[m]), default=0)
    base, extra = divmod(n, len(ids))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(ids)}
    owned: dict[str, list[int]] = {m: [] for m in ids}
    taken: set[int] = set()
    prev = previous or {}
    for m in ids:
        for p in sorted(set(prev.get(m, ()))):
            if 0 <= p < n and p not in taken and len(owned[m]) < quota[m]:
                owned[m].append(p)
                taken.add(p)
    free = iter(p for p in range(n) if p not in taken)
    for m in ids:
        while len(owned[m]) < quota[m]:
            owned[m].append(next(free))
    return {
        m: {t: sorted(p for p in owned[m] if p < partitions.get(t, 0)) for t in sorted(subs[m])}
        for m in ids
    }


class CoPartitionAssignor(AbstractPartitionAssignor):
    """kafka-python group assignor running :func:`copartition_plan` on the group leader.

    Each member sends the partition numbers it owns as ``user_data`` (JSON), so the plan
    can be sticky. Pass the class in ``partition_assignment_strategy``; kafka-python
    instantiates it once per consumer.
    """

    name = "monitor-copartition"
    version = 0

    def __init__(self) -> None:
        self.owned: list[int] = []

    def assign(self, cluster: Any, members: Any) -> dict[str, Any]:
        subscriptions: dict[str, list[str]] = {}
        previous: dict[str, list[int]] = {}
        counts: dict[str, int] = {}
        for member in members:
            subscriptions[member.member_id] = list(member.metadata.topics)
            previous[member.member_id] = _decode_owned(member.metadata.user_data)
            for topic in member.metadata.topics:
                parts = cluster.partitions_for_topic(topic)
                counts[topic] = len(parts) if parts else 0
        if len(set(counts.values())) > 1:
            log.error("topics are not co-partitioned: %s partitions", counts)
        plan = copartition_plan(subscriptions, counts, previous)
        return {
            member_id: ConsumerProtocolAssignment(self.version, sorted(topics.items()), b"")
            for member_id, topics in plan.items()
        }

    def metadata(self, topics: Any) -> Any:
        return ConsumerProtocolSubscription(
            self.version, list(topics), json.dumps(sorted(self.owned)).encode()
        )

    def on_assignment(self, assignment: Any, generation: Any) -> None:
        self.owned = sorted({tp.partition for tp in assignment.partitions()})


def _decode_owned(user_data: bytes | None) -> list[int]:
    """A member's previously owned partitions; anything unreadable counts as none."""
    if not user_data:
        return []
    try:
        value = json.loads(user_data)
    except ValueError:
        return []
    if not isinstance(value, list):
        return []
    return [p for p in value if isinstance(p, int) and not isinstance(p, bool)]
