"""A read-only picture of the engine's bucket stores: what evaluation reads.

Evaluation is a pure function of this view, so the daemon can take it under its lock
and compute outside it, and replay can take it without copying.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .windows import Tiers

__all__ = ["Arrays", "StoreView", "base_group_index"]

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
    index = np.full(len(groups), -1, np.intp)
    k = 0
    for gid, (model, _, segment) in enumerate(groups):
        if model == m and not segment:
            index[gid] = k
            k += 1
    return index, k
