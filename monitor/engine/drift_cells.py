"""Drift histogram cells of arriving predictions (features and scores), per bucket.

The tests and references live in ``engine.drift.DriftTracker``; this accumulator counts
what they read into each model's wide store (a row per version and bucket), fills the
bootstrap sample of a live reference first, and keeps a few unseen categorical values
per feature for the drift API.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .accumulator import NewPredictions, StateParts
from .buckets import BucketStore
from .drift import DriftTracker

__all__ = ["DriftCells", "UnseenValues"]


@dataclass
class UnseenValues:
    """A few categorical values per (model, feature) that its reference has not seen,
    for the drift API. ``+`` is the union (sorted, so commutative and associative; the
    empty ``UnseenValues()`` is its identity); one engine keeps arrival order."""

    by_feature: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    def __add__(self, other: UnseenValues) -> UnseenValues:
        keys = self.by_feature.keys() | other.by_feature.keys()
        return UnseenValues(
            {
                k: sorted({*self.by_feature.get(k, ()), *other.by_feature.get(k, ())})
                for k in sorted(keys)
            }
        )

    def copy(self) -> UnseenValues:
        return UnseenValues({k: list(v) for k, v in self.by_feature.items()})


class DriftCells:
    def __init__(
        self,
        tracker: DriftTracker,
        wide: Mapping[int, BucketStore],
        model_names: Sequence[str],
        base_of: Callable[[np.ndarray], np.ndarray],
    ) -> None:
        self.tracker, self.wide, self.model_names = tracker, wide, tuple(model_names)
        self.base_of = base_of  # groups -> their (model, version) group without segment
        self.unseen = UnseenValues()
        # models whose saved histograms belong to another reference (set by ``load``)
        self.stale: set[str] = set()

    def add_predictions(self, rows: NewPredictions) -> None:
        """A model with a live reference first fills its bootstrap sample; when it is full
        the reference's layout is built from it, its matrix registered, and the sample
        itself counted into its buckets like any later prediction."""
        tracker = self.tracker
        if not (tracker.by_model or tracker.bootstrap):
            return
        batch, new, model = rows.batch, rows.new, rows.model

        def features(sel: np.ndarray) -> list[dict[str, Any] | None]:
            if not batch.features:
                return [None] * sel.shape[0]
            return [batch.features[i] for i in new[sel]]

        counted: dict[int, int] = {}  # model -> leading events already counted
        for m in list(tracker.bootstrap):
            sel = np.flatnonzero(model == m)
            if sel.shape[0] == 0:
                continue
            boot = tracker.bootstrap[m]
            take = sel[: boot.room]
            boot.add(rows.ts[take], rows.group[take], features(take), batch.score[new[take]])
            counted[m] = take.shape[0]
            if boot.full:
                d = tracker.become_ready(m)
                self.wide[m].add_matrix(d.matrix, d.width)
                n = boot.n
                base = self.base_of(boot.group[:n])
                self._add(d, m, boot.rows(), boot.score[:n], base, boot.ts[:n])
        for m, d in tracker.by_model.items():
            sel = np.flatnonzero(model == m)[counted.get(m, 0) :]
            if sel.shape[0] == 0:
                continue
            numeric = ready = None
            names = batch.numeric_names
            if batch.numeric_cells is not None and (m, d.spec.fingerprint) in batch.cells_of:
                cells = batch.numeric_cells[new[sel]]  # computed ahead (DriftTracker.with_cells)
                ready = {name: cells[:, j] for j, name in enumerate(names)}
            elif batch.numeric is not None:  # decoded in columns (monitor.ingest.decode)
                block = batch.numeric[new[sel]]
                numeric = {name: block[:, j] for j, name in enumerate(names)}
            self._add(
                d, m, features(sel), batch.score[new[sel]], rows.base[sel], rows.ts[sel],
                numeric, ready,
            )  # fmt: skip

    def _add(
        self,
        d: Any,
        m: int,
        feats: Sequence[dict[str, Any] | None],
        score: np.ndarray,
        base: np.ndarray,
        ts: np.ndarray,
        numeric: dict[str, np.ndarray] | None = None,
        ready: dict[str, np.ndarray] | None = None,
    ) -> None:
        ev, cols, unseen = d.cells(feats, score, numeric, ready)
        at = self.wide[m].rows_for(base, ts)
        self.wide[m].add_cells(d.matrix, at[ev], cols)
        for feature, value in unseen:
            examples = self.unseen.by_feature.setdefault((self.model_names[m], feature), [])
            if value not in examples and len(examples) < d.spec.unseen_examples:
                examples.append(value)

    def state(self) -> StateParts:
        meta = {
            "drift_fingerprints": self.tracker.fingerprints(),
            "drift_live": self.tracker.state(),
        }
        return meta, self.tracker.arrays()

    def load(self, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        """Live references (their matrices registered) and which models' saved cells no
        longer apply (``stale``: the configured reference changed)."""
        for d in self.tracker.load(meta.get("drift_live", {}), arrays):
            self.wide[d.spec.model_index].add_matrix(d.matrix, d.width)
        saved = meta.get("drift_fingerprints", {})
        self.stale = {
            name for name, fp in self.tracker.fingerprints().items() if saved.get(name) != fp
        }
