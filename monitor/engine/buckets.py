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

import itertools
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
from scipy.sparse import csr_matrix

from .windows import Tiers

__all__ = [
    "BucketStore", "CopyPlan", "CopyRound", "MatrixSpec", "RunningSums", "SumPlan",
    "copy_in_rounds", "finish_copies", "finish_sums_deferred", "settle_copies", "settle_sums",
    "window_group_sums",
]  # fmt: skip

MatrixSpec = int | tuple[int, type] | tuple[int, type, tuple[int, ...]]
"""A named matrix: its width (int32 counts), (width, dtype), or (width, dtype, the widths
it had before columns were appended to it)."""

_BUCKET_BITS = 36  # bucket index < 2**36 (over 2000 years of 1 s buckets)
_GROUP_SHIFT = np.int64(_BUCKET_BITS + 2)  # then 2 bits of tier (0 base, 1 h, 2 day, 3 12 h)
_MIN_ROWS = 8
_ROLL_PART = 4096  # rows of a roll-up summed at a time (bounds its transient copy)
_FIXED = {"group": ((), np.int32), "bucket": ((), np.int64), "tier": ((), np.int8),
          "predicted": ((), np.int64), "labeled": ((), np.int64),
          "confusion": ((4,), np.int64)}  # fmt: skip


class CopyPlan:
    """A copy of a store's rows in progress (:meth:`BucketStore.begin_copy`)."""

    __slots__ = (
        "copied", "generation", "n", "owed", "owed_at", "owed_rows", "patched", "rounds",
        "since", "skip", "source",
    )  # fmt: skip

    def __init__(self, n: int, generation: int, source: dict[str, np.ndarray]) -> None:
        self.n, self.generation, self.source = n, generation, source
        self.skip = frozenset[str]()  # columns the store has and the copy leaves out
        self.copied: dict[str, np.ndarray] | None = None
        self.since = 0  # rows stamped from this epoch on changed after they were copied
        self.patched = 0  # rows the lock-held finish copied
        self.rounds = 0  # re-copy rounds made outside the lock
        # rows the finish left to copy (:meth:`BucketStore.settle_copy`): which are still
        # owed, all of them in order, and how far the settling has got through them
        self.owed: np.ndarray | None = None
        self.owed_rows = np.zeros(0, np.int64)
        self.owed_at = 0

    def copy(self) -> None:
        """The bulk copy, outside the lock (NumPy copies without holding the GIL, so the
        writer runs meanwhile; rows it changes are re-copied by ``finish_copy``), with
        room for the rows the writer adds meanwhile (appended under the lock without
        copying the rest again)."""
        spare = self.n // 4 + 1024
        self.copied = {}
        for name, arr in self.source.items():
            out = np.empty((arr.shape[0] + spare, *arr.shape[1:]), arr.dtype)
            out[: arr.shape[0]] = arr
            self.copied[name] = out
        self.source = {}


class CopyRound:
    """Rows of a copy to copy again outside the lock (:meth:`BucketStore.take_round`):
    the rows changed since they were copied and the rows added since, with the store's
    columns as they were when taken (a column the writer grows meanwhile is re-allocated,
    never changed under this reference)."""

    __slots__ = ("added", "changed", "plan", "source")

    def __init__(
        self, plan: CopyPlan, changed: np.ndarray, added: tuple[int, int], source: dict
    ) -> None:
        self.plan, self.changed, self.added, self.source = plan, changed, added, source

    def copy(self) -> None:
        """Copy the rows, outside the lock. A row the writer writes meanwhile may be
        copied half-written; it was stamped again before that write, so a later round or
        the finish copies it again."""
        lo, hi = self.added
        copied = self.plan.copied or {}
        for name, live in self.source.items():
            out = copied[name]
            if self.changed.shape[0]:
                out[self.changed] = live[self.changed]
            out[lo:hi] = live[lo:hi]
        self.source = {}


# the most a copy's hold copies (~1-2 ms): rounds outside the lock run until at most this
# much is left for the final hold, which leaves any more owed, settled this much per hold
_FINAL_COPY_BYTES = 2 << 20
_COPY_ROUNDS = 8


def copy_in_rounds(
    plans: Sequence[tuple[BucketStore, CopyPlan]],
    lock: AbstractContextManager[Any],
    holds: list[float] | None = None,
) -> None:
    """Copy again, outside ``lock``, the rows the writer changed or added since the bulk
    copy of each plan, round after round, so that the final hold (:meth:`~BucketStore.
    finish_copy`) copies at most :data:`_FINAL_COPY_BYTES`: each round takes the rows
    written since the last one under a short hold (their stamps then count from a new
    epoch, so a row written while it is being copied is taken again), as a live
    migration's iterative pre-copy does (Clark et al. 2005). Stops when little is left,
    after :data:`_COPY_ROUNDS`, or when a round found no less to copy than the one
    before (a writer outrunning the copier): the final hold then leaves the rest owed
    (:meth:`BucketStore.finish_copy`). ``holds`` gets the seconds each hold took."""
    last = None
    for _ in range(_COPY_ROUNDS if plans else 0):
        with lock:
            held = time.perf_counter()
            left = sum(st.pending_bytes(plan) for st, plan in plans)
            done = left <= _FINAL_COPY_BYTES or (last is not None and left >= last)
            taken = [] if done else [r for st, p in plans if (r := st.take_round(p)) is not None]
            if holds is not None:
                holds.append(time.perf_counter() - held)
        if done:
            return
        for r in taken:
            r.copy()
        last = left


def finish_copies(
    plans: Sequence[tuple[BucketStore, CopyPlan]],
) -> dict[int, dict[str, np.ndarray]]:
    """Each plan's copy as of now by ``id(store)`` (call under the lock), at most
    :data:`_FINAL_COPY_BYTES` of rows copied per store: more are left owed, for
    :func:`settle_copies` to complete after the lock is released."""
    return {id(st): st.finish_copy(plan, _FINAL_COPY_BYTES) for st, plan in plans}


