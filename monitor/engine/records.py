"""Columnar record batches: the only shape in which data enters the engine.

Decoding happens once at the edge (``monitor.ingest``); from there on a batch is a
handful of numpy arrays, so joining and accumulating are vectorized rather than
per-event Python. Prediction ids are carried as 64-bit hashes (``hash_ids``), which is
what lets a million pending predictions fit in tens of bytes each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "ID_HASH",
    "LabelBatch",
    "PredictionBatch",
    "Rejection",
    "hash_ids",
]

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
    version: list[str]
    score: np.ndarray  # float64; P(positive) for binary tasks, NaN when absent
    decision: np.ndarray  # int8 class index (1 = positive for binary)
    features: list[dict[str, Any] | None] = field(default_factory=list)  # when drift wants them
    segments: list[dict[str, Any] | None] = field(default_factory=list)  # when slices want them
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

    def take(self, rows: np.ndarray) -> PredictionBatch:
        """The batch of ``rows`` (indices, in order)."""
        picked = rows.tolist()

        def some(xs: list[Any] | None) -> list[Any] | None:
            return xs if not xs else [xs[i] for i in picked]

        def arr(x: np.ndarray | None) -> np.ndarray | None:
            return None if x is None else x[rows]

        return PredictionBatch(
            self.keys[rows], self.ts_ms[rows], self.model[rows], [self.version[i] for i in picked],
            self.score[rows], self.decision[rows], some(self.features) or [],
            some(self.segments) or [], arr(self.proba), arr(self.lower), arr(self.upper),
            arr(self.numeric), self.numeric_names, some(self.ranked), arr(self.numeric_cells),
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
    label: list[str]
    value: np.ndarray | None = None  # float64 numeric value of each label, NaN if none
    # ranking labels: each row's {item: grade} (None for class / number labels); ``value``
    # then holds the map's digest (monitor.ingest.ranking.relevance_digest)
    relevance: list[dict[str, float] | None] | None = None

    def __len__(self) -> int:
        return int(self.keys.shape[0])

    def take(self, rows: np.ndarray) -> LabelBatch:
        """The batch of ``rows`` (indices, in order)."""
        picked = rows.tolist()
        relevance = None if self.relevance is None else [self.relevance[i] for i in picked]
        value = None if self.value is None else self.value[rows]
        return LabelBatch(
            self.keys[rows], self.ts_ms[rows], [self.label[i] for i in picked], value, relevance
        )

    @staticmethod
    def empty() -> LabelBatch:
        return LabelBatch(np.empty(0, np.uint64), np.empty(0, np.int64), [])
