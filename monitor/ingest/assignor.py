"""Co-partitioned group assignment: an instance owning partition p of predictions also
owns p of labels, so it holds both halves of every join of p.

Kafka Streams needs the same for its joins ("co-partitioning requirements"); its range
assignor provides it for topics with equal partition counts. This assignor hands out
partition *numbers* and adds stickiness, so a rebalance moves only what it must (and with
it only that partition's state). No I/O here, no imports from the ingest adapters: the
sources import this module.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from kafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)

__all__ = ["CoPartitionAssignor", "copartition_plan", "copartition_violations", "warn_unpaired"]

log = logging.getLogger(__name__)


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


def warn_unpaired(assigned: Iterable[tuple[str, int]], topics: Iterable[str]) -> set[int]:
    """Log partitions this member owns of one topic but not the other (returned): a group
    whose members run an assignor that does not co-partition, or unequal partition counts
    that appeared after the start. Their records are still applied, but joins across
    members are lost until the layout is fixed."""
    unpaired = copartition_violations(assigned, topics)
    if unpaired:
        log.error(
            "assignment is not co-partitioned: partition(s) %s owned for only one of %s; "
            "labels of those partitions cannot meet their predictions here",
            sorted(unpaired),
            sorted(topics),
        )
    return unpaired


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
