"""A store whose matrix keeps thin rows as (row, column, value) triples reads as the
same store kept dense, for every reader: its rows, window sums (chunked, running, left
owed), the copy, roll-up, retention and a checkpoint round trip. Float cells agree to
1e-9 (sums are added in another order); every integer column is equal."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import monitor.engine.buckets as buckets
from monitor.engine.buckets import BucketStore, window_group_sums
from monitor.engine.sparse_rows import SparseRows

WIDTH_MS = 60_000
COLS = 40  # a row takes a slot past 10 triples
TOL = {"rtol": 1e-9, "atol": 1e-9}


def _pair() -> tuple[BucketStore, BucketStore]:
    spec = {"cells": (COLS, np.float64)}
    return BucketStore(WIDTH_MS, spec), BucketStore(WIDTH_MS, spec, frozenset({"cells"}))


def _write(
    stores: tuple[BucketStore, BucketStore],
    rng: np.random.Generator,
    groups: int,
    lo: int,
    hi: int,
    n: int,
) -> None:
    """The same events into both stores: 3 cells each (one of them often weight 0, as a
    score histogram's label-weighted cells are for negatives)."""
    g = rng.integers(0, groups, n)
    ts = rng.integers(lo, hi, n) * WIDTH_MS
    cols = rng.integers(0, COLS, (3, n))
    weights = rng.random((3, n)) * (rng.random((3, n)) < 0.8)
    y, decided = rng.integers(0, 2, n), rng.integers(0, 2, n)
    for store in stores:
        rows = store.rows_for(g, ts)
        sparse = store.sparse_matrix("cells")
        if sparse is None:
            for c, w in zip(cols, weights, strict=True):
                np.add.at(store.matrix("cells"), (rows, c), w)
        else:
            sparse.add_cells(rows, cols, weights)
        store.add_joined(g, ts, y, decided)


def _same_state(dense: dict[str, np.ndarray], sparse: dict[str, np.ndarray]) -> None:
    assert dense.keys() == sparse.keys()
    for k in dense:
        if dense[k].dtype.kind == "f":
            np.testing.assert_allclose(sparse[k], dense[k], err_msg=k, **TOL)
        else:
            np.testing.assert_array_equal(sparse[k], dense[k], err_msg=k)


def _fresh(state: dict[str, np.ndarray], bounds: list, n_groups: int) -> list[np.ndarray]:
    idx = np.arange(n_groups)
    return [
        window_group_sums(state["group"], state["bucket"], state["m.cells"], b, idx, n_groups)
        for b in bounds
    ]


def _pass(
    stores: tuple[BucketStore, BucketStore],
    rng: np.random.Generator,
    n_groups: int,
    bounds: list[tuple[int, int]],
    defer: bool,
    hi: int,
) -> None:
    """One evaluation's window sums on both stores, the writer writing between each
    step; the sums equal each other and a fresh sum of the rows the finish saw."""
    idx = np.arange(n_groups)
    plans = [s.begin_sums("cells", bounds, idx, n_groups) for s in stores]
    _write(stores, rng, n_groups, hi - 20, hi, 30)  # before the pass advanced
    for s, p in zip(stores, plans, strict=True):
        s.advance_sums(p)
    _write(stores, rng, n_groups, hi - 20, hi + 2, 30)  # after
    for s, p in zip(stores, plans, strict=True):
        while s.sum_chunk(p, idx, n_groups):
            s.add_chunk(p)
    _write(stores, rng, n_groups, hi - 20, hi + 2, 30)  # rows the finish may owe
    got = [s.finish_sums(p, idx, n_groups, defer=defer) for s, p in zip(stores, plans, strict=True)]
    seen = stores[0].state()
    _write(stores, rng, n_groups, hi - 20, hi + 2, 30)  # between the finish and the settling
    for s, p in zip(stores, plans, strict=True):
        buckets.settle_sums([(s, p)], contextlib.nullcontext())
    for a, b, c in zip(*got, _fresh(seen, bounds, n_groups), strict=True):
        np.testing.assert_allclose(b, a, **TOL)
        np.testing.assert_allclose(b, c, **TOL)


def _copy(stores: tuple[BucketStore, BucketStore], rng: np.random.Generator, hi: int) -> None:
    """The evaluation's copy, rows written after the bulk copy: equal on both stores."""
    plans = [s.begin_copy() for s in stores]
    for p in plans:
        p.copy()
    _write(stores, rng, 12, hi - 20, hi + 2, 40)
    copies = [s.finish_copy(p) for s, p in zip(stores, plans, strict=True)]
    _same_state(*copies)
    _same_state(copies[0], stores[0].state())


def _round_trip(stores: tuple[BucketStore, BucketStore]) -> None:
    """A checkpoint of the sparse store (dense rows, the format unchanged) loads into a
    sparse store equal to both; the dense store's loads into a sparse one too."""
    for store in stores:
        again = _pair()[1]
        again.load(store.state())
        _same_state(stores[0].state(), again.state())


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    steps=st.lists(st.sampled_from(["write", "pass", "owed", "roll", "drop", "copy", "save"]),
                   min_size=3, max_size=12),
)  # fmt: skip
def test_a_sparse_store_reads_as_the_dense_store(seed: int, steps: list[str]) -> None:
    rng = np.random.default_rng(seed)
    stores = _pair()
    hi, n_groups = 30, 12
    _write(stores, rng, n_groups, 0, hi, 200)
    for step in steps:
        hi += 7  # time moves on: new rows, windows that slide
        if step == "write":
            _write(stores, rng, n_groups, hi - 30, hi, int(rng.integers(1, 300)))
        elif step in ("pass", "owed"):
            bounds = [(hi - 25, hi), (hi - 12, hi - 3), (0, hi + 5)]
            _pass(stores, rng, n_groups, bounds, step == "owed", hi)
        elif step == "roll":
            tiers = stores[0].tiers.advanced(hi * WIDTH_MS, 600_000, 7_200_000, 14_400_000)
            assert stores[0].roll_up(tiers) == stores[1].roll_up(tiers)
        elif step == "drop":
            cut = hi - 40
            assert stores[0].drop_before(cut) == stores[1].drop_before(cut)
        elif step == "copy":
            _copy(stores, rng, hi)
        else:
            _round_trip(stores)
        _same_state(stores[0].state(), stores[1].state())
        assert stores[0]._index == stores[1]._index
    _pass(stores, rng, n_groups, [(hi - 25, hi), (0, hi + 5)], False, hi)  # running sums
    _same_state(stores[0].state(), stores[1].state())


