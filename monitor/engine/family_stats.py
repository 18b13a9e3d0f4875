"""The statistics of metric families that own one — plugins, and built-ins such as
top-k accuracy — fed joined rows of their model's task; and the errors that switch a
plugin off."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..metrics.protocol import BinaryRows, Metric, MulticlassRows, RankingRows, RegressionRows
from .accumulator import LabeledRows, StateParts
from .buckets import BucketStore
from .join import JoinBuffer, Joined

__all__ = ["FamilyStats"]

_log = logging.getLogger(__name__)


class FamilyStats:
    """One statistic matrix per family in its model's wide store (per version and
    bucket). Each family sees the batch of its model's task. A plugin that raises in
    ``update`` is counted and switched off: its statistics may be half-updated, so its
    metrics are no longer exported (a built-in family raising is a bug: it propagates)."""

    def __init__(
        self,
        families: Mapping[int, Sequence[Metric]],
        plugins: Sequence[Metric],
        wide: Mapping[int, BucketStore],
        tasks: Sequence[str],
        n_classes: Sequence[int],
        join: JoinBuffer,
        ranking_rows: Any,
        load_errors: Iterable[str] = (),
        loss_columns: Mapping[str, str] | None = None,
    ) -> None:
        self.families = {m: tuple(f) for m, f in families.items() if f}
        self.plugins = tuple(plugins)
        self._plugin_ids = {id(p) for p in self.plugins}
        self.wide, self.tasks, self.join = wide, tuple(tasks), join
        self.n_classes = tuple(n_classes)
        self.ranking_rows = ranking_rows  # (model, sel) -> RankingRows of the last batch
        self.errors: Counter[str] = Counter(load_errors)
        self.failed: set[str] = set()
        # plugin -> the join buffer column its per-prediction loss goes to (the losses
        # version comparisons use)
        self.loss_columns = dict(loss_columns or {})

    @property
    def active(self) -> tuple[Any, ...]:
        """Plugins still trusted."""
        return tuple(p for p in self.plugins if p.name not in self.failed)

    def add(self, rows: LabeledRows) -> None:
        if not self.families:
            return
        j = rows.joined
        for m in np.unique(rows.model).tolist():
            families = [f for f in self.families.get(m, ()) if f.name not in self.failed]
            if not families:
                continue
            sel = rows.of_model(m)
            store = self.wide[m]
            at = store.rows_for(rows.base[sel], j.pred_ts[sel])  # before matrix(): may grow
            batch = self._batch(self.tasks[m], m, j, sel)
            for family in families:
                matrix = store.matrix(family.stat.name)
                if id(family) not in self._plugin_ids:
                    family.update(matrix, at, batch)
                    continue
                try:
                    family.update(matrix, at, batch)
                    col = self.loss_columns.get(family.name)
                    if col is not None:
                        self.join.preds.col(col)[j.rows[sel]] = _losses(family, batch, len(at))
                except Exception as err:
                    self.errors[family.name] += 1
                    self.failed.add(family.name)
                    _log.error("plugin %s failed and is disabled: %r", family.name, err)

    def _batch(self, task: str, m: int, j: Joined, sel: np.ndarray) -> Any:
        if task == "binary":
            return BinaryRows(
                j.y_true[sel].astype(np.int8), j.decision[sel].astype(np.int8), j.score[sel]
            )
        if task == "multiclass":
            proba = self.join.proba(j.rows[sel], self.n_classes[m])
            return MulticlassRows(
                j.y_true[sel].astype(np.intp), j.decision[sel].astype(np.intp), proba
            )
        if task == "regression":
            preds, r = self.join.preds, j.rows[sel]
            return RegressionRows(
                j.values[sel], j.score[sel], preds.col("lower")[r], preds.col("upper")[r]
            )
        out: RankingRows = self.ranking_rows(m, sel)
        return out

    def state(self) -> StateParts:
        return {"plugin_errors": dict(self.errors), "failed_plugins": sorted(self.failed)}, {}

    def load(self, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        """Saved errors add to those counted so far (this start's loading errors)."""
        self.errors = Counter(meta.get("plugin_errors", {})) + self.errors
        self.failed = set(meta.get("failed_plugins", [])) & {p.name for p in self.plugins}


def _losses(family: Metric, batch: Any, n: int) -> np.ndarray:
    """A plugin's per-prediction losses of ``batch``, checked: one float per row."""
    out = np.asarray(family.loss(batch), np.float64)
    if out.shape != (n,):
        raise ValueError(f"loss() returned shape {out.shape}, expected ({n},)")
    return out
