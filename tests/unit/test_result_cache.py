"""Reusing window results across evaluation passes never changes a result: a pass with
the engine's cache equals a pass without it, before and after new events arrive."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitor.engine.evaluate import evaluate_all
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
