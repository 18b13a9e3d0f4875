"""`monitor check-config`'s series estimate against what /metrics really exports for
config.example.toml's models under a synthetic stream that fills every slice value."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from monitor.config import load_settings, settings_from_mapping
from monitor.engine.snapshot import Snapshot
from monitor.export.exposition import Exposition
from monitor.export.published import Published
from monitor.ingest.deadletter import FileDeadLetter
from monitor.series_estimate import _probe_features, estimate_series, feed, task_records
from monitor.wiring import build_engine, build_pipeline

REPO = Path(__file__).resolve().parents[2]
NOW = 1_800_000_000_000
HOUR = 3_600_000


def _exported_per_model() -> dict[str, int]:
    """Series per model on /metrics (quality, fairness, drift) after a stream with more
    values per slice dimension than top_k, each slice value above its min_samples in
    every window."""
    example = load_settings(REPO / "config.example.toml")
    # the models only: comparisons and SLO states are not part of the estimate
    settings = settings_from_mapping(
        example.model_dump(exclude={"comparisons", "slos", "schedules"})
    )
    engine = build_engine(settings)
    rng = np.random.default_rng(21)
    blocks = {"fraud": [(NOW - HOUR, HOUR), (NOW - 7 * HOUR, HOUR)]}
    dims = {"country": 25, "device": 12, "region": 25}
    with tempfile.TemporaryDirectory() as tmp:
        sink = FileDeadLetter(Path(tmp) / "dl.jsonl")
        pipeline = build_pipeline(settings, engine, sink, clock_ms=lambda: NOW)
        for i, model in enumerate(settings.models):
            wanted = sorted({d for s in model.slices for d in s.dimensions})
            segments: list[dict[str, str]] = [{}]
            for d in wanted:  # every combination of the dimensions' values
                segments = [{**s, d: f"{d}{v}"} for s in segments for v in range(dims[d])]
            segments = segments if wanted else []
            need = max([s.min_samples for s in model.slices] + [400])
            # every combination equally often (records cycle through them): the top_k
            # values stay the first seen, as ties keep them, and each combination holds need
            n = max(2000, need * max(1, len(segments)))
            for start, span in blocks.get(model.name, [(NOW - HOUR, HOUR)]):
                feed(pipeline, list(task_records(
                    model, settings, n, start + 60_000, span - 120_000, "v1", segments,
                    _probe_features(settings, i), rng, f"{model.name}-{start}-",
                )))  # fmt: skip
        sink.close()
    # counted on the rendered page, as Prometheus would read it
    snap = engine.snapshot(NOW, retain=False)
    pub = Published(snapshot=Snapshot(snap.at_ms, snap.results, drift=snap.drift,
                                      fairness=snap.fairness, series=snap.series))  # fmt: skip
    exposition = Exposition(lambda: pub, CollectorRegistry(auto_describe=False))
    exposition.refresh()
    text = exposition.collector.snapshot_text(pub).decode()
    out: Counter[str] = Counter()
    for fam in text_string_to_metric_families(text):
        out.update(s.labels["model"] for s in fam.samples if "model" in s.labels)
    assert sum(out.values()) == exposition.series - 1  # all but the evaluation stamp
    return dict(out)


@pytest.mark.slow
def test_estimate_within_ten_percent_of_the_exported_series() -> None:
    settings = load_settings(REPO / "config.example.toml")
    estimate = {m.model: m for m in estimate_series(settings, NOW)}
    exported = _exported_per_model()
    assert set(exported) == set(estimate)
    for name, m in estimate.items():
        assert abs(m.total(versions=1) - exported[name]) <= 0.1 * exported[name], (
            name, m, exported[name],
        )  # fmt: skip
    fraud = estimate["fraud"]
    assert fraud.slice_values == 21 + 21 * 11  # country (top 20 + other), crossed with device
    assert fraud.total() == 20 * fraud.per_version  # worst case: max_versions
