"""Scoring the rows of many model windows together changes no result: an evaluation
whose score pool runs after every window (and computes two rows a call) equals one that
pools a whole fleet's windows, results and fairness gaps in the same order — with a
multiclass model between binary ones, whose results are appended as they are emitted."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

import monitor.engine.evaluate as evaluate
from monitor.config import settings_from_mapping
from monitor.engine.evaluate import evaluate_all
from monitor.engine.result_cache import ResultCache
from monitor.ingest.deadletter import FileDeadLetter
from monitor.ingest.pipeline import RawRecord
from monitor.synthetic import binary_traffic
from monitor.wiring import build_engine, build_pipeline

NOW = int(time.time() * 1000) // 60_000 * 60_000
CLASSES = ["a", "b", "c"]
WINDOWS = [{"size": "5m"}, {"size": "1h"}]
SLICES = [{"dimensions": ["country"], "min_samples": 1}]


def _engine(tmp_path: Path) -> Any:
    settings = settings_from_mapping(
        {
            "models": [
                {"name": "fraud", "windows": WINDOWS, "slices": SLICES},
                {"name": "topic", "task": "multiclass", "classes": CLASSES,
                 "windows": WINDOWS, "slices": SLICES},
                {"name": "churn", "windows": WINDOWS, "slices": SLICES},
            ]
        }
    )  # fmt: skip
    engine = build_engine(settings)
    pipe = build_pipeline(settings, engine, FileDeadLetter(tmp_path / "dead.jsonl"))
    start = NOW - 3_000_000
    preds, labels = [], []
    for seed, model, version in ((1, "fraud", "v1"), (2, "fraud", "v2"), (3, "churn", "v1")):
        traffic = binary_traffic(
            1_500, seed=seed, start_ms=start, rate_per_s=0.6, model=model, version=version,
            id_prefix=f"{model}{version}-", countries=("US", "DE", "BR", "IN", "FR"),
        )  # fmt: skip
        preds += traffic.predictions
        labels += traffic.labels
    rng = np.random.default_rng(4)
    for i in range(1_500):
        y = int(rng.integers(3))
        p = rng.dirichlet(np.ones(3) + 2.0 * (np.arange(3) == y))
        ts = start + i * 1_900
        preds.append({"id": f"t{i}", "ts": ts, "model": "topic", "version": "v1",
                      "scores": dict(zip(CLASSES, p.tolist(), strict=True)),
                      "segments": {"country": ("US", "DE")[i % 2]}})  # fmt: skip
        labels.append({"id": f"t{i}", "ts": ts + 100, "label": CLASSES[y]})
    for kind, records in (("predictions", preds), ("labels", labels)):
        pipe.process(kind, [RawRecord(orjson.dumps(r), kind) for r in records])
    return engine


def _pass(engine: Any, cache: ResultCache | None = None) -> list[str]:
    results, gaps = evaluate_all(engine.view(), engine.models, NOW, cache=cache)
    return [repr(r) for r in results] + [repr(g) for g in gaps]


def test_pooled_scores_equal_window_by_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = _engine(tmp_path)
    pooled = _pass(engine)
    cached = ResultCache()
    assert _pass(engine, cached) == pooled
    monkeypatch.setattr(evaluate, "_POOL_BYTES", 1)  # the pool runs after every window
    monkeypatch.setattr(evaluate, "_CHUNK_BYTES", 1)  # one row per score-metric call
    alone = _pass(engine)
    assert alone == pooled
    assert _pass(engine, ResultCache()) == pooled
    assert _pass(engine, cached) == pooled  # and the pooled pass's cache serves it
    models = [line.split("model='", 1)[1].split("'", 1)[0] for line in pooled[:-1]]
    assert {"fraud", "topic", "churn"} <= set(models)
    # each model's results together, in configuration order
    assert [m for i, m in enumerate(models) if i == 0 or models[i - 1] != m][:3] == [
        "fraud", "topic", "churn",
    ]  # fmt: skip
    slices = [line for line in pooled if "slice='country=" in line and "model='fraud'" in line]
    assert len(slices) >= 10 and any("FairnessGap(" in line for line in pooled)
