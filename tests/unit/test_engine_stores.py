"""The engine's store layout: per-model wide rows (memory linear in the number of
models) and the checkpoint format migration from format 1."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from monitor.config import settings_from_mapping
from monitor.engine import state_codec
from monitor.engine.core import Engine
from monitor.engine.evaluate import evaluate_all
from monitor.engine.models import SCORE_METRICS, ModelSpec, SliceSpec, WindowSpec
from monitor.engine.records import LabelBatch, PredictionBatch, hash_ids
from monitor.engine.state_codec import ENGINE_FORMAT, StateMismatch
from monitor.ingest.deadletter import FileDeadLetter
from monitor.ingest.pipeline import RawRecord
from monitor.metrics.catalog import SCORES
from monitor.state.checkpoint import CheckpointStore
from monitor.wiring import build_engine, build_pipeline

from .close import assert_close
from .data.make_engine_v1 import BASE, records

V1 = Path(__file__).parent / "data" / "engine_v1"


def _fleet(n_models: int) -> Engine:
    """``n_models`` binary models, each fed the very same traffic (2 versions, 1 hour)."""
    models = [ModelSpec(f"m{i}", windows=(WindowSpec("1h", 3_600_000),)) for i in range(n_models)]
    engine = Engine(models, 60_000, 10**12, 10**12, 10**6, 10**6)
    rng = np.random.default_rng(3)
    n = 3000
    ts = BASE + np.sort(rng.integers(0, 3_600_000, n)).astype(np.int64)
    score = rng.random(n)
    y = (rng.random(n) < score).astype(int)
    for m in range(n_models):
        keys = hash_ids([f"{m}-{i}" for i in range(n)])
        version = [f"v{i % 2}" for i in range(n)]
        batch = PredictionBatch(keys, ts, np.full(n, m, np.int16), version, score,
                                (score >= 0.5).astype(np.int8))  # fmt: skip
        engine.apply_predictions(batch)
        engine.apply_labels(LabelBatch(keys, ts + 5, [str(v) for v in y]))
    return engine


def test_wide_rows_hold_only_their_models_statistics() -> None:
    one, ten = _fleet(1), _fleet(10)
    for m, store in ten.wide.items():
        assert [k for k in store.view() if k.startswith("m.")] == [SCORES.key], m
    # every model has the same rows as the lone model: memory is exactly linear
    assert one.store_bytes()["wide"] > 0
    assert ten.store_bytes()["wide"] == 10 * one.store_bytes()["wide"]
    # and its statistics are the lone model's
    v_one, v_ten = one.view(), ten.view()
    for m in range(10):
        assert np.array_equal(v_ten.wide[m][SCORES.key], v_one.wide[0][SCORES.key])


def _fresh_and_migrated(tmp_path: Path) -> tuple[Engine, Engine]:
    settings = settings_from_mapping(json.loads((V1 / "config.json").read_text()))
    fresh = build_engine(settings)
    pipe = build_pipeline(settings, fresh, FileDeadLetter(tmp_path / "dl.jsonl"))
    preds, labels = records()
    pipe.process("predictions", [RawRecord(orjson.dumps(r), "predictions") for r in preds])
    pipe.process("labels", [RawRecord(orjson.dumps(r), "labels") for r in labels])
    loaded = CheckpointStore(V1).load()
    assert loaded is not None and "engine_format" not in loaded.meta  # really format 1
    migrated = build_engine(settings)
    state_codec.decode(migrated, loaded.meta, loaded.arrays)
    return fresh, migrated


def test_format_1_checkpoint_migrates_to_identical_results(tmp_path: Path) -> None:
    fresh, migrated = _fresh_and_migrated(tmp_path)
    now = BASE + 3_600_000
    got, _ = evaluate_all(migrated.view(), migrated.models, now)
    want, _ = evaluate_all(fresh.view(), fresh.models, now)
    # format 1 had no per-slice score histograms: a binary segment slice restored from it
    # has the confusion-based metrics only, until new traffic fills its histograms
    restored_slices = [r for r in got if r.model == "fraud" and r.slice != "all"]
    assert restored_slices and all(r.reliability == () for r in restored_slices)
    # the score metrics as exported ("gain" stands for gain_at_10, lift_at_10, ...)
    score_names = ModelSpec("x", metrics=tuple(SCORE_METRICS)).exported
    for r in want:
        if r.model == "fraud" and r.slice != "all":
            kept = tuple(m for m in r.metrics if m.name not in score_names)
            want = tuple(replace(x, metrics=kept, reliability=()) if x is r else x for x in want)
    # format 1 has no cubic loss sums: log loss and Brier keep the CLT interval there
    # (the skewness-corrected one once its buckets age out of the windows); nor within-bin
    # sums: average precision reads its bins as groups of tied scores there
    want = [_as_restored(w, g) for w, g in zip(want, got, strict=True)]
    # counts exactly, floats to the summation-order tolerance of tests/unit/close.py
    assert_close(got, want)
    names = {(r.model, r.slice): {m.name for m in r.metrics} for r in got}
    assert ("fraud", "country=de") in names and ("demand", "all") in names
    assert {"accuracy"} <= names["topic", "all"] and {"mae"} & names["demand", "all"]
    # the fine score histograms came across too (they feed slice "all" AUC)
    # (but for the cubic loss and within-bin sums appended since, zero in the restored rows)
    legacy = fresh.score_layouts[0].legacy_widths[0]
    old, new = migrated.view().wide[0][SCORES.key], fresh.view().wide[0][SCORES.key]
    assert_close(old[:, :legacy], new[:, :legacy])
    assert not old[:, legacy:].any()
    meta, _ = state_codec.encode(migrated)
    assert meta["engine_format"] == ENGINE_FORMAT


def _as_restored(want: Any, got: Any) -> Any:
    """``want`` with the intervals that need the cubic sums, and the average precisions that
    need the within-bin sums, as the restored state has them."""
    restored = {m.name: m for m in got.metrics if m.method == "clt"}
    ties = {m.name: m for m in got.metrics if m.name in ("pr_auc", "pr_auc_debiased")}
    metrics = tuple(
        restored[m.name] if m.method == "clt-skew" and m.name in restored
        else ties.get(m.name, m)
        for m in want.metrics
    )  # fmt: skip
    return replace(want, metrics=metrics)


def _appended(engine: Engine) -> dict[int, int]:
    """Today's width of each score histogram by its width before the cubic loss and
    within-bin sums were appended."""
    layouts = [*engine.score_layouts.values(), *engine.slice_score_layouts.values()]
    return {layout.legacy_widths[0]: layout.width for layout in layouts}


def _extended(meta: dict[str, Any]) -> dict[str, Any]:
    """A state's meta without what later formats added beside the old fields: the arms'
    labelled positives and the pairs' sixth (positives) column, both zero when loaded."""
    out = json.loads(json.dumps(meta))
    for arm in (out.get("arms") or {}).values():
        arm.pop("positives", None)
    for name, v in (out.get("paired") or {}).items():
        out["paired"][name] = v[:5]
    return out


