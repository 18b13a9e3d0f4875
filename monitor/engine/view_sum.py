"""The sum of several engines' bucket stores, as one ``StoreView``.

Every statistic a store row holds is a sum over the events of its (group, bucket) —
counts, moments, histograms — so the stores of disjoint streams merge by keeping their
rows side by side (the mergeable-summary property, Agarwal et al., "Mergeable
Summaries", PODS 2012): evaluation sums rows by group within a window, so rows of the
same (group, bucket) from two inputs add up. Groups are re-coded into their sorted
union, so the sum is the same whatever order the inputs come in.

Time tiers: each engine rolls its rows up at the time its own events have reached (the
earlier of the clock and its watermark), and each partition's watermark lags the
stream's end by its own amount (a minute or more), so partitions can sit on either side
of a roll-up. The sum takes the coarsest tiers (the largest ``hour_from`` /
``half_from`` / ``day_from``) and moves an input's rows that are finer than those allow
into the coarse row holding them, as a roll-up would: every row of the sum then has the
tier its time gives, so a window edge falls on a row boundary of every input and history
reads one point per period, never a partial minute of a partition that had not rolled
up yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from .view import Arrays, StoreView
from .windows import Tiers

__all__ = ["sum_views"]

Group = tuple[int, str, tuple[str, ...]]


def sum_views(views: Sequence[StoreView], width_ms: int) -> StoreView:
    """The stores of the union of ``views``' streams (no views: empty stores).

    ValueError for views of another bucket width or read as window sums (their rows are
    gone)."""
    for v in views:
        if v.width_ms != width_ms:
            raise ValueError(f"stores of bucket width {v.width_ms} ms, summing {width_ms} ms")
        if v.window_sums or v.wide_sums:
            raise ValueError("stores read as window sums cannot be summed")
    groups: list[Group] = sorted({g for v in views for g in v.groups})
    index = {g: i for i, g in enumerate(groups)}
    remaps = [np.array([index[g] for g in v.groups], np.int32) for v in views]
    tiers = Tiers.for_width(width_ms)
    for v in views:
        tiers = replace(
            tiers,
            hour_from=max(tiers.hour_from, v.tiers.hour_from),
            half_from=max(tiers.half_from, v.tiers.half_from),
            day_from=max(tiers.day_from, v.tiers.day_from),
        )
    models = sorted({m for v in views for m in (*v.wide, *v.sliced)})

    def per_model(kind: str) -> dict[int, dict[str, np.ndarray]]:
        out = {}
        for m in models:
            stores = [_retiered(getattr(v, kind).get(m, {}), tiers) for v in views]
            merged = _concat(list(zip(stores, remaps, strict=True)))
            if merged:
                out[m] = merged
        return out

    return StoreView(
        width_ms=width_ms,
        tiers=tiers,
        groups=tuple(groups),
        buckets=_concat(
            [(_retiered(v.buckets, tiers), r) for v, r in zip(views, remaps, strict=True)]
        ),
        wide=per_model("wide"),
        sliced=per_model("sliced"),
    )


def _retiered(arrays: Arrays, tiers: Tiers) -> Arrays:
    """``arrays`` with each row finer than ``tiers`` allow for its time relabelled as the
    coarse row holding it (its bucket and tier code; its values unchanged). Rows of one
    (group, tier, bucket) then sit side by side, which every reader adds."""
    bucket, tier = arrays.get("bucket"), arrays.get("tier")
    if not tiers.per_hour or bucket is None or tier is None or not len(bucket):
        return arrays
    moving = np.flatnonzero(tiers.moving(bucket, tier))
    if not moving.shape[0]:
        return arrays
    coarse, start = tiers.rows_of(bucket[moving])
    bucket, tier = bucket.copy(), tier.copy()
    bucket[moving], tier[moving] = start, coarse
    return {**arrays, "bucket": bucket, "tier": tier}


def _concat(parts: Sequence[tuple[Arrays, np.ndarray]]) -> dict[str, np.ndarray]:
    """Rows of several stores as one (group codes remapped); a matrix missing from one
    part (a drift reference that became ready later) is zeros there."""
    parts = [(a, r) for a, r in parts if "group" in a and len(a["group"])]
    if not parts:
        return {}
    shapes: dict[str, tuple[tuple[int, ...], np.dtype[Any]]] = {}
    for arrays, _ in parts:
        for k, v in arrays.items():
            shapes.setdefault(k, (v.shape[1:], v.dtype))
    out: dict[str, np.ndarray] = {}
    for k, (shape, dtype) in shapes.items():
        cols = []
        for arrays, remap in parts:
            n = len(arrays["group"])
            v: Any = arrays.get(k)
            if v is None:
                v = np.zeros((n, *shape), dtype)
            elif k == "group":
                v = remap[v]
            cols.append(v)
        out[k] = np.concatenate(cols)
    return out
