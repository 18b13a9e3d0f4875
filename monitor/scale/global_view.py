"""Evaluate merged partition statistics: the second half of ``Engine.snapshot``.

The partition engines keep the per-event state (join buffers, statistics); evaluation
reads only their mergeable statistics (``merge.PartitionStats``). The stateful parts of
evaluation that are not per partition — each comparison's sticky sequential decision and
the drift references — live in one *holder* engine built from the same configuration,
which never receives records.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..engine.core import Engine
from ..engine.snapshot import Snapshot
from .merge import PartitionStats

__all__ = ["global_snapshot"]


def global_snapshot(
    holder: Engine,
    stats: PartitionStats,
    now_ms: int,
    *,
    at_ms: int,
    confidence: float,
    not_ready: Sequence[str] = (),
    look_at_ms: int | None = None,
) -> Snapshot:
    """The snapshot of the union the merged ``stats`` describe (comparisons look once:
    the holder's sticky decision state advances)."""
    return holder.evaluate_view(
        stats.view,
        stats.ops,
        stats.unseen,
        now_ms,
        at_ms=at_ms,
        confidence=confidence,
        not_ready=not_ready,
        look_at_ms=look_at_ms,
        sums=(stats.arms, stats.paired),
    )