def test_score_histograms_saved_before_the_within_bin_sums_load_padded() -> None:
    """A checkpoint of this format written before the within-bin sums were appended (its
    score histograms end at the cubic loss sums) loads with zeros there: the same
    results but average precision, which reads such a window's bins as tied scores."""
    spec = ModelSpec("m", metrics=("roc_auc", "pr_auc", "log_loss"),
                     windows=(WindowSpec("1h", 3_600_000),))  # fmt: skip
    engine = Engine([spec], 60_000, 10**12, 10**12, 10**6, 10**6)
    rng = np.random.default_rng(4)
    n = 3000
    ts = BASE + np.sort(rng.integers(120_000, 3_000_000, n)).astype(np.int64)  # in the window
    score = rng.beta(0.5, 20, n)
    keys = hash_ids([f"k{i}" for i in range(n)])
    engine.apply_predictions(PredictionBatch(keys, ts, np.zeros(n, np.int16), ["v"] * n, score,
                                             (score >= 0.5).astype(np.int8)))  # fmt: skip
    y = (rng.random(n) < score).astype(int)
    engine.apply_labels(LabelBatch(keys, ts + 5, [str(v) for v in y]))
    meta, arrays = state_codec.encode(engine)
    layout = engine.score_layouts[0]
    cut = {k: v[:, : layout.legacy_widths[1]] if v.ndim == 2 and v.shape[1] == layout.width
           else v for k, v in arrays.items()}  # fmt: skip
    assert sum(v.shape != cut[k].shape for k, v in arrays.items()) >= 1
    loaded = Engine(engine.models, 60_000, 10**12, 10**12, 10**6, 10**6)
    state_codec.decode(loaded, meta, cut)
    old, new = loaded.view().wide[0][SCORES.key], engine.view().wide[0][SCORES.key]
    assert np.array_equal(old[:, : layout.legacy_widths[1]], new[:, : layout.legacy_widths[1]])
    assert not old[:, layout.legacy_widths[1] :].any()
    now = BASE + 3_600_000
    got, _ = evaluate_all(loaded.view(), loaded.models, now)
    want, _ = evaluate_all(engine.view(), engine.models, now)
    (g,), (w,) = got, want
    for a, b in zip(g.metrics, w.metrics, strict=True):
        if a.name != "pr_auc":
            assert a == b, a.name
    vec = new.sum(axis=0)
    exact = layout.pr_auc(vec).value
    vec[layout.legacy_widths[1] :] = 0.0
    ties = layout.pr_auc(vec).value
    assert abs(ties - exact) > 1e-4  # the two readings differ here
    assert {m.name: m.value for m in g.metrics}["pr_auc"] == pytest.approx(ties, abs=1e-12)
    assert {m.name: m.value for m in w.metrics}["pr_auc"] == pytest.approx(exact, abs=1e-12)


