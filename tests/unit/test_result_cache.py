"""Reusing window results across evaluation passes never changes a result: a pass with
the engine's cache equals a pass without it, before and after new events arrive."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from monitor.engine import state_codec
from monitor.engine.evaluate import _cached_rows, evaluate_all
from monitor.engine.records import LabelBatch, PredictionBatch, hash_ids
from monitor.engine.result_cache import ResultCache, digest, row_digests
from monitor.engine.snapshot import WindowResult
from tests.unit.test_slice_scores import BASE, NOW, _data, _engine, _feed


def _pass(engine, cache: ResultCache | None) -> list[str]:  # type: ignore[no-untyped-def]
    results, gaps = evaluate_all(engine.view(), engine.models, NOW, cache=cache)
    return [repr(r) for r in results] + [repr(g) for g in gaps]


def test_cached_passes_equal_fresh_ones() -> None:
    engine = _engine()
    country, y, score = _data(6_000, seed=3)
    _feed(engine, country, y, score)
    cache = ResultCache()
    fresh = _pass(engine, None)
    assert _pass(engine, cache) == fresh
    assert cache.misses > 0
    assert _pass(engine, cache) == fresh
    assert cache.misses == 0 and cache.hits > 0  # nothing changed: everything reused

    # new events for one country only: its windows are recomputed, the others reused
    _new_events(engine)
    fresh = _pass(engine, None)
    assert _pass(engine, cache) == fresh
    assert cache.misses > 0 and cache.hits > 0


def test_only_the_last_pass_is_kept() -> None:
    cache = ResultCache()
    cache.begin()
    cache.put(b"a", 1)
    cache.end()
    cache.begin()
    assert cache.get(b"a") == 1  # used by this pass: kept
    cache.put(b"b", 2)
    cache.end()
    cache.begin()
    cache.end()  # a pass that used nothing
    cache.begin()
    assert cache.get(b"a") is None and cache.get(b"b") is None
    assert len(cache) == 0


def test_digest_tells_arrays_and_context_apart() -> None:
    a = np.arange(4, dtype=np.float64)
    assert digest(a, ("x", 0.95)) == digest(a.copy(), ("x", 0.95))
    assert digest(a, ("x", 0.95)) != digest(a, ("x", 0.9))
    assert digest(a) != digest(a.astype(np.int64))
    b = a.copy()
    b[3] += 1e-12
    assert digest(a) != digest(b)


def test_row_digests_tell_rows_and_context_apart() -> None:
    rows = np.arange(12, dtype=np.float64).reshape(3, 4)
    rows[2] = rows[0]
    keys = row_digests(rows, ("slice", 0.95))
    assert keys[0] == keys[2] and len({keys[0], keys[1]}) == 2  # equal rows, equal keys
    assert keys == row_digests(rows[:, :].copy(order="F"), ("slice", 0.95))  # any layout
    assert row_digests(rows, ("slice", 0.9))[0] != keys[0]
    assert row_digests(rows.astype(np.float32), ("slice", 0.95))[0] != keys[0]
    changed = rows.copy()
    changed[1, 3] += 1e-12
    assert row_digests(changed, ("slice", 0.95))[1] != keys[1]
    # a row is hashed as its non-zero cells: their columns count, and so do zeros' signs
    sparse = np.zeros((4, 6))
    sparse[0, 1], sparse[1, 2], sparse[3, 4] = 3.0, 3.0, -0.0
    first, moved, empty, signed = row_digests(sparse, ("slice", 0.95))
    assert len({first, moved, empty, signed}) == 4
    assert row_digests(sparse[2:], ("slice", 0.95)) == [empty, signed]  # the same alone


def _new_events(engine, n: int = 300) -> None:  # type: ignore[no-untyped-def]
    """``n`` new labelled events of country "fr" only."""
    rng = np.random.default_rng(9)
    keys = hash_ids([f"new{i}" for i in range(n)])
    ts = np.full(n, BASE + 3_000_000, np.int64)
    p = rng.random(n)
    engine.apply_predictions(
        PredictionBatch(keys, ts, np.zeros(n, np.int16), ["v1"] * n, p,
                        (p >= 0.5).astype(np.int8), segments=[{"country": "fr"}] * n)
    )  # fmt: skip
    engine.apply_labels(LabelBatch(keys, ts + 10, [str(int(v < 0.3)) for v in rng.random(n)]))


def _close(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-12, abs=1e-15)


def _assert_same_result(got: WindowResult, ref: WindowResult) -> None:
    """Equal counts and labels exactly; equal floats up to rounding (running window sums
    add and subtract score sums in another order than a fresh sum)."""
    fields = ("model", "version", "window", "slice", "start_ms", "end_ms", "predictions",
              "labeled", "confusion")  # fmt: skip
    assert [getattr(got, f) for f in fields] == [getattr(ref, f) for f in fields]
    assert [(m.name, m.n, m.method, m.note) for m in got.metrics] == [
        (m.name, m.n, m.method, m.note) for m in ref.metrics
    ]
    for a, b in zip(got.metrics, ref.metrics, strict=True):
        assert all(_close(x, y) for x, y in ((a.value, b.value), (a.lower, b.lower),
                                              (a.upper, b.upper))), a.name  # fmt: skip
    assert len(got.reliability) == len(ref.reliability)
    for a, b in zip(got.reliability, ref.reliability, strict=True):
        assert all(_close(float(x), float(y)) for x, y in zip(a, b, strict=True))


def test_daemon_ticks_reuse_unchanged_results_and_equal_a_fresh_engine() -> None:
    """Through ``Engine.snapshot`` as the daemon runs it (lock, running sums): a tick with
    nothing new hands out the very same segment-slice results; after new events for one
    country, that country's results are new and the whole snapshot equals a fresh engine's
    first tick over the same rows, while the other countries' results are reused."""
    import threading

    lock = threading.RLock()
    country, y, score = _data(6_000, seed=3)
    engine = _engine()
    _feed(engine, country, y, score)
    first = engine.snapshot(NOW, lock=lock)
    again = engine.snapshot(NOW, lock=lock)
    assert [repr(r) for r in again.results] == [repr(r) for r in first.results]
    segments = [
        (a, b) for a, b in zip(first.results, again.results, strict=True) if a.slice != "all"
    ]
    assert len(segments) == 4 and all(a is b for a, b in segments)

    _new_events(engine)
    changed = engine.snapshot(NOW, lock=lock)
    fresh = _engine()
    _feed(fresh, country, y, score)
    _new_events(fresh)
    want = fresh.snapshot(NOW, lock=lock)
    assert len(changed.results) == len(want.results)
    for got, ref in zip(changed.results, want.results, strict=True):
        _assert_same_result(got, ref)
    assert [(g.metric, g.lowest, g.highest) for g in changed.fairness] == [
        (g.metric, g.lowest, g.highest) for g in want.fairness
    ]
    assert [g.gap for g in changed.fairness] == pytest.approx([g.gap for g in want.fairness])
    by_slice = {r.slice: r for r in again.results}
    for r in changed.results:
        if r.slice == "country=fr":
            assert r is not by_slice[r.slice] and r.labeled == by_slice[r.slice].labeled + 300
        elif r.slice != "all":
            assert r is by_slice[r.slice]


