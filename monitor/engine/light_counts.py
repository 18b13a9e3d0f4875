"""The light counts every slice reads: predictions, labeled predictions and binary
confusion counts per (group, bucket) of every model (``Engine.buckets``; saved with it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .accumulator import LabeledRows, NewPredictions, StateParts
from .buckets import BucketStore

__all__ = ["LightCounts"]


class LightCounts:
    def __init__(self, store: BucketStore, binary: np.ndarray) -> None:
        self.store = store
        self.binary = binary  # model index -> whether it is a binary model
        self.all_binary = bool(binary.all())

    def add_predictions(self, rows: NewPredictions) -> None:
        self.store.add_predictions(rows.group, rows.ts)

    def add(self, rows: LabeledRows) -> None:
        """Binary joins: labeled and confusion counts; other tasks: labeled counts (their
        statistics are ``TaskStats``')."""
        j = rows.joined
        if self.all_binary:
            self.store.add_joined(j.group, j.pred_ts, j.y_true, j.decision)
            return
        binary = self.binary[rows.model]
        b = np.flatnonzero(binary)
        if b.shape[0]:
            self.store.add_joined(j.group[b], j.pred_ts[b], j.y_true[b], j.decision[b])
        o = np.flatnonzero(~binary)
        if o.shape[0]:
            self.store.add_labeled(j.group[o], j.pred_ts[o])

    def state(self) -> StateParts:
        return {}, {}

    def load(self, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        pass
