"""Event-time buckets: per (group, bucket) sufficient statistics that merge by addition.

A bucket is the atom of time (e.g. one minute of *prediction* time); a window is the
sum of its buckets, so a sliding window costs O(buckets), never O(events), and late
labels simply add into old buckets. Statistics live in dense arrays (one row per
(group, bucket)) and are updated for a whole batch at once with ``np.add.at``.

Besides the fixed columns (predicted, labeled, confusion counts) a store carries named
count matrices registered by the engine — e.g. one drift histogram layout per model —
that share the row index and every merge, retention and checkpoint rule.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .windows import Tiers

__all__ = ["BucketStore"]

_BUCKET_BITS = 36  # bucket index < 2**36 (over 2000 years of 1 s buckets)
_GROUP_SHIFT = np.int64(_BUCKET_BITS + 2)  # then 2 bits of tier (0 base, 1 hour, 2 day)
_MIN_ROWS = 8
_FIXED = {"group": ((), np.int32), "bucket": ((), np.int64), "tier": ((), np.int8),
          "predicted": ((), np.int64), "labeled": ((), np.int64),
          "confusion": ((4,), np.int64)}  # fmt: skip


class BucketStore:
    """Rows of ``predicted``, ``labeled``, binary confusion counts and registered count
    matrices per (group, bucket)."""

    def __init__(
        self, width_ms: int, matrices: Mapping[str, int | tuple[int, type]] | None = None
    ) -> None:
        """``matrices``: name -> width (int32 counts) or (width, dtype)."""
        if width_ms <= 0:
            raise ValueError("bucket width must be positive")
        self.width_ms = int(width_ms)
        self._shapes: dict[str, tuple[tuple[int, ...], type]] = dict(_FIXED)
        for name, spec in (matrices or {}).items():
            width, dtype = spec if isinstance(spec, tuple) else (spec, np.int32)
            self._shapes[f"m.{name}"] = ((int(width),), dtype)
        self._index: dict[int, int] = {}
        self.tiers = Tiers.for_width(self.width_ms)  # moved forward by the engine (roll_up)
        self._n = 0
        self._cap = _MIN_ROWS  # grows by doubling: an idle store stays small
        self._cols = {k: np.zeros((self._cap, *sh), dt) for k, (sh, dt) in self._shapes.items()}

    def __len__(self) -> int:
        return self._n

    @property
    def group(self) -> np.ndarray:
        return self._cols["group"][: self._n]

    @property
    def bucket(self) -> np.ndarray:
        return self._cols["bucket"][: self._n]

    def add_matrix(self, name: str, width: int, dtype: type = np.int32) -> None:
        """Register a count matrix after start (a live drift reference became ready)."""
        key = f"m.{name}"
        if key in self._shapes:
            return
        self._shapes[key] = ((int(width),), dtype)
        self._cols[key] = np.zeros((self._cap, int(width)), dtype)

    def matrix(self, name: str) -> np.ndarray:
        """Rows in use of matrix ``name`` (a view: in-place adds reach the store)."""
        return self._cols[f"m.{name}"][: self._n]

    def bucket_of(self, ts_ms: np.ndarray) -> np.ndarray:
        return np.floor_divide(np.asarray(ts_ms, np.int64), self.width_ms)

    def rows_for(self, group: np.ndarray, ts_ms: np.ndarray) -> np.ndarray:
        """Row per event, creating rows for (group, bucket) pairs not seen before; an
        event in a rolled-up period goes to its hour or day row."""
        bidx = self.bucket_of(ts_ms)
        combined = (np.asarray(group, np.int64) << _GROUP_SHIFT) | self._tiered(bidx)
        uniq, inverse = np.unique(combined, return_inverse=True)
        urows = np.empty(uniq.shape[0], np.int64)
        index = self._index
        for i, key in enumerate(uniq.tolist()):
            row = index.get(key)
            if row is None:
                row = self._new_row(key)
            urows[i] = row
        return urows[inverse.reshape(-1)]

    def _tiered(self, bidx: np.ndarray) -> np.ndarray:
        """(tier << 36) | start of the row each base bucket index belongs to."""
        t = self.tiers
        if not t.per_hour or not len(bidx) or int(bidx.min()) >= t.hour_from:
            return bidx
        tier = np.where(bidx >= t.hour_from, 0, np.where(bidx < t.day_from, 2, 1))
        span = np.array([1, t.per_hour, t.per_day], np.int64)[tier]
        return (tier.astype(np.int64) << _BUCKET_BITS) | (bidx - bidx % span)

    def _new_row(self, key: int) -> int:
        if self._n == self._cap:
            self._grow(self._cap * 2)
        row = self._n
        self._n += 1
        self._index[key] = row
        self._cols["group"][row] = key >> int(_GROUP_SHIFT)
        self._cols["bucket"][row] = key & ((1 << _BUCKET_BITS) - 1)
        self._cols["tier"][row] = (key >> _BUCKET_BITS) & 3
        return row

    def span(self) -> np.ndarray:
        """Base buckets each row in use covers (1, or an hour's or a day's worth)."""
        t = self.tiers
        return np.array([1, t.per_hour or 1, t.per_day or 1], np.int64)[self.tier]

    @property
    def tier(self) -> np.ndarray:
        return self._cols["tier"][: self._n]

    def roll_up(self, tiers: Tiers) -> int:
        """Adopt ``tiers`` and merge rows now older than their tier's start into hour or
        day rows (every column adds); returns rows merged away.

        Incremental: only the rows that change tier are touched — each is added into the
        existing coarse row of its (group, hour/day), or becomes that row — so the hourly
        roll-up costs the rows that move plus one in-place compaction, not a copy."""
        self.tiers = tiers
        n = self._n
        if not tiers.per_hour or n == 0:
            return 0
        bucket, tier = self.bucket, self.tier
        moving = ((tier == 0) & (bucket < tiers.hour_from)) | (
            (tier == 1) & (bucket < tiers.day_from)
        )
        src = np.flatnonzero(moving)
        if src.shape[0] == 0:
            return 0
        keys = (self.group[src].astype(np.int64) << _GROUP_SHIFT) | self._tiered(bucket[src])
        uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        dest = np.empty(uniq.shape[0], np.int64)
        for i, key in enumerate(uniq.tolist()):
            row = self._index.get(key)
            dest[i] = src[first[i]] if row is None else row  # else: the first mover
        to = dest[inverse.reshape(-1)]
        add = src != to
        if add.any():  # sum the movers per destination (sorted reduceat), then add once
            order = np.argsort(to[add], kind="stable")
            movers, targets = src[add][order], to[add][order]
            starts = np.flatnonzero(np.r_[True, targets[1:] != targets[:-1]])
            for name, col in self._cols.items():
                if name not in ("group", "bucket", "tier"):
                    col[targets[starts]] += np.add.reduceat(col[movers], starts, axis=0)
        # movers that became their coarse row take its key
        becomes = np.flatnonzero(dest == src[first])
        for i in becomes.tolist():
            row = int(dest[i])
            key = int(uniq[i])
            old = (
                (int(self._cols["group"][row]) << int(_GROUP_SHIFT))
                | (int(self._cols["tier"][row]) << _BUCKET_BITS)
                | int(self._cols["bucket"][row])
            )
            del self._index[old]
            self._index[key] = row
            self._cols["bucket"][row] = key & ((1 << _BUCKET_BITS) - 1)
            self._cols["tier"][row] = (key >> _BUCKET_BITS) & 3
        gone = src[add]
        if gone.shape[0]:
            keep = np.ones(n, bool)
            keep[gone] = False
            kept = np.flatnonzero(keep)
            for col in self._cols.values():
                col[: kept.shape[0]] = col[kept]
                col[kept.shape[0] : n] = 0  # freed rows must be zero when reused
            self._n = int(kept.shape[0])
            index_keys = (
                (self.group.astype(np.int64) << _GROUP_SHIFT)
                | (self.tier.astype(np.int64) << _BUCKET_BITS)
                | self.bucket
            )
            self._index = {int(k): i for i, k in enumerate(index_keys.tolist())}
            if self._n * 4 < self._cap and self._cap > _MIN_ROWS:  # give memory back
                self._shrink(max(_MIN_ROWS, 2 * self._n))
        return int(gone.shape[0])

    def _shrink(self, cap: int) -> None:
        self._cols = {name: col[:cap].copy() for name, col in self._cols.items()}
        self._cap = cap

    def _grow(self, cap: int) -> None:
        for name, old in self._cols.items():
            new = np.zeros((cap, *old.shape[1:]), old.dtype)
            new[: self._n] = old[: self._n]
            self._cols[name] = new
        self._cap = cap

    def add_predictions(self, group: np.ndarray, ts_ms: np.ndarray) -> None:
        if len(group):
            rows = self.rows_for(group, ts_ms)  # may grow the arrays: index them after
            np.add.at(self._cols["predicted"], rows, 1)

    def add_joined(
        self, group: np.ndarray, ts_ms: np.ndarray, y_true: np.ndarray, y_pred: np.ndarray
    ) -> None:
        if not len(group):
            return
        rows = self.rows_for(group, ts_ms)
        np.add.at(self._cols["labeled"], rows, 1)
        cells = 2 * np.asarray(y_true, np.int64) + np.asarray(y_pred, np.int64)
        np.add.at(self._cols["confusion"], (rows, cells), 1)

    def add_labeled(self, group: np.ndarray, ts_ms: np.ndarray) -> None:
        """Count joins of models whose statistics live elsewhere (multiclass, regression)."""
        if len(group):
            rows = self.rows_for(group, ts_ms)
            np.add.at(self._cols["labeled"], rows, 1)

    def add_cells(self, name: str, rows: np.ndarray, cells: np.ndarray) -> None:
        """Count 1 at ``(rows[i], cells[i])`` of matrix ``name`` (vectorized): one
        bincount over the span of rows the batch touches (a batch covers a few recent
        buckets), several times faster than ``np.add.at``."""
        if not rows.shape[0]:
            return
        matrix = self._cols[f"m.{name}"]
        lo, hi = int(rows.min()), int(rows.max()) + 1
        width = matrix.shape[1]
        if (hi - lo) * width > 4 * rows.shape[0]:  # rows far apart: a sparse update
            np.add.at(matrix, (rows, cells), 1)
            return
        flat = (rows - lo) * width + cells
        counts = np.bincount(flat, minlength=(hi - lo) * width).reshape(hi - lo, width)
        matrix[lo:hi] += counts.astype(matrix.dtype, copy=False)

    def nbytes(self) -> int:
        """Bytes allocated for the columns (capacity included)."""
        return int(sum(a.nbytes for a in self._cols.values()))

    def view(self) -> dict[str, np.ndarray]:
        """Read-only arrays over the rows in use (matrices under ``m.<name>``)."""
        return {k: v[: self._n] for k, v in self._cols.items()}

    def drop_before(self, bucket_idx: int) -> int:
        """Forget rows that end before ``bucket_idx`` (retention); returns rows dropped."""
        keep = self.bucket + self.span() > bucket_idx
        dropped = int(self._n - np.count_nonzero(keep))
        if dropped:
            self.load({k: v[keep] for k, v in self.view().items()})
        return dropped

    def state(self) -> dict[str, np.ndarray]:
        return {k: v.copy() for k, v in self.view().items()}

    def load(self, state: Mapping[str, np.ndarray]) -> None:
        n = np.asarray(state["group"]).shape[0]
        cols = {}
        for name, (shape, dtype) in self._shapes.items():
            if name not in state:
                if name == "tier":  # state written before time tiers: all base rows
                    cols[name] = np.zeros(n, dtype)
                    continue
                if name.startswith("m."):
                    cols[name] = np.zeros((n, *shape), dtype)  # a matrix added since
                    continue
                raise ValueError(f"bucket state lacks {name!r}")
            arr = np.asarray(state[name], dtype)
            if name.startswith("m.") and arr.shape != (n, *shape):
                cols[name] = np.zeros((n, *shape), dtype)  # layout changed: history dropped
                continue
            if arr.shape != (n, *shape):
                raise ValueError(f"bucket state {name!r} has shape {arr.shape}, not {(n, *shape)}")
            if name in ("group", "bucket"):
                pass
            elif name == "tier":
                if ((arr < 0) | (arr > 2)).any():
                    raise ValueError("bucket state holds unknown tiers")
            elif arr.dtype.kind == "f":  # sums (regression errors may be negative)
                if not np.isfinite(arr).all():
                    raise ValueError(f"bucket state {name!r} holds non-finite sums")
            elif (arr < 0).any():
                raise ValueError(f"bucket state {name!r} holds negative counts")
            cols[name] = arr
        self._cap = max(_MIN_ROWS, n)
        self._n = n
        self._cols = {}
        for name, arr in cols.items():
            full = np.zeros((self._cap, *arr.shape[1:]), arr.dtype)
            full[:n] = arr
            self._cols[name] = full
        keys = (
            (self.group.astype(np.int64) << _GROUP_SHIFT)
            | (self.tier.astype(np.int64) << _BUCKET_BITS)
            | self.bucket
        )
        self._index = {int(k): i for i, k in enumerate(keys.tolist())}
        if len(self._index) != n:
            raise ValueError("duplicate (group, bucket) rows in bucket state")