def _checkpointed(engine, tmp_path):  # type: ignore[no-untyped-def]
    """``engine``'s state through a real checkpoint file (JSON header, npz arrays)."""
    from monitor.state.checkpoint import CheckpointStore

    store = CheckpointStore(tmp_path)
    store.write(*state_codec.encode(engine))
    loaded = store.load()
    assert loaded is not None
    return loaded


def test_a_restarted_engine_reuses_checkpointed_results_equal_to_a_cold_recompute(
    tmp_path,
    monkeypatch,  # type: ignore[no-untyped-def]
) -> None:
    """The first tick of an engine restored from a checkpoint computes no binary catalog
    and no score row of a window whose counts did not change, only those of the changed
    ones; its results equal a cold engine's first tick over the same state (floats
    within ``close.REL`` = 1e-9 relative, counts and names exactly)."""
    import threading

    from tests.unit.close import assert_close

    lock = threading.RLock()
    country, y, score = _data(6_000, seed=3)
    engine = _engine()
    _feed(engine, country, y, score)
    engine.snapshot(NOW, lock=lock)
    loaded = _checkpointed(engine, tmp_path)
    assert "result_cache" in loaded.arrays

    def restored():  # type: ignore[no-untyped-def]
        e = _engine()
        state_codec.decode(e, loaded.meta, loaded.arrays)
        return e

    def cold():  # type: ignore[no-untyped-def]
        e = _engine()
        state_codec.decode(
            e, loaded.meta, {k: v for k, v in loaded.arrays.items() if k != "result_cache"}
        )
        assert len(e.result_cache) == 0
        return e

    import monitor.engine.evaluate as evaluate

    computed: list[int] = []  # rows of the batch computations the cache saves

    def counting(f):  # type: ignore[no-untyped-def]
        def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
            rows = next(a for a in args if isinstance(a, np.ndarray))
            computed.append(np.atleast_2d(rows).shape[0])
            return f(*args, **kwargs)

        return counted

    for owner, name in ((evaluate, "score_results"), (evaluate._Catalog, "confusion_metrics")):
        monkeypatch.setattr(owner, name, counting(getattr(owner, name)))
    warm = restored()
    assert len(warm.result_cache) > 0 and not warm.result_cache.faults
    got = warm.snapshot(NOW, lock=lock)
    assert computed == [] and warm.result_cache.hits > 0  # nothing recomputed
    want = cold().snapshot(NOW, lock=lock)
    assert sum(computed) > 0  # the cold engine computes them
    assert len(got.results) == len(want.results) > 4
    assert_close(got.results, want.results)
    assert_close(got.fairness, want.fairness)

    # new events for one country after the restart: its windows are recomputed
    warm = restored()
    _new_events(warm)
    computed.clear()
    got = warm.snapshot(NOW, lock=lock)
    assert 0 < sum(computed) < len(got.results) and warm.result_cache.hits > 0
    ref = cold()
    _new_events(ref)
    assert_close(got.results, ref.snapshot(NOW, lock=lock).results)


