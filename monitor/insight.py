"""History and causes from the retained rows, for the daemon and replay.

The rows are one engine's, or in partitioned mode the global view's merge of every
partition's statistics (``engine/rows.py``). Each question copies the rows it reads
under the daemon's lock (a few thousand at most) and evaluates them outside it
(``engine/narrow.py``): ``/api/v1/history`` and the status page's trends
(``engine/history.py``), the slices behind an SLO that starts firing or a comparison
that rolls back (``engine/cause.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from .alerting.slo import SloSpec
from .durations import parse_duration
from .engine.cause import Cause, change_cause, comparison_metric
from .engine.core import Engine
from .engine.history import Series, series, take, versions_series
from .engine.models import ModelSpec, WindowSpec
from .engine.narrow import NarrowError, copy_rows, exported, slice_groups
from .engine.rows import Rows
from .engine.snapshot import ComparisonResult, Snapshot
from .export.status_page import KEY_METRIC

__all__ = ["MAX_POINTS", "Insight", "NarrowError", "key_metrics"]

POINT_WIDTHS_S = (60, 300, 900, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 7 * 86400)
MAX_POINTS = 120  # points of a trend over the whole retained (or replayed) range


def key_metrics(spec: ModelSpec, slo_metrics: Sequence[str] = (), k: int = 2) -> list[str]:
    """What a model's trends show: the metrics its SLOs watch, then its task's key metric
    (error rate, MAE, NDCG at the first k), at most ``k``."""
    names = exported(spec)
    out = list(dict.fromkeys(m for m in slo_metrics if m in names))
    key = [f"ndcg_at_{spec.ks[0]}"] if spec.task == "ranking" and spec.ks else []
    key += [name for name, _ in KEY_METRIC.get(spec.task, ())]
    out += [m for m in key if m in names and m not in out][:1]
    return out[:k]


class Insight:
    """Questions about the past of the retained rows: ``rows`` gives an engine (its rows
    are read under ``lock``, the daemon's engine lock) or :class:`Rows` (merged
    statistics)."""

    def __init__(
        self,
        rows: Callable[[], Engine | Rows],
        lock: AbstractContextManager[Any] | None = None,
        confidence: float = 0.95,
    ) -> None:
        self._source = rows
        self._lock = lock if lock is not None else nullcontext()
        self.confidence = confidence

    def _rows(self) -> Rows:
        """The rows to read now (call under ``lock``)."""
        found = self._source()
        return found if isinstance(found, Rows) else Rows.of(found)

    def _models(self) -> Sequence[ModelSpec]:
        with self._lock:
            return self._rows().models

    def point_width(self, model: str, window: str | None) -> int | None:
        """A ``window`` parameter as a point width in ms: a window of the model (its
        size) or a duration ("15m"); None for the tiers' own rows."""
        if not window:
            return None
        for spec in self._models():
            if spec.name == model:
                for w in spec.windows:
                    if w.label == window:
                        return w.size_ms
        try:
            return round(parse_duration(window) * 1000)
        except ValueError:
            raise NarrowError(
                "window", f"window {window!r} is neither a window of {model} nor a duration"
            ) from None

    def history(
        self,
        model: str,
        version: str,
        slice_label: str,
        metrics: Sequence[str],
        now_ms: int,
        point_ms: int | None = None,
        from_ms: int | None = None,
        to_ms: int | None = None,
    ) -> dict[str, Series]:
        """The series of each metric (``engine.history.series``); NarrowError names a
        bad parameter."""
        with self._lock:
            rows = self._rows()
            view, spec = take(rows.models, rows.view, model, version, slice_label)
        delay = rows.delays.of(model)
        return series(
            view, spec, version, slice_label, metrics, delay, now_ms, self.confidence,
            rows.plugins, point_ms, from_ms, to_ms,
        )  # fmt: skip

    def trend_point_ms(self, now_ms: int) -> int | None:
        """The trends' point width: the finest of :data:`POINT_WIDTHS_S` (a multiple of
        the bucket width) keeping the retained range within :data:`MAX_POINTS` points."""
        with self._lock:
            stores = self._rows().view
            buckets = stores.buckets.get("bucket")
            if buckets is None or not len(buckets):
                return None
            first = int(buckets.min())
        width = stores.width_ms
        span = now_ms - first * width + width
        return next(
            (
                w * 1000
                for w in POINT_WIDTHS_S
                if w * 1000 % width == 0 and span <= MAX_POINTS * w * 1000
            ),
            None,
        )

    def trends(self, now_ms: int, metrics_of: Callable[[ModelSpec], Sequence[str]]) -> list[Series]:
        """Slice ``all`` of every model version over the retained range, the metrics
        ``metrics_of(model)`` each, at the finest point width (a multiple of the bucket
        width) that keeps at most :data:`MAX_POINTS` points — what
        ``/api/v1/history?window=<width>`` gives. Series without any sample are left out."""
        point = self.trend_point_ms(now_ms)
        with self._lock:
            rows = self._rows()
            light = rows.view.buckets.get("bucket")
            if light is None or not len(light):
                return []
            models = rows.models
            versions = sorted({(m, v) for m, v, _ in rows.view.groups if m >= 0})
        by_model: dict[int, list[str]] = {}
        for m, version in versions:
            by_model.setdefault(m, []).append(version)
        out: list[Series] = []
        for m, names in by_model.items():  # a model's versions in one evaluation
            spec = models[m]
            metrics = list(metrics_of(spec))
            if not metrics:
                continue
            with self._lock:
                rows = self._rows()
                view, spec = take(rows.models, rows.view, spec.name, names, "all")
            delay = rows.delays.of(spec.name)
            found = versions_series(
                view, spec, names, "all", metrics, delay, now_ms, self.confidence,
                rows.plugins, point,
            )  # fmt: skip
            for version in names:
                out.extend(s for s in found[version].values() if any(p.n for p in s.points))
        return out

    def _cause(
        self,
        model_name: str,
        metric: str,
        before: tuple[str, WindowSpec],
        after: tuple[str, WindowSpec],
        now_ms: int,
    ) -> Cause | None:
        """The slices behind the change of ``metric`` from ``before`` to ``after`` (each
        a version and window of ``model_name``): rows copied from the earlier window's
        start under the lock, evaluated outside it."""
        first = min(before[1], after[1], key=lambda w: -(w.size_ms + w.delay_ms))
        with self._lock:
            rows = self._rows()
            names = [m.name for m in rows.models]
            if model_name not in names:
                return None
            m = names.index(model_name)
            model = rows.models[m]
            stores = rows.view
            lo, _ = stores.tiers.window(now_ms, first.size_ms, first.delay_ms)
            versions = dict.fromkeys((before[0], after[0]))
            gids = [g for v in versions for g in slice_groups(stores.groups, model, m, v, "all")]
            view = copy_rows(stores, m, gids, lo=lo)
        return change_cause(
            view, model, now_ms, metric, before, after, self.confidence, rows.plugins
        )

    def slo_cause(self, spec: SloSpec, version: str, now_ms: int) -> Cause | None:
        """The slices behind an SLO instance's change: its window against the one before."""
        model = next((m for m in self._models() if m.name == spec.model), None)
        window = next((w for w in model.windows if w.label == spec.window), None) if model else None
        if spec.slice != "all" or window is None:
            return None
        before = WindowSpec("previous", window.size_ms, window.delay_ms + window.size_ms)
        return self._cause(spec.model, spec.metric, (version, before), (version, window), now_ms)

    def comparison_cause(self, c: ComparisonResult, now_ms: int) -> Cause | None:
        """The slices behind a comparison's difference: treatment against control over
        the model's longest window."""
        model = next((m for m in self._models() if m.name == c.model), None)
        metric = comparison_metric(model, c.loss) if model is not None else None
        if model is None or metric is None or not model.windows:
            return None
        window = max(model.windows, key=lambda w: w.size_ms + w.delay_ms)
        return self._cause(c.model, metric, (c.control, window), (c.treatment, window), now_ms)

    def rollback_causes(
        self, snap: Snapshot, known: Mapping[str, Cause | None]
    ) -> dict[str, Cause | None]:
        """Causes of the comparisons in rollback: ``known`` ones kept, new ones found."""
        now = snap.placed_ms if snap.placed_ms is not None else snap.at_ms
        out: dict[str, Cause | None] = {}
        for c in snap.comparisons:
            if c.decision != "rollback":
                continue
            if c.name in known:
                out[c.name] = known[c.name]
                continue
            try:
                out[c.name] = self.comparison_cause(c, now)
            except Exception:  # a cause is a help, never a reason to miss the alert
                out[c.name] = None
        return out
