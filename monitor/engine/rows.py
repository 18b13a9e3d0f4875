"""The retained rows that history, trends and causes read.

One engine's rows in single-instance mode; in partitioned mode the statistics of every
partition merged by the global view (the same stores, summed by their own merges), so
``/api/v1/history``, the status page's trends and the causes in alerts answer the same
questions in both modes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .core import Engine
from .models import ModelSpec
from .snapshot import LabelDelays
from .view import StoreView

__all__ = ["Rows"]


@dataclass(frozen=True, slots=True)
class Rows:
    """The models, their retained bucket rows, label delays and trusted plugins."""

    models: Sequence[ModelSpec]
    view: StoreView
    delays: LabelDelays
    plugins: tuple[Any, ...]

    @classmethod
    def of(cls, engine: Engine) -> Rows:
        """``engine``'s rows, shared with it: read them under the engine's lock."""
        return cls(
            tuple(engine.models),
            engine.view(copy=False),
            engine.delay.histograms(),
            engine.active_plugins,
        )
