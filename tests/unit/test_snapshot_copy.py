"""The snapshot's store copy made outside the engine lock equals a copy made entirely
under it, whatever the writer does meanwhile (rows written, rows added, the store grown,
rows moved by a roll-up)."""

from __future__ import annotations

import numpy as np

from monitor.engine.buckets import BucketStore

WIDTH = 60_000


def _store() -> BucketStore:
    return BucketStore(WIDTH, {"scores": (6, np.float64)})


def _write(store: BucketStore, rng: np.random.Generator, groups: int, buckets: int) -> None:
    g = rng.integers(0, groups, 50)
    ts = rng.integers(0, buckets, 50) * WIDTH
    rows = store.rows_for(g, ts)
    np.add.at(store.matrix("scores"), (rows, rng.integers(0, 6, 50)), rng.random(50))
    store.add_joined(g, ts, rng.integers(0, 2, 50), rng.integers(0, 2, 50))


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_rows_written_during_the_copy_are_recopied() -> None:
    rng = np.random.default_rng(1)
    store = _store()
    for _ in range(20):
        _write(store, rng, 30, 40)
    plan = store.begin_copy()
    plan.copy()
    for _ in range(5):  # old rows and new ones, enough new ones to grow the arrays
        _write(store, rng, 60, 80)
    _same(store.finish_copy(plan), store.state())
    assert 0 < plan.patched <= len(store)


def test_writes_between_begin_and_copy_are_seen() -> None:
    rng = np.random.default_rng(2)
    store = _store()
    _write(store, rng, 10, 10)
    plan = store.begin_copy()
    _write(store, rng, 10, 10)  # before the bulk copy: copied or patched, never lost
    plan.copy()
    _write(store, rng, 10, 10)
    _same(store.finish_copy(plan), store.state())


def test_a_roll_up_meanwhile_falls_back_to_a_full_copy() -> None:
    rng = np.random.default_rng(3)
    store = _store()
    for _ in range(10):
        _write(store, rng, 5, 200)
    plan = store.begin_copy()
    plan.copy()
    moved = store.roll_up(store.tiers.advanced(200 * WIDTH, 2 * 3_600_000, 8 * 86_400_000))
    assert moved > 0
    _same(store.finish_copy(plan), store.state())


def test_two_overlapping_copies_both_see_every_write() -> None:
    rng = np.random.default_rng(4)
    store = _store()
    _write(store, rng, 10, 10)
    first = store.begin_copy()
    first.copy()
    _write(store, rng, 10, 10)
    second = store.begin_copy()  # must not forget the rows the first copy needs
    second.copy()
    _write(store, rng, 10, 10)
    _same(store.finish_copy(first), store.state())
    _same(store.finish_copy(second), store.state())


def test_engine_snapshot_under_a_lock_equals_one_without() -> None:
    import threading

    from tests.unit.test_slice_scores import NOW, _data, _engine, _feed

    engine = _engine()
    country, y, score = _data(3_000, seed=4)
    _feed(engine, country, y, score)
    locked = engine.snapshot(NOW, lock=threading.RLock(), retain=False)
    assert len(engine.lock_holds_s) == 3
    free = engine.snapshot(NOW, retain=False)
    assert [repr(r) for r in locked.results] == [repr(r) for r in free.results]
    assert locked.results
