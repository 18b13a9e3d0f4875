"""Metric plugins' statistics of joined binary rows, and the errors that switch one off."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..plugins import JoinedRows
from .accumulator import LabeledRows, StateParts
from .buckets import BucketStore

__all__ = ["PluginStats"]

_log = logging.getLogger(__name__)


class PluginStats:
    """One statistic matrix per plugin in each binary model's wide store (per version
    and bucket). A plugin that raises in ``update`` is counted and switched off: its
    statistics may be half-updated, so its metrics are no longer exported."""

    def __init__(
        self,
        plugins: Sequence[Any],
        wide: Mapping[int, BucketStore],
        binary: Iterable[int],
        load_errors: Iterable[str] = (),
    ) -> None:
        self.plugins = tuple(plugins)
        self.wide = wide
        self.binary = frozenset(binary)  # plugins see binary outcomes
        self.errors: Counter[str] = Counter(load_errors)
        self.failed: set[str] = set()

    @property
    def active(self) -> tuple[Any, ...]:
        """Plugins still trusted."""
        return tuple(p for p in self.plugins if p.name not in self.failed)

    def add(self, rows: LabeledRows) -> None:
        if not self.plugins:
            return
        j = rows.joined
        models = [m for m in np.unique(rows.model).tolist() if m in self.binary]
        for plugin in self.plugins:
            if plugin.name in self.failed:
                continue
            for m in models:
                sel = rows.of_model(m)
                at = self.wide[m].rows_for(rows.base[sel], j.pred_ts[sel])
                batch = JoinedRows(
                    j.y_true[sel].astype(np.int8), j.decision[sel].astype(np.int8), j.score[sel]
                )
                try:
                    plugin.update(self.wide[m].matrix(f"p_{plugin.name}"), at, batch)
                except Exception as err:
                    self.errors[plugin.name] += 1
                    self.failed.add(plugin.name)
                    _log.error("plugin %s failed in update and is disabled: %r", plugin.name, err)
                    break

    def state(self) -> StateParts:
        return {"plugin_errors": dict(self.errors), "failed_plugins": sorted(self.failed)}, {}

    def load(self, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        """Saved errors add to those counted so far (this start's loading errors)."""
        self.errors = Counter(meta.get("plugin_errors", {})) + self.errors
        self.failed = set(meta.get("failed_plugins", [])) & {p.name for p in self.plugins}
