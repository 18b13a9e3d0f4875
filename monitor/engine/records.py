"""Columnar record batches: the only shape in which data enters the engine.

Decoding happens once at the edge (``monitor.ingest``); from there on a batch is a
handful of numpy arrays, so joining and accumulating are vectorized rather than
per-event Python. Prediction ids are carried as 64-bit hashes (``hash_ids``), which is
what lets a million pending predictions fit in tens of bytes each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, Generic, TypeVar, overload

import numpy as np
import pandas as pd

__all__ = [
    "ID_HASH",
    "Coded",
    "LabelBatch",
    "PredictionBatch",
    "Rejection",
    "concat_texts",
    "factorize",
    "hash_ids",
]

T = TypeVar("T")
Rows = np.ndarray | slice  # row indices in order, or a contiguous range of rows

# Recorded in checkpoints: a checkpoint written with another id hash is refused.
ID_HASH = "pandas-siphash24-0123456789123456"


def hash_ids(ids: Sequence[str]) -> np.ndarray:
    """Stable 64-bit hashes of prediction ids (SipHash-2-4 with pandas' fixed key).

    Stable across processes and restarts, unlike ``hash()``. The chance that two of a
    million live ids collide is about n²/2⁶⁵ ≈ 3·10⁻⁸ (birthday bound); a collision
    would make the second prediction count as a duplicate of the first.
    """
    if len(ids) == 0:
        return np.empty(0, dtype=np.uint64)
    arr = np.empty(len(ids), dtype=object)
    arr[:] = ids
    return pd.util.hash_array(arr, categorize=False).astype(np.uint64, copy=False)


class Coded(Sequence[T], Generic[T]):
    """A repetitive text column (versions, segments, labels) as its distinct values and
    a code per row, read-only.

    Why: a batch holds a handful of versions, countries or labels over thousands of rows;
    as a list every row is a Python object that each step's ``take`` copies and the
    engine hashes again to code it (``factorize``). Coded, a ``take`` is one integer
    gather and coding is a hash of small integers. Replay's decoding processes send these
    columns coded (ingest/file_feed.py)."""

    __slots__ = ("codes", "values")

    def __init__(self, values: Sequence[T], codes: np.ndarray) -> None:
        self.values, self.codes = values, codes

    def __len__(self) -> int:
        return int(self.codes.shape[0])

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> list[T]: ...
    def __getitem__(self, i: int | slice) -> T | list[T]:
        if isinstance(i, slice):
            return list(map(self.values.__getitem__, self.codes[i].tolist()))
        return self.values[int(self.codes[i])]

    def take(self, rows: Rows) -> Coded[T]:
        return Coded(self.values, self.codes[rows])

    def factorized(self) -> tuple[np.ndarray, list[T]]:
        """``pd.factorize`` of the rows' values: codes numbering them as rows first show
        them, and the values in that order (the values are distinct)."""
        codes, firsts = pd.factorize(self.codes)
        return codes, [self.values[c] for c in firsts.tolist()]


def concat_texts(columns: Sequence[Sequence[T]]) -> Sequence[T]:
    """Text columns one after the other; coded when every one is (their distinct texts
    merged, first seen first), else a list."""
    if not all(isinstance(c, Coded) for c in columns):
        return list(chain.from_iterable(c[:] for c in columns))
    index: dict[T, int] = {}
    codes = []
    for c in columns:
        assert isinstance(c, Coded)
        remap = np.array([index.setdefault(t, len(index)) for t in c.values], np.intp)
        codes.append(remap[c.codes])
    return Coded(list(index), np.concatenate(codes))


def factorize(column: Sequence[Any]) -> tuple[np.ndarray, list[Any]]:
    """(a code per row, the distinct values) numbered as rows first show them, as
    ``pd.factorize`` gives them; a ``Coded`` column is not hashed again row by row."""
    if isinstance(column, Coded):
        return column.factorized()
    codes, uniq = pd.factorize(np.asarray(column, dtype=object))
    return codes, uniq.tolist()


def _rows(column: Sequence[T], rows: Rows, picked: list[int] | None) -> Sequence[T]:
    """``column``'s rows: a coded column stays coded, a list is sliced or picked."""
    if isinstance(column, Coded):
        return column.take(rows)
    if picked is None:
        assert isinstance(rows, slice)
        return list(column[rows])
    return [column[i] for i in picked]


@dataclass(frozen=True, slots=True)
class Rejection:
    """A record that did not pass decoding or validation, with its original bytes."""

    reason: str
    detail: str
    raw: bytes | None
    topic: str = ""
    partition: int = -1
    offset: int = -1


@dataclass(frozen=True, slots=True)
class PredictionBatch:
    """Decoded, valid predictions. ``model`` indexes the configured models."""

    keys: np.ndarray  # uint64 id hashes
    ts_ms: np.ndarray  # int64 prediction time, epoch milliseconds
    model: np.ndarray  # int16 index into the configured models
    version: Sequence[str]  # a list, or Coded
    score: np.ndarray  # float64; P(positive) for binary tasks, NaN when absent
    decision: np.ndarray  # int8 class index (1 = positive for binary)
    features: list[dict[str, Any] | None] = field(default_factory=list)  # when drift wants them
    # when slices want them; a list, or Coded
    segments: Sequence[dict[str, Any] | None] = field(default_factory=list)
    # multiclass: (n, K) probabilities in class order, NaN rows when only a decision came;
    # None without multiclass models. Regression: interval bounds, NaN when absent.
    proba: np.ndarray | None = None
    lower: np.ndarray | None = None
    upper: np.ndarray | None = None
    # numeric drift features as an (n, F) float64 block, decoded once (NaN: absent or
    # not a number), column j holding ``numeric_names[j]``; None when not asked for
    numeric: np.ndarray | None = None
    numeric_names: tuple[str, ...] = ()
    # ranking: each row's ranked list (monitor.stats.ranking.RankedList; None for rows of
    # other tasks); None without ranking rows in the batch
    ranked: list[Any] | None = None
    # the numeric block's drift cells, (n, F) int32, computed ahead of applying (replay's
    # decoding processes) against the fixed references named in ``cells_of`` ((model
    # index, reference fingerprint) pairs; rows of other models hold -1); None: not done
    numeric_cells: np.ndarray | None = None
    cells_of: tuple[tuple[int, str], ...] = ()

    def __len__(self) -> int:
        return int(self.keys.shape[0])

    def take(self, rows: Rows) -> PredictionBatch:
        """The batch of ``rows`` (indices, in order; a slice of contiguous rows takes
        views of the arrays, without copying them)."""
        picked = None if isinstance(rows, slice) else rows.tolist()

        def some(xs: Sequence[Any] | None) -> Sequence[Any] | None:
            return xs if not xs else _rows(xs, rows, picked)

        def arr(x: np.ndarray | None) -> np.ndarray | None:
            return None if x is None else x[rows]

        return PredictionBatch(
            self.keys[rows], self.ts_ms[rows], self.model[rows], _rows(self.version, rows, picked),
            self.score[rows], self.decision[rows], some(self.features) or [],  # type: ignore[arg-type]
            some(self.segments) or [], arr(self.proba), arr(self.lower), arr(self.upper),
            arr(self.numeric), self.numeric_names, some(self.ranked), arr(self.numeric_cells),  # type: ignore[arg-type]
            self.cells_of,
        )  # fmt: skip

    @staticmethod
    def empty() -> PredictionBatch:
        return PredictionBatch(
            np.empty(0, np.uint64),
            np.empty(0, np.int64),
            np.empty(0, np.int16),
            [],
            np.empty(0, np.float64),
            np.empty(0, np.int8),
        )


@dataclass(frozen=True, slots=True)
class LabelBatch:
    """Decoded, valid labels. ``label`` is the canonical label text ("1", "fraud")."""

    keys: np.ndarray  # uint64 id hashes
    ts_ms: np.ndarray  # int64 label time, epoch milliseconds
    label: Sequence[str]  # a list, or Coded
    value: np.ndarray | None = None  # float64 numeric value of each label, NaN if none
    # ranking labels: each row's {item: grade} (None for class / number labels); ``value``
    # then holds the map's digest (monitor.ingest.ranking.relevance_digest)
    relevance: list[dict[str, float] | None] | None = None

    def __len__(self) -> int:
        return int(self.keys.shape[0])

    def take(self, rows: Rows) -> LabelBatch:
        """The batch of ``rows`` (indices, in order; or a slice of contiguous rows)."""
        picked = None if isinstance(rows, slice) else rows.tolist()
        relevance = None if self.relevance is None else list(_rows(self.relevance, rows, picked))
        value = None if self.value is None else self.value[rows]
        return LabelBatch(
            self.keys[rows], self.ts_ms[rows], _rows(self.label, rows, picked), value, relevance
        )

    @staticmethod
    def empty() -> LabelBatch:
        return LabelBatch(np.empty(0, np.uint64), np.empty(0, np.int64), [])