def settle_copies(
    plans: Sequence[tuple[BucketStore, CopyPlan]],
    lock: AbstractContextManager[Any],
    holds: list[float] | None = None,
) -> None:
    """Complete the copies whose finish left rows owed (:meth:`BucketStore.finish_copy`),
    :data:`_FINAL_COPY_BYTES` per short hold of ``lock``; ``holds`` gets their seconds."""
    for st, plan in plans:
        done = plan.owed is None
        while not done:
            with lock:
                held = time.perf_counter()
                done = st.settle_copy(plan, _FINAL_COPY_BYTES)
                if holds is not None:
                    holds.append(time.perf_counter() - held)


def finish_sums_deferred(
    store: BucketStore, plan: SumPlan, index: np.ndarray, size: int
) -> list[np.ndarray]:
    """:meth:`BucketStore.finish_sums` adding no row under the lock: the rows still to
    add are left owed, for :func:`settle_sums` to add a budget per hold."""
    return store.finish_sums(plan, index, size, defer=True)


def settle_sums(
    plans: Sequence[tuple[BucketStore, SumPlan]],
    lock: AbstractContextManager[Any],
    holds: list[float] | None = None,
) -> None:
    """Complete the window sums whose finish left rows owed: the rows taken
    :data:`_FINAL_COPY_BYTES` per short hold of ``lock``, added with it released."""
    for st, plan in plans:
        more = plan.owed is not None
        while more:
            with lock:
                held = time.perf_counter()
                more = st.settle_sums(plan, _FINAL_COPY_BYTES)
                if holds is not None:
                    holds.append(time.perf_counter() - held)
            st.add_chunk(plan)
        st.add_chunk(plan)  # what a roll-up or new matrix took for it meanwhile


