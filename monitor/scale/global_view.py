"""The global view: one snapshot of the statistics merged from every partition.

The partition engines keep the per-event state (join buffers, statistics); evaluation
reads only their mergeable statistics (``merge.PartitionStats``). What evaluation keeps
that is not per partition — each comparison's sticky sequential decision, the drift
references, the results reused between ticks — is one ``Assembler`` built from the
configuration alone: no engine stands behind it. History, trends and the causes in
alerts read the merged statistics of the latest evaluation (``rows``).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from ..engine.assemble import Assembler
from ..engine.rows import Rows
from ..engine.snapshot import Snapshot
from .merge import PartitionStats

__all__ = ["GlobalView"]


class GlobalView:
    """Evaluates merged partition statistics as if one engine had counted them all."""

    def __init__(self, assembler: Assembler) -> None:
        self.assembler = assembler
        self.evaluated: PartitionStats | None = None  # the latest snapshot's statistics

    def snapshot(
        self,
        stats: PartitionStats,
        now_ms: int,
        *,
        at_ms: int,
        confidence: float,
        not_ready: Sequence[str] = (),
        look_at_ms: int | None = None,
        lock: AbstractContextManager[Any] | None = None,
    ) -> Snapshot:
        """The snapshot of the union the merged ``stats`` describe (comparisons look once:
        the sticky decision state advances, under ``lock`` — the daemon's, as a single
        engine's look takes it; the caller serializes calls)."""
        self.evaluated = stats
        return self.assembler.evaluate(
            stats.view,
            stats.ops,
            stats.unseen,
            lambda: (stats.arms, stats.paired),
            now_ms,
            at_ms=at_ms,
            confidence=confidence,
            not_ready=not_ready,
            look_at_ms=look_at_ms,
            lock=lock,
        )

    def rows(self, stats: PartitionStats) -> Rows:
        """``stats`` as the rows history, trends and causes read, with the plugins the
        view evaluates with (every configured one)."""
        a = self.assembler
        return Rows(a.models, stats.view, stats.ops.label_delay, a.plugins)
