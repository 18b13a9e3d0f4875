"""The one protocol of everything the engine counts joined rows into.

The engine joins (``join.JoinBuffer``) and hands each batch of rows that just got their
label to a list of accumulators, in order; each owns its statistics and says how they
are saved. An accumulator that writes matrices of the engine's bucket stores keeps its
state there (a row of a store holds all of a model's matrices, so roll-up, retention and
the snapshot copy move them together) and saves nothing itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .join import Joined
from .records import PredictionBatch

__all__ = ["Accumulator", "LabeledRows", "NewPredictions", "PredictionAccumulator", "StateParts"]

# (JSON-able meta, arrays): the two parts of a checkpoint
StateParts = tuple[dict[str, Any], dict[str, np.ndarray]]


@dataclass(frozen=True, slots=True)
class LabeledRows:
    """A join as accumulators see it: the joined rows with each row's model index and
    the group of its (model, version) without segment (the wide, per-version rows)."""

    joined: Joined
    model: np.ndarray
    base: np.ndarray

    def of_model(self, m: int, mask: np.ndarray | None = None) -> np.ndarray:
        """Indices of the rows of model ``m`` (and ``mask``)."""
        sel = self.model == m
        return np.flatnonzero(sel if mask is None else sel & mask)


class Accumulator(Protocol):
    """Counts joined rows; ``state``/``load`` round-trip exactly what it counted (meta
    keys and array names are the checkpoint's, so they must stay stable)."""

    def add(self, rows: LabeledRows) -> None: ...

    def state(self) -> StateParts: ...

    def load(self, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None: ...


@dataclass(frozen=True, slots=True)
class NewPredictions:
    """Predictions just added to the join buffer (not duplicates): rows ``new`` of
    ``batch``, with their group, base group, model index and timestamp."""

    batch: PredictionBatch
    new: np.ndarray
    group: np.ndarray
    base: np.ndarray
    model: np.ndarray
    ts: np.ndarray


class PredictionAccumulator(Protocol):
    """Counts predictions when they arrive, labels or not (label-free estimates, split
    comparison arms)."""

    def add_predictions(self, rows: NewPredictions) -> None: ...

    def state(self) -> StateParts: ...

    def load(self, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None: ...
