"""Reusing window results across evaluation passes never changes a result: a pass with
the engine's cache equals a pass without it, before and after new events arrive."""

from __future__ import annotations

import numpy as np

from monitor.engine.evaluate import evaluate_all
from monitor.engine.records import LabelBatch, PredictionBatch, hash_ids
from monitor.engine.result_cache import ResultCache, digest, row_digests
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
    n = 300
    rng = np.random.default_rng(9)
    keys = hash_ids([f"new{i}" for i in range(n)])
    ts = np.full(n, BASE + 3_000_000, np.int64)
    p = rng.random(n)
    engine.apply_predictions(
        PredictionBatch(keys, ts, np.zeros(n, np.int16), ["v1"] * n, p,
                        (p >= 0.5).astype(np.int8), segments=[{"country": "fr"}] * n)
    )  # fmt: skip
    engine.apply_labels(LabelBatch(keys, ts + 10, [str(int(v < 0.3)) for v in rng.random(n)]))
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
