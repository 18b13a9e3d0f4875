"""The unit of work: one input partition's engine and the source positions it covers.

Records of one input partition number (its prediction and label partitions, which
co-partitioning pairs) are applied in log order to one engine; the engine's state and
the next offsets of those partitions are saved and restored together, so each record is
counted once across restarts and hand-overs. A single-instance daemon is the one owner
of every partition: one :class:`Partition` numbered :data:`ALL`. A partitioned daemon
(``scale.mode = "partitioned"``) owns one per assigned partition number and moves them
between instances.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .core import Engine

__all__ = ["ALL", "Partition"]

ALL = -1  # the number of the one partition a single-instance daemon owns: all of them


@dataclass(eq=False)
class Partition:
    """One owned partition: its engine and the next offsets its state covers."""

    number: int
    engine: Engine
    # source offsets covered by the engine's state (``ingest.pipeline.offset_key``)
    offsets: dict[str, int] = field(default_factory=dict)
    # the membership (group generation) it was restored in: stored only while it lasts
    group_generation: int = -1
    # the topic ids (``ingest/topic_watch.py``) of the logs the offsets are positions in
    topic_ids: dict[str, str] = field(default_factory=dict)
    stats_published: bool = False  # partitioned mode: its statistics went out once
    lost: bool = False  # evicted from the group with it: never store it again