def window_group_sums(
    group: np.ndarray,
    bucket: np.ndarray,
    matrix: np.ndarray,
    bounds: tuple[int, int],
    index: np.ndarray,
    size: int,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Per-group sums of the rows of ``matrix`` whose bucket is in the inclusive
    ``bounds``, group g summed into row ``index[g]`` of a (``size`` × width) result
    (added into ``out`` when given): a sparse 0/1 selector times the rows, so they are
    read in place, never copied."""
    lo, hi = bounds
    rows = np.flatnonzero((bucket >= lo) & (bucket <= hi))
    if out is None:
        out = np.zeros((size, matrix.shape[1]))
    if rows.shape[0]:
        selector = csr_matrix(
            (np.ones(rows.shape[0]), (index[group[rows]], rows)), shape=(size, matrix.shape[0])
        )
        out += selector @ matrix
    return out


def _resize_in_place(cols: dict[str, np.ndarray], name: str, cap: int) -> bool:
    """Grow column ``name`` to ``cap`` rows with ``realloc`` (NumPy zeroes the new rows).

    Why: a thin group opens a row per bucket, so a fleet of many models grows its
    stores all the time; a fresh zeroed block with the rows copied into it faulted
    every old row's pages in again on each growth, the dominant cost of applying a
    batch. ``realloc`` extends the block where it lies or moves it (a mapped block by
    remapping its pages). The price: the new rows are zeroed at once, so resident.
    False when a view of the column is alive (a copy or sum in progress reads the old
    block): the caller copies instead, leaving that block alone."""
    try:
        cols[name].resize((cap, *cols[name].shape[1:]), refcheck=True)
    except ValueError:
        return False
    return True


def _save_old(undo: dict[int, np.ndarray], col: np.ndarray, rows: np.ndarray) -> None:
    """Keep the current value of each of ``rows`` not kept yet (before it is written)."""
    for r in rows.tolist():
        if r not in undo:
            undo[r] = col[r].copy()


def _scatter_many(
    xs: Sequence[np.ndarray], at: np.ndarray, vals: np.ndarray, weights: Sequence[np.ndarray]
) -> None:
    """``xs[w][at[i]] += weights[w][i] * vals[i]`` for every window ``w`` (arrays of the
    same rows; weights 0/±1 or bool), as one sparse product onto the (window, row) pairs
    it touches only. Why: a product onto every row made a dense temporary as large as
    ``x`` (every group × every column) for a handful of rows, and a product per window
    and per kind of row paid a sparse matrix's fixed cost (~60 µs) a dozen times per
    store and tick for a few rows each."""
    if not xs or at.shape[0] == 0:
        return
    size = xs[0].shape[0]
    w = np.asarray(weights, np.float64)  # (windows, rows)
    win, keep = np.nonzero(w)
    if keep.shape[0] == 0:
        return
    # (window, row) as one key; a negative row counts from the end, as numpy's indexing
    targets, pos = np.unique(win * size + at[keep] % size, return_inverse=True)
    selector = csr_matrix((w[win, keep], (pos, keep)), shape=(targets.shape[0], vals.shape[0]))
    added = selector @ vals
    owner, row = np.divmod(targets, size)
    ends = np.searchsorted(owner, np.arange(1, len(xs) + 1)).tolist()
    start = 0
    for x, end in zip(xs, ends, strict=True):
        if end > start:
            x[row[start:end]] += added[start:end]
        start = end


class SumPlan:
    """Window sums of one matrix of a store, computed a chunk of rows at a time with the
    writer's lock held only per chunk (:meth:`BucketStore.begin_sums`).

    Why: a fleet's per-segment histograms are a GB; copying them for each evaluation cost
    as much time as the evaluation and doubled memory, and holding the lock while reading
    them all stalled ingestion. Rows the writer changes after their chunk was summed are
    corrected at the end from an undo copy taken before the write (write-ahead of the old
    value, as in a database's undo log); rows added meanwhile are added then."""

    __slots__ = (
        "base", "bounds", "done", "generation", "index", "matrix", "n", "owed", "owed_at",
        "owed_old", "owed_rows", "pending", "prior", "running", "saved", "size", "sums", "undo",
    )  # fmt: skip

    def __init__(
        self,
        matrix: str,
        bounds: list[tuple[int, int]],
        n: int,
        index: np.ndarray,
        size: int,
        generation: int,
    ) -> None:
        self.matrix, self.bounds, self.n = matrix, bounds, n
        self.index, self.size = index, size  # group -> row of the sums, rows
        self.generation = generation
        self.done = 0  # rows [0, done) summed
        self.running = True  # kept for the next pass (RunningSums)
        self.sums: list[np.ndarray] | None = None
        self.undo: dict[int, np.ndarray] = {}
        # incremental: the last pass's sums, and the old values of rows changed since then
        self.base: RunningSums | None = None
        self.prior: dict[int, np.ndarray] = {}
        # a chunk taken under the lock, summed outside it (:meth:`BucketStore.add_chunk`):
        # (row of the sums, bucket, values) of changed rows' deltas and of new rows
        self.pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        # rows the finish left owed (:meth:`BucketStore.settle_sums`): which are not taken
        # yet, all of them in order, how far the settling got, the summed (old) value of
        # those that had been summed, and the values the writer saved before writing
        self.owed: np.ndarray | None = None
        self.owed_rows = np.zeros(0, np.int64)
        self.owed_at = 0
        self.owed_old: dict[int, np.ndarray] = {}
        self.saved: dict[int, np.ndarray] = {}


class RunningSums:
    """The window sums the last pass finished with, kept for the next one (running
    window sums): the next pass starts from them, swaps the rows changed since for their
    new values (old values kept by the writer, as :class:`SumPlan`'s undo), adds the rows
    that entered a window and subtracts the rows that left it — so a steady tick reads
    the rows that changed or moved, not the whole store.

    Valid while no row moves or drops (the store's ``generation``): roll-up and
    retention start afresh; so does every :data:`_RUNNING_PASSES` passes, which bounds
    the rounding a long chain of float additions and subtractions could gather."""

    __slots__ = ("bounds", "generation", "index", "n", "passes", "sums", "undo")

    def __init__(
        self,
        sums: list[np.ndarray],
        bounds: list[tuple[int, int]],
        n: int,
        index: np.ndarray,
        generation: int,
        passes: int,
    ) -> None:
        self.sums, self.bounds, self.n, self.index = sums, bounds, n, index
        self.generation, self.passes = generation, passes
        self.undo: dict[int, np.ndarray] = {}  # row -> value when the sums were taken


_RUNNING_PASSES = 60  # incremental passes before the sums are taken afresh


_SUM_CHUNK_BYTES = 4 << 20  # rows summed per lock hold: ~4 MB of matrix, about a ms
# a big store grows by a quarter, not double: at most 25 % of it allocated and unused
# (still amortized O(1) per row). Big in rows or in bytes: a wide row of fine score
# histograms is ~50 KB, so 4,096 of them doubling would leave up to 200 MB unused.
_GROW_SLOWER_FROM = 1 << 12
_GROW_SLOWER_BYTES = 4 << 20


class BucketStore:
    """Rows of ``predicted``, ``labeled``, binary confusion counts and registered count
    matrices per (group, bucket)."""

    def __init__(
        self,
        width_ms: int,
        matrices: Mapping[str, MatrixSpec] | None = None,
    ) -> None:
        """``matrices``: name -> :data:`MatrixSpec`; a saved matrix of one of its legacy
        widths is the same layout before columns were appended to it, and loads padded
        with zeros."""
        if width_ms <= 0:
            raise ValueError("bucket width must be positive")
        self.width_ms = int(width_ms)
        self._shapes: dict[str, tuple[tuple[int, ...], type]] = dict(_FIXED)
        self._legacy: dict[str, tuple[int, ...]] = {}
        for name, spec in (matrices or {}).items():
            width, dtype, *legacy = spec if isinstance(spec, tuple) else (spec, np.int32)
            self._shapes[f"m.{name}"] = ((int(width),), dtype)
            if legacy:
                self._legacy[f"m.{name}"] = tuple(int(w) for w in legacy[0])
        self._index: dict[int, int] = {}
        self.tiers = Tiers.for_width(self.width_ms)  # moved forward by the engine (roll_up)
        self._n = 0
        self._cap = _MIN_ROWS  # grows by doubling, then by a quarter: an idle store stays small
        self._cols = {k: np.zeros((self._cap, *sh), dt) for k, (sh, dt) in self._shapes.items()}
        # copy-out bookkeeping (:meth:`begin_copy`): the epoch each row was last written
        # in (a copy takes a new epoch each time it copies rows, so a row written after
        # its copy has a later stamp), and a counter of changes that move or drop rows
        # (a copy then starts over)
        self._stamp = np.zeros(self._cap, np.int64)
        self._epoch = 0
        self._owing: list[CopyPlan] = []  # finished copies with rows still owed
        self._settling: list[SumPlan] = []  # finished sums with rows still owed
        self.generation = 0
        self._sum_plans: list[SumPlan] = []
        self._running: dict[str, RunningSums] = {}  # matrix -> the last pass's window sums
        self._rolled_to: Tiers | None = None  # the tiers every row is rolled up to

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
        self._settle_all()
        self._shapes[key] = ((int(width),), dtype)
        self._cols[key] = np.zeros((self._cap, int(width)), dtype)
        self.generation += 1

    def matrix(self, name: str) -> np.ndarray:
        """Rows in use of matrix ``name`` (a view: in-place adds reach the store)."""
        return self._cols[f"m.{name}"][: self._n]

    def bucket_of(self, ts_ms: np.ndarray) -> np.ndarray:
        return np.floor_divide(np.asarray(ts_ms, np.int64), self.width_ms)

    def rows_for(self, group: np.ndarray, ts_ms: np.ndarray) -> np.ndarray:
        """Row per event, creating rows for (group, bucket) pairs not seen before; an
        event in a rolled-up period goes to its hour, 12-hour or day row."""
        bidx = self.bucket_of(ts_ms)
        combined = (np.asarray(group, np.int64) << _GROUP_SHIFT) | self._tiered(bidx)
        uniq, inverse = np.unique(combined, return_inverse=True)
        keys = uniq.tolist()
        urows = np.fromiter(map(self._index.get, keys, itertools.repeat(-1)), np.int64, len(keys))
        new = np.flatnonzero(urows < 0)
        if new.shape[0]:
            urows[new] = self._new_rows(uniq[new])
        for plan in self._owing:  # copy-before-write of rows a finished copy still owes
            self._pay(plan, urows)
        for summed in self._settling:  # and of rows finished sums still owe
            self._save_owed(summed, urows)
        self._stamp[urows] = self._epoch  # every write to a row comes through here first
        for plan in self._sum_plans:  # keep the old value of rows already summed
            self._save_undo(plan, urows)
        for name, run in list(self._running.items()):  # and of rows in the running sums
            if run.generation != self.generation:
                del self._running[name]  # rows moved: the next pass sums afresh
            else:
                _save_old(run.undo, self._cols[name], urows[urows < run.n])
        return urows[inverse.reshape(-1)]

    def _tiered(self, bidx: np.ndarray) -> np.ndarray:
        """(tier << 36) | start of the row each base bucket index belongs to."""
        t = self.tiers
        if not t.per_hour or not len(bidx) or int(bidx.min()) >= t.hour_from:
            return bidx
        tier, start = t.rows_of(bidx)
        return (tier << _BUCKET_BITS) | start

    def _new_rows(self, keys: np.ndarray) -> np.ndarray:
        """Rows for new (group, tier, bucket) keys, appended in one step; their rows."""
        k = keys.shape[0]
        if self._n + k > self._cap:
            cap = self._cap
            while cap < self._n + k:
                small = cap < _GROW_SLOWER_FROM and cap * self._row_bytes() < _GROW_SLOWER_BYTES
                cap = cap * 2 if small else cap + cap // 4
            self._grow(cap)
        rows = np.arange(self._n, self._n + k)
        self._n += k
        self._index.update(zip(keys.tolist(), rows.tolist(), strict=True))
        self._cols["group"][rows] = keys >> _GROUP_SHIFT
        self._cols["bucket"][rows] = keys & ((1 << _BUCKET_BITS) - 1)
        self._cols["tier"][rows] = (keys >> _BUCKET_BITS) & 3
        return rows

    def _row_bytes(self, skip: frozenset[str] = frozenset()) -> int:
        """Bytes of one row (of the columns not in ``skip``)."""
        return int(sum(a.nbytes // a.shape[0] for k, a in self._cols.items() if k not in skip))

    def span(self) -> np.ndarray:
        """Base buckets each row in use covers (1, or an hour's, 12 hours' or a day's worth)."""
        return np.array(self.tiers.spans, np.int64)[self.tier]

    @property
    def tier(self) -> np.ndarray:
        return self._cols["tier"][: self._n]

    def roll_up(self, tiers: Tiers) -> int:
        """Adopt ``tiers`` and merge rows now older than their tier's start into hour,
        12-hour or day rows (every column adds); returns rows merged away.

        Incremental: only the rows that change tier are touched — each is added into the
        existing coarse row of its (group, coarser period), or becomes that row — so the hourly
        roll-up costs the rows that move plus one in-place compaction, not a copy."""
        if tiers == self._rolled_to:  # rows are made in their tier: nothing new to move
            return 0
        self._settle_all()
        self.tiers = tiers
        n = self._n
        if not tiers.per_hour or n == 0:
            self._rolled_to = tiers
            return 0
        bucket = self.bucket
        src = np.flatnonzero(tiers.moving(bucket, self.tier))
        if src.shape[0] == 0:
            self._rolled_to = tiers
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
            ends = np.r_[starts[1:], movers.shape[0]]
            # in parts of whole destinations, ~_ROLL_PART movers each: a week of rows
            # rolled at once would otherwise be copied whole (``col[movers]``)
            k, parts = 0, []
            while k < starts.shape[0]:
                k2 = max(k + 1, int(np.searchsorted(ends, starts[k] + _ROLL_PART, "right")))
                parts.append((k, k2))
                k = k2
            for name, col in self._cols.items():
                if name in ("group", "bucket", "tier"):
                    continue
                for k, k2 in parts:
                    lo, hi = int(starts[k]), int(ends[k2 - 1])
                    col[targets[starts[k:k2]]] += np.add.reduceat(
                        col[movers[lo:hi]], starts[k:k2] - lo, axis=0
                    )
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
        self.generation += 1
        gone = src[add]
        if gone.shape[0]:
            self._remove_rows(gone)
        self._rolled_to = tiers
        return int(gone.shape[0])

    def _keys(self, rows: np.ndarray) -> np.ndarray:
        cols = self._cols
        return (
            (cols["group"][rows].astype(np.int64) << _GROUP_SHIFT)
            | (cols["tier"][rows].astype(np.int64) << _BUCKET_BITS)
            | cols["bucket"][rows]
        )

    def _remove_rows(self, gone: np.ndarray) -> None:
        """Forget rows: the last rows move into the holes (O(removed) rows touched, not a
        rewrite of the store — this runs under the engine lock), freed rows are zeroed."""
        self._settle_all()
        n = self._n
        gone = np.unique(gone)
        for key in self._keys(gone).tolist():
            del self._index[key]
        n_new = n - int(gone.shape[0])
        holes = gone[gone < n_new]
        tail = np.arange(n_new, n)
        movers = tail[~np.isin(tail, gone)]
        for col in self._cols.values():
            for at in range(0, holes.shape[0], _ROLL_PART):  # (parts: a bounded copy)
                col[holes[at : at + _ROLL_PART]] = col[movers[at : at + _ROLL_PART]]
            col[n_new:n] = 0  # freed rows must be zero when reused
        self._n = n_new
        for key, row in zip(self._keys(holes).tolist(), holes.tolist(), strict=True):
            self._index[key] = row
        self.generation += 1
        if self._n * 4 < self._cap and self._cap > _MIN_ROWS:  # give memory back
            self._shrink(max(_MIN_ROWS, 2 * self._n))

    def _shrink(self, cap: int) -> None:
        for name in list(self._cols):  # one column's copy alive at a time
            self._cols[name] = self._cols[name][:cap].copy()
        self._stamp = self._stamp[:cap].copy()
        self._cap = cap

    def _grow(self, cap: int) -> None:
        for name in self._cols:
            if not _resize_in_place(self._cols, name, cap):
                old = self._cols[name]
                new = np.zeros((cap, *old.shape[1:]), old.dtype)
                new[: self._n] = old[: self._n]
                self._cols[name] = new
        stamp = np.zeros(cap, np.int64)
        stamp[: self._n] = self._stamp[: self._n]
        self._stamp = stamp
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
        older = np.flatnonzero(self.bucket < bucket_idx)  # only these can end before it
        if older.shape[0] == 0:
            return 0
        span = np.array(self.tiers.spans, np.int64)[self.tier[older]]
        gone = older[self.bucket[older] + span <= bucket_idx]
        if gone.shape[0]:
            self._remove_rows(gone)
        return int(gone.shape[0])

    def state(self) -> dict[str, np.ndarray]:
        return {k: v.copy() for k, v in self.view().items()}

    def begin_copy(self, skip: tuple[str, ...] = ()) -> CopyPlan:
        """Start a copy of the rows in use that the caller makes *without* holding the
        writer's lock (:meth:`CopyPlan.copy`), refreshes in rounds outside it
        (:meth:`take_round`), then completes under it (:meth:`finish_copy`). Call under
        the lock.

        Why: a fleet's stores are hundreds of MB; copying them under the engine lock
        stalled ingestion for the whole copy. The writer keeps writing meanwhile; every
        row it touches is stamped with the current epoch (:meth:`rows_for`), and the
        rounds and the finish re-copy just the rows stamped since they were copied and
        the new ones — the read-copy-update pattern with write stamps instead of
        versions (McKenney & Slingwine 1998), refreshed in rounds as a live migration's
        pre-copy is (Clark et al. 2005). Copies may overlap: each keeps its own epoch.
        ``skip``: columns left out (read as window sums instead)."""
        view = {k: v for k, v in self.view().items() if k not in skip}
        plan = CopyPlan(self._n, self.generation, view)
        plan.skip = frozenset(skip)
        plan.since = self._next_epoch()
        return plan

    def _next_epoch(self) -> int:
        """A new epoch: rows written from now on are stamped with it."""
        self._epoch += 1
        return self._epoch

    def pending_bytes(self, plan: CopyPlan) -> int:
        """Bytes the lock-held finish of ``plan`` would copy now (rows written since they
        were copied, rows added since); 0 when it would copy everything afresh (rows
        moved), as no round can help then."""
        if plan.copied is None or plan.generation != self.generation:
            return 0
        rows = int(np.count_nonzero(self._stamp[: plan.n] >= plan.since)) + self._n - plan.n
        return rows * self._row_bytes(plan.skip)

    def take_round(self, plan: CopyPlan) -> CopyRound | None:
        """The rows of a bulk-copied plan to copy again outside the lock (call under it):
        those written since they were copied and those added since (as far as the copy
        has room); they count as copied from now on. None when rows moved (the finish
        then copies everything)."""
        if plan.copied is None or plan.generation != self.generation:
            return None
        changed = np.flatnonzero(self._stamp[: plan.n] >= plan.since)
        room = next(iter(plan.copied.values())).shape[0] if plan.copied else plan.n
        hi = max(plan.n, min(self._n, room))
        source = {k: v for k, v in self._cols.items() if k not in plan.skip}
        taken = CopyRound(plan, changed, (plan.n, hi), source)
        plan.n, plan.since = hi, self._next_epoch()
        plan.rounds += 1
        return taken

    def finish_copy(self, plan: CopyPlan, budget_bytes: int | None = None) -> dict[str, np.ndarray]:
        """The copy as of now (call under the lock): rows written since they were copied
        re-copied, rows added appended; a plain copy if rows moved or were dropped
        meanwhile (roll-up, retention, restore: none run in the writer's normal path).

        With ``budget_bytes``: if the rows to re-copy are more than that, they are left
        *owed* instead — the arrays returned are complete only after :meth:`settle_copy`
        returned True. Until then the writer copies an owed row into the copy before it
        writes it (copy-before-write, :meth:`rows_for`), and each :meth:`settle_copy`
        copies a budget's worth of the rest under a short hold; either way a row is
        copied once, with its value as of this call, so the copy is exactly the state
        this call saw while no hold copies more than the budget."""
        live_cols = {k: v for k, v in self.view().items() if k not in plan.skip}
        if plan.copied is None or plan.generation != self.generation:
            return {k: v.copy() for k, v in live_cols.items()}
        n0 = plan.n
        rows = np.flatnonzero(self._stamp[:n0] >= plan.since)
        room = next(iter(plan.copied.values())).shape[0] if plan.copied else 0
        owe = (
            budget_bytes is not None
            and self._n <= room
            and plan.copied.keys() == live_cols.keys()
            and rows.shape[0] * self._row_bytes(plan.skip) > budget_bytes
        )
        if owe:
            plan.owed = np.zeros(n0, bool)
            plan.owed[rows] = True
            plan.owed_rows, plan.owed_at = rows, 0
            self._owing.append(plan)
            rows = rows[:0]
        out: dict[str, np.ndarray] = {}
        for name, live in live_cols.items():
            if name not in plan.copied:  # a matrix registered meanwhile (generation moved)
                return {k: v.copy() for k, v in live_cols.items()}
            copied = plan.copied[name]
            if rows.shape[0]:
                copied[rows] = live[rows]
            if self._n <= copied.shape[0]:
                copied[n0 : self._n] = live[n0:]
                out[name] = copied[: self._n]
            else:  # more new rows than the room left for them
                out[name] = np.concatenate([copied[:n0], live[n0:]])
        plan.patched = int(rows.shape[0]) + (self._n - n0)
        return out

    def settle_copy(self, plan: CopyPlan, budget_bytes: int) -> bool:
        """Copy up to ``budget_bytes`` of the rows :meth:`finish_copy` left owed (call
        under the lock); True when none is owed any more (the copy is complete)."""
        if plan.owed is None:
            return True
        step = max(1, budget_bytes // max(1, self._row_bytes(plan.skip)))
        rows = plan.owed_rows[plan.owed_at :]
        rows = rows[plan.owed[rows]][:step]  # those the writer has not copied itself
        if rows.shape[0]:
            plan.owed_at = int(np.searchsorted(plan.owed_rows, rows[-1], "right"))
            self._pay(plan, rows)
        else:
            plan.owed_at = plan.owed_rows.shape[0]
        if plan.owed_at < plan.owed_rows.shape[0]:
            return False
        self.drop_copy(plan)
        return True

    def drop_copy(self, plan: CopyPlan) -> None:
        """No row of ``plan`` is owed any more (settled, or its pass failed)."""
        plan.owed = None
        if plan in self._owing:
            self._owing.remove(plan)

    def _pay(self, plan: CopyPlan, rows: np.ndarray) -> None:
        """Copy the owed ones of ``rows`` into the plan's copy (their values now)."""
        owed = plan.owed
        if owed is None or plan.copied is None:
            return
        rows = rows[rows < owed.shape[0]]
        rows = rows[owed[rows]]
        if rows.shape[0]:
            for name, out in plan.copied.items():
                out[rows] = self._cols[name][rows]
            owed[rows] = False

    def _settle_all(self) -> None:
        """Copy every owed row now, and take every row finished sums owe: rows are about
        to move or change layout."""
        for plan in list(self._owing):
            if plan.owed is not None:
                self._pay(plan, plan.owed_rows)
            self.drop_copy(plan)
        for summed in list(self._settling):  # taken now, added by the settling pass
            while self.settle_sums(summed, 1 << 62):
                pass

    # -- window sums outside one long lock hold ------------------------------------------
    def begin_sums(
        self,
        matrix: str,
        bounds: list[tuple[int, int]],
        index: np.ndarray,
        size: int,
        running: bool = True,
    ) -> SumPlan:
        """Plan the per-group sums of matrix ``matrix`` over each window of ``bounds``
        (inclusive bucket ranges), group g into row ``index[g]`` of ``size``; call under
        the lock, then :meth:`sum_chunk` (each call under the lock) until it returns
        False, then :meth:`finish_sums` under it. ``running``: advanced from the last
        pass's sums and kept for the next (:class:`RunningSums`); False for a one-off
        (a report's window), which leaves them as they are."""
        plan = SumPlan(f"m.{matrix}", list(bounds), self._n, index, size, self.generation)
        plan.running = running
        run = self._running.pop(plan.matrix, None) if running else None
        if (
            run is not None
            and run.generation == self.generation
            and run.passes < _RUNNING_PASSES
            and len(run.bounds) == len(plan.bounds)
            and index.shape[0] >= run.index.shape[0]
            and np.array_equal(index[: run.index.shape[0]], run.index)
        ):
            plan.base, plan.prior = run, run.undo
            plan.done = self._n  # rows written from now on keep their old value in undo
        self._sum_plans.append(plan)
        return plan

    def advance_sums(self, plan: SumPlan) -> None:
        """An incremental plan's sums as of :meth:`begin_sums`, from the last pass's
        (:class:`RunningSums`); call *without* the lock. Reads only the rows changed
        since the last pass, the rows that entered or left a window, and the rows added
        since. A row is read, then looked up in the plan's undo: the writer saves a row's
        old value before its first write after ``begin_sums``, so a row found there is
        taken from it and one not found was not yet written when it was read."""
        run = plan.base
        if run is None or plan.sums is not None or plan.generation != self.generation:
            return
        n0, col = plan.n, self._cols[plan.matrix]
        group, bucket = self._cols["group"][:n0], self._cols["bucket"][:n0]
        index, size = plan.index, plan.size

        def as_of_begin(rows: np.ndarray) -> np.ndarray:
            vals = col[rows].astype(np.float64)
            undo = plan.undo
            for i, r in enumerate(rows.tolist()):
                old = undo.get(r)
                if old is not None:
                    vals[i] = old
            return vals

        changed = np.fromiter(plan.prior, np.int64, len(plan.prior))
        before = (
            np.stack(list(plan.prior.values())).astype(np.float64)
            if plan.prior
            else np.zeros((0, col.shape[1]))
        )
        fresh = np.arange(run.n, n0)
        untouched = np.ones(run.n, bool)
        untouched[changed] = False
        old_b, b_changed, b_fresh = bucket[: run.n], bucket[changed], bucket[fresh]
        # rows that entered or left some window (not changed since): their value once
        flips = []
        for (lo, hi), (plo, phi) in zip(plan.bounds, run.bounds, strict=True):
            if (lo, hi) != (plo, phi):
                flips.append(((old_b >= lo) & (old_b <= hi)) != ((old_b >= plo) & (old_b <= phi)))
            else:
                flips.append(None)
        some = [f for f in flips if f is not None]
        moved = np.flatnonzero(np.logical_or.reduce(some) & untouched) if some else fresh[:0]
        b_moved = old_b[moved]
        weights = []
        for (lo, hi), (plo, phi), flip in zip(plan.bounds, run.bounds, flips, strict=True):
            if flip is None:
                sign = np.zeros(moved.shape[0])
            else:  # entered: +1, left: -1, neither: 0
                sign = np.where((b_moved >= lo) & (b_moved <= hi), 1.0, -1.0) * flip[moved]
            weights.append(
                np.concatenate(
                    [
                        -((b_changed >= plo) & (b_changed <= phi)).astype(np.float64),
                        (b_changed >= lo) & (b_changed <= hi),
                        sign,
                        (b_fresh >= lo) & (b_fresh <= hi),
                    ]
                )
            )
        rows = np.concatenate([changed, changed, moved, fresh])
        vals = np.concatenate([before, as_of_begin(np.concatenate([changed, moved, fresh]))])
        sums = []
        for last in run.sums:
            x = np.zeros((size, col.shape[1]))
            x[: last.shape[0]] = last
            sums.append(x)
        _scatter_many(sums, index[group[rows]], vals, weights)
        plan.sums = sums

    def sum_chunk(self, plan: SumPlan, index: np.ndarray, size: int) -> bool:
        """One lock hold's share of the plan: take up to a chunk of rows changed since
        their value was summed (the sums take their value now; the row leaves the undo
        log, so its next write keeps this value) and the next chunk of rows not yet
        summed — rows the writer added meanwhile included, so the lock-held finish only
        has the last few. Taking is copying: the sums are added by :meth:`add_chunk`,
        which may run outside the lock (the writer only appends to the undo log of rows
        already taken, which the finish corrects); the next call or the finish adds a
        chunk not added yet. False when every row is taken and at most a chunk of
        changed rows is left to the finish (or rows moved meanwhile: :meth:`finish_sums`
        then sums afresh). ``index`` and ``size``: the plan's group index now (groups
        added meanwhile appended)."""
        self.add_chunk(plan)
        if plan.base is not None and plan.sums is None:
            self.advance_sums(plan)  # incremental (normally advanced outside the lock)
        if plan.generation != self.generation or (plan.base is not None and plan.sums is None):
            return False
        if plan.sums is not None and size > plan.size:
            plan.sums = [np.pad(x, ((0, size - plan.size), (0, 0))) for x in plan.sums]
        plan.index, plan.size = index, size
        col = self._cols[plan.matrix]
        step = max(1, _SUM_CHUNK_BYTES // max(1, col.itemsize * col.shape[1]))
        if plan.sums is None:
            plan.sums = [np.zeros((plan.size, col.shape[1])) for _ in plan.bounds]
        if plan.undo:
            rows = np.fromiter(itertools.islice(plan.undo, step), np.int64)
            old = np.stack([plan.undo.pop(r) for r in rows.tolist()])
            delta = col[rows] - old
            at = plan.index[self._cols["group"][rows]]
            plan.pending.append((at, self._cols["bucket"][rows], delta))
        if plan.done < self._n:
            lo, hi = plan.done, min(self._n, plan.done + step)
            plan.pending.append(
                (plan.index[self.group[lo:hi]], self.bucket[lo:hi].copy(), col[lo:hi].copy())
            )
            plan.done = hi
        # more to do while rows are unsummed or more than a chunk's worth changed: the
        # writer may keep rewriting summed rows, and the finishing hold takes the rest
        return plan.done < self._n or len(plan.undo) > step

    @staticmethod
    def add_chunk(plan: SumPlan) -> None:
        """Add the chunks :meth:`sum_chunk` took to the plan's sums: reads only copies,
        so the caller need not hold the writer's lock (one thread per plan)."""
        pending, plan.pending = plan.pending, []
        for at, bucket, values in pending:
            if plan.sums:
                inside = [(bucket >= lo) & (bucket <= hi) for lo, hi in plan.bounds]
                _scatter_many(plan.sums, at, values, inside[: len(plan.sums)])

    def finish_sums(
        self, plan: SumPlan, index: np.ndarray, size: int, defer: bool = False
    ) -> list[np.ndarray]:
        """The plan's window sums as of now (call under the lock), group g in row
        ``index[g]`` of ``size`` — the plan's ``index`` extended by the groups added
        meanwhile (appended rows).

        With ``defer``: the rows still to add (changed since summed, or not summed yet)
        are left *owed* — the sums returned are complete only after :meth:`settle_sums`
        returned False and :meth:`add_chunk` ran (adding even a few hundred wide rows
        here took tens of ms per store, so none is added under this hold). Until then
        the writer saves an owed row's value before it writes it (copy-before-write,
        :meth:`rows_for`), so each row adds its value as of this call and the sums are
        exactly those of the rows this call saw."""
        if plan in self._sum_plans:
            self._sum_plans.remove(plan)
        self.add_chunk(plan)
        col = self._cols[plan.matrix][: self._n]
        group, bucket = self.group, self.bucket
        if plan.generation != self.generation or plan.sums is None:
            sums = [window_group_sums(group, bucket, col, b, index, size) for b in plan.bounds]
            self._keep_running(plan, sums, index, 0)
            return sums
        sums = plan.sums
        if size > plan.size:
            sums = [np.pad(x, ((0, size - plan.size), (0, 0))) for x in sums]
        # rows changed after their chunk was summed: swap the summed (old) value for the
        # current one; rows not yet summed when the plan ended and new rows: add them
        changed = np.fromiter(plan.undo, np.int64, len(plan.undo))
        rest = np.arange(plan.done, self._n)
        if defer and changed.shape[0] + rest.shape[0]:
            plan.sums, plan.index, plan.size = sums, index, size
            plan.owed_old, plan.undo = plan.undo, {}
            plan.owed_rows, plan.owed_at = np.union1d(changed, rest), 0
            plan.owed = np.zeros(self._n, bool)
            plan.owed[plan.owed_rows] = True
            self._settling.append(plan)
            self._keep_running(plan, sums, index, plan.base.passes + 1 if plan.base else 0)
            return sums
        old = np.stack(list(plan.undo.values())) if plan.undo else np.zeros((0, col.shape[1]))
        for x, (lo, hi) in zip(sums, plan.bounds, strict=True):
            if changed.shape[0]:
                inside = (bucket[changed] >= lo) & (bucket[changed] <= hi)
                at = index[group[changed[inside]]]
                np.add.at(x, at, col[changed[inside]] - old[inside])
            if rest.shape[0]:
                window_group_sums(group[rest], bucket[rest], col[rest], (lo, hi), index, size, x)
        self._keep_running(plan, sums, index, plan.base.passes + 1 if plan.base else 0)
        return sums

    def settle_sums(self, plan: SumPlan, budget_bytes: int) -> bool:
        """Take up to ``budget_bytes`` of the rows :meth:`finish_sums` left owed (call
        under the lock; :meth:`add_chunk` adds them, with the lock released): each row's
        value as the finish saw it — the writer's saved copy, or the row itself if not
        written since — less its summed value if it had one. True while more is owed."""
        if plan.owed is None:
            return False
        col = self._cols[plan.matrix]
        step = max(1, budget_bytes // max(1, col.itemsize * col.shape[1]))
        rows = plan.owed_rows[plan.owed_at : plan.owed_at + step]
        plan.owed_at += rows.shape[0]
        if rows.shape[0]:
            vals = col[rows].astype(np.float64)
            for i, r in enumerate(rows.tolist()):
                kept = plan.saved.pop(r, None)
                if kept is not None:
                    vals[i] = kept
                old = plan.owed_old.pop(r, None)
                if old is not None:
                    vals[i] -= old
            plan.owed[rows] = False
            at = plan.index[self._cols["group"][rows]]
            plan.pending.append((at, self._cols["bucket"][rows].copy(), vals))
        if plan.owed_at < plan.owed_rows.shape[0]:
            return True
        self._drop_settling(plan)
        return False

    def drop_sums(self, plan: SumPlan) -> None:
        """A plan whose owed rows will not be settled (its pass failed): its sums are
        not kept for the next pass, and the writer stops saving rows for it."""
        self.abandon_sums(plan)
        if plan.owed is not None:
            self._drop_settling(plan)
            run = self._running.get(plan.matrix)
            if run is not None and run.sums is plan.sums:
                del self._running[plan.matrix]

    def _drop_settling(self, plan: SumPlan) -> None:
        plan.owed, plan.saved, plan.owed_old = None, {}, {}
        if plan in self._settling:
            self._settling.remove(plan)

    def _save_owed(self, plan: SumPlan, rows: np.ndarray) -> None:
        """Keep the value of each owed row of ``rows`` before it is written."""
        owed = plan.owed
        if owed is None:
            return
        rows = rows[rows < owed.shape[0]]
        rows = rows[owed[rows]]
        if rows.shape[0]:
            col = self._cols[plan.matrix]
            for r in rows.tolist():
                plan.saved[r] = col[r].copy()
            owed[rows] = False

    def _keep_running(
        self, plan: SumPlan, sums: list[np.ndarray], index: np.ndarray, passes: int
    ) -> None:
        """The finished sums become the next pass's start (never changed in place: the
        next pass adds into copies, as these are the caller's); a one-off's are not."""
        if not plan.running:
            return
        self._running[plan.matrix] = RunningSums(
            sums, list(plan.bounds), self._n, index.copy(), self.generation, passes
        )

    def abandon_sums(self, plan: SumPlan) -> None:
        if plan in self._sum_plans:
            self._sum_plans.remove(plan)

    def _save_undo(self, plan: SumPlan, rows: np.ndarray) -> None:
        if plan.generation != self.generation:
            return
        _save_old(plan.undo, self._cols[plan.matrix], rows[rows < plan.done])

    def load(self, state: Mapping[str, np.ndarray]) -> None:
        self._settle_all()
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
            legacy = self._legacy.get(name, ())
            if arr.ndim == 2 and arr.shape[0] == n and arr.shape[1] in legacy:  # appended since
                arr = np.concatenate([arr, np.zeros((n, shape[0] - arr.shape[1]), dtype)], 1)
            if name.startswith("m.") and arr.shape != (n, *shape):
                cols[name] = np.zeros((n, *shape), dtype)  # layout changed: history dropped
                continue
            if arr.shape != (n, *shape):
                raise ValueError(f"bucket state {name!r} has shape {arr.shape}, not {(n, *shape)}")
            if name in ("group", "bucket"):
                pass
            elif name == "tier":
                if ((arr < 0) | (arr > 3)).any():
                    raise ValueError("bucket state holds unknown tiers")
            elif arr.dtype.kind == "f":  # sums (regression errors may be negative)
                if not np.isfinite(arr).all():
                    raise ValueError(f"bucket state {name!r} holds non-finite sums")
            elif (arr < 0).any():
                raise ValueError(f"bucket state {name!r} holds negative counts")
            cols[name] = arr
        self._cap = max(_MIN_ROWS, n)
        self._n = n
        self._rolled_to = None  # restored rows may predate the tiers
        self._stamp = np.zeros(self._cap, np.int64)
        self.generation += 1
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
