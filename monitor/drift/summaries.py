"""The live side of drift tests: one cell index per event, counted into a fixed-size vector.

The engine keeps, per time bucket and feature, a dense count vector of ``n_cells(ref)``
integers — its size is set by the reference, not by traffic — and a window is the sum of
its buckets' vectors. Because every event lands in exactly one cell, counting commutes with
concatenation: ``bincount(cells(A)) + bincount(cells(B)) == bincount(cells(A ∪ B))``, which
is what makes the statistics mergeable across buckets and instances.

Cell layouts (index 0 is always *missing*):

- numeric, ``B`` bins: ``0`` missing (NaN), ``1`` underflow (below the reference min),
  ``2 .. B+1`` reference bins ``[e[i-1], e[i])`` (the last one closed), ``B+2`` overflow
  (above the reference max) — ``B + 3`` cells;
- categorical, ``K`` categories: ``0`` missing (``None``), ``1 .. K`` reference categories
  (including ``"__other__"`` if the reference folded rare values), ``K+1`` unseen — ``K + 2``
  cells; with a reference sketch of S buckets, S more cells ``K+2 .. K+S+1`` receive the
  folded values by hash bucket (the ``__other__`` cell then stays empty).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from monitor.drift.reference import OTHER, CategoricalReference, NumericReference, sketch_bucket

__all__ = [
    "MAX_UNSEEN_NAMES",
    "categorical_cells",
    "count_cells",
    "first_unseen",
    "n_cells",
    "numeric_cells",
    "reference_cells",
]

MAX_UNSEEN_NAMES = 10
"""How many unseen category names a window keeps for reporting (memory stays bounded)."""

MISSING_CELL = 0
UNDERFLOW_CELL = 1


def n_cells(ref: NumericReference | CategoricalReference) -> int:
    """Length of a live count vector for ``ref``: ``B + 3`` (numeric) or ``K + 2 + S``."""
    if isinstance(ref, NumericReference):
        return ref.bins + 3
    return len(ref.categories) + 2 + ref.sketch_cells


def reference_cells(ref: CategoricalReference) -> np.ndarray:
    """The reference's counts over the live cells after *missing*: categories, unseen (0),
    then the sketch buckets (with the ``__other__`` count moved into them)."""
    counts = np.asarray(ref.counts, dtype=np.int64).copy()
    if ref.sketch is None:
        return np.append(counts, 0)
    counts[ref.categories.index(OTHER)] = 0
    return np.concatenate([counts, [0], ref.sketch])


def numeric_cells(ref: NumericReference, values: np.ndarray | Sequence[float]) -> np.ndarray:
    """Cell index (int64) of every value; NaN is missing, ±inf is out of range."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1:
        raise ValueError(f"values must be 1-D, got shape {v.shape}")
    edges = ref.edges
    b = ref.bins
    lo, hi = float(edges[0]), float(edges[-1])
    nan = np.isnan(v)
    clipped = np.clip(v, lo, hi)
    clipped[nan] = lo
    # reference bins 2 .. B+1 (a value on the last edge is in the last, closed bin)
    cells = np.minimum(_count_at_or_below(edges, clipped), b) + 1
    cells[v < lo] = UNDERFLOW_CELL
    cells[v > hi] = b + 2
    cells[nan] = MISSING_CELL
    return cells


# grid cells per reference bin of the bin lookup; at most this many edges in one cell
_GRID_PER_BIN = 8
_GRID_MAX_EDGES = 2
_grids: dict[int, tuple[np.ndarray, tuple[float, float, np.ndarray, np.ndarray] | None]] = {}


