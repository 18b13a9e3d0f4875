"""What the scheduled jobs read instead of a copy of every store: a report its window's
group sums (``Engine.summed_view``) — the report a copy would give, without the copy's
memory, the evaluation's running sums left alone —, a reference rotation one model's
drift cells (``Engine.copied_view(wide_of=...)``)."""

from __future__ import annotations

import math
import threading
import tracemalloc
from dataclasses import replace

import numpy as np
import pytest

from monitor.engine.core import Engine
from monitor.engine.evaluate import evaluate_all
from monitor.engine.models import WindowSpec
from monitor.engine.snapshot import WindowResult

from .test_copied_view import START, _batches, _engine

MINUTE_MS = 60_000
NOW = START + 40 * MINUTE_MS


def _by_key(results: list[WindowResult]) -> dict[tuple[str, str, str], WindowResult]:
    return {(r.version, r.window, r.slice): r for r in results}


def _fed(batches: int, seed: int) -> Engine:
    """The copy tests' engine after ``batches`` of their 2,000-event batches."""
    engine = _engine()
    feed = _batches(np.random.default_rng(seed))
    for _ in range(batches):
        preds, labels = next(feed)
        engine.apply_predictions(preds)
        engine.apply_labels(labels)
    return engine


def test_a_report_from_window_sums_equals_one_from_a_copy_in_less_memory() -> None:
    engine = _fed(10, seed=11)
    lock = threading.RLock()
    engine.snapshot(NOW, lock=lock)  # the evaluation's running sums exist
    running = {id(st): dict(st._running) for st in engine.sliced.values()}
    assert any(running.values())
    window = (WindowSpec("report", 3_600_000, 0),)
    models = tuple(replace(m, windows=window) for m in engine.models)

    tracemalloc.start()
    copied = engine.copied_view(lock)
    copy_peak = tracemalloc.get_traced_memory()[1]
    del copied
    tracemalloc.reset_peak()
    summed = engine.summed_view(lock, models, NOW)
    sum_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()

    want, _ = evaluate_all(engine.copied_view(lock), models, NOW, 0.95, ())
    got, _ = evaluate_all(summed, models, NOW, 0.95, ())
    assert len(want) > 100  # every shop's slice
    want_by, got_by = _by_key(want), _by_key(got)
    assert want_by.keys() == got_by.keys()
    for key, w in want_by.items():
        g = got_by[key]
        assert (g.predictions, g.labeled, g.confusion) == (w.predictions, w.labeled, w.confusion)
        for a, b in zip(g.metrics, w.metrics, strict=True):
            assert a.name == b.name, key
            for x, y in ((a.value, b.value), (a.lower, b.lower), (a.upper, b.upper)):
                # the sums add the same rows in another order
                assert (math.isnan(x) and math.isnan(y)) or math.isclose(
                    x, y, rel_tol=1e-9, abs_tol=1e-12
                ), (key, a.name)
    sliced_bytes = sum(st.nbytes() for st in engine.sliced.values())
    assert sum_peak < copy_peak / 3, (sum_peak, copy_peak, sliced_bytes)
    # the evaluation's running sums are the ones its last pass kept
    assert {id(st): dict(st._running) for st in engine.sliced.values()} == running


def test_a_models_drift_view_copies_its_wide_rows_without_the_score_histograms() -> None:
    """A reference rotation reads one model's drift cells: the view holds that model's
    per-version rows as the full copy has them, less the fine score histograms (most of
    the store), and nothing of the other stores."""
    engine = _fed(3, seed=12)
    lock = threading.RLock()
    whole = engine.copied_view(lock).wide[0]
    view = engine.copied_view(lock, wide_of=0)
    assert not view.buckets and not view.sliced and set(view.wide) == {0}
    own = view.wide[0]
    skipped = set(whole) - set(own)
    assert skipped == {"m.scores"}, skipped
    for name, arr in own.items():
        np.testing.assert_array_equal(arr, whole[name], err_msg=name)
    assert sum(a.nbytes for a in own.values()) < whole["m.scores"].nbytes / 10


def test_a_take_that_fails_in_its_final_hold_leaves_no_plan_for_the_writer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A plan left registered would make the writer save the old value of every row it
    writes, for a pass that never comes (memory growing with each write)."""
    engine = _fed(4, seed=12)
    lock = threading.RLock()
    engine.snapshot(NOW, lock=lock)

    def fail(*_: object) -> None:
        raise MemoryError("in the final hold")

    monkeypatch.setattr(engine, "_finish_window_sums", fail)
    with pytest.raises(MemoryError):
        engine.snapshot(NOW + MINUTE_MS, lock=lock)
    stores = [engine.buckets, *engine.wide.values(), *engine.sliced.values()]
    assert all(not st._sum_plans for st in stores)
    monkeypatch.undo()
    preds, labels = next(_batches(np.random.default_rng(13)))
    engine.apply_predictions(preds)  # the writer, with no plan to save rows for
    engine.apply_labels(labels)
    assert all(not st._sum_plans for st in stores)
    engine.snapshot(NOW + 2 * MINUTE_MS, lock=lock)  # and the next pass works
