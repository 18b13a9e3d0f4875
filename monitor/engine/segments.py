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

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from .models import ModelSpec
from .records import Coded, factorize

__all__ = ["MISSING", "OTHER", "SegmentFolder", "dimension_values", "sliced_dimensions"]

OTHER = "__other__"
MISSING = "__none__"
Key = tuple[str, ...]


class SegmentFolder:
    def __init__(self, model: ModelSpec) -> None:
        self.dimensions = model.slice_dimensions
        self.top_k = {
            d: max(s.top_k for s in model.slices if d in s.dimensions) for d in self.dimensions
        }
        self.counts: dict[str, dict[str, int]] = {d: {} for d in self.dimensions}

    def fold(self, values: dict[str, tuple[np.ndarray, list[str]]]) -> tuple[np.ndarray, list[Key]]:
        """Segment key per row, as a code per row into the rows' distinct keys (in the
        order rows first show them); updates the frequency counters first. The rows come
        as (code per row, text per code) on each dimension (:func:`dimension_values`): a
        batch spanning many models codes its texts once and each model folds its rows'
        codes. Only distinct values touch Python."""
        n = next(iter(values.values()))[0].shape[0] if values else 0
        combined = np.zeros(n, np.int64)
        distinct: list[list[str]] = []  # per dimension: folded values by code
        for d in self.dimensions:
            codes, texts = values[d]
            # the distinct values in first-seen order, as counting row by row would give
            uniq, first, inverse, count = np.unique(
                codes, return_index=True, return_inverse=True, return_counts=True
            )
            seen = np.argsort(first, kind="stable")
            counts = self.counts[d]
            names = [texts[c] for c in uniq.tolist()]
            for i, c in zip(seen.tolist(), count[seen].tolist(), strict=True):
                counts[names[i]] = counts.get(names[i], 0) + c
            k = self.top_k[d]
            # stable sorts by count only: among equal counts the first seen stays ahead
            if len(counts) > 10 * k:
                keep = sorted(counts.items(), key=lambda kv: -kv[1])[: 5 * k]
                self.counts[d] = counts = dict(keep)
            top = {v for v, _ in sorted(counts.items(), key=lambda kv: -kv[1])[:k]}
            top.add(MISSING)
            folded: dict[str, int] = {}
            code_of = np.empty(uniq.shape[0], np.int64)
            for i in seen.tolist():
                v = names[i]
                code_of[i] = folded.setdefault(v if v in top else OTHER, len(folded))
            combined = combined * len(folded) + code_of[inverse.reshape(-1)]
            distinct.append(list(folded))
        if len(distinct) == 1:  # codes already number the values as rows first show them
            return combined, [(v,) for v in distinct[0]]
        codes, firsts = pd.factorize(combined)
        keys = []
        for c in firsts.tolist():
            parts = []
            for names in reversed(distinct):
                c, r = divmod(c, len(names))
                parts.append(names[r])
            keys.append(tuple(reversed(parts)))
        return codes.astype(np.int64, copy=False), keys

    def state(self) -> dict[str, dict[str, int]]:
        return {d: dict(c) for d, c in self.counts.items()}

    def load(self, state: dict[str, dict[str, int]]) -> None:
        for d in self.dimensions:
            self.counts[d] = {str(k): int(v) for k, v in state.get(d, {}).items()}


def sliced_dimensions(models: Sequence[ModelSpec]) -> tuple[str, ...]:
    """Every dimension some model slices by, each once: all of the segments object the
    engine reads (through :func:`dimension_values`)."""
    return tuple(dict.fromkeys(d for m in models if m.slices for d in m.slice_dimensions))


def dimension_values(
    segments: Sequence[dict[str, Any] | None], d: str
) -> tuple[np.ndarray, list[str]]:
    """Dimension ``d`` of every row as (a code per row, the text of each code), numbered
    as rows first show them; of a ``Coded`` column, only its distinct objects are read."""
    if isinstance(segments, Coded):
        distinct = Coded(_texts(segments.values, d), segments.codes)
        codes, uniq = distinct.factorized()  # (two objects may share a text: coded again)
        texts, first = pd.factorize(np.asarray(uniq, dtype=object))
        if len(first) < len(uniq):
            codes = texts[codes]
            uniq = first.tolist()
    else:
        codes, uniq = factorize(_texts(segments, d))
    return codes.astype(np.int64, copy=False), [str(v) for v in uniq]


def _texts(segments: Sequence[dict[str, Any] | None], d: str) -> list[str]:
    """The text of dimension ``d`` of every row (``MISSING`` when absent)."""
    if set(map(type, segments)) == {dict}:
        raw = list(map(operator.methodcaller("get", d), segments))
    else:
        raw = [s.get(d) if isinstance(s, dict) else None for s in segments]
    types = set(map(type, raw))
    if types == {str}:  # every row has the dimension, as text: its own text
        return raw
    if types <= {str, type(None)}:  # the usual case: one _text per value
        text_of = {v: _text(v) for v in set(raw)}
        return list(map(text_of.__getitem__, raw))
    return list(map(_text, raw))


def _text(value: Any) -> str:
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return OTHER  # no slice of its own (and str() of deep nesting would recurse)
    return str(value)
