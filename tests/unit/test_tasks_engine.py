"""Multiclass and regression inside the engine: restart equivalence, label conflicts,
comparison losses and the per-slice view of a degrading segment."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from monitor.config import Settings, settings_from_mapping
from monitor.engine import state_codec
from monitor.engine.core import LOSSES, Engine
from monitor.engine.evaluate import evaluate_all
from monitor.ingest.deadletter import FileDeadLetter
from monitor.ingest.pipeline import RawRecord
from monitor.wiring import build_engine, build_pipeline

CLASSES = ["a", "b", "c", "d"]
NOW = int(time.time() * 1000)


def _settings(**extra: Any) -> Settings:
    return settings_from_mapping(
        {
            "models": [
                {"name": "topic", "task": "multiclass", "classes": CLASSES,
                 "windows": [{"size": "1d"}],
                 "slices": [{"dimensions": ["lang"], "min_samples": 20}]},
                {"name": "demand", "task": "regression", "windows": [{"size": "1d"}],
                 "slices": [{"dimensions": ["region"], "min_samples": 20}]},
            ],
            **extra,
        }
    )  # fmt: skip


def _records(n: int, seed: int, version: str = "v1", bad_region: float = 0.0) -> tuple[list, list]:
    rng = np.random.default_rng(seed)
    preds, labels = [], []
    for i in range(n):
        ts = NOW - 3_600_000 + i * 500
        y = int(rng.integers(4))
        logits = rng.normal(size=4)
        logits[y] += 2.0
        p = np.exp(logits) / np.exp(logits).sum()
        preds.append({"id": f"t{seed}-{i}", "ts": ts, "model": "topic", "version": version,
                      "scores": dict(zip(CLASSES, p.tolist(), strict=True)),
                      "segments": {"lang": "en" if i % 2 else "fr"}})  # fmt: skip
        labels.append({"id": f"t{seed}-{i}", "ts": ts + 100, "label": CLASSES[y]})
        region = "south" if i % 4 == 0 else "north"
        target = float(rng.normal(100, 20))
        noise = rng.normal(scale=5.0 + (bad_region if region == "south" else 0.0))
        preds.append({"id": f"r{seed}-{i}", "ts": ts, "model": "demand", "version": version,
                      "prediction": target + float(noise),
                      "segments": {"region": region}})  # fmt: skip
        labels.append({"id": f"r{seed}-{i}", "ts": ts + 100, "label": target})
    return preds, labels


def _feed(pipe: Any, kind: str, records: list[dict]) -> list:
    return pipe.process(kind, [RawRecord(orjson.dumps(r), kind) for r in records])


def _evaluate(engine: Engine) -> dict[tuple[str, str], dict[str, float]]:
    results, _ = evaluate_all(engine.view(), engine.models, NOW)
    return {(r.model, r.slice): {m.name: m.value for m in r.metrics} for r in results}


def test_restart_from_state_equals_one_run(tmp_path: Path) -> None:
    settings = _settings()
    preds, labels = _records(800, seed=1)
    one = build_engine(settings)
    pipe = build_pipeline(settings, one, FileDeadLetter(tmp_path / "a.jsonl"))
    _feed(pipe, "labels", labels[:500])  # these wait as orphans (numeric ones too)
    _feed(pipe, "predictions", preds)
    _feed(pipe, "labels", labels[500:])
    expected = _evaluate(one)

    first = build_engine(settings)
    pipe = build_pipeline(settings, first, FileDeadLetter(tmp_path / "b.jsonl"))
    _feed(pipe, "labels", labels[:500])
    _feed(pipe, "predictions", preds[:700])
    meta, arrays = state_codec.encode(first)
    meta = orjson.loads(orjson.dumps(meta))  # what the checkpoint's JSON half keeps
    second = build_engine(settings)
    state_codec.decode(second, meta, arrays)
    pipe = build_pipeline(settings, second, FileDeadLetter(tmp_path / "b.jsonl"))
    _feed(pipe, "predictions", preds[700:])
    _feed(pipe, "labels", labels[500:])
    got = _evaluate(second)
    assert got.keys() == expected.keys()
    assert ("topic", "lang=en") in got and ("demand", "region=south") in got
    for key, metrics in expected.items():
        for name, value in metrics.items():
            assert got[key][name] == pytest.approx(value, rel=1e-12, nan_ok=True), (key, name)
    assert second.pending == one.pending == 0
    # the burn-rate counters: cumulative labeled/errors per version, kept across restarts
    outcomes = one.registry.outcome_counts()
    counts = {(one.models[m].name, v): (lab, err) for m, v, lab, err in outcomes}
    assert second.registry.outcome_counts() == one.registry.outcome_counts()
    mc_errors = 0
    for p, lab in zip(preds[::2], labels[::2], strict=True):
        scores = p["scores"]
        mc_errors += max(scores, key=scores.get) != lab["label"]
    assert counts[("topic", "v1")] == (800, mc_errors)
    assert counts[("demand", "v1")] == (800, 0)  # regression has no "wrong" decisions


def test_regression_label_duplicates_and_conflicts(tmp_path: Path) -> None:
    settings = _settings()
    engine = build_engine(settings)
    pipe = build_pipeline(settings, engine, FileDeadLetter(tmp_path / "dl.jsonl"))
    pred = {"id": "q", "ts": NOW - 1000, "model": "demand", "version": "v1", "prediction": 3.0}
    _feed(pipe, "labels", [{"id": "q", "ts": NOW - 900, "label": 2.5}])
    # a waiting numeric label: the same value is a duplicate, another value a conflict
    rej = _feed(pipe, "labels", [{"id": "q", "ts": NOW - 800, "label": 2.5},
                                 {"id": "q", "ts": NOW - 800, "label": 7.0}])  # fmt: skip
    assert [r.reason for r in rej] == ["conflicting_label"]
    _feed(pipe, "predictions", [pred])
    rej = _feed(pipe, "labels", [{"id": "q", "ts": NOW - 700, "label": 2.5},
                                 {"id": "q", "ts": NOW - 700, "label": 9.0}])  # fmt: skip
    assert [r.reason for r in rej] == ["conflicting_label"]
    assert engine.join_events["duplicate_label"] == 2
    assert engine.join_events["joined"] == 1
    metrics = _evaluate(engine)[("demand", "all")]
    assert metrics["mae"] == pytest.approx(0.5) and metrics["mean_error"] == pytest.approx(0.5)
    # numeric targets never enter the label vocabulary (bounded memory)
    assert all(t in CLASSES for t in engine.label_codes)
    # a text label is no regression target, and no class of the multiclass model either
    rej = _feed(pipe, "labels", [{"id": "z", "ts": NOW, "label": "north"}])
    assert [r.reason for r in rej] == ["unknown_class"]


def test_comparison_losses_for_each_task(tmp_path: Path) -> None:
    settings = _settings(
        comparisons=[
            {"name": "mc", "model": "topic", "control": "v1", "treatment": "v2",
             "loss": "log_loss", "min_samples": 10},
            {"name": "rg", "model": "demand", "control": "v1", "treatment": "v2",
             "loss": "squared_error", "min_samples": 10},
        ]
    )  # fmt: skip
    engine = build_engine(settings)
    pipe = build_pipeline(settings, engine, FileDeadLetter(tmp_path / "dl.jsonl"))
    p1, l1 = _records(300, seed=2)
    p2, l2 = _records(300, seed=3, version="v2")
    _feed(pipe, "predictions", p1 + p2)
    _feed(pipe, "labels", l1 + l2)
    li = LOSSES.index("log_loss")
    n, total, _ = engine.arms.sums.loss["mc"][0, li]
    assert n == 300
    oracle = 0.0
    for p, lab in zip(p1[::2], l1[::2], strict=True):
        oracle -= math.log(p["scores"][lab["label"]])
    assert total == pytest.approx(oracle, rel=1e-9)
    si = LOSSES.index("squared_error")
    n, total, _ = engine.arms.sums.loss["rg"][1, si]
    oracle = sum(
        (p["prediction"] - lab["label"]) ** 2 for p, lab in zip(p2[1::2], l2[1::2], strict=True)
    )
    assert n == 300 and total == pytest.approx(oracle, rel=1e-9)
    # error_rate does not apply to regression: no samples, not zeros
    assert engine.arms.sums.loss["rg"][1, LOSSES.index("error_rate")][0] == 0


def test_a_degrading_regression_slice_shows_in_its_interval(tmp_path: Path) -> None:
    settings = _settings()
    engine = build_engine(settings)
    pipe = build_pipeline(settings, engine, FileDeadLetter(tmp_path / "dl.jsonl"))
    preds, labels = _records(4000, seed=4, bad_region=25.0)
    _feed(pipe, "predictions", preds)
    _feed(pipe, "labels", labels)
    results, _ = evaluate_all(engine.view(), engine.models, NOW)

    def by_slice(name: str) -> dict:
        return {
            r.slice: next(m for m in r.metrics if m.name == name)
            for r in results
            if r.model == "demand"
        }

    assert by_slice("rmse")["region=north"].value == pytest.approx(5.0, rel=0.1)
    # RMSE's interval is withheld by default (heavy tails, docs/statistics.md); MAE's is not
    mae = by_slice("mae")
    healthy = mae["region=north"]
    assert healthy.value == pytest.approx(5.0 * math.sqrt(2 / math.pi), rel=0.1)
    south = mae["region=south"]
    assert south.lower > healthy.upper  # the degraded slice's interval excludes healthy


def test_a_batch_that_compacts_the_join_table_counts_the_labels_it_joins(tmp_path: Path) -> None:
    # labels waiting first, then one batch of predictions big enough to compact the
    # prediction table: the joined rows are read before the table moves them
    settings = _settings()
    preds, labels = _records(5000, seed=4)
    big = build_engine(settings)
    pipe = build_pipeline(settings, big, FileDeadLetter(tmp_path / "a.jsonl"))
    _feed(pipe, "labels", labels)
    _feed(pipe, "predictions", preds)
    small = build_engine(settings)
    pipe = build_pipeline(settings, small, FileDeadLetter(tmp_path / "b.jsonl"))
    _feed(pipe, "labels", labels)
    for at in range(0, len(preds), 1000):
        _feed(pipe, "predictions", preds[at : at + 1000])
    assert big.join_events["joined"] == small.join_events["joined"] == len(preds)
    expected, got = _evaluate(small), _evaluate(big)
    assert got.keys() == expected.keys()
    for key, metrics in expected.items():
        for name, value in metrics.items():
            assert got[key][name] == pytest.approx(value, rel=1e-9, nan_ok=True), (key, name)
    mae = np.mean(
        [
            abs(p["prediction"] - lab["label"])
            for p, lab in zip(preds[1::2], labels[1::2], strict=True)
        ]
    )
    assert got[("demand", "all")]["mae"] == pytest.approx(mae, rel=1e-9)
