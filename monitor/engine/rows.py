"""The retained rows that history, trends and causes read.

One engine's rows in single-instance mode; in partitioned mode the statistics of every
partition merged by the global view (the same stores, summed by their own merges), so
``/api/v1/history``, the status page's trends and the causes in alerts answer the same
questions in both modes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .buckets import BucketStore
from .core import Engine
from .models import ModelSpec
from .snapshot import LabelDelays
from .view import Arrays, StoreView

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
        """``engine``'s rows, shared with it: read them under the engine's lock. A model's
        stores are looked at only when asked (a question reads one model's rows: taking
        every model's for each of a fleet's models would cost models² lookups)."""
        buckets = engine.buckets
        return cls(
            engine.models,
            StoreView(
                width_ms=buckets.width_ms,
                tiers=engine.tiers,
                groups=engine.groups,
                buckets=buckets.view(),
                wide=_Lazy(engine.wide),
                sliced=_Lazy(engine.sliced),
            ),
            engine.delay.histograms(),
            engine.active_plugins,
        )


class _Lazy(Mapping[int, Arrays]):
    """Each model's store as its arrays in use, taken when read; a store without rows is
    absent (as in ``Engine.view``)."""

    def __init__(self, stores: Mapping[int, BucketStore]) -> None:
        self._stores = stores

    def __getitem__(self, m: int) -> Arrays:
        store = self._stores[m]
        if not len(store):
            raise KeyError(m)
        return store.view()

    def __iter__(self) -> Iterator[int]:
        return (m for m, store in self._stores.items() if len(store))

    def __len__(self) -> int:
        return sum(1 for _ in self)