def test_newer_format_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    fresh, _ = _fresh_and_migrated(tmp_path)
    meta, arrays = state_codec.encode(fresh)
    meta["engine_format"] = ENGINE_FORMAT + 1
    with pytest.raises(StateMismatch, match="newer model-monitor"):
        state_codec.decode(
            build_engine(settings_from_mapping(json.loads((V1 / "config.json").read_text()))),
            meta,
            arrays,
        )


V2 = Path(__file__).parent / "data" / "engine_v2"


def test_format_2_checkpoint_of_the_engine_before_its_split_loads_exactly(
    tmp_path: Path,
) -> None:
    """engine_v2 was written before the join buffer and the accumulators left the engine
    (tests/unit/data/make_engine_v2.py): the same layout must load into them and save
    back unchanged — but for the label delay, one histogram of every model then, which
    loads as the fleet prior beside empty per-model delays (format 3) —, and a fresh
    run of the same records must reach the same state."""
    from .data import make_engine_v2 as v2

    loaded = CheckpointStore(V2).load()
    assert loaded is not None and loaded.meta["engine_format"] == 2
    settings = settings_from_mapping(json.loads((V2 / "config.json").read_text()))
    engine = build_engine(settings)
    state_codec.decode(engine, loaded.meta, loaded.arrays)
    # written before checkpoints carried evaluation results: none, and nothing counted
    assert len(engine.result_cache) == 0 and not engine.result_cache.faults
    meta, arrays = state_codec.encode(engine)
    assert "result_cache" not in arrays  # nothing evaluated yet: no section
    names = ["fraud", "topic", "demand"]
    assert meta.pop("delay_models") == names and meta.pop("delay_sums_s") == [0.0] * 3
    assert meta.pop("engine_format") == ENGINE_FORMAT == 3
    # saved back unchanged but for what later formats appended (zeros): the arms' and
    # pairs' positives, the score histograms' cubic loss and within-bin sums, the delays
    # per model
    before = {k: v for k, v in loaded.meta.items() if k != "engine_format"}
    appended = _appended(engine)
    assert _extended(orjson.loads(orjson.dumps(meta))) == _extended(before)
    assert arrays.pop("delay_counts_by_model").tolist() == [[0] * 16] * 3
    assert arrays.keys() == loaded.arrays.keys()
    for name, value in loaded.arrays.items():
        got = arrays[name]
        if got.ndim == 2 and value.ndim == 2 and got.shape[1] == appended.get(value.shape[1]):
            assert not got[:, value.shape[1] :].any(), name  # the appended score sums
            got = got[:, : value.shape[1]]
        assert np.array_equal(got, value, equal_nan=True), name
    prior = engine.delay.histograms()
    assert all(prior.of(n) == prior.prior for n in names) and prior.prior is not None
    assert list(prior.prior.counts) == loaded.arrays["delay_counts"].tolist()
    # the checkpoint exercises every part the engine handed to an accumulator
    assert engine.pending > 0 and len(engine.orphans) > 0
    assert engine.pairs.sums.by_name["shadow"][0] > 0
    assert engine.arms.sums.predictions["canary"].sum() > 0
    assert engine.delay.prior is not None and engine.delay.prior[0].sum() > 0
    assert 0 in engine.drift.by_model
    assert engine.join_events["conflicting_label"] > 0
    # ... and today's engine, fed the same records, reaches that state
    fresh = build_engine(settings)
    pipe = build_pipeline(settings, fresh, FileDeadLetter(tmp_path / "dl.jsonl"),
                          clock_ms=lambda: v2.BASE + 300_000)  # fmt: skip
    preds, labels = v2.records()
    pipe.process("predictions", [RawRecord(orjson.dumps(r), "predictions") for r in preds])
    pipe.process("labels", [RawRecord(orjson.dumps(r), "labels") for r in labels])
    fresh_meta, fresh_arrays = state_codec.encode(fresh)
    # the fresh run keeps the delays per model: together, the fleet histogram of then
    assert fresh_arrays["delay_counts_by_model"].sum(axis=0).tolist() == (
        loaded.arrays.pop("delay_counts").tolist()
    )
    assert sum(fresh_meta.pop("delay_sums_s")) == pytest.approx(loaded.meta.pop("delay_sum_s"))
    del fresh_meta["delay_models"]
    fresh_meta["engine_format"] = 2
    # a fresh run sums floats in this CPU's order: counts exact, sums to a tolerance
    assert_close(_extended(orjson.loads(orjson.dumps(fresh_meta))), _extended(loaded.meta))
    for name, value in loaded.arrays.items():
        if name.startswith(("preds.", "orphans.")):  # row order differs before a compaction
            order = np.argsort(fresh_arrays[f"{name.split('.')[0]}.keys"], kind="stable")
            got = fresh_arrays[name][order]
        else:
            got = fresh_arrays[name]
        if got.ndim == 2 and value.ndim == 2 and got.shape[1] == appended.get(value.shape[1]):
            got = got[:, : value.shape[1]]  # fresh histograms also hold the appended sums
        assert_close(got, value, name)


