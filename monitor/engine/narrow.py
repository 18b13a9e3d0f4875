"""A view and a model spec narrowed to one question: the rows of a few groups and the
windows, slice and metric it asks about, evaluated by the windows' own ``evaluate_all``.

History points, the slices behind an SLO breach and replay's SLO steps all ask for a few
windows of one model version (or two) rather than every window of every model. They copy
just the rows of those groups out of the engine's stores (under the caller's lock, a few
thousand rows at most), re-coded as the only model of a small view, and evaluate them
with the same entry point the snapshot uses — so there is one implementation of every
metric, and whatever it computes for a window it computes for these.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..metrics.registry import exported_names
from .evaluate import evaluate_all
from .models import ModelSpec, SliceSpec, WindowSpec
from .snapshot import WindowResult
from .view import Arrays, StoreView
from .windows import Tiers

__all__ = [
    "NarrowError",
    "copy_rows",
    "evaluate_narrow",
    "exported",
    "narrowed_spec",
    "parse_slice",
    "slice_groups",
    "span_window",
]

_SKIP = 1 << 62  # a slice's min_samples that no slice reaches: not evaluated


class NarrowError(ValueError):
    """A question the engine cannot answer: ``param`` names what is wrong."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def parse_slice(label: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``"country=US,device=ios"`` -> (dimensions, values); ``"all"`` -> ((), ())."""
    if label == "all":
        return (), ()
    dims, values = [], []
    for part in label.split(","):
        d, eq, v = part.partition("=")
        if not eq or not d:
            raise NarrowError("slice", f"slice {label!r} is not 'all' or 'dim=value,...'")
        dims.append(d)
        values.append(v)
    return tuple(dims), tuple(values)


def slice_groups(
    groups: Sequence[tuple[int, str, tuple[str, ...]]],
    spec: ModelSpec,
    m: int,
    version: str,
    label: str,
) -> list[int]:
    """The group codes of model ``m``'s ``version`` that slice ``label`` sums."""
    dims, values = parse_slice(label)
    if dims and not any(s.dimensions == dims for s in spec.slices):
        known = ", ".join(",".join(s.dimensions) for s in spec.slices) or "none"
        raise NarrowError(
            "slice", f"model {spec.name} has no slice over {','.join(dims)} (slices: {known})"
        )
    at = [spec.slice_dimensions.index(d) for d in dims]
    out = []
    for gid, (model, v, segment) in enumerate(groups):
        if model != m or v != version:
            continue
        if dims and (not segment or tuple(segment[i] for i in at) != values):
            continue
        out.append(gid)
    return out


def copy_rows(
    stores: StoreView,
    m: int,
    gids: Iterable[int],
    lo: int | None = None,
    hi: int | None = None,
    sliced: bool = True,
) -> StoreView:
    """A copy of the rows of groups ``gids`` of model ``m`` (their buckets in ``[lo, hi]``
    when given) from every store, the groups re-coded as model 0's only ones, so
    :func:`evaluate_narrow` reads them alone. ``stores``: an engine's view (call under
    its lock) or merged statistics.
    ``sliced=False``: not the per-slice store (an evaluation of slice ``all`` only)."""
    wanted = sorted(set(gids))
    groups = stores.groups
    versions = {groups[g][1] for g in wanted}
    bases = [
        g for g, (model, v, seg) in enumerate(groups) if model == m and v in versions and not seg
    ]
    keep = sorted(set(wanted) | set(bases))
    code = np.full(len(groups), -1, np.int64)
    code[keep] = np.arange(len(keep))

    def take(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        group, bucket = arrays["group"], arrays["bucket"]
        sel = code[group] >= 0
        if lo is not None:
            sel &= bucket >= lo
        if hi is not None:
            sel &= bucket <= hi
        rows = np.flatnonzero(sel)
        out = {k: v[rows] for k, v in arrays.items()}
        out["group"] = code[group[rows]].astype(np.int32)
        return out

    light = take(dict(stores.buckets))
    # base groups not asked for keep their wide rows (slice "all" reads them) but no
    # light rows: their counts would enter the version's sums
    asked = np.isin(light["group"], code[wanted])
    light = {k: v[asked] for k, v in light.items()}
    wide = stores.wide.get(m)
    per_slice = stores.sliced.get(m) if sliced else None
    return StoreView(
        width_ms=stores.width_ms,
        tiers=stores.tiers,
        groups=tuple((0, groups[g][1], groups[g][2]) for g in keep),
        buckets=light,
        wide={0: take(dict(wide))} if _has_rows(wide) else {},
        sliced={0: _only(take(dict(per_slice)), code[wanted])} if _has_rows(per_slice) else {},
    )


def _has_rows(arrays: Arrays | None) -> bool:
    return arrays is not None and "group" in arrays and len(arrays["group"]) > 0


def _only(arrays: dict[str, np.ndarray], codes: np.ndarray) -> dict[str, np.ndarray]:
    rows = np.isin(arrays["group"], codes)
    return {k: v[rows] for k, v in arrays.items()}


def narrowed_spec(
    spec: ModelSpec,
    windows: Sequence[WindowSpec],
    metrics: Sequence[str] = (),
    slices: Sequence[tuple[str, ...]] = (),
    min_samples: int | None = None,
    extra_metrics: Sequence[str] = (),
) -> ModelSpec:
    """``spec`` evaluating only ``windows``, the slices over ``slices`` (each a tuple of
    dimensions; their ``min_samples`` replaced by ``min_samples`` when given; the others
    skipped, their dimensions kept so segment keys read the same), computing only
    ``metrics`` when the configured ones cover them, and without economics."""
    names = tuple(spec.metrics) + tuple(m for m in extra_metrics if m not in spec.metrics)
    wanted = set(metrics)
    mine = tuple(n for n in names if exported(spec, (n,)) & wanted)
    if wanted and wanted <= {e for n in mine for e in exported(spec, (n,))}:
        names = mine  # only what is asked (estimates and plugins need the whole spec)
    dims = set(slices)
    kept: list[SliceSpec] = []
    for s in spec.slices:
        if s.dimensions in dims:
            kept.append(s if min_samples is None else replace(s, min_samples=min_samples))
        else:
            kept.append(replace(s, min_samples=_SKIP))
    return replace(spec, windows=tuple(windows), metrics=names, slices=tuple(kept), costs=None)


def exported(spec: ModelSpec, metrics: Sequence[str] | None = None) -> frozenset[str]:
    """The names ``metrics`` of ``spec`` (default: its configured ones) are exported
    under (fbeta: f2, f0_5, ...)."""
    names = spec.metrics if metrics is None else metrics
    return exported_names(spec.params, names)


def span_window(label: str, start_b: int, end_b: int, now_b: int, width_ms: int) -> WindowSpec:
    """A window covering base buckets ``[start_b, end_b)`` exactly when evaluated at
    ``now_b * width_ms`` with tiers that do not snap (``Tiers(width_ms)``)."""
    return WindowSpec(label, (end_b - start_b) * width_ms, (now_b - end_b + 1) * width_ms)


def evaluate_narrow(
    view: StoreView,
    spec: ModelSpec,
    now_ms: int,
    confidence: float,
    plugins: Sequence[Any] = (),
    exact: bool = False,
) -> tuple[WindowResult, ...]:
    """``evaluate_all`` over a :func:`copy_rows` view with the narrowed ``spec``;
    ``exact``: windows cover exactly the buckets :func:`span_window` placed (no snapping
    to the time tiers)."""
    if exact:
        view = replace(view, tiers=Tiers(view.width_ms))
    results, _ = evaluate_all(view, [spec], now_ms, confidence, plugins)
    return results
