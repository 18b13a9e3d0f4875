"""What each input topic *is*, not only where we are in it: its topic id and partition
count, as the broker's metadata says.

Offsets are positions in one log. A topic deleted and created again under the same name
is another log: when the new one already holds more records than the old position, no
offset check can tell (the position is inside the new log's range) and every record
below it is silently skipped. The topic id (KIP-516; a UUID the broker gives a topic at
creation) tells: when it changes, the positions belong to a log that is gone, and
reading starts again at the new log's start (``auto_offset_reset``). A grown partition
count is logged and counted; the consumer group takes the new partitions on its next
metadata refresh (``kafka.metadata_max_age_ms``, seconds rather than the clients'
default five minutes).

The ids the positions belong to are kept in the checkpoint beside the offsets, so a
topic recreated while the daemon was down is recognised at the next start.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["MAX_METADATA_WAIT_S", "TopicChange", "TopicWatch"]

log = logging.getLogger(__name__)

# how long records are held back for want of fresh metadata before they are read anyway
MAX_METADATA_WAIT_S = 30.0


@dataclass(frozen=True, slots=True)
class TopicChange:
    recreated: bool = False  # the topic id changed: positions belong to the old log
    added: int = 0  # partitions more than last seen


class TopicWatch:
    """The id and partition count each topic had when last seen (``known``: the ids a
    checkpoint's offsets belong to)."""

    def __init__(self, known: Mapping[str, str] | None = None) -> None:
        self.ids: dict[str, str] = dict(known or {})
        self.partitions: dict[str, int] = {}
        self.faults: Counter[str] = Counter()
        self._relearn: dict[str, float] = {}  # topic -> metadata must be newer than this
        self._stale_since: float | None = None  # metadata too old since (monotonic)

    def hold_back(self, age_s: float, limit_s: float, now: float) -> bool:
        """Whether records must wait for fresh metadata: it is ``age_s`` old, more than
        ``limit_s`` (the process was paused, or the broker is away), so it cannot say
        which log they are in — for ``MAX_METADATA_WAIT_S`` at most, then they are read
        regardless (a broker that serves fetches but no metadata must not stop
        consumption)."""
        if age_s <= limit_s:
            self._stale_since = None
            return False
        if self._stale_since is None:
            self._stale_since = now
        return now - self._stale_since < MAX_METADATA_WAIT_S

    def restarted(self, topic: str, at: float) -> None:
        """The source already restarted ``topic`` at a new log's start at ``at`` (the
        source's metadata clock, ``time.monotonic()``; its
        position was past the end): the id in the first metadata fetched after that is
        learnt, not taken for another recreation — one log is read from its start once.
        (Metadata older than ``at`` may still show the old log's id.)"""
        self._relearn[topic] = at

    def observe(
        self, topic: str, topic_id: str | None, partitions: int | None, fetched_at: float = 0.0
    ) -> TopicChange:
        """Compare what the metadata (fetched at ``fetched_at``) says now with what was
        seen; None: unknown (no metadata yet, or a broker without topic ids)."""
        recreated, added = False, 0
        if topic in self._relearn:
            if fetched_at <= self._relearn[topic]:
                return TopicChange()
            del self._relearn[topic]
            if topic_id:
                self.ids[topic] = topic_id
        if topic_id:
            known = self.ids.get(topic)
            self.ids[topic] = topic_id
            if known is not None and known != topic_id:
                recreated = True
                log.error(
                    "topic %s was recreated (topic id %s, was %s): the positions in the old "
                    "log are void, reading the new one from its start (kafka.auto_offset_reset)",
                    topic, topic_id, known,
                )  # fmt: skip
        if partitions:
            before = self.partitions.get(topic)
            self.partitions[topic] = partitions
            if before is not None and partitions > before and not recreated:
                added = partitions - before
                self.faults["partitions_added"] += added
                log.warning("topic %s grew from %d to %d partitions: the group takes the new "
                            "ones at its next rebalance", topic, before, partitions)  # fmt: skip
        return TopicChange(recreated, added)