def test_format_2_checkpoint_evaluated_and_saved_again_carries_its_results(
    tmp_path: Path,
) -> None:
    """The golden format-2 checkpoint, evaluated once and checkpointed by today's engine,
    gains the result section (bytes beside the arrays; every other array as before) and
    restores into an engine whose first tick recomputes nothing and equals a cold one."""
    from .close import assert_close

    loaded = CheckpointStore(V2).load()
    assert loaded is not None
    settings = settings_from_mapping(json.loads((V2 / "config.json").read_text()))
    engine = build_engine(settings)
    state_codec.decode(engine, loaded.meta, loaded.arrays)
    now = int(loaded.meta["pred_watermark_ms"])
    engine.snapshot(now, retain=False)
    store = CheckpointStore(tmp_path)
    store.write(*state_codec.encode(engine))
    again = store.load()
    assert again is not None
    section = again.arrays.pop("result_cache")
    assert section.dtype == np.uint8 and section.ndim == 1 and section.shape[0] > 32
    warm, cold = build_engine(settings), build_engine(settings)
    state_codec.decode(warm, again.meta, {**again.arrays, "result_cache": section})
    state_codec.decode(cold, again.meta, again.arrays)
    assert len(warm.result_cache) > 0 and len(cold.result_cache) == 0
    got, want = warm.snapshot(now, retain=False), cold.snapshot(now, retain=False)
    assert warm.result_cache.hits > 0 and not warm.result_cache.faults
    assert_close(got.results, want.results)  # floats within 1e-9 relative


