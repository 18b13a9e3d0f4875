"""The snapshot's store copy made outside the engine lock equals a copy made entirely
under it, whatever the writer does meanwhile (rows written, rows added, the store grown,
rows moved by a roll-up)."""

from __future__ import annotations

import contextlib

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import monitor.engine.buckets as buckets
from monitor.engine.buckets import BucketStore, CopyPlan
from monitor.metrics.protocol import Stat

WIDTH = 60_000


CELLS = Stat("cells")  # a matrix of 6 float cells per row


def _store() -> BucketStore:
    return BucketStore(WIDTH, {CELLS.name: (6, np.float64)})


def _write(store: BucketStore, rng: np.random.Generator, groups: int, buckets: int) -> None:
    g = rng.integers(0, groups, 50)
    ts = rng.integers(0, buckets, 50) * WIDTH
    rows = store.rows_for(g, ts)
    np.add.at(store.matrix(CELLS.name), (rows, rng.integers(0, 6, 50)), rng.random(50))
    store.add_joined(g, ts, rng.integers(0, 2, 50), rng.integers(0, 2, 50))


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def _bulk_copied(
    seed: int, buckets_used: int = 40, after: tuple[int, int] = (60, 80)
) -> tuple[BucketStore, CopyPlan, np.random.Generator]:
    """A store bulk-copied, then written: ``after`` (groups, buckets) reach old rows and
    new ones (by default enough new ones to grow the arrays)."""
    rng = np.random.default_rng(seed)
    store = _store()
    for _ in range(20):
        _write(store, rng, 30, buckets_used)
    plan = store.begin_copy()
    plan.copy()
    for _ in range(5):
        _write(store, rng, *after)
    return store, plan, rng


def test_rows_written_during_the_copy_are_recopied() -> None:
    store, plan, _ = _bulk_copied(1)
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


def test_growth_keeps_the_rows_zeroes_new_ones_and_spares_a_view_being_read() -> None:
    rng = np.random.default_rng(7)
    store = _store()
    for _ in range(20):
        _write(store, rng, 30, 40)
    before, n0, size0 = store.state(), len(store), store.nbytes()
    for held in (True, False):  # a reader's view alive across the growth, then none
        view = store.matrix(CELLS.name) if held else None
        start = len(store)
        while store.nbytes() == size0 or len(store) == start:  # new rows only: grows
            g = np.arange(40)
            store.rows_for(g, np.full(40, 1_000 + len(store)) * WIDTH)
        size0 = store.nbytes()
        if view is not None:  # the block it reads was not freed nor changed
            np.testing.assert_array_equal(view, before["m.cells"])
        after = store.state()
        for k, col in before.items():
            np.testing.assert_array_equal(after[k][:n0], col, err_msg=k)
            if k not in ("group", "bucket", "tier"):
                assert not after[k][n0:].any(), k


def test_a_roll_up_meanwhile_falls_back_to_a_full_copy() -> None:
    rng = np.random.default_rng(3)
    store = _store()
    for _ in range(10):
        _write(store, rng, 5, 200)
    plan = store.begin_copy()
    plan.copy()
    moved = store.roll_up(
        store.tiers.advanced(200 * WIDTH, 2 * 3_600_000, 8 * 86_400_000, 9 * 86_400_000)
    )
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


def test_rounds_leave_the_finish_only_what_was_written_after_them() -> None:
    """Rows written after the bulk copy are copied again in a round outside the lock; a
    writer that then stops leaves the lock-held finish nothing to copy."""
    store, plan, _ = _bulk_copied(10)
    assert store.pending_bytes(plan) > 0
    taken = store.take_round(plan)
    assert taken is not None and taken.changed.shape[0] > 0 and taken.added[1] > taken.added[0]
    taken.copy()
    assert store.pending_bytes(plan) == 0
    _same(store.finish_copy(plan), store.state())
    assert plan.patched == 0


