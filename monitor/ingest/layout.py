"""Co-partitioned topics: the layout check made at start.

A prediction and its labels meet only if one instance reads both: producers key both
topics by prediction id, so with equal partition counts and the same (default, murmur2)
partitioner the id lands in partition p of each topic, and the instance that owns p of
predictions must own p of labels. This is the co-partitioning requirement of Kafka Streams
joins (Kafka Streams docs, "Joining: co-partitioning requirements"): we check it at start
and enforce it with the group assignor of ``monitor.ingest.assignor``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from kafka import KafkaConsumer

from ..config import KafkaSettings
from .kafka import client_security

__all__ = ["LayoutError", "check_layout", "metadata_config", "partition_counts"]

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
