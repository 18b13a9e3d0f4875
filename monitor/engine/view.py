"""A read-only picture of the engine's bucket stores: what evaluation reads.

Evaluation is a pure function of this view, so the daemon can take it under its lock
and compute outside it, and replay can take it without copying.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .windows import Tiers

__all__ = ["Arrays", "StoreView", "base_group_index", "base_rows"]

Arrays = Mapping[str, np.ndarray]


@dataclass(frozen=True, slots=True)
class StoreView:
    """``buckets``: light counts per (group, bucket), every model and segment.
    ``wide[m]``: model m's per-(version, bucket) matrices (fine score histograms,
    drift cells, plugin statistics), rows keyed by the version's base group.
    ``sliced[m]``: model m's per-(group, bucket) task matrices (coarse score
    histograms, multiclass and regression statistics), every segment."""

    width_ms: int
    tiers: Tiers
    groups: Sequence[tuple[int, str, tuple[str, ...]]]
    buckets: Arrays
    wide: Mapping[int, Arrays]
    sliced: Mapping[int, Arrays]
    # (model, first bucket, last bucket) -> per-group sums of the model's sliced matrix
    # over that window, in place of ``sliced[m]`` (the daemon's snapshot: Engine.snapshot)
    window_sums: Mapping[tuple[int, int, int], np.ndarray] = field(default_factory=dict)
    # (model, first bucket, last bucket) -> per-version sums of the model's fine score
    # histograms (wide ``SCORES``, then left out of ``wide[m]``), a row per base group
    # of the model in group order (:func:`base_group_index`)
    wide_sums: Mapping[tuple[int, int, int], np.ndarray] = field(default_factory=dict)

    def wide_matrix(self, m: int, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(group, bucket, matrix) of model m's wide matrix ``name``, or None."""
        arrays = self.wide.get(m)
        if arrays is None or f"m.{name}" not in arrays:
            return None
        return arrays["group"], arrays["bucket"], arrays[f"m.{name}"]


def base_group_index(
    groups: Sequence[tuple[int, str, tuple[str, ...]]], m: int
) -> tuple[np.ndarray, int]:
    """(group -> row among model m's base groups, i.e. its versions, -1 for every other
    group; how many): the rows of the wide window sums."""
    model_of = np.fromiter((g[0] for g in groups), np.int64, len(groups))
    is_base = np.fromiter((not g[2] for g in groups), bool, len(groups))
    return base_rows(model_of, is_base, m)


def base_rows(model_of: np.ndarray, is_base: np.ndarray, m: int) -> tuple[np.ndarray, int]:
    """:func:`base_group_index` from every group's model and whether it is a base group
    (an evaluation reads them once for all its models, not once per model)."""
    index = np.full(model_of.shape[0], -1, np.intp)
    rows = np.flatnonzero(is_base & (model_of == m))
    index[rows] = np.arange(rows.shape[0])
    return index, int(rows.shape[0])