def _count_at_or_below(edges: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``np.searchsorted(edges, v, "right")`` (int64) for finite ``v`` in the edges' range.

    A value's cell on a uniform grid over the edges gives the answer to within an edge
    or two (precomputed per cell); a step or two of vectorized correction, then a check
    that sends any value left unsettled to ``searchsorted``, keep it exact. Binary search
    costs ~log2(B) unpredictable branches per value — most of a drift batch's time."""
    grid = _grid(edges)
    if grid is None:
        return np.searchsorted(edges, v, side="right").astype(np.int64)
    lo, scale, first, padded = grid  # padded[i] = edges[i - 1], ±inf beyond
    cell = ((v - lo) * scale).astype(np.int64)
    np.clip(cell, 0, first.shape[0] - 1, out=cell)
    i = first[cell]
    for _ in range(_GRID_MAX_EDGES):
        up = padded[i + 1] <= v  # edges[i] <= v: one more edge at or below
        if not up.any():
            break
        i += up
    wrong = (padded[i + 1] <= v) | (padded[i] > v)  # (floating-point rounding at a cell end)
    if wrong.any():
        i[wrong] = np.searchsorted(edges, v[wrong], side="right")
    return i


def _grid(edges: np.ndarray) -> tuple[float, float, np.ndarray, np.ndarray] | None:
    """(start, cells per unit, edges at or below each cell's start, padded edges); None
    when edges crowd a cell or span nothing. Cached per read-only edges array (a
    reference's), which the cache holds, so its id stays its own."""
    hit = _grids.get(id(edges))
    if hit is not None and hit[0] is edges:
        return hit[1]
    lo, hi = float(edges[0]), float(edges[-1])
    n = _GRID_PER_BIN * (edges.shape[0] - 1)
    scale = n / (hi - lo) if hi > lo else 0.0
    grid = None
    if np.isfinite(scale) and scale > 0:
        starts = lo + np.arange(n + 1) / scale
        first = np.searchsorted(edges, starts, side="right").astype(np.int64)
        if int(np.diff(first).max(initial=0)) <= _GRID_MAX_EDGES:
            padded = np.concatenate([[-np.inf], edges, [np.inf]])
            grid = (lo, scale, first[:n], padded)
    if not edges.flags.writeable:
        if len(_grids) >= 4096:
            _grids.clear()
        _grids[id(edges)] = (edges, grid)
    return grid


def categorical_cells(
    ref: CategoricalReference, values: Sequence[str | None]
) -> tuple[np.ndarray, list[str]]:
    """Cell index (int64) of every value, and the distinct unseen values in first-seen order.

    Values are compared as strings. A value folded into ``"__other__"`` by the reference
    counts there; a value the reference never saw is *unseen* (cell ``K + 1``).
    """
    k = len(ref.categories)
    index: dict[str, int] = {c: i + 1 for i, c in enumerate(ref.categories)}
    if OTHER in index:
        other = index[OTHER]
        if ref.sketch is None:
            index.update(dict.fromkeys(ref.folded, other))
        else:
            cells = ref.sketch_cells
            index.update({v: k + 2 + sketch_bucket(v, cells) for v in ref.folded})
    # one dictionary lookup per *distinct* present value, then a vectorized gather
    is_missing = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
    cells = np.zeros(len(values), dtype=np.int64)
    present = np.asarray([str(v) for v in values if v is not None], dtype=object)
    if present.size == 0:
        return cells, []
    uniq, first, inverse = np.unique(present, return_index=True, return_inverse=True)
    codes = np.fromiter((index.get(u, k + 1) for u in uniq), dtype=np.int64, count=uniq.size)
    cells[~is_missing] = codes[inverse.reshape(-1)]
    unseen_mask = codes == k + 1
    order = np.argsort(first[unseen_mask], kind="stable")
    unseen = [str(u) for u in uniq[unseen_mask][order]]
    return cells, unseen


def count_cells(ref: NumericReference | CategoricalReference, cells: np.ndarray) -> np.ndarray:
    """Dense count vector (int64, length ``n_cells(ref)``) of a batch of cell indices."""
    return np.bincount(np.asarray(cells, dtype=np.int64), minlength=n_cells(ref))


def first_unseen(*names: Iterable[str], limit: int = MAX_UNSEEN_NAMES) -> tuple[str, ...]:
    """Merge unseen-name lists (earliest bucket first), keeping the first ``limit`` distinct."""
    out: dict[str, None] = {}
    for group in names:
        for name in group:
            if len(out) >= limit:
                return tuple(out)
            out.setdefault(name, None)
    return tuple(out)
