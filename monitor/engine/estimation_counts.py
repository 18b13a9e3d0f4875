"""Prediction-time score histograms, the input of label-free performance estimates.

Confidence-based performance estimation (CBPE; NannyML, after Guo et al. 2017 on
calibration) needs, per (version, bucket), how many predictions fell in each score bin
and their summed probability, apart by decision — labels or not
(``monitor.stats.estimation``). Kept in the wide stores (saved with them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..metrics.catalog import ESTIMATION, EXPECTED_CONFUSION
from ..stats.scores import ScoreLayout
from .accumulator import NewPredictions, StateParts
from .buckets import BucketStore

__all__ = ["EstimationCounts"]


class EstimationCounts:
    """Binary: count and Σp per score bin, [decided negative, decided positive].
    Multiclass: count and Σ confidence of the decided class per confidence bin, and the
    expected confusion matrix (row: decided class, columns: the probability vector)."""

    def __init__(
        self,
        binary: Mapping[int, ScoreLayout],
        multiclass_bins: Mapping[int, int],
        wide: Mapping[int, BucketStore],
    ) -> None:
        self.binary, self.multiclass_bins, self.wide = binary, multiclass_bins, wide

    def add_predictions(self, rows: NewPredictions) -> None:
        batch, new = rows.batch, rows.new
        score = batch.score[new]
        for m, layout in self.binary.items():
            sel = np.flatnonzero((rows.model == m) & ~np.isnan(score))
            if sel.shape[0] == 0:
                continue
            store = self.wide[m]
            at = store.rows_for(rows.base[sel], rows.ts[sel])
            p = np.clip(score[sel], 0.0, 1.0)
            b = layout.bins
            col = layout.bin_of(p) + 2 * b * (batch.decision[new[sel]] > 0)
            matrix = store.matrix(ESTIMATION.name)
            np.add.at(matrix, (at, col), 1.0)
            np.add.at(matrix, (at, col + b), p)
        for m, b in self.multiclass_bins.items():
            if batch.proba is None:
                break
            sel = np.flatnonzero((rows.model == m) & ~np.isnan(batch.proba[new, 0]))
            if sel.shape[0] == 0:
                continue
            store = self.wide[m]
            at = store.rows_for(rows.base[sel], rows.ts[sel])
            # P(correct) of a calibrated model: the probability of the class it decided
            decided = batch.decision[new[sel]].astype(np.intp)
            conf = np.clip(batch.proba[new[sel], decided], 0.0, 1.0)
            col = np.minimum((conf * b).astype(np.intp), b - 1)
            matrix = store.matrix(ESTIMATION.name)
            np.add.at(matrix, (at, col), 1.0)
            np.add.at(matrix, (at, col + b), conf)
            proba = np.clip(batch.proba[new[sel]], 0.0, 1.0)
            k = proba.shape[1]
            cells = decided[:, None] * k + np.arange(k)
            np.add.at(
                store.matrix(EXPECTED_CONFUSION.name),
                (np.broadcast_to(at[:, None], cells.shape), cells),
                proba,
            )

    def state(self) -> StateParts:
        return {}, {}

    def load(self, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        pass
