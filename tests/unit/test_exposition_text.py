"""The directly written quality text (export/sinks.py TextSink) is byte-for-byte the page
prometheus-client renders from the same collector's metric families."""

from __future__ import annotations

import math

import numpy as np
import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from monitor.config import settings_from_mapping
from monitor.engine.records import LabelBatch, PredictionBatch, hash_ids
from monitor.engine.snapshot import Economics, FairnessGap, Snapshot, WindowResult
from monitor.export.prometheus import MonitorCollector
from monitor.export.published import Published
from monitor.export.sinks import go_float
from monitor.metrics.protocol import ModelParams
from monitor.metrics.registry import series_table
from monitor.stats.results import MetricValue
from monitor.stats.scores import ReliabilityBin
from monitor.wiring import build_engine


def _reference(pub: Published, render=generate_latest) -> bytes:  # type: ignore[no-untyped-def]
    """The previous rendering: every snapshot family through ``render`` (generate_latest)."""
    collector = MonitorCollector(lambda: pub)
    registry = CollectorRegistry(auto_describe=False)

    class Families:
        def collect(self):  # type: ignore[no-untyped-def]
            return iter(list(collector.snapshot_families(pub)))

    registry.register(Families())  # type: ignore[arg-type]
    return render(registry)


def _fleet_snapshot() -> Snapshot:
    """A real engine's snapshot: 2 binary models with costs, 2 versions, 6 slices."""
    models = [
        {
            "name": f"m{i}",
            "windows": [{"size": "1h"}, {"size": "1d"}],
            "costs": {"tp": 5.0, "fp": -1.0, "fn": -10.0, "tn": 0.0},
            "slices": [{"dimensions": ["segment"], "top_k": 6, "min_samples": 1}],
        }
        for i in range(2)
    ]
    engine = build_engine(settings_from_mapping({"models": models}, "<test>"))
    rng = np.random.default_rng(3)
    n, now = 6_000, 1_700_000_000_000
    ts = np.sort(rng.integers(now - 20 * 3_600_000, now, n)).astype(np.int64)
    y = (rng.random(n) < 0.3).astype(np.int8)
    score = 1 / (1 + np.exp(-(2.0 * (y - 0.5) + rng.normal(size=n))))
    keys = hash_ids([f"k{i}" for i in range(n)])
    model = rng.integers(0, 2, n).astype(np.int16)
    versions = [f"v{v}" for v in rng.integers(0, 2, n)]
    segments = [{"segment": f's"{v}\\'} for v in rng.integers(0, 6, n)]  # needs escaping
    engine.apply_predictions(
        PredictionBatch(keys, ts, model, versions, score, (score >= 0.5).astype(np.int8),
                        segments=segments)
    )  # fmt: skip
    engine.apply_labels(LabelBatch(keys, ts + 1000, [str(v) for v in y]))
    return engine.snapshot(now)


def _synthetic_snapshot() -> Snapshot:
    """Shapes a binary fleet does not produce: per-class metrics, a confusion matrix,
    excluded rows, withheld intervals, values Go prints with exponents, odd labels."""
    mv = MetricValue
    metrics = (
        mv("accuracy", 0.5, 0.4, 0.6, 10),
        mv("precision[cat\ndog]", 0.25, 0.1, 0.5, 4),
        mv("recall[cat\ndog]", 0.75, math.nan, math.nan, 4),
        mv("mae", 1.5e7, 1.2e6, 2e9, 12),
        mv("mape", math.nan, math.nan, math.nan, 0),
        mv("pinball_q0_9", 0.1, 0.05, 0.2, 12),
        mv("gain_at_10", 0.3, 0.2, 0.4, 12),
        mv("lift_at_10", 3.0, 2.0, 4.0, 12),
        mv("log_loss", math.inf, math.nan, math.nan, 3),
        mv("brier", -0.0, -1e-300, 1e300, 3),
    )
    results = (
        WindowResult("mc", 'v"1', "1h", "all", 0, 1, 20, 10, metrics,
                     class_confusion=(1, 2, 3, 4), classes=("cat\ndog", "b\\c")),
        WindowResult("mc", "v\\2", "1h", "region=eu,tier=\"x\"", 0, 1, 0, 0, metrics[:3],
                     excluded=(("mape", 2), ("smape", 1))),
        WindowResult("bin", "v1", "7d", "all", 0, 1, 7, 7, metrics[:1],
                     reliability=(ReliabilityBin(0.0, 0.1, 3, 0.05, 0.0, 0.0, 0.5),
                                  ReliabilityBin(0.1, 0.25, 0, math.nan, math.nan, 0, 1)),
                     economics=Economics(mv("expected_value", 2.0, 1.0, 3.0, 7), 0.4,
                                         mv("expected_value", 2.5, math.nan, math.nan, 7))),
    )  # fmt: skip
    fairness = (FairnessGap("bin", "v1", "7d", 'seg"ment', "ece_gap", 0.125, "a", "b"),)
    # what a fleet of these models exports its names as (per-class labels, help texts)
    series = series_table([
        (ModelParams("multiclass", ("cat\ndog", "b\\c")), ("accuracy", "per_class")),
        (ModelParams("regression", quantiles=(0.9,)), ("mae", "mape", "pinball")),
        (ModelParams("binary", gain_fractions=(0.1,)), ("gain", "log_loss", "brier")),
    ])  # fmt: skip
    return Snapshot(0, results, fairness=fairness, series=series)


@pytest.mark.parametrize("make", [_fleet_snapshot, _synthetic_snapshot])
def test_text_sink_renders_the_reference_page(make) -> None:  # type: ignore[no-untyped-def]
    snap = make()
    pub = Published(snapshot=snap, ops=snap.ops)
    fast = MonitorCollector(lambda: pub).snapshot_text(pub)
    reference = _reference(pub)
    assert fast == reference
    families = {f.name for f in text_string_to_metric_families(fast.decode())}
    assert "mlmon_window_samples" in families  # parses, and is not empty


def test_fleet_page_has_per_slice_scores_and_reliability() -> None:
    snap = _fleet_snapshot()
    pub = Published(snapshot=snap, ops=snap.ops)
    text = MonitorCollector(lambda: pub).snapshot_text(pub).decode()
    seen = {
        (s.name, s.labels["slice"])
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if "slice" in s.labels
    }
    for name in ("mlmon_roc_auc", "mlmon_ece", "mlmon_reliability_samples"):
        assert (name, 'segment=s"3\\') in seen


_VALUES = [0.0, -0.0, 1.0, 0.1, 123456.7, 999999.9, 1e6, 2.5e7, 1e300, -3e9, 7, math.inf,
           -math.inf, math.nan, 5e-324]  # fmt: skip


@pytest.mark.parametrize("value", _VALUES)
def test_go_float_is_floattogostring(value: float) -> None:
    from prometheus_client.utils import floatToGoString

    assert go_float(value) == floatToGoString(value)


@pytest.mark.parametrize("make", [_fleet_snapshot, _synthetic_snapshot])
def test_openmetrics_snapshot_part_is_the_cached_text(make) -> None:  # type: ignore[no-untyped-def]
    """/metrics serves OpenMetrics from the same cached snapshot bytes (export/exposition.py):
    that holds while the part is gauges only, whose OpenMetrics lines are the text lines."""
    snap = make()
    pub = Published(snapshot=snap, ops=snap.ops)
    cached = MonitorCollector(lambda: pub).snapshot_text(pub)
    assert _reference(pub, openmetrics_latest) == cached + b"# EOF\n"
