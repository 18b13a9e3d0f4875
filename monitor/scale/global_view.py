"""Evaluate merged partition statistics: the second half of ``Engine.snapshot``.

The partition engines keep the per-event state (join buffers, statistics); evaluation
reads only their mergeable statistics (``merge.PartitionStats``). The stateful parts of
evaluation that are not per partition — each comparison's sticky sequential decision and
the drift references — live in one *holder* engine built from the same configuration,
which never receives records.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from ..engine.core import Engine
from ..engine.evaluate import evaluate_all
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
    errors: Counter[str] = Counter()
    results, fairness = evaluate_all(
        stats.view, holder.models, now_ms, confidence, holder.active_plugins, errors
    )
    comparisons = holder.look_comparisons(
        results,
        now_ms if look_at_ms is None else look_at_ms,
        not_ready,
        confidence,
        sums=(stats.arms, stats.paired),
    )
    holder.plugin_errors.update(errors)
    ops = stats.ops
    if errors:
        merged = Counter(dict(ops.plugin_errors)) + errors
        ops = replace(ops, plugin_errors=tuple(sorted(merged.items())))
    drift = holder.drift.evaluate(stats.view, now_ms, None, unseen=stats.unseen.by_feature)
    return Snapshot(
        at_ms=at_ms,
        results=results,
        ops=ops,
        comparisons=comparisons,
        drift=drift,
        fairness=fairness,
    )
