"""Per-task quality statistics of joined rows, written into the engine's bucket stores.

- ``ScoreHistograms``: binary models' fine score histograms per (version, bucket) (ROC/PR
  curves, log loss, Brier, calibration for slice ``all``) and the coarser ones per
  (segment, bucket) that give every slice its score metrics (``stats.scores``).
- ``TaskStats``: multiclass, regression and ranking sums per (segment, bucket)
  (``stats.multiclass``, ``stats.regression``, ``stats.ranking``).

Both keep their state in the stores (saved with them), so ``state`` is empty.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..metrics.catalog import MULTICLASS, RANKING, REGRESSION, SCORES
from ..metrics.protocol import RankingRows
from ..stats.multiclass import MulticlassLayout
from ..stats.ranking import RankingLayout
from ..stats.regression import RegressionLayout
from ..stats.scores import ScoreCells, ScoreLayout
from .accumulator import LabeledRows, StateParts
from .buckets import BucketStore
from .join import JoinBuffer, Joined
from .ranking import RankingState

__all__ = ["ScoreHistograms", "TaskStats"]


class ScoreHistograms:
    """Score histograms of joined binary predictions that carry a score."""

    def __init__(
        self,
        fine: Mapping[int, ScoreLayout],
        coarse: Mapping[int, ScoreLayout],
        wide: Mapping[int, BucketStore],
        sliced: Mapping[int, BucketStore],
    ) -> None:
        self.fine, self.coarse = fine, coarse
        self.wide, self.sliced = wide, sliced
        self._models = np.array(sorted(fine), np.int64)

    def add(self, rows: LabeledRows) -> None:
        """Add the scored rows of binary models: each pair's cells computed once for the
        batch (per distinct layout, not per model), then added model by model, their rows
        in arrival order (a fleet of many models sends each a small slice of a batch)."""
        j = rows.joined
        mine = np.flatnonzero(~np.isnan(j.score) & np.isin(rows.model, self._models))
        if mine.shape[0] == 0:
            return
        order = mine[np.argsort(rows.model[mine], kind="stable")]
        model = rows.model[order]
        cuts = (np.flatnonzero(model[1:] != model[:-1]) + 1).tolist()
        y, score, ts = j.y_true[order], j.score[order], j.pred_ts[order]
        cells: dict[ScoreLayout, ScoreCells] = {}
        for lo, hi in zip([0, *cuts], [*cuts, order.shape[0]], strict=True):
            m = int(model[lo])
            fine, coarse = self.fine[m], self.coarse.get(m)
            for layout, stores, groups in (
                (fine, self.wide, rows.base),
                (coarse, self.sliced, j.group),
            ):
                if layout is None:
                    continue
                store = stores[m]
                if layout not in cells:
                    cells[layout] = layout.cells(y, score)
                at = store.rows_for(groups[order[lo:hi]], ts[lo:hi])  # before matrix(): may grow
                layout.add_cells(store.matrix(SCORES.name), at, cells[layout].take(lo, hi))

    def state(self) -> StateParts:
        return {}, {}

    def load(self, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        pass


class TaskStats:
    """Multiclass, regression and ranking statistics per (group, bucket)."""

    def __init__(
        self,
        join: JoinBuffer,
        sliced: Mapping[int, BucketStore],
        mc: Mapping[int, MulticlassLayout],
        rg: Mapping[int, RegressionLayout],
        rank: Mapping[int, RankingLayout],
        ranking: RankingState,
    ) -> None:
        self.join, self.sliced = join, sliced
        self.mc, self.rg, self.rank = mc, rg, rank
        self.ranking = ranking
        # model -> its last batch's queries as metric families read them (when asked)
        self.ranking_rows: dict[int, RankingRows] = {}
        self.keep_ranking_rows = False

    def add(self, rows: LabeledRows) -> None:
        j = rows.joined
        tasks: tuple[tuple[Mapping[int, Any], str, Callable[..., None]], ...] = (
            (self.mc, MULTICLASS.name, self._add_multiclass),
            (self.rg, REGRESSION.name, self._add_regression),
            (self.rank, RANKING.name, self._add_ranking),
        )
        for layouts, name, add in tasks:
            for m, layout in layouts.items():
                sel = rows.of_model(m)
                if sel.shape[0] == 0:
                    continue
                store = self.sliced[m]
                at = store.rows_for(j.group[sel], j.pred_ts[sel])
                got = add(layout, store.matrix(name), at, j, sel)  # after rows_for: may grow
                if got is not None:  # a ranking batch's queries, for its metric families
                    self.ranking_rows[m] = got

    def _add_multiclass(
        self, mc: MulticlassLayout, matrix: np.ndarray, at: np.ndarray, j: Joined, sel: np.ndarray
    ) -> None:
        proba = self.join.proba(j.rows[sel], mc.n_classes)
        y, decision = j.y_true[sel], j.decision[sel]
        has = ~np.isnan(proba[:, 0])
        if has.any():
            mc.add_rows(matrix, at[has], y[has], decision[has], proba[has])
        if not has.all():
            mc.add_rows(matrix, at[~has], y[~has], decision[~has])

    def _add_regression(
        self, rg: RegressionLayout, matrix: np.ndarray, at: np.ndarray, j: Joined, sel: np.ndarray
    ) -> None:
        preds, r = self.join.preds, j.rows[sel]
        lower, upper = preds.col("lower")[r], preds.col("upper")[r]
        rg.add_rows(matrix, at, j.values[sel], j.score[sel], lower, upper)

    def _add_ranking(
        self, rk: RankingLayout, matrix: np.ndarray, at: np.ndarray, j: Joined, sel: np.ndarray
    ) -> RankingRows | None:
        preds, r = self.join.preds, j.rows[sel]
        keep: list[RankingRows] | None = [] if self.keep_ranking_rows else None
        rows_of = self.ranking.contributions(rk, preds.keys[r], j.group[sel], j.values[sel], keep)
        rk.add_rows(matrix, at, rows_of)
        preds.col("rank_loss")[r] = rk.ndcg_loss(rows_of)  # comparisons' ndcg_loss
        return keep[0] if keep else None

    def state(self) -> StateParts:
        return {}, {}

    def load(self, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        pass
