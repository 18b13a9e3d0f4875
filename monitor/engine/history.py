"""A metric over time at the resolution the time tiers hold.

The bucket stores already keep every group's statistics per row of time: base buckets
for the recent past, then hour, 12-hour and day rows (``windows.Tiers``). A history point
is one such row period — or, with a point width, the rows of one aligned period merged —
evaluated as a window of its own through ``evaluate_all`` (``narrow.py``), so its value,
interval and n are exactly what a window over those buckets reports, late labels
included (they land in their prediction's row). Nothing is stored for it: a request
copies the rows of one version's groups (the trends: of one model's versions) and
evaluates them; memory is bounded by those rows.

A coarse row that a tier boundary cuts holds what lies before the boundary (the rest is
still in finer rows), so its point ends there: points never overlap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..stats.completeness import PROVISIONAL_BELOW, expected_coverage
from .completeness import delay_cdf
from .models import ModelSpec
from .narrow import (
    NarrowError,
    copy_rows,
    evaluate_narrow,
    exported,
    narrowed_spec,
    parse_slice,
    slice_groups,
    span_window,
)
from .snapshot import DelayHistogram, WindowResult
from .view import StoreView
from .windows import Tiers

__all__ = ["HistoryPoint", "Series", "point_spans", "series", "take", "versions_series"]


@dataclass(frozen=True, slots=True)
class HistoryPoint:
    """One point: the metric over the predictions made in ``[start_ms, end_ms)``."""

    start_ms: int
    end_ms: int
    value: float
    lower: float
    upper: float
    n: int
    predictions: int
    labeled: int
    completeness: float  # expected share of the point's eventual labels already in
    expected_coverage: float  # label coverage the point is expected to end with

    @property
    def label_coverage(self) -> float:
        return self.labeled / self.predictions if self.predictions else math.nan

    @property
    def provisional(self) -> bool:
        """Labels are still expected to arrive (or no label delay is known yet)."""
        return not self.completeness >= PROVISIONAL_BELOW


@dataclass(frozen=True, slots=True)
class Series:
    model: str
    version: str
    slice: str
    metric: str
    point_ms: int | None  # the points' width asked for; None: the tiers' own rows
    points: tuple[HistoryPoint, ...]
    first_seen_ms: int | None  # the version's first retained row (a deploy marker)


def row_spans(tier: np.ndarray, bucket: np.ndarray, tiers: Tiers) -> np.ndarray:
    """(rows, 2) base-bucket ``[start, end)`` of each row: its tier's span, cut at the
    next finer tier's start."""
    spans = np.array(tiers.spans, np.int64)[tier]
    end = bucket + spans
    hour_cut = tiers.hour_from
    half_cut = max(tiers.half_from, tiers.day_from)
    end = np.where(tier == 1, np.minimum(end, hour_cut), end)
    end = np.where(tier == 3, np.minimum(end, half_cut), end)
    end = np.where(tier == 2, np.minimum(end, tiers.day_from), end)
    return np.stack([bucket, np.maximum(end, bucket + 1)], axis=1)


def point_spans(
    tier: np.ndarray, bucket: np.ndarray, tiers: Tiers, per_point: int | None = None
) -> list[tuple[int, int]]:
    """The points' base-bucket ``[start, end)`` over rows (``tier``, ``bucket``), in time
    order: every distinct row span, or with ``per_point`` buckets per point the rows of
    each aligned period merged (a row longer than a period stays a point of its own)."""
    if tier.shape[0] == 0:
        return []
    spans = np.unique(row_spans(tier, bucket, tiers), axis=0)
    if not per_point or per_point <= 1:
        return [(int(a), int(b)) for a, b in spans]
    period_a, period_b = spans[:, 0] // per_point, (spans[:, 1] - 1) // per_point
    key = np.where(period_a == period_b, period_a, -1 - np.arange(spans.shape[0]))
    points: dict[int, list[int]] = {}
    for k, (a, b) in zip(key.tolist(), spans.tolist(), strict=True):
        p = points.get(k)
        if p is None:
            points[k] = [a, b]
        else:
            p[0], p[1] = min(p[0], a), max(p[1], b)
    return sorted((a, b) for a, b in points.values())


def series(
    view: StoreView,
    spec: ModelSpec,
    version: str,
    slice_label: str,
    metrics: Sequence[str],
    delay: DelayHistogram | None,
    now_ms: int,
    confidence: float = 0.95,
    plugins: Sequence[Any] = (),
    point_ms: int | None = None,
    from_ms: int | None = None,
    to_ms: int | None = None,
) -> dict[str, Series]:
    """The history of each of ``metrics`` of ``spec``'s ``version`` and slice over a
    ``narrow.copy_rows`` view of that version's groups (re-coded as model 0), points
    overlapping ``[from_ms, to_ms)``; ``now_ms``: when labels are counted as in (the
    completeness of each point, from the model's label ``delay``; None: none known).
    NarrowError names a bad parameter."""
    return versions_series(
        view, spec, [version], slice_label, metrics, delay, now_ms, confidence, plugins,
        point_ms, from_ms, to_ms,
    )[version]  # fmt: skip


