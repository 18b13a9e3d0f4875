"""A store column whose thin rows are kept as (row, column, value) triples.

Why: a fleet of many models spreads a batch over many (slice, minute) groups, about
0.2 events each, and a dense per-slice score row is 5.4 KB of freshly written memory
per group and minute whatever it holds (the first write of memory costs far more than a
later one). A row is born sparse: the cells its events add are appended as triples
(16 an event, fewer once zero weights are left out); it gets a dense slot only when its
triples outnumber a quarter of the row's width, or when whole rows are added into it
(roll-up into an hour row). Every reader sees the dense rows they stand for: rows are
read as their dense slot plus their triples (:meth:`SparseRows.take`), a chunk at a time
for window sums (:meth:`SparseRows.window_sums`, :class:`RowChunk`) — a dense block
with coordinate-list overflow, as hybrid sparse formats pair a regular part with a
coordinate list (Bell & Garland 2009, "HYB").
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix

__all__ = ["RowChunk", "SparseRows"]

_MIN_SLOTS = 8
_CHUNK_BYTES = 4 << 20  # dense rows read at a time by a window sum


def _add_cells(out: np.ndarray, flat: np.ndarray, values: np.ndarray) -> None:
    """``out.flat[flat[i]] += values[i]`` in order (a row holds a slot or triples, never
    both, so each cell sums its triples from zero in their order: the same bits every
    way the rows are read). Few cells: one unbuffered add, not a ``bincount`` as large
    as ``out`` (whose fresh pages cost more than the adds)."""
    if flat.shape[0] * 8 < out.size:
        np.add.at(out.reshape(-1), flat, values)
    else:
        out.reshape(-1)[:] += np.bincount(flat, values, out.size).astype(out.dtype, copy=False)


def _grown(n: int, need: int, item_bytes: int = 8) -> int:
    """Capacity for ``need`` items from ``n``: doubling while small (in items and
    bytes), then by a quarter (at most a quarter allocated and unused)."""
    cap = max(n, _MIN_SLOTS)
    while cap < need:
        cap = cap * 2 if cap < 4096 and cap * item_bytes < 4 << 20 else cap + cap // 4
    return cap


class RowChunk:
    """Rows ``[lo, hi)`` of a :class:`SparseRows` as they were when taken
    (:meth:`SparseRows.chunk`): their slots' values copied into a zeroed block, their
    triples by reference (the triples in use are never changed in place, so the
    reference stays what it was while the writer goes on). Taking it costs the copy of
    the slotted rows (a dense store's chunk copies every row); adding the triples waits
    for :meth:`dense`, which a reader calls without the writer's lock."""

    __slots__ = ("block", "hi", "lo", "triples")

    def __init__(self, rows: SparseRows, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi
        s = rows.slot[lo:hi]
        has = np.flatnonzero(s >= 0)  # positions in the chunk
        self.block = np.zeros((hi - lo, rows.width), rows.dtype)
        self.block[has] = rows.dense[s[has]]
        self.triples = rows.triples() if rows.count[lo:hi].any() else None

    def dense(self) -> np.ndarray:
        """The chunk's rows, dense: each row's value exactly as :meth:`SparseRows.take`
        gives it (so sums of it do not depend on which rows had a slot)."""
        out, self.block = self.block, np.zeros((0, self.block.shape[1]))  # (taken once)
        width = out.shape[1]
        if self.triples is not None:
            r, c, v = self.triples
            hit = np.flatnonzero((r >= self.lo) & (r < self.hi))
            _add_cells(out, (r[hit] - self.lo) * width + c[hit], v[hit])
        return out


class SparseRows:
    """Rows ``[0, cap)`` of ``width`` float64 columns: row r is ``dense[slot[r]]`` when
    it has a slot (``slot[r] >= 0``) plus the sum of its triples. Reading by index
    (``col[rows]``, ``col[lo:hi]``) gives dense copies; writes go through the methods
    (the store owns the row numbering)."""

    ndim = 2

    def __init__(self, cap: int, width: int, dtype: type = np.float64) -> None:
        self.width = int(width)
        self.dtype = np.dtype(dtype)
        self.slot = np.full(cap, -1, np.int64)
        self.count = np.zeros(cap, np.int64)  # triples per row
        self.dense = np.zeros((_MIN_SLOTS, self.width), self.dtype)
        self.owner = np.full(_MIN_SLOTS, -1, np.int64)  # slot -> row (-1: free)
        self.n_slots = 0  # slots [0, n_slots) used or freed (free ones: owner -1)
        self.free: list[int] = []
        # the triples: (row, column, value) arrays and how many are in use, replaced as
        # one tuple (a reader outside the writer's lock takes it once): appends write
        # past the count in use, removals make new arrays (copy-on-write)
        self._t = (np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float64), 0)
        self.limit = max(1, self.width // 4)  # triples past which a row takes a slot

    # -- what numpy-minded readers ask -------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        return (self.slot.shape[0], self.width)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return int(
            self.dense.nbytes + self.owner.nbytes + self.slot.nbytes + self.count.nbytes
            + sum(a.nbytes for a in self._t[:3])
        )  # fmt: skip

    def __getitem__(self, key: object) -> np.ndarray:
        if isinstance(key, slice):
            lo, hi, step = key.indices(self.shape[0])
            return self.take_range(lo, hi) if step == 1 else self.take(np.arange(lo, hi, step))
        if isinstance(key, (int, np.integer)):
            return self.take(np.array([int(key)]))[0]
        return self.take(np.asarray(key, np.int64))

    def __array__(self, dtype: object = None, copy: object = None) -> np.ndarray:
        out = self.take(np.arange(self.shape[0]))
        return out if dtype is None else out.astype(dtype)

    @property
    def nt(self) -> int:
        """Triples in use."""
        return self._t[3]

    def triples(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row, column, value) of the triples in use."""
        r, c, v, n = self._t
        return r[:n], c[:n], v[:n]

    # -- reading -----------------------------------------------------------------------
    def take(self, rows: np.ndarray) -> np.ndarray:
        """Dense copies of ``rows`` (row i of the result is row ``rows[i]``)."""
        rows = np.asarray(rows, np.int64).reshape(-1)
        out = np.zeros((rows.shape[0], self.width), self.dtype)
        if rows.shape[0] == 0:
            return out
        s = self.slot[rows]
        has = np.flatnonzero(s >= 0)
        if has.shape[0]:
            out[has] = self.dense[s[has]]
        r, c, v = self.triples()
        if r.shape[0] and self.count[rows].any():  # one gather over the triples, no sort
            pos = np.full(self.shape[0], -1, np.int64)
            pos[rows] = np.arange(rows.shape[0])
            if not np.array_equal(pos[rows], np.arange(rows.shape[0])):  # a row twice
                uniq, inverse = np.unique(rows, return_inverse=True)
                return self.take(uniq)[inverse.reshape(-1)]
            at = pos[r]
            hit = np.flatnonzero(at >= 0)
            if hit.shape[0]:
                _add_cells(out, at[hit] * self.width + c[hit], v[hit])
        return out

    def take_range(self, lo: int, hi: int) -> np.ndarray:
        """Dense copies of rows ``[lo, hi)`` (a chunk: its triples found by a range test,
        not a search)."""
        return RowChunk(self, lo, max(lo, hi)).dense()

    def chunk(self, lo: int, hi: int) -> RowChunk:
        """Rows ``[lo, hi)`` as they are now, their triples found later (a chunk of window
        sums taken under the writer's lock, summed outside it)."""
        return RowChunk(self, lo, hi)

    def window_sums(
        self,
        group: np.ndarray,
        bucket: np.ndarray,
        bounds: tuple[int, int],
        index: np.ndarray,
        size: int,
        rows: np.ndarray | None = None,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """Per-group sums of ``rows`` (default: all ``len(group)`` rows) whose bucket is
        in the inclusive ``bounds``, group g into row ``index[g]`` of a (``size`` ×
        width) result; ``group`` and ``bucket`` are indexed by row number. The rows are
        read dense a chunk at a time, in row order, as a dense store's are: sums that
        do not depend on which rows have a slot are the same bits before a checkpoint
        and after it (a restored row may be triples where it had a slot), which the
        result cache's digests need."""
        lo, hi = bounds
        if out is None:
            out = np.zeros((size, self.width))
        inside = (bucket >= lo) & (bucket <= hi)
        picked = np.flatnonzero(inside) if rows is None else np.sort(rows[inside[rows]])
        step = max(1, _CHUNK_BYTES // (self.width * self.itemsize))
        for k in range(0, picked.shape[0], step):
            part = picked[k : k + step]
            targets, at = np.unique(index[group[part]], return_inverse=True)
            sel = csr_matrix(
                (np.ones(part.shape[0]), (at, np.arange(part.shape[0]))),
                shape=(targets.shape[0], part.shape[0]),
            )
            out[targets] += sel @ self.take(part)  # onto the rows it touches
        return out

    # -- writing -----------------------------------------------------------------------
    def add_cells(self, rows: np.ndarray, cols: np.ndarray, weights: np.ndarray) -> None:
        """Add ``weights[k, i]`` at ``(rows[i], cols[k, i])``: into the slot of a row
        that has one, as triples otherwise (zero weights left out); rows whose triples
        then pass the limit take a slot."""
        if rows.shape[0] == 0:
            return
        rr = np.broadcast_to(rows, cols.shape).reshape(-1)
        cc, ww = cols.reshape(-1), np.asarray(weights, np.float64).reshape(-1)
        s = self.slot[rr]
        slotted = s >= 0
        if slotted.any():  # (no view of ``dense`` kept: a new slot may resize it in place)
            np.add.at(self.dense.reshape(-1), s[slotted] * self.width + cc[slotted], ww[slotted])
        keep = ~slotted & (ww != 0)
        if not keep.any():
            return
        r, c, v = rr[keep], cc[keep], ww[keep]
        self._append(r, c, v)
        full = r[self.count[r] > self.limit]
        if full.shape[0]:
            self.densify(full)

    def _append(self, r: np.ndarray, c: np.ndarray, v: np.ndarray) -> None:
        k = r.shape[0]
        arrays, n = self._t[:3], self._t[3]
        if n + k > arrays[0].shape[0]:
            cap = _grown(arrays[0].shape[0], n + k)
            arrays = tuple(np.concatenate([a[:n], np.zeros(cap - n, a.dtype)]) for a in arrays)
        for a, x in zip(arrays, (r, c, v), strict=True):
            a[n : n + k] = x
        self._t = (*arrays, n + k)
        self.count += np.bincount(r, minlength=self.count.shape[0])[: self.count.shape[0]]

    def _drop_triples(self, rows: np.ndarray) -> None:
        """Forget the triples of ``rows`` (their values already taken or gone)."""
        rows = rows[self.count[rows] > 0]
        if rows.shape[0] == 0:
            return
        r, c, v = self.triples()
        gone = np.zeros(self.shape[0], bool)
        gone[rows] = True
        keep = np.flatnonzero(~gone[r])
        self._t = (r[keep], c[keep], v[keep], keep.shape[0])
        self.count[rows] = 0

    def densify(self, rows: np.ndarray) -> np.ndarray:
        """Give each of ``rows`` without one a slot holding its value; the rows' slots."""
        rows = np.unique(np.asarray(rows, np.int64))
        need = rows[self.slot[rows] < 0]
        if need.shape[0]:
            values = self.take(need)
            slots = self._new_slots(need.shape[0])
            self.dense[slots] = values
            self.owner[slots] = need
            self.slot[need] = slots
            self._drop_triples(need)
        return self.slot[rows]

    def _new_slots(self, k: int) -> np.ndarray:
        reuse = [self.free.pop() for _ in range(min(k, len(self.free)))]
        fresh = k - len(reuse)
        if self.n_slots + fresh > self.dense.shape[0]:
            cap = _grown(self.dense.shape[0], self.n_slots + fresh, self.width * self.itemsize)
            try:  # in place (NumPy zeroes the new rows), unless a view of it is alive
                self.dense.resize((cap, self.width), refcheck=True)
            except ValueError:
                new = np.zeros((cap, self.width), self.dtype)
                new[: self.n_slots] = self.dense[: self.n_slots]
                self.dense = new
            owner = np.full(cap, -1, np.int64)
            owner[: self.n_slots] = self.owner[: self.n_slots]
            self.owner = owner
        out = np.array(reuse + list(range(self.n_slots, self.n_slots + fresh)), np.int64)
        self.n_slots += fresh
        return out

    def add_rows(self, rows: np.ndarray, values: np.ndarray) -> None:
        """Add dense ``values`` into ``rows`` (distinct), which take a slot."""
        slots = self.densify(rows)
        order = np.argsort(np.asarray(rows, np.int64), kind="stable")
        self.dense[slots] += np.asarray(values)[order]

    def clear(self, rows: np.ndarray) -> None:
        """Zero ``rows``: their triples dropped, their slots freed (and zeroed)."""
        rows = np.asarray(rows, np.int64)
        self._drop_triples(rows)
        s = self.slot[rows]
        s = s[s >= 0]
        if s.shape[0]:
            self.dense[s] = 0
            self.owner[s] = -1
            self.free.extend(s.tolist())
            self.slot[rows] = -1

    # -- the store's row numbering -----------------------------------------------------
    def resize(self, cap: int) -> None:
        """Rows ``[0, cap)``: new rows empty, rows past ``cap`` (empty) forgotten; the
        slots of removed rows given back when shrinking (rows only move then)."""
        n = self.slot.shape[0]
        if cap > n:
            self.slot = np.concatenate([self.slot, np.full(cap - n, -1, np.int64)])
            self.count = np.concatenate([self.count, np.zeros(cap - n, np.int64)])
        else:
            self.slot, self.count = self.slot[:cap].copy(), self.count[:cap].copy()
            self._compact_slots()

    def move(self, holes: np.ndarray, movers: np.ndarray, gone: np.ndarray) -> None:
        """Retention's and roll-up's compaction: rows ``gone`` are forgotten, then row
        ``movers[i]`` becomes row ``holes[i]``."""
        self.clear(gone)
        if holes.shape[0]:
            to = np.arange(self.shape[0])
            to[movers] = holes
            r, c, v = self.triples()
            if r.shape[0]:
                self._t = (to[r], c.copy(), v.copy(), r.shape[0])
            s = self.slot[movers]
            self.slot[holes], self.count[holes] = s, self.count[movers]
            self.slot[movers], self.count[movers] = -1, 0
            has = s >= 0
            self.owner[s[has]] = holes[has]

    def _compact_slots(self) -> None:
        """Give back the dense slots of removed rows when most are free."""
        used = self.n_slots - len(self.free)
        if self.n_slots <= _MIN_SLOTS or used * 2 > self.n_slots:
            return
        keep = np.flatnonzero(self.owner[: self.n_slots] >= 0)
        cap = _grown(0, max(used, 1), self.width * self.itemsize)
        dense = np.zeros((cap, self.width), self.dtype)
        dense[:used] = self.dense[keep]
        owner = np.full(cap, -1, np.int64)
        owner[:used] = self.owner[keep]
        self.slot[owner[:used]] = np.arange(used)
        self.dense, self.owner, self.n_slots, self.free = dense, owner, used, []

    @classmethod
    def of_dense(cls, arr: np.ndarray, cap: int) -> SparseRows:
        """The rows of ``arr`` (a loaded checkpoint's), thin ones as triples."""
        out = cls(cap, arr.shape[1], arr.dtype.type)
        nz = np.count_nonzero(arr, axis=1)
        thin = np.flatnonzero(nz <= out.limit)
        wide = np.flatnonzero(nz > out.limit)
        if thin.shape[0]:
            r, c = np.nonzero(arr[thin])
            out._append(thin[r], c.astype(np.int32), arr[thin[r], c].astype(np.float64))
        if wide.shape[0]:
            out.add_rows(wide, arr[wide])
        return out
