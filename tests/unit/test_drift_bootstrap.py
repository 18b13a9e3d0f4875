"""A live drift reference's bootstrap keeps bounded column summaries, never the raw
feature dicts, and tracks at most `drift.max_features` feature names."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitor.config import settings_from_mapping
from monitor.engine import state_codec
from monitor.engine.core import Engine
from monitor.engine.records import PredictionBatch, hash_ids
from monitor.engine.snapshot import Snapshot
from monitor.export.prometheus import MonitorCollector, Published
from monitor.wiring import build_engine

BASE = 1_700_000_000_000
N_FEATURES = 10_000
BOOTSTRAP = 1_000
MAX_FEATURES = 100
_NAMES = [f"f{j:05d}" for j in range(N_FEATURES)]


def _engine(**drift: Any) -> Engine:
    settings = settings_from_mapping(
        {"models": [{"name": "m", "windows": [{"size": "1d"}],
                     "drift": {"reference_window": "previous:1d", "bootstrap": BOOTSTRAP,
                               "max_features": MAX_FEATURES, **drift}}]}
    )  # fmt: skip
    return build_engine(settings)


def _batch(lo: int, n: int, rng: np.random.Generator, width: int) -> PredictionBatch:
    values = rng.normal(size=(n, width))
    names = _NAMES[:width]
    # a categorical feature first, then the numeric ones
    feats: list[dict[str, Any] | None] = [
        {"a_country": ["de", "fr", "it"][(lo + r) % 3], **dict(zip(names, row, strict=True))}
        for r, row in enumerate(values.tolist())
    ]
    score = rng.random(n)
    return PredictionBatch(
        hash_ids([f"p{lo + i}" for i in range(n)]),
        np.full(n, BASE + lo, np.int64),
        np.zeros(n, np.int16),
        ["v1"] * n,
        score,
        (score >= 0.5).astype(np.int8),
        features=feats,
    )


def test_ten_thousand_features_per_record_keep_memory_bounded() -> None:
    """1,200 records of 10,001 features: the engine retains < 3 MB across the bootstrap
    (bound: bootstrap × max_features × 12 B = 1.2 MB of columns, plus bookkeeping); the
    raw dicts it used to keep would be ~1 GB."""
    engine = _engine()
    rng = np.random.default_rng(1)
    gc.collect()
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        retained = []
        for lo in range(0, 1_200, 100):
            batch = _batch(lo, 100, rng, N_FEATURES)
            engine.apply_predictions(batch)
            del batch
            gc.collect()
            retained.append(tracemalloc.get_traced_memory()[0] - base)
    finally:
        tracemalloc.stop()
    assert max(retained) < 3_000_000, retained
    print(f"drift bootstrap, 10,001 features per record: retained at most {max(retained)} B")
    # the reference is live, with exactly max_features features: the first names met
    assert 0 in engine.drift.by_model and not engine.drift.bootstrap
    d = engine.drift.by_model[0]
    names = [r.name for r in d.refs]
    assert len(names) == MAX_FEATURES
    assert sorted(names) == ["a_country"] + [f"f{j:05d}" for j in range(MAX_FEATURES - 1)]
    # every value of the other names during the bootstrap is counted, and exported
    untracked = BOOTSTRAP * (N_FEATURES + 1 - MAX_FEATURES)
    assert engine.drift.untracked_features() == {"m": untracked}
    ops = engine.ops()
    assert ops.drift_untracked == (("m", untracked),)
    registry = CollectorRegistry(auto_describe=False)
    snap = Snapshot(BASE, (), ops)
    registry.register(MonitorCollector(lambda: Published(snap, ops)))
    text = generate_latest(registry).decode()
    samples = {
        (s.name, s.labels.get("model")): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }
    assert samples["mlmon_drift_untracked_features_total", "m"] == untracked


def test_bootstrap_profile_and_checkpoint_mid_bootstrap() -> None:
    """Numeric and categorical columns give the profile the raw values would, and a
    checkpoint taken mid-bootstrap continues to the same reference."""
    rng = np.random.default_rng(2)
    batches = [_batch(lo, 100, rng, 5) for lo in range(0, 1_200, 100)]
    one = _engine(max_features=4)
    for b in batches:
        one.apply_predictions(b)
    two = _engine(max_features=4)
    for i, b in enumerate(batches):
        if i == 4:
            meta, arrays = state_codec.encode(two)
            assert not any(isinstance(v, dict) for v in str(meta))  # no raw records
            two = _engine(max_features=4)
            state_codec.decode(two, meta, arrays)
        two.apply_predictions(b)
    p1, p2 = one.drift.by_model[0].profile, two.drift.by_model[0].profile
    assert p1.to_json() == p2.to_json()
    kinds = {r.name: type(r).__name__ for r in p1.features}
    assert kinds == {"a_country": "CategoricalReference", "f00000": "NumericReference",
                     "f00001": "NumericReference", "f00002": "NumericReference"}  # fmt: skip
    # the numeric reference is built from exactly the bootstrap's values
    values = np.array([f["f00000"] for b in batches[:10] for f in b.features])  # type: ignore[index]
    ref = next(r for r in p1.features if r.name == "f00000")
    assert ref.n == BOOTSTRAP
    assert float(ref.edges[0]) == values.min() or ref.edges[0] <= values.min()
    view = one.view().wide[0]["m.drift"]
    assert int(view.sum()) > 0
