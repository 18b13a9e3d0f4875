"""Slice folding from coded values (one coding per batch shared by every model) against
the definition: count the batch's values in first-seen order, keep the top K by count
(first seen ahead among equal counts, the counter halved past 10·K), fold the rest."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.engine.models import ModelSpec, SliceSpec
from monitor.engine.segments import MISSING, OTHER, SegmentFolder, _text, dimension_values


class _Reference:
    """The folding rule row by row, in plain Python."""

    def __init__(self, dims: tuple[str, ...], k: int) -> None:
        self.dims, self.k = dims, k
        self.counts: dict[str, dict[str, int]] = {d: {} for d in dims}

    def fold(self, segments: list[dict[str, Any] | None]) -> list[tuple[str, ...]]:
        folded: dict[str, list[str]] = {}
        for d in self.dims:
            values = [_text(s.get(d)) if isinstance(s, dict) else MISSING for s in segments]
            counts = self.counts[d]
            for v, c in Counter(values).items():
                counts[v] = counts.get(v, 0) + c
            if len(counts) > 10 * self.k:
                counts = dict(sorted(counts.items(), key=lambda kv: -kv[1])[: 5 * self.k])
                self.counts[d] = counts
            top = {v for v, _ in sorted(counts.items(), key=lambda kv: -kv[1])[: self.k]}
            folded[d] = [v if v in top or v == MISSING else OTHER for v in values]
        return [tuple(folded[d][i] for d in self.dims) for i in range(len(segments))]


_value = st.one_of(
    st.none(), st.sampled_from(["a", "b", "c", "d", "e", "f", "g"]), st.integers(0, 30),
    st.booleans(), st.just({"x": 1}),
)  # fmt: skip
_row = st.one_of(st.none(), st.fixed_dictionaries({}, optional={"u": _value, "v": _value}))


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(
        st.lists(st.tuples(_row, st.booleans()), min_size=1, max_size=40), min_size=1, max_size=6
    ),
    k=st.integers(1, 3),
    two=st.booleans(),
)
def test_folding_coded_values_matches_the_definition(
    batches: list[list[tuple[dict[str, Any] | None, bool]]], k: int, two: bool
) -> None:
    """Each batch mixes this model's rows with another model's (``False``): the batch is
    coded once, this model folds its rows' codes."""
    dims = ("u", "v") if two else ("u",)
    folder = SegmentFolder(ModelSpec("m", slices=(SliceSpec(dims, top_k=k),)))
    ref = _Reference(dims, k)
    for batch in batches:
        everyone = [row for row, _ in batch]
        mine = np.array([i for i, (_, ours) in enumerate(batch) if ours], np.int64)
        if mine.shape[0] == 0:
            continue
        coded = {d: dimension_values(everyone, d) for d in dims}
        codes, keys = folder.fold({d: (c[mine], t) for d, (c, t) in coded.items()})
        segments = [everyone[i] for i in mine.tolist()]
        assert [keys[c] for c in codes.tolist()] == ref.fold(segments)
        # codes number the keys as the rows first show them
        firsts = list(dict.fromkeys(codes.tolist()))
        assert firsts == list(range(len(keys)))
        assert folder.state() == ref.counts
        assert list(folder.state()["u"]) == list(ref.counts["u"])  # first-seen order kept
