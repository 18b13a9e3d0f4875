"""Where to resume a partition: the checkpointed offset checked against the log's range.

Why: offsets are positions in *one* log. After a topic is deleted and recreated (or
truncated) the checkpointed offset can point past the end of the new log; a client then
waits there forever — lag clamped to 0, every new record below the position skipped —
or silently resets. And records deleted by retention before we read them are a gap.
Both are decided here, per partition, without any Kafka client, so any source can use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Resume", "reset_by_client", "resume_position"]


@dataclass(frozen=True, slots=True)
class Resume:
    offset: int
    # None: the checkpointed offset is valid; else the fault that forced another offset
    reason: Literal["offset_beyond_end", "offset_before_start", "topic_recreated"] | None = None
    skipped: int = 0  # records known to be lost (before_start) — 0 when unknown


def resume_position(
    checkpointed: int, low: int | None, high: int | None, auto_offset_reset: str
) -> Resume:
    """The offset to read next, given the log's ``low`` (first offset) and ``high``
    (high watermark: the offset after the last record); None where unknown.

    - inside ``[low, high]``: resume there;
    - past ``high``: the log was recreated or truncated; restart per
      ``auto_offset_reset`` (``earliest``: ``low``, else ``high``);
    - before ``low``: records were deleted before we read them; resume at ``low`` (the
      least data lost) and report how many were skipped.
    """
    if checkpointed < 0:
        raise ValueError(f"offset {checkpointed} is negative")
    if high is not None and checkpointed > high:
        start = low if low is not None else 0
        return Resume(start if auto_offset_reset == "earliest" else high, "offset_beyond_end")
    if low is not None and checkpointed < low:
        return Resume(low, "offset_before_start", low - checkpointed)
    return Resume(checkpointed)


def reset_by_client(expected: int, first: int) -> Resume | None:
    """A client's own out-of-range reset, seen in the records it hands over: the first
    record of a partition below ``expected`` (the offset we sought to, or the one after
    the last record handed out) means the client found its position past the end of the
    log and went back per ``auto_offset_reset`` before our range check saw it. The
    daemon's offset must follow it back (its offsets otherwise only move forward):
    left at the old, higher position, a restart would skip or re-read records. None
    when the records continue where expected (or after a gap, which only moves ahead)."""
    return Resume(first, "offset_beyond_end") if first < expected else None
