"""What the daemon publishes for readers: the latest snapshot plus runtime status.

Exporters and the HTTP API read a ``Published`` and nothing else; the app replaces it
atomically (a single reference assignment), so a reader never sees a half-built state.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..alerting.delivery import DeliveryStats
from ..alerting.slo import SloStatus
from ..alerting.timeline import Span
from ..engine.cause import Cause
from ..engine.comparisons import ComparisonResult
from ..engine.snapshot import OpsState, Snapshot

__all__ = ["HISTORY_POINTS", "CsPoint", "History", "Published", "RuntimeStatus", "extend_history"]

HISTORY_POINTS = 240  # looks kept per comparison for the status page's chart
CsPoint = tuple[int, float, float, float]  # (evaluated at ms, effect, cs lower, cs upper)
History = tuple[tuple[str, tuple[CsPoint, ...]], ...]  # (comparison name, points), by name


@dataclass(frozen=True, slots=True)
class RuntimeStatus:
    started_at: float = 0.0
    consuming: bool = False
    assigned_partitions: int = 0
    source_error: str | None = None
    consumer_lag: tuple[tuple[str, int, int], ...] = ()  # (topic, partition, lag)
    last_checkpoint_at: float | None = None
    checkpoint_failures: int = 0
    last_checkpoint_error: str | None = None
    last_evaluation_ok: bool = False
    last_evaluation_error: str | None = None
    topics: tuple[tuple[str, str], ...] = ()  # (kind, topic name)
    dead_letter_failures: int = 0
    # handled faults by event (docs/operations.md "Failure modes")
    fault_events: tuple[tuple[str, int], ...] = ()
    dead_letter_spooled: int = 0  # rejected records on disk waiting for the DLQ topic
    group_members: int | None = None  # consumer group members (None: not known yet)
    schedule_runs: tuple[tuple[str, str, int], ...] = ()  # (schedule, outcome, runs)


@dataclass(frozen=True, slots=True)
class Published:
    snapshot: Snapshot | None = None
    ops: OpsState | None = None
    status: RuntimeStatus = field(default_factory=RuntimeStatus)
    slos: tuple[SloStatus, ...] = ()  # after the latest evaluation (docs/alerting.md)
    alerts: DeliveryStats | None = None  # alert delivery counters (None: no receiver)
    comparison_history: History = ()  # each comparison's confidence sequence over time
    timeline: tuple[Span, ...] = ()  # SLO firing, comparison decision and drift spans
    # the slices behind each comparison in rollback, by name (None: none found)
    comparison_causes: tuple[tuple[str, Cause | None], ...] = ()


def extend_history(
    history: History, looks: Iterable[ComparisonResult], limit: int = HISTORY_POINTS
) -> History:
    """The history with one more point per comparison in ``looks``. When a comparison
    has ``limit`` points, every second one is dropped (the newest kept): memory stays
    bounded however long the daemon runs, and the chart still spans the whole run."""
    points = dict(history)
    for c in looks:
        old = points.get(c.name, ())
        if old and old[-1][0] == c.at_ms:
            continue  # the same look published twice
        if len(old) >= limit:
            old = (*old[:-1:2], old[-1])
        points[c.name] = (*old, (c.at_ms, float(c.effect), float(c.cs_lower), float(c.cs_upper)))
    return tuple(sorted(points.items()))
