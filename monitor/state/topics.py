"""Names of the topics the monitor keeps for itself beside the input topics.

One definition each, read by the stores that write them and by configuration
validation (a dead-letter topic must never be one of them: the monitor would read or
overwrite its own output).
"""

from __future__ import annotations

__all__ = ["internal_topics", "lease_topic", "state_topic", "stats_topic"]


def state_topic(group_id: str) -> str:
    """Checkpoints and partition states (``state.kafka_store``, partitioned mode)."""
    return f"{group_id}-state"


def stats_topic(group_id: str) -> str:
    """Every partition's latest mergeable statistics (partitioned mode)."""
    return f"{group_id}-stats"


def lease_topic(group_id: str) -> str:
    """The exporter lease (partitioned mode)."""
    return f"{group_id}-exporter"


def internal_topics(group_id: str) -> tuple[str, ...]:
    return state_topic(group_id), stats_topic(group_id), lease_topic(group_id)