def versions_series(
    view: StoreView,
    spec: ModelSpec,
    versions: Sequence[str],
    slice_label: str,
    metrics: Sequence[str],
    delay: DelayHistogram | None,
    now_ms: int,
    confidence: float = 0.95,
    plugins: Sequence[Any] = (),
    point_ms: int | None = None,
    from_ms: int | None = None,
    to_ms: int | None = None,
) -> dict[str, dict[str, Series]]:
    """:func:`series` of several versions of one model at once, over a view of all their
    groups (:func:`take`): each version keeps its own points (the spans of its own rows),
    and the union of those spans is evaluated in one pass — the versions of a window are
    then computed together, which is what makes the status page's trends cheap."""
    w = view.width_ms
    if point_ms is not None and (point_ms <= 0 or point_ms % w):
        raise NarrowError("window", f"a point width must be a multiple of the bucket width {w} ms")
    light = view.buckets
    row_version = np.array([g[1] for g in view.groups] or [""], object)[light["group"]]
    own: dict[str, list[tuple[int, int]]] = {}
    first: dict[str, int | None] = {}
    for version in versions:
        mine = row_version == version
        spans = point_spans(light["tier"][mine], light["bucket"][mine], view.tiers,
                            (point_ms or 0) // w)  # fmt: skip
        first[version] = min((a for a, _ in spans), default=None)
        if from_ms is not None:
            spans = [(a, b) for a, b in spans if b * w > from_ms]
        if to_ms is not None:
            spans = [(a, b) for a, b in spans if a * w < to_ms]
        own[version] = spans
    every = sorted({s for spans in own.values() for s in spans})
    at = {s: i for i, s in enumerate(every)}
    dims, _ = parse_slice(slice_label)
    now_b = max((b for _, b in every), default=0)
    windows = [span_window(str(i), a, b, now_b, w) for i, (a, b) in enumerate(every)]
    narrow = narrowed_spec(spec, windows, metrics, (dims,) if dims else (), min_samples=0)
    results = evaluate_narrow(view, narrow, now_b * w, confidence, plugins, exact=True)
    by_point: dict[tuple[str, int], WindowResult] = {
        (r.version, int(r.window)): r for r in results if r.slice == slice_label
    }
    complete = delay_cdf(delay).completeness(
        np.array([a * w for a, _ in every], np.int64),
        np.array([b * w for _, b in every], np.int64),
        now_ms,
    )
    named = _names(results)
    for metric in metrics:
        if every and metric not in named and not _configured(spec, metric):
            raise NarrowError("metric", f"model {spec.name} computes no metric {metric!r}")
    out: dict[str, dict[str, Series]] = {}
    for version, spans in own.items():
        out[version] = {}
        for metric in metrics:
            points = []
            for a, b in spans:
                i = at[a, b]
                r = by_point.get((version, i))
                mv = next((x for x in r.metrics if x.name == metric), None) if r else None
                preds, labeled = (r.predictions, r.labeled) if r else (0, 0)
                cov = labeled / preds if preds else math.nan
                points.append(
                    HistoryPoint(
                        a * w,
                        b * w,
                        mv.value if mv else math.nan,
                        mv.lower if mv else math.nan,
                        mv.upper if mv else math.nan,
                        int(mv.n) if mv else 0,
                        preds,
                        labeled,
                        float(complete[i]),
                        expected_coverage(cov, float(complete[i])),
                    )
                )
            out[version][metric] = Series(
                spec.name, version, slice_label, metric, point_ms, tuple(points),
                None if first[version] is None else first[version] * w,
            )  # fmt: skip
    return out


def _names(results: Sequence[WindowResult]) -> set[str]:
    return {mv.name for r in results for mv in r.metrics}


def _configured(spec: ModelSpec, metric: str) -> bool:
    """Whether ``metric`` is one the model is configured to compute (then a span without
    it simply had no data for it)."""
    return metric in exported(spec)


def take(
    models: Sequence[ModelSpec],
    stores: StoreView,
    model: str,
    version: str | Sequence[str],
    slice_label: str,
) -> tuple[StoreView, ModelSpec]:
    """The rows a :func:`series` of ``model``'s ``version`` (or a :func:`versions_series`
    of several) and slice reads, copied out of ``stores`` (an engine's view: call under
    its lock). NarrowError names an unknown model or version."""
    names = [m.name for m in models]
    if model not in names:
        raise NarrowError("model", f"no model {model!r} is configured (models: {', '.join(names)})")
    m = names.index(model)
    spec = models[m]
    known = sorted({v for mi, v, _ in stores.groups if mi == m})
    asked = [version] if isinstance(version, str) else list(version)
    for v in asked:
        if v not in known:
            have = ", ".join(known) or "none yet"
            raise NarrowError("version", f"model {model} has no version {v!r} (versions: {have})")
    gids = [g for v in asked for g in slice_groups(stores.groups, spec, m, v, slice_label)]
    dims, _ = parse_slice(slice_label)  # (slice "all" reads no per-slice row)
    return copy_rows(stores, m, gids, sliced=bool(dims)), spec
