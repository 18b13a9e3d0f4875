"""The engine as replay and scale-out use it: one typed interface, no attributes.

Replay (``monitor/replay.py``) drives an engine through event time and evaluates it at
each step; scale-out (``monitor/scale/``) feeds one engine per partition, moves its
statistics between instances and retains its buckets. Both go through
:class:`EnginePort` only, so the engine's fields (stores, accumulators, clocks) can
change without them; what evaluation keeps is the engine's ``Assembler``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

from .assemble import Assembler
from .buckets import BucketStore
from .comparison_stats import ArmSums, PairedSums
from .comparisons import ComparisonResult
from .drift_cells import UnseenValues
from .join import JoinReject
from .models import ModelSpec
from .records import LabelBatch, PredictionBatch
from .snapshot import OpsState, Snapshot, WindowResult
from .view import StoreView

__all__ = ["EnginePort"]

_T = TypeVar("_T")


class EnginePort(Protocol):
    """What replay and scale-out may read of, and do to, an engine."""

    @property
    def models(self) -> tuple[ModelSpec, ...]: ...

    @property
    def assembler(self) -> Assembler:
        """The evaluation state (comparisons' sticky decisions, drift references)."""
        ...

    @property
    def pred_watermark_ms(self) -> int:
        """The newest prediction time applied (``join.NO_TS`` before the first)."""
        ...

    @property
    def active_plugins(self) -> tuple[Any, ...]:
        """Metric plugins still trusted (one that raised is switched off)."""
        ...

    def apply_predictions(self, batch: PredictionBatch) -> list[JoinReject]: ...

    def apply_labels(self, batch: LabelBatch) -> list[JoinReject]: ...

    def count_invalid(self, kind: str, reason: str, k: int = 1) -> None:
        """Count records rejected before they reached the engine (decode errors)."""
        ...

    def view(self, copy: bool = True) -> StoreView:
        """The statistics evaluation reads (``copy=False``: shared until the next write)."""
        ...

    def copied_with(
        self, lock: AbstractContextManager[Any], under_final: Callable[[], _T]
    ) -> tuple[StoreView, _T]:
        """A copy of the statistics taken beside the writer (short holds of ``lock``),
        and what ``under_final`` reads as of the same moment."""
        ...

    def ops(self) -> OpsState:
        """A copy of the operational counters and watermarks."""
        ...

    def sums(self) -> tuple[ArmSums, PairedSums, UnseenValues]:
        """Copies of the sums kept outside the bucket stores (what a merge adds up)."""
        ...

    def named_stores(self) -> dict[str, BucketStore]:
        """Every bucket store by name (``buckets``, ``wide/<model>``, ``sliced/<model>``)."""
        ...

    def roll_up(self, now_ms: int, hours_only: bool = False) -> int:
        """Merge rows older than their time tier into coarser rows."""
        ...

    def freeze_live_references(self) -> None:
        """Keep "first"-mode drift references whose period has passed."""
        ...

    def retain(self, now_ms: int) -> int:
        """Drop what no window can reach any more at ``now_ms`` (after freezing)."""
        ...

    def retention_now(self, now_ms: int) -> int:
        """Where retention may run at wall time ``now_ms``: the earlier of it and the
        event watermark (advanced by this call)."""
        ...

    def look_comparisons(
        self,
        results: Sequence[WindowResult],
        now_ms: int,
        not_ready: Sequence[str] = (),
        confidence: float = 0.95,
    ) -> tuple[ComparisonResult, ...]:
        """One look of every comparison at this engine's own sums."""
        ...

    def snapshot(
        self,
        now_ms: int,
        at_ms: int | None = None,
        confidence: float = 0.95,
        lock: AbstractContextManager[Any] | None = None,
        models: Sequence[ModelSpec] | None = None,
        not_ready: Sequence[str] = (),
        look_at_ms: int | None = None,
        retain: bool = True,
        retain_at_ms: int | None = None,
        input_ended: bool = False,
    ) -> Snapshot:
        """The immutable snapshot at ``now_ms``: counted statistics, evaluated."""
        ...