def test_a_row_written_while_its_round_copies_it_is_copied_again() -> None:
    """A round copies outside the lock, so it may read a row half-written: every row
    written after the round was taken is stamped again and re-copied by the finish,
    whatever the round read (here: garbage in its place)."""
    store, plan, rng = _bulk_copied(11, after=(30, 40))
    taken = store.take_round(plan)
    assert taken is not None
    g = rng.integers(0, 30, 50)  # the writer, between the take and the round's copy
    rows = np.unique(store.rows_for(g, rng.integers(0, 40, 50) * WIDTH))
    store.matrix(CELLS.name)[rows] += 1.0
    taken.copy()
    assert plan.copied is not None
    plan.copied[CELLS.key][rows] = np.nan  # as if torn
    assert store.pending_bytes(plan) > 0
    _same(store.finish_copy(plan), store.state())
    assert plan.patched == rows.shape[0]


def _concurrent_copy(
    seed: int, groups: int, n_buckets: int, budget: int, stop_after: int | None
) -> tuple[CopyPlan, dict[str, np.ndarray], dict[str, np.ndarray], int]:
    """A copy made by the engine's path (bulk copy, rounds, finish, owed rows settled)
    while a writer thread writes under the same lock: the plan, the finished copy and a
    stop-the-world copy taken in the same hold as the finish, and the writes made."""
    import threading

    rng = np.random.default_rng(seed)
    store, lock = _store(), threading.Lock()
    for _ in range(10):
        _write(store, rng, groups, n_buckets)
    stop, wrote, writes = threading.Event(), threading.Event(), [0]

    def writer() -> None:
        wrng = np.random.default_rng(seed + 1)
        while not stop.is_set() and (stop_after is None or writes[0] < stop_after):
            with lock:
                _write(store, wrng, groups + 5, n_buckets + 5)  # old rows and new ones
                writes[0] += 1
            wrote.set()

    thread = threading.Thread(target=writer)
    with lock:
        plan = store.begin_copy()
    thread.start()
    try:
        plan.copy()
        wrote.wait()  # the writer has written since the copy began
        holds: list[float] = []
        saved = buckets._FINAL_COPY_BYTES
        buckets._FINAL_COPY_BYTES = budget
        try:
            buckets.copy_in_rounds([(store, plan)], lock, holds)
            assert 1 <= len(holds) <= buckets._COPY_ROUNDS  # the rounds end, writer or not
            with lock:  # the final section: the copy must equal the state it holds
                done, world = buckets.finish_copies([(store, plan)])[id(store)], store.state()
            buckets.settle_copies([(store, plan)], lock)  # the writer goes on meanwhile
        finally:
            buckets._FINAL_COPY_BYTES = saved
    finally:
        stop.set()
        thread.join()
    return plan, done, world, writes[0]


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    groups=st.integers(1, 40),
    n_buckets=st.integers(1, 60),
    budget=st.sampled_from([0, 500, 50_000]),
)
def test_a_copy_beside_a_concurrent_writer_is_exactly_the_lock_held_state(
    seed: int, groups: int, n_buckets: int, budget: int
) -> None:
    plan, done, world, _ = _concurrent_copy(seed, groups, n_buckets, budget, stop_after=200)
    _same(done, world)
    assert plan.rounds <= buckets._COPY_ROUNDS


def test_rounds_end_under_a_writer_that_writes_all_the_time() -> None:
    """A writer that never stops rewriting every row: the rounds still end (round limit,
    or no progress) and the finish copies what is left, exactly."""
    plan, done, world, writes = _concurrent_copy(12, 5, 5, 0, stop_after=None)
    assert writes > 0 and 1 <= plan.rounds <= buckets._COPY_ROUNDS
    _same(done, world)


def _owing_copy(
    seed: int, buckets_used: int = 40
) -> tuple[BucketStore, CopyPlan, dict, dict, np.random.Generator]:
    """A store whose copy was finished with a budget too small for the rows written
    since the bulk copy: (store, plan, the copy, the state at the finish, rng)."""
    store, plan, rng = _bulk_copied(seed, buckets_used, (30, buckets_used))
    done, world = store.finish_copy(plan, budget_bytes=0), store.state()
    assert plan.owed is not None and plan.owed.sum() > 10
    assert plan.patched == len(store) - plan.n  # only the new rows were copied
    return store, plan, done, world, rng