def _reference(rows: SparseRows) -> np.ndarray:
    return rows.take(np.arange(rows.shape[0]))


def test_thin_rows_stay_triples_and_a_full_row_takes_a_slot() -> None:
    """A row with few cells costs its triples, not a dense row; past a quarter of the
    width it gets a slot holding the same values, its triples dropped."""
    m = SparseRows(100, 40)
    m.add_cells(np.array([3, 7]), np.array([[1, 2], [5, 5]]), np.array([[1.0, 2.0], [0.5, 0]]))
    assert m.n_slots == 0 and m.nt == 3  # the zero weight left out
    expected = np.zeros((100, 40))
    expected[3, 1], expected[3, 5], expected[7, 2] = 1.0, 0.5, 2.0
    np.testing.assert_array_equal(_reference(m), expected)
    cols = np.arange(11)[:, np.newaxis]  # 11 more triples: row 7 passes 10
    m.add_cells(np.array([7]), cols, np.ones((11, 1)))
    expected[7, :11] += 1.0
    assert m.slot[7] >= 0 and m.count[7] == 0 and m.slot[3] < 0
    np.testing.assert_array_equal(_reference(m), expected)
    m.add_cells(np.array([7, 3]), np.array([[0, 0]]), np.array([[2.0, 3.0]]))  # slot + triple
    expected[7, 0] += 2.0
    expected[3, 0] += 3.0
    np.testing.assert_array_equal(_reference(m), expected)
    assert m.nbytes < expected.nbytes / 4


@pytest.mark.parametrize("thin", [True, False])
def test_rows_loaded_from_a_checkpoint_keep_their_values(thin: bool) -> None:
    rng = np.random.default_rng(3)
    arr = rng.random((50, 40)) * (rng.random((50, 40)) < (0.05 if thin else 0.9))
    m = SparseRows.of_dense(arr, 64)
    np.testing.assert_array_equal(m.take(np.arange(50)), arr)
    assert not m.take(np.arange(50, 64)).any()
    assert (m.n_slots == 0) if thin else (m.nt == 0)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), groups=st.integers(2, 30))
def test_window_sums_beside_a_concurrent_writer_are_the_lock_held_state(
    seed: int, groups: int
) -> None:
    """The evaluation's path on a sparse store (advanced outside the lock, a chunk per
    hold, the finish's rows left owed and settled) while a writer thread appends
    triples, fills rows into slots and adds rows under the same lock: the sums equal a
    fresh sum of the state the finishing hold saw, pass after pass."""
    import threading

    rng = np.random.default_rng(seed)
    stores = _pair()
    store, lock = stores[1], threading.Lock()
    _write(stores, rng, groups, 0, 40, 300)
    stop = threading.Event()

    def writer() -> None:
        wrng = np.random.default_rng(seed + 1)
        while not stop.is_set():
            with lock:
                _write((store,), wrng, groups, 20, 45, int(wrng.integers(1, 60)))

    thread = threading.Thread(target=writer)
    thread.start()
    idx = np.arange(groups)
    try:
        for step in range(4):
            bounds = [(step, 30 + step), (25, 44)]
            with lock:
                plan = store.begin_sums("cells", bounds, idx, groups)
            store.advance_sums(plan)
            more = True
            while more:
                with lock:
                    more = store.sum_chunk(plan, idx, groups)
                store.add_chunk(plan)
            with lock:
                got = buckets.finish_sums_deferred(store, plan, idx, groups)
                seen = store.state()
            buckets.settle_sums([(store, plan)], lock)
            for a, b in zip(got, _fresh(seen, bounds, groups), strict=True):
                np.testing.assert_allclose(a, b, **TOL)
    finally:
        stop.set()
        thread.join()
    assert store.sparse_matrix("cells").nt > 0


def test_rows_read_in_any_order_and_repeated() -> None:
    rng = np.random.default_rng(5)
    arr = rng.random((30, 40)) * (rng.random((30, 40)) < 0.1)
    m = SparseRows.of_dense(arr, 30)
    rows = np.array([7, 3, 7, 29, 0, 3])
    np.testing.assert_array_equal(m.take(rows), arr[rows])
    np.testing.assert_array_equal(m[5:17], arr[5:17])
    np.testing.assert_array_equal(m[4], arr[4])
