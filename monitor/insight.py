"""History and causes from the engine's rows, for the daemon and replay.

Each question copies the rows it reads under the engine's lock (a few thousand at most)
and evaluates them outside it (``engine/narrow.py``): ``/api/v1/history`` and the status
page's trends (``engine/history.py``), the slices behind an SLO that starts firing or a
comparison that rolls back (``engine/cause.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from .alerting.slo import SloSpec
from .durations import parse_duration
from .engine.cause import Cause, change_cause, comparison_metric
from .engine.core import Engine
from .engine.history import Series, series, take
from .engine.models import WindowSpec
from .engine.narrow import NarrowError, copy_rows, slice_groups
from .engine.snapshot import ComparisonResult, Snapshot

__all__ = ["Insight", "NarrowError"]


class Insight:
    """Questions about the past of one engine; ``lock``: the daemon's engine lock."""

    def __init__(
        self,
        engine: Callable[[], Engine],
        lock: AbstractContextManager[Any] | None = None,
        confidence: float = 0.95,
    ) -> None:
        self._engine = engine
        self._lock = lock if lock is not None else nullcontext()
        self.confidence = confidence

    def point_width(self, model: str, window: str | None) -> int | None:
        """A ``window`` parameter as a point width in ms: a window of the model (its
        size) or a duration ("15m"); None for the tiers' own rows."""
        if not window:
            return None
        for spec in self._engine().models:
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
        engine = self._engine()
        with self._lock:
            view, spec = take(engine, model, version, slice_label)
            delay = engine.delay.histogram()
            plugins = engine.active_plugins
        return series(
            view, spec, version, slice_label, metrics, delay, now_ms, self.confidence,
            plugins, point_ms, from_ms, to_ms,
        )  # fmt: skip

    def slo_cause(self, spec: SloSpec, version: str, now_ms: int) -> Cause | None:
        """The slices behind an SLO instance's change: its window against the one before."""
        if spec.slice != "all":
            return None
        engine = self._engine()
        names = [m.name for m in engine.models]
        if spec.model not in names:
            return None
        m = names.index(spec.model)
        model = engine.models[m]
        window = next((w for w in model.windows if w.label == spec.window), None)
        if window is None:
            return None
        before = WindowSpec("previous", window.size_ms, window.delay_ms + window.size_ms)
        with self._lock:
            lo, _ = engine.tiers.window(now_ms, before.size_ms, before.delay_ms)
            gids = slice_groups(engine.groups, model, m, version, "all")
            view = copy_rows(engine, m, gids, lo=lo)
            plugins = engine.active_plugins
        return change_cause(
            view, model, now_ms, spec.metric, (version, before), (version, window),
            self.confidence, plugins,
        )  # fmt: skip

    def comparison_cause(self, c: ComparisonResult, now_ms: int) -> Cause | None:
        """The slices behind a comparison's difference: treatment against control over
        the model's longest window."""
        engine = self._engine()
        names = [m.name for m in engine.models]
        if c.model not in names:
            return None
        m = names.index(c.model)
        model = engine.models[m]
        metric = comparison_metric(model, c.loss)
        if metric is None or not model.windows:
            return None
        window = max(model.windows, key=lambda w: w.size_ms + w.delay_ms)
        with self._lock:
            lo, _ = engine.tiers.window(now_ms, window.size_ms, window.delay_ms)
            gids = [
                g
                for v in (c.control, c.treatment)
                for g in slice_groups(engine.groups, model, m, v, "all")
            ]
            view = copy_rows(engine, m, gids, lo=lo)
            plugins = engine.active_plugins
        return change_cause(
            view, model, now_ms, metric, (c.control, window), (c.treatment, window),
            self.confidence, plugins,
        )  # fmt: skip

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