def test_rows_a_finish_left_owed_are_copied_before_the_writer_writes_them() -> None:
    """Past its budget the finish leaves rows owed: the writer copies each owed row it is
    about to write (its value at the finish), the settling copies the rest a budget per
    call, and the copy ends exactly as the state the finish saw."""
    store, plan, done, world, rng = _owing_copy(14)
    assert plan.owed is not None
    owed = int(plan.owed.sum())
    for _ in range(3):  # writes to owed rows, old rows and new ones
        _write(store, rng, 40, 50)
    paid = owed - int(plan.owed.sum())
    assert paid > 0  # the writer copied some owed rows itself
    calls = 0
    while not store.settle_copy(plan, 3 * store._row_bytes()):  # three rows per hold
        calls += 1
    assert calls >= (owed - paid) // 3 - 1 and plan.owed is None and not store._owing
    _same(done, world)
    with np.testing.assert_raises(AssertionError):  # the store itself moved on
        _same(store.state(), world)


def test_a_roll_up_while_rows_are_owed_settles_them_first() -> None:
    store, plan, done, world, _ = _owing_copy(15, buckets_used=200)
    moved = store.roll_up(
        store.tiers.advanced(200 * WIDTH, 2 * 3_600_000, 8 * 86_400_000, 9 * 86_400_000)
    )
    assert moved > 0 and plan.owed is None
    assert store.settle_copy(plan, 1)
    _same(done, world)


def test_a_failed_pass_drops_its_owed_rows() -> None:
    store, plan, _, _, rng = _owing_copy(16)
    store.drop_copy(plan)
    assert plan.owed is None and not store._owing
    _write(store, rng, 30, 40)  # the writer no longer copies for it


def test_engine_snapshot_under_a_lock_equals_one_without() -> None:
    import threading

    from tests.unit.test_slice_scores import NOW, _data, _engine, _feed

    engine = _engine()
    country, y, score = _data(3_000, seed=4)
    _feed(engine, country, y, score)
    locked = engine.snapshot(NOW, lock=threading.RLock(), retain=False)
    assert len(engine.lock_holds_s) == 4 and engine.lock_holds_s[1] > 0  # chunks summed
    free = engine.snapshot(NOW, retain=False)
    assert locked.results
    # chunked sums add in another order: equal up to rounding, counts exactly
    assert len(locked.results) == len(free.results)
    for a, b in zip(locked.results, free.results, strict=True):
        assert (a.slice, a.window, a.predictions, a.labeled, a.confusion) == (
            b.slice, b.window, b.predictions, b.labeled, b.confusion
        )  # fmt: skip
        assert [(m.name, m.n, m.note) for m in a.metrics] == [
            (m.name, m.n, m.note) for m in b.metrics
        ]
        for x, y in zip(a.metrics, b.metrics, strict=True):
            np.testing.assert_allclose(
                [x.value, x.lower, x.upper], [y.value, y.lower, y.upper], rtol=1e-9, atol=1e-12
            )


