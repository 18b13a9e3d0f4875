"""Label completeness per model: a model whose labels take days is provisional while one
whose labels take seconds is not, each read from its own delay distribution — whatever
the other model's traffic (an engine fed one model alone gives the same completeness)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitor.alerting.slo import SloEvaluator, SloSpec
from monitor.config import settings_from_mapping
from monitor.engine.core import Engine
from monitor.engine.records import LabelBatch, PredictionBatch, hash_ids
from monitor.insight import Insight
from monitor.wiring import build_engine

DAY = 86_400_000
NOW = 1_700_000_000_000 // DAY * DAY
MODELS = {"clicks": (20_000, 1_000, 10_000), "fraud": (1_500, 2 * DAY, 4 * DAY)}  # n, delay


def _engine() -> Engine:
    windows = [{"size": "1h"}, {"size": "7d"}]
    return build_engine(
        settings_from_mapping({"models": [{"name": n, "windows": windows} for n in MODELS]})
    )


def _feed(engine: Engine, models: list[str], seed: int = 5) -> None:
    """A week of each model's predictions, and the labels stamped by ``NOW``."""
    rng = np.random.default_rng(seed)
    index = [m.name for m in engine.models]
    for name, (n, lo, hi) in MODELS.items():
        ts = NOW - 7 * DAY + np.sort(rng.integers(0, 7 * DAY, n)).astype(np.int64)
        label_ts = ts + rng.integers(lo, hi, n)
        score = rng.random(n)
        y = (rng.random(n) < score).astype(int)  # calibrated: accuracy about 0.75
        if name not in models:
            continue
        keys = hash_ids([f"{name}-{i}" for i in range(n)])
        engine.apply_predictions(
            PredictionBatch(
                keys,
                ts,
                np.full(n, index.index(name), np.int16),
                ["v1"] * n,
                score,
                (score >= 0.5).astype(np.int8),
            )
        )
        came = label_ts <= NOW
        engine.apply_labels(LabelBatch(keys[came], label_ts[came], [str(v) for v in y[came]]))


def _completeness(engine: Engine) -> dict[tuple[str, str], float]:
    snap = engine.snapshot(NOW)
    return {(c.model, c.window): c.completeness for c in snap.completeness}


def test_each_model_reads_its_own_label_delay() -> None:
    both = _engine()
    _feed(both, list(MODELS))
    got = _completeness(both)
    # the clicks are labeled within 10 s: their last hour is complete; the fraud labels
    # take 2-4 days, so neither its last hour nor much of its week is in yet
    assert got["clicks", "1h"] > 0.99 and got["clicks", "1w"] > 0.99
    assert got["fraud", "1h"] == pytest.approx(0.0, abs=1e-12)
    assert 0.3 < got["fraud", "1w"] < 0.7  # about (7 - 3) / 7 of the week
    # the same as an engine that saw one model alone: the other's traffic does not matter
    for name in MODELS:
        alone = _engine()
        _feed(alone, [name])
        for (model, window), value in _completeness(alone).items():
            if model == name:
                assert got[model, window] == pytest.approx(value, abs=1e-12), (model, window)
    snap = both.snapshot(NOW)
    provisional = {(c.model, c.window): c.provisional for c in snap.completeness}
    assert provisional == {("clicks", "1h"): False, ("clicks", "1w"): False,
                           ("fraud", "1h"): True, ("fraud", "1w"): True}  # fmt: skip


def test_min_label_completeness_holds_only_the_model_whose_labels_lag() -> None:
    engine = _engine()
    _feed(engine, list(MODELS))
    snap = engine.snapshot(NOW)
    specs = [
        SloSpec(
            f"{m}-acc",
            m,
            "accuracy",
            "1w",
            0.99,
            "above",
            min_samples=10,
            confidence="point",
            min_label_completeness=0.9,
        )
        for m in MODELS
    ]
    states = {s.model: s for s in SloEvaluator(specs).evaluate(snap, NOW / 1000)}
    assert states["clicks"].state == "firing"  # accuracy about 0.75 < 0.99: breached
    assert states["fraud"].state == "inactive"
    assert "labels incomplete" in states["fraud"].reason


def test_history_points_read_the_models_own_delay() -> None:
    engine = _engine()
    _feed(engine, list(MODELS))
    insight = Insight(lambda: engine)
    for model, provisional in (("clicks", False), ("fraud", True)):
        (s,) = insight.history(model, "v1", "all", ["accuracy"], NOW, point_ms=3_600_000).values()
        # the last day but its last hour: the clicks' labels are in, the fraud's are not
        points = [p for p in s.points if p.start_ms >= NOW - DAY and p.end_ms <= NOW - 3_600_000]
        assert len(points) >= 20 and all(p.provisional == provisional for p in points), model
        assert all(not math.isnan(p.completeness) for p in points), model