def test_a_damaged_or_foreign_cache_section_is_ignored_and_counted(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A section whose bytes changed, or that was saved beside another state, is never
    served: the engine loads without it (every window recomputed) and counts why."""
    import threading

    lock = threading.RLock()
    country, y, score = _data(3_000, seed=4)
    engine = _engine()
    _feed(engine, country, y, score)
    engine.snapshot(NOW, lock=lock)
    loaded = _checkpointed(engine, tmp_path / "a")
    section = loaded.arrays["result_cache"]

    damaged = section.copy()
    damaged[len(damaged) // 2] ^= 0xFF
    e = _engine()
    state_codec.decode(e, loaded.meta, {**loaded.arrays, "result_cache": damaged})
    assert len(e.result_cache) == 0 and e.result_cache.faults == {"result_cache_corrupt": 1}
    e.snapshot(NOW, lock=lock)
    assert e.result_cache.hits == 0

    truncated = section[:20]  # the seal cut short
    e = _engine()
    state_codec.decode(e, loaded.meta, {**loaded.arrays, "result_cache": truncated})
    assert len(e.result_cache) == 0 and e.result_cache.faults == {"result_cache_corrupt": 1}

    wrong_type = section.astype(np.int64)  # not a byte string: refused, not cast
    e = _engine()
    state_codec.decode(e, loaded.meta, {**loaded.arrays, "result_cache": wrong_type})
    assert len(e.result_cache) == 0 and e.result_cache.faults["result_cache_corrupt"] == 1

    # a well-formed section of another state (one more event since): foreign
    _new_events(engine, n=1)
    other = _checkpointed(engine, tmp_path / "b")
    e = _engine()
    state_codec.decode(e, other.meta, {**other.arrays, "result_cache": section})
    assert len(e.result_cache) == 0 and e.result_cache.faults == {"result_cache_foreign": 1}

    # a body that is intact but not a section (resealed garbage): unreadable, counted
    cache = ResultCache()
    binding = b"state"
    garbage = hashlib_seal(binding, b"\x93\x01\x02")
    assert cache.restore(garbage, binding) == 0 and cache.faults == {"result_cache_corrupt": 1}


def hashlib_seal(binding: bytes, body: bytes) -> bytes:
    """A section's seal over ``body`` as :meth:`ResultCache.section` writes it."""
    import hashlib

    parts = (b"1" + binding, body)  # the section layout's version sealed with the binding
    return b"".join(hashlib.blake2b(x, digest_size=16).digest() for x in parts) + body


def test_the_section_round_trips_the_batch_computed_entries() -> None:
    """A pass's batch-computed entries (binary catalogs, score rows) come back equal,
    under keys that look up the same entries; the rest is rebuilt from them."""
    engine = _engine()
    country, y, score = _data(4_000, seed=5)
    _feed(engine, country, y, score)
    cache = ResultCache()
    evaluate_all(engine.view(), engine.models, NOW, cache=cache)
    saved = {**cache._before, **cache._now}
    blob = cache.section(b"x")
    assert blob is not None
    back = ResultCache()
    kept = {
        k: v for k, v in saved.items()
        if v is not None and (isinstance(k, bytes) or (len(k) == 2 and k[1][0] == "binary"))
    }  # fmt: skip
    assert back.restore(blob, b"x") == len(kept) < len(saved)
    kinds = {type(k).__name__ + str(len(k)) for k in back._now}
    assert kinds == {"bytes16", "tuple2"}  # score rows and binary rows
    from tests.unit.close import assert_close

    for key, value in back._now.items():
        assert_close(value, saved[key])  # msgpack keeps doubles: far inside close.REL
        assert [type(v) for v in value] == [type(v) for v in saved[key]]  # list/tuple kept


def _counting_rows() -> tuple[list[int], Callable[[np.ndarray], list[tuple[float, ...]]]]:
    """A compute that returns each row as a tuple, and the sizes of the batches it got."""
    computed: list[int] = []

    def compute(rows: np.ndarray) -> list[tuple[float, ...]]:
        computed.append(rows.shape[0])
        return [tuple(r) for r in rows.tolist()]

    return computed, compute


def test_cached_rows_of_blocks_equal_the_stacked_rows() -> None:
    """A pool keys its windows' row blocks where they lie and computes only the rows not
    cached, gathered across blocks: the results and keys are those of the stacked rows."""
    rng = np.random.default_rng(4)
    blocks = [rng.integers(0, 5, (n, 12)).astype(np.float64) for n in (3, 1, 4, 2)]
    blocks[2][1] = blocks[0][0]  # a repeat across blocks is computed once
    stacked = np.vstack(blocks)
    computed, compute = _counting_rows()
    cache = ResultCache()
    cache.begin()
    warm = _cached_rows(cache, blocks[3], ("ctx",), compute)  # the last block known already
    got, keys = _cached_rows(cache, blocks, ("ctx",), compute)
    assert computed == [2, 7]  # 10 rows: 2 cached, one repeat
    assert got == [tuple(r) for r in stacked.tolist()]
    assert keys == row_digests(stacked, ("ctx",)) and warm[1] == keys[-2:]
    again, _ = _cached_rows(None, blocks, ("ctx",), compute)  # no cache: all of them
    assert again == got and computed[-1] == 10


def test_row_references_are_keyed_and_gathered_as_the_stacked_rows() -> None:
    """A window's slice rows are handed to the pool as references into its window sums
    with the long-run share as a last column: keys and results are those of the rows
    stacked with that column, and only the rows not cached are gathered."""
    from monitor.engine.evaluate import _Rows

    rng = np.random.default_rng(8)
    matrix = rng.integers(0, 3, (6, 9)).astype(np.float64)
    matrix[2] = 0.0
    index = np.array([4, 0, 2, 4])
    tail = np.array([0.25, 0.0, -0.0, 0.25])
    stacked = np.hstack([matrix[index], tail[:, np.newaxis]])
    rows = _Rows(matrix, index, tail)
    assert row_digests(matrix, ("s",), index, tail) == row_digests(stacked, ("s",))
    assert len(rows) == 4 and rows.nbytes == stacked.nbytes
    computed, compute = _counting_rows()
    cache = ResultCache()
    cache.begin()
    plain = np.arange(20, dtype=np.float64).reshape(2, 10)
    got, keys = _cached_rows(cache, [plain, rows], ("s",), compute)
    assert got == [tuple(r) for r in np.vstack([plain, stacked]).tolist()]
    assert keys[2:] == row_digests(stacked, ("s",)) and computed == [5]  # a repeat: once
    assert _cached_rows(None, [plain, rows], ("s",), compute)[0] == got