def test_engine_snapshot_with_rows_owed_equals_one_without(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Rows written after the bulk copy and left owed by the final section (no rounds, no
    budget) are settled before evaluation: the results equal a snapshot without a lock."""
    import threading

    from monitor.engine.records import LabelBatch, PredictionBatch, hash_ids
    from tests.unit.test_slice_scores import BASE, NOW, _data, _engine, _feed

    engine = _engine()
    country, y, score = _data(3_000, seed=4)
    _feed(engine, country, y, score)
    monkeypatch.setattr(buckets, "_FINAL_COPY_BYTES", 0)
    monkeypatch.setattr(buckets, "_COPY_ROUNDS", 0)
    bulk, settle = buckets.CopyPlan.copy, BucketStore.settle_copy
    owed: list[int] = []

    def copy_then_write(plan: CopyPlan) -> None:  # the writer, after each bulk copy
        bulk(plan)
        n = 300
        ts = BASE + np.arange(120_000, 3_500_000, (3_500_000 - 120_000) // n)[:n]
        keys = hash_ids([f"late{len(owed)}-{i}" for i in range(n)])
        s = np.linspace(0.01, 0.99, n)
        engine.apply_predictions(
            PredictionBatch(keys, ts, np.zeros(n, np.int16), ["v1"] * n, s,
                            (s >= 0.5).astype(np.int8),
                            segments=[{"country": "de"} for _ in range(n)])
        )  # fmt: skip
        engine.apply_labels(LabelBatch(keys[::2], ts[::2] + 10, ["1"] * (n // 2)))

    def counted(store: BucketStore, plan: CopyPlan, budget: int) -> bool:
        owed.append(0 if plan.owed is None else int(plan.owed.sum()))
        return settle(store, plan, budget)

    monkeypatch.setattr(buckets.CopyPlan, "copy", copy_then_write)
    monkeypatch.setattr(BucketStore, "settle_copy", counted)
    locked = engine.snapshot(NOW, lock=threading.RLock(), retain=False)
    assert max(owed) > 1  # rows were owed, and settled a row per hold
    free = engine.snapshot(NOW, retain=False)
    assert len(locked.results) == len(free.results) > 0
    for a, b in zip(locked.results, free.results, strict=True):
        assert (a.slice, a.window, a.predictions, a.labeled, a.confusion) == (
            b.slice, b.window, b.predictions, b.labeled, b.confusion
        )  # fmt: skip
        for x, z in zip(a.metrics, b.metrics, strict=True):
            np.testing.assert_allclose(
                [x.value, x.lower, x.upper], [z.value, z.lower, z.upper], rtol=1e-9, atol=1e-12
            )


def _fresh_sums(store: BucketStore, bounds: list[tuple[int, int]], n_groups: int) -> list:
    from monitor.engine.buckets import window_group_sums

    return [
        window_group_sums(
            store.group, store.bucket, store.matrix(CELLS.name), b, np.arange(n_groups), n_groups
        )
        for b in bounds
    ]


def test_window_sums_by_chunks_equal_sums_of_the_final_rows(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Chunks summed between writes: rows written after their chunk was summed, rows
    written before, new rows and new groups all end up exactly as a fresh sum."""

    monkeypatch.setattr(buckets, "_SUM_CHUNK_BYTES", 48 * 20)  # 20 rows per chunk
    rng = np.random.default_rng(5)
    store = _store()
    for _ in range(10):
        _write(store, rng, 30, 60)
    bounds = [(0, 59), (30, 59), (55, 59), (100, 200)]
    plan = store.begin_sums(CELLS.name, bounds, np.arange(30), 30)
    chunks = 0
    while store.sum_chunk(plan, np.arange(40), 40):
        chunks += 1
        if chunks <= 12:  # a writer that stops: the chunks then catch up
            _write(store, rng, 40, 70)  # old rows (summed or not), new rows, new groups
    assert chunks > 3
    got = store.finish_sums(plan, np.arange(40), 40)
    for a, b in zip(got, _fresh_sums(store, bounds, 40), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def _rolled_up_while_summing(rng: np.random.Generator, finish: bool):  # type: ignore[no-untyped-def]
    """A store of 5 groups × 200 buckets with a sum begun over them (one chunk summed, or
    the pass finished), then rows rolled up: the rows the sums were taken from moved."""
    store = _store()
    for _ in range(10):
        _write(store, rng, 5, 200)
    bounds = [(0, 199)]
    plan = store.begin_sums(CELLS.name, bounds, np.arange(5), 5)
    if finish:
        store.finish_sums(plan, np.arange(5), 5)
    else:
        store.sum_chunk(plan, np.arange(5), 5)
    assert (
        store.roll_up(
            store.tiers.advanced(200 * WIDTH, 2 * 3_600_000, 8 * 86_400_000, 9 * 86_400_000)
        )
        > 0
    )
    return store, bounds, plan


def test_window_sums_after_a_roll_up_are_summed_afresh() -> None:
    rng = np.random.default_rng(6)
    store, bounds, plan = _rolled_up_while_summing(rng, finish=False)
    assert not store.sum_chunk(plan, np.arange(5), 5)
    got = store.finish_sums(plan, np.arange(5), 5)
    np.testing.assert_allclose(got[0], _fresh_sums(store, bounds, 5)[0], rtol=1e-12)


def _as_rows(store: BucketStore) -> dict[tuple[int, int, int], tuple[float, ...]]:
    v = store.view()
    return {
        (int(g), int(t), int(b)): (int(p), int(lab), *c.tolist(), *m.tolist())
        for g, t, b, p, lab, c, m in zip(
            v["group"], v["tier"], v["bucket"], v["predicted"], v["labeled"],
            v["confusion"], v[CELLS.key], strict=True,
        )
    }  # fmt: skip


def test_roll_up_and_retention_move_only_the_rows_they_remove() -> None:
    """Rows removed by a roll-up or a drop are filled from the end of the store: the rows
    equal the old rows summed into their hour/day rows minus the dropped ones, the index
    stays right, freed rows are zero, and later writes find their rows."""
    rng = np.random.default_rng(7)
    store = _store()
    for _ in range(30):
        _write(store, rng, 6, 400)
    before = _as_rows(store)
    tiers = store.tiers.advanced(400 * WIDTH, 2 * 3_600_000, 8 * 86_400_000, 9 * 86_400_000)
    assert store.roll_up(tiers) > 0
    assert store.drop_before(120) > 0
    expected: dict[tuple[int, int, int], np.ndarray] = {}
    for (g, _, b), values in before.items():
        t = tiers.tier_of(b)
        start = b - b % tiers.span(t)
        if start + tiers.span(t) <= 120:
            continue  # dropped
        key = (g, t, start)
        expected[key] = expected.get(key, 0) + np.array(values, dtype=np.float64)
    got = _as_rows(store)
    assert got.keys() == expected.keys()
    for key, values in expected.items():
        np.testing.assert_allclose(got[key], values, rtol=1e-12)
    keys = store._keys(np.arange(len(store))).tolist()
    assert store._index == {k: i for i, k in enumerate(keys)}
    assert not store._cols[CELLS.key][len(store) :].any()
    # writes after the removal land in the right rows
    rows = store.rows_for(np.array([2]), np.array([399 * WIDTH]))
    assert store._keys(rows).tolist() == [(2 << 38) | 399]


def test_running_window_sums_equal_fresh_sums_pass_after_pass() -> None:
    """Running window sums: each pass starts from the last one's sums; rows written
    between passes, during a pass (before and after it advanced), new rows, new groups
    and windows that slide all end up as a fresh sum of the final rows, while a pass
    reads only what changed (no chunk of the whole store)."""
    rng = np.random.default_rng(8)
    store = _store()
    for _ in range(10):
        _write(store, rng, 30, 60)
    n_groups = 30
    incremental = 0
    for step in range(12):
        lo = step * 3  # the windows slide; one stays put, one is empty
        bounds = [(lo, lo + 40), (lo + 30, lo + 45), (0, 80), (500, 600)]
        plan = store.begin_sums(CELLS.name, bounds, np.arange(n_groups), n_groups)
        incremental += plan.base is not None
        _write(store, rng, n_groups, 70)  # before the pass advanced
        store.advance_sums(plan)
        n_groups += 2  # new groups meanwhile
        _write(store, rng, n_groups, 75 + step)  # after it advanced
        assert not store.sum_chunk(plan, np.arange(n_groups), n_groups) or plan.base is None
        while store.sum_chunk(plan, np.arange(n_groups), n_groups):
            pass
        got = store.finish_sums(plan, np.arange(n_groups), n_groups)
        for a, b in zip(got, _fresh_sums(store, bounds, n_groups), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)
        _write(store, rng, n_groups, 80)  # between passes
    assert incremental == 11  # every pass after the first was incremental


def _sums_of(state: dict[str, np.ndarray], bounds: list, n_groups: int) -> list:
    from monitor.engine.buckets import window_group_sums

    idx = np.arange(n_groups)
    return [
        window_group_sums(state["group"], state["bucket"], state[CELLS.key], b, idx, n_groups)
        for b in bounds
    ]


def test_window_sums_left_owed_end_as_the_sums_the_finish_saw() -> None:
    """Past its budget the sums' finish leaves rows owed: the writer keeps an owed row's
    value before writing it, the settling adds each row's value as of the finish, and the
    sums equal fresh sums of the state the finish saw — pass after pass (running sums),
    with writes between the finish and the settling."""
    rng = np.random.default_rng(17)
    store = _store()
    for _ in range(10):
        _write(store, rng, 30, 60)
    n_groups, owed_passes = 30, 0
    for step in range(6):
        bounds = [(step, step + 40), (0, 80), (50, 59)]
        plan = store.begin_sums(CELLS.name, bounds, np.arange(n_groups), n_groups)
        store.advance_sums(plan)
        _write(store, rng, n_groups + 2, 70)  # after the plan began: changed and new rows
        n_groups += 2
        while store.sum_chunk(plan, np.arange(n_groups), n_groups):
            store.add_chunk(plan)
        _write(store, rng, n_groups, 70)  # rows the finish will owe
        got = store.finish_sums(plan, np.arange(n_groups), n_groups, defer=True)
        seen = store.state()
        owed_passes += plan.owed is not None
        for _ in range(3):  # the writer between the finish and the settling
            _write(store, rng, n_groups, 75)
            if store.settle_sums(plan, 2 * 48):  # two rows per hold
                store.add_chunk(plan)
        buckets.settle_sums([(store, plan)], contextlib.nullcontext())
        assert plan.owed is None and not store._settling
        for a, b in zip(got, _sums_of(seen, bounds, n_groups), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)
    assert owed_passes >= 5


def test_a_roll_up_while_sums_are_owed_takes_them_first() -> None:
    rng = np.random.default_rng(18)
    store = _store()
    for _ in range(10):
        _write(store, rng, 5, 200)
    bounds = [(0, 199)]
    plan = store.begin_sums(CELLS.name, bounds, np.arange(5), 5)
    while store.sum_chunk(plan, np.arange(5), 5):
        pass
    _write(store, rng, 5, 200)
    got = store.finish_sums(plan, np.arange(5), 5, defer=True)
    seen = store.state()
    assert plan.owed is not None
    store.roll_up(store.tiers.advanced(200 * WIDTH, 2 * 3_600_000, 8 * 86_400_000, 9 * 86_400_000))
    assert plan.owed is None and plan.pending  # taken, to be added by the settling pass
    buckets.settle_sums([(store, plan)], contextlib.nullcontext())
    np.testing.assert_allclose(got[0], _sums_of(seen, bounds, 5)[0], rtol=1e-12)


def test_running_window_sums_start_afresh_after_rows_move() -> None:
    rng = np.random.default_rng(9)
    store, bounds, plan = _rolled_up_while_summing(rng, finish=True)
    _write(store, rng, 5, 200)
    plan = store.begin_sums(CELLS.name, bounds, np.arange(5), 5)
    assert plan.base is None  # the rows moved: summed afresh
    while store.sum_chunk(plan, np.arange(5), 5):
        pass
    got = store.finish_sums(plan, np.arange(5), 5)
    np.testing.assert_allclose(got[0], _fresh_sums(store, bounds, 5)[0], rtol=1e-12)


def test_locked_snapshot_reads_fine_scores_as_window_sums_and_equals_unlocked() -> None:
    """Under a lock the fine score histograms are window sums (never copied): slice
    "all" score metrics, CBPE estimates (the calibration they rest on) and reliability
    equal the row-summing path, pass after pass (running sums), with writes between."""
    import threading

    from monitor.config import settings_from_mapping
    from monitor.engine.records import LabelBatch, PredictionBatch, hash_ids
    from monitor.wiring import build_engine

    settings = settings_from_mapping(
        {"models": [{"name": "m", "windows": [{"size": "1h"}, {"size": "1d"}],
                     "estimation": {"max_ece": 0.2},
                     "slices": [{"dimensions": ["seg"], "top_k": 4, "min_samples": 1}]}]},
        "<test>",
    )  # fmt: skip
    engine = build_engine(settings)
    rng = np.random.default_rng(12)
    now = 1_700_000_000_000
    lock = threading.RLock()
    for step in range(3):
        n = 2_000
        ts = np.sort(rng.integers(now - 20 * 3_600_000, now, n)).astype(np.int64)
        y = (rng.random(n) < 0.3).astype(np.int8)
        score = 1 / (1 + np.exp(-(2.0 * (y - 0.5) + rng.normal(size=n))))
        keys = hash_ids([f"{step}-{i}" for i in range(n)])
        engine.apply_predictions(
            PredictionBatch(keys, ts, np.zeros(n, np.int16), [f"v{i % 2}" for i in range(n)],
                            score, (score >= 0.5).astype(np.int8),
                            segments=[{"seg": f"s{i % 4}"} for i in range(n)])
        )  # fmt: skip
        labeled = np.flatnonzero(rng.random(n) < 0.7)
        engine.apply_labels(
            LabelBatch(keys[labeled], ts[labeled] + 1, [str(v) for v in y[labeled]])
        )
        locked = engine.snapshot(now, lock=lock, retain=False)
        free = engine.snapshot(now, retain=False)
        assert len(locked.results) == len(free.results) > 0
        names = set()
        for a, b in zip(locked.results, free.results, strict=True):
            assert (a.slice, a.window, a.version) == (b.slice, b.window, b.version)
            assert [m.name for m in a.metrics] == [m.name for m in b.metrics]
            names.update(m.name for m in a.metrics if a.slice == "all")
            for x, z in zip(a.metrics, b.metrics, strict=True):
                np.testing.assert_allclose(
                    [x.value, x.lower, x.upper], [z.value, z.lower, z.upper], rtol=1e-9, atol=1e-12
                )
            assert [(r.count, r.upper) for r in a.reliability] == [
                (r.count, r.upper) for r in b.reliability
            ]
        assert {"roc_auc", "ece", "estimated_accuracy"} <= names


def test_chunks_taken_under_the_lock_and_added_after_writes_equal_fresh_sums(
    monkeypatch,  # type: ignore[no-untyped-def]
) -> None:
    """A chunk is copied under the lock and added with it released: the writer changing
    the chunk's rows (or adding rows and groups) between the copy and the addition still
    ends in exactly a fresh sum of the final rows."""

    monkeypatch.setattr(buckets, "_SUM_CHUNK_BYTES", 48 * 20)  # 20 rows per chunk
    rng = np.random.default_rng(8)
    store = _store()
    for _ in range(10):
        _write(store, rng, 30, 60)
    bounds = [(0, 59), (20, 59), (58, 59)]
    plan = store.begin_sums(CELLS.name, bounds, np.arange(30), 30)
    chunks, more = 0, True
    while more:
        more = store.sum_chunk(plan, np.arange(40), 40)
        assert plan.pending or not more  # taken, not yet added
        if chunks < 10:
            _write(store, rng, 40, 70)  # between the copy and its addition
        store.add_chunk(plan)
        assert not plan.pending
        chunks += 1
    assert chunks > 3
    got = store.finish_sums(plan, np.arange(40), 40)
    for a, b in zip(got, _fresh_sums(store, bounds, 40), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_window_sums_are_added_with_the_lock_released(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The chunks of an engine's window sums are summed while the evaluation does not hold
    the caller's lock: under it they are only copied."""
    import threading

    from tests.unit.test_slice_scores import NOW, _data, _engine, _feed

    class Flagged:
        def __init__(self) -> None:
            self.lock, self.held = threading.RLock(), 0

        def __enter__(self) -> None:
            self.lock.acquire()
            self.held += 1

        def __exit__(self, *exc: object) -> None:
            self.held -= 1
            self.lock.release()

    lock = Flagged()
    held_while_summing: list[bool] = []
    scatter = buckets._scatter_many

    def watched(*args, **kwargs):  # type: ignore[no-untyped-def]
        held_while_summing.append(lock.held > 0)
        return scatter(*args, **kwargs)

    monkeypatch.setattr(buckets, "_scatter_many", watched)
    engine = _engine()
    country, y, score = _data(3_000, seed=4)
    _feed(engine, country, y, score)
    engine.snapshot(NOW, lock=lock, retain=False)  # type: ignore[arg-type]
    assert held_while_summing and not any(held_while_summing)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    windows=st.integers(1, 4),
    rows=st.integers(0, 40),
    size=st.integers(1, 12),
)
def test_scatter_many_adds_each_windows_weighted_rows(
    seed: int, windows: int, rows: int, size: int
) -> None:
    """One sparse product onto every window equals each window's weighted rows added one
    at a time (``np.add.at``: repeated targets accumulate), negative targets counting
    from the end as numpy's indexing does, and weights of 0 leaving a window alone."""
    rng = np.random.default_rng(seed)
    xs = [rng.normal(size=(size, 3)) for _ in range(windows)]
    expected = [x.copy() for x in xs]
    at = rng.integers(-size, size, rows)
    vals = rng.normal(size=(rows, 3))
    weights = [rng.choice([-1.0, 0.0, 0.0, 1.0], rows) for _ in range(windows)]
    weights[0] = weights[0] != 0  # a boolean mask is a weight too
    buckets._scatter_many(xs, at, vals, weights)
    for x, want, w in zip(xs, expected, weights, strict=True):
        np.add.at(want, at, np.asarray(w, np.float64)[:, np.newaxis] * vals)
        np.testing.assert_allclose(x, want, rtol=1e-12, atol=1e-12)
