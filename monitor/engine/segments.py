"""Segment keys for slices, with bounded cardinality.

A model's slices name dimensions of the record's ``segments`` object (``country``,
``device``). Each prediction's segment key is the tuple of its values on every sliced
dimension, with values outside a dimension's current top-K folded into ``__other__`` —
so a million distinct values in one field still make at most K+2 series per dimension.

Top-K is by frequency so far, tracked with a bounded counter per dimension (capacity 10·K,
halved by dropping the rarest when full — a lossy counter in the spirit of Manku &
Motwani's lossy counting): a value that becomes frequent later gets its own slice from
then on; its earlier predictions stay in ``__other__``. Ties go to the value seen first,
so a flood of distinct values (a user id, each seen once) cannot rotate new values into
the top K batch after batch — every such rotation would add a group and a series.
Values that are not scalars (objects, arrays) are ``__other__``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .models import ModelSpec

__all__ = ["MISSING", "OTHER", "SegmentFolder"]

OTHER = "__other__"
MISSING = "__none__"


class SegmentFolder:
    def __init__(self, model: ModelSpec) -> None:
        self.dimensions = model.slice_dimensions
        self.top_k = {
            d: max(s.top_k for s in model.slices if d in s.dimensions) for d in self.dimensions
        }
        self.counts: dict[str, dict[str, int]] = {d: {} for d in self.dimensions}

    def fold(self, segments: Sequence[dict[str, Any] | None]) -> list[tuple[str, ...]]:
        """Segment key per row (updates the frequency counters first)."""
        columns = []
        for d in self.dimensions:
            values = [_text(s.get(d)) if isinstance(s, dict) else MISSING for s in segments]
            counts = self.counts[d]
            for v in values:
                counts[v] = counts.get(v, 0) + 1
            k = self.top_k[d]
            # stable sorts by count only: among equal counts the first seen stays ahead
            if len(counts) > 10 * k:
                keep = sorted(counts.items(), key=lambda kv: -kv[1])[: 5 * k]
                self.counts[d] = counts = dict(keep)
            top = {v for v, _ in sorted(counts.items(), key=lambda kv: -kv[1])[:k]}
            top.add(MISSING)
            columns.append([v if v in top else OTHER for v in values])
        return list(zip(*columns, strict=True)) if columns else [()] * len(segments)

    def state(self) -> dict[str, dict[str, int]]:
        return {d: dict(c) for d, c in self.counts.items()}

    def load(self, state: dict[str, dict[str, int]]) -> None:
        for d in self.dimensions:
            self.counts[d] = {str(k): int(v) for k, v in state.get(d, {}).items()}


def _text(value: Any) -> str:
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return OTHER  # no slice of its own (and str() of deep nesting would recurse)
    return str(value)