def _mixed_engine(batches: list[np.ndarray]) -> Engine:
    """Three binary models (two score layouts, slices on two of them) fed the same rows,
    in the batches given by ``batches`` (index arrays into the rows)."""
    sliced = (SliceSpec(("country",), top_k=5, min_samples=1),)
    hour = (WindowSpec("1h", 3_600_000),)
    models = [
        ModelSpec("a", windows=hour, slices=sliced),
        ModelSpec("b", windows=hour, score_bins=256, slice_score_bins=32, slices=sliced),
        ModelSpec("c", windows=hour),
    ]
    engine = Engine(models, 60_000, 10**12, 10**12, 10**6, 10**6)
    rng = np.random.default_rng(17)
    n = 4000
    ts = BASE + np.sort(rng.integers(0, 3_600_000, n)).astype(np.int64)
    model = rng.integers(0, 3, n).astype(np.int16)  # models interleaved within a batch
    score = rng.random(n)
    y = (rng.random(n) < score).astype(int)
    keys = hash_ids([f"r{i}" for i in range(n)])
    version = [f"v{i % 3}" for i in range(n)]
    segments = [{"country": f"c{i % 7}"} for i in range(n)]
    for idx in batches:
        engine.apply_predictions(
            PredictionBatch(keys[idx], ts[idx], model[idx], [version[i] for i in idx],
                            score[idx], (score[idx] >= 0.5).astype(np.int8),
                            segments=[segments[i] for i in idx])
        )  # fmt: skip
        engine.apply_labels(LabelBatch(keys[idx], ts[idx] + 5, [str(y[i]) for i in idx]))
    return engine


def test_score_histograms_of_a_mixed_batch_equal_one_model_at_a_time() -> None:
    """A batch spanning several models (their pairs' cells computed once per layout, then
    added model by model) writes every model's fine and per-slice score rows as feeding
    the same rows one model and one row at a time in small batches would (float sums:
    relative 1e-12)."""
    n = 4000
    mixed = _mixed_engine([np.arange(0, 2500), np.arange(2500, n)])
    rng = np.random.default_rng(5)
    small = _mixed_engine(np.array_split(rng.permutation(n), 40))
    for kind in ("wide", "sliced"):
        a_stores, b_stores = getattr(mixed, kind), getattr(small, kind)
        assert sorted(a_stores) == sorted(b_stores)
        for m in a_stores:
            got, want = _rows_by_key(mixed, kind, m), _rows_by_key(small, kind, m)
            assert got.keys() == want.keys(), (kind, m)
            assert sum(float(r.sum()) for r in got.values()) > 0, (kind, m)
            for key, row in got.items():
                np.testing.assert_allclose(row, want[key], rtol=1e-12, atol=1e-9)


def _rows_by_key(engine: Engine, kind: str, m: int) -> dict[tuple[Any, ...], np.ndarray]:
    """A store's score rows by (group, tier, bucket): group codes depend on arrival order."""
    store = getattr(engine, kind)[m]
    view = store.view()
    return {
        (engine.groups[g], t, b): row
        for g, t, b, row in zip(
            view["group"].tolist(), view["tier"].tolist(), view["bucket"].tolist(),
            store.matrix(SCORES.name), strict=True,
        )
    }  # fmt: skip
