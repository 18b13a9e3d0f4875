"""Resource bounds under hostile traffic: a million distinct slice values, a flood of labels
for ids that never come, a flood of predictions that are never labeled.

Batches go straight into the daemon's engine (columnar, as the pipeline hands them over)
and the results are read where users read them: a ``/metrics`` page rendered by the real
exporter over the daemon's registry. Each test checks the configured cap, that every
eviction/expiry is counted, and that memory (the engine's arrays, and everything Python
allocated, via tracemalloc) stays under a cap computed from the configuration, not from
the traffic.
"""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from integration.daemon_harness import Metrics

from monitor.app import Daemon
from monitor.config import settings_from_mapping
from monitor.engine import state_codec
from monitor.engine.records import LabelBatch, PredictionBatch
from monitor.metrics.catalog import SCORES

BATCH = 50_000
N = 1_000_000


def make_daemon(tmp_path: Path, join: dict[str, Any], slices: list[dict[str, Any]]) -> Daemon:
    s = settings_from_mapping(
        {
            "state": {"dir": str(tmp_path / "state")},
            "join": join,
            "models": [
                {
                    "name": "fraud",
                    "windows": [{"size": "1h"}],
                    "metrics": ["accuracy", "recall"],
                    "slices": slices,
                }
            ],
        }
    )
    return Daemon(s)


def predictions(
    start: int, n: int, ts_ms: int, segments: list[Any] | None = None
) -> PredictionBatch:
    keys = np.arange(start, start + n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    score = (np.arange(n) % 100) / 100.0
    return PredictionBatch(
        keys=keys,
        ts_ms=np.full(n, ts_ms, np.int64),
        model=np.zeros(n, np.int16),
        version=["v1"] * n,
        score=score,
        decision=(score >= 0.5).astype(np.int8),
        segments=segments or [],
    )


def labels(start: int, n: int, ts_ms: int) -> LabelBatch:
    keys = np.arange(start, start + n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    return LabelBatch(keys=keys, ts_ms=np.full(n, ts_ms, np.int64), label=["1", "0"] * (n // 2))


def scrape(daemon: Daemon) -> Metrics:
    assert daemon.evaluate_now() is not None, daemon.status_json()["not_ready_reasons"]
    return Metrics(daemon.exposition.page().decode("utf-8"))


def engine_bytes(daemon: Daemon) -> int:
    _, arrays = state_codec.encode(daemon.engine)
    return sum(a.nbytes for a in arrays.values())


@pytest.mark.slow
def test_a_million_distinct_slice_values_stay_within_top_k(tmp_path: Path) -> None:
    top_user, top_country = 10, 3
    daemon = make_daemon(
        tmp_path,
        {"max_pending": 100_000},
        [
            {"dimensions": ["user"], "top_k": top_user, "min_samples": 1},
            {"dimensions": ["country"], "top_k": top_country, "min_samples": 1},
            {"dimensions": ["country", "user"], "top_k": top_country, "min_samples": 1},
        ],
    )
    engine = daemon.engine
    rng = np.random.default_rng(5)
    now = int(time.time() * 1000) - 60_000
    countries = np.array([f"c{i}" for i in range(50)])
    tracemalloc.start()
    retained: list[int] = []
    try:
        for b in range(N // BATCH):
            # random hex user ids, each seen once; 50 countries with a skew
            users = np.char.mod("%016x", rng.integers(0, 2**62, BATCH)).tolist()
            country = countries[np.minimum(rng.geometric(0.3, BATCH) - 1, 49)].tolist()
            segs = [{"user": u, "country": c} for u, c in zip(users, country, strict=True)]
            with daemon.lock:
                engine.apply_predictions(predictions(b * BATCH, BATCH, now + b, segs))
                engine.apply_labels(labels(b * BATCH, BATCH, now + b + 1))
            del users, country, segs
            retained.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()

    assert engine.records["predictions", "accepted"] == N
    assert engine.join_events["joined"] == N
    # groups: the base group + (top-3 countries, __other__, __none__) x (top-10 users,
    # __other__, __none__) at most — not one per value
    max_groups = 1 + (top_country + 2) * (top_user + 2)
    assert len(engine.groups) <= max_groups, len(engine.groups)
    # the frequency counters are bounded too (10·K per dimension after each batch)
    for dim, counts in engine.registry.folders[0].counts.items():
        k = top_user if dim == "user" else top_country
        assert len(counts) <= 10 * k, (dim, len(counts))

    m = scrape(daemon)
    slices = {s.labels["slice"] for s in m.find("mlmon_window_samples", window="1h")}
    users = {s for s in slices if s.startswith("user=")}
    countries_shown = {s for s in slices if s.startswith("country=") and "," not in s}
    crossed = {s for s in slices if "," in s}
    assert "user=__other__" in users and len(users) <= top_user + 1, sorted(users)
    assert "country=__other__" in countries_shown
    assert len(countries_shown) <= top_country + 1, sorted(countries_shown)
    assert len(crossed) <= (top_country + 1) * (top_user + 1), len(crossed)
    # the top-3 countries are the three most frequent (geometric: c0, c1, c2)
    assert countries_shown == {"country=c0", "country=c1", "country=c2", "country=__other__"}
    # every labeled prediction is in exactly one user slice
    total = sum(m.get("mlmon_window_samples", model="fraud", version="v1", window="1h",
                      slice=s) or 0 for s in users)  # fmt: skip
    assert total == N
    # the whole exposition is bounded by configuration, whatever the traffic
    quality_series = sum(
        len(m.find(f"mlmon_{name}", window="1h")) for name in ("accuracy", "recall")
    )
    assert quality_series <= 2 * (1 + len(users) + len(countries_shown) + len(crossed))
    assert len(m.text) < 200_000, len(m.text)

    # memory: the join buffer is capped by max_pending, everything else by the groups
    assert len(engine.preds) <= 100_000
    cap = 2 * 100_000 * 64 + max_groups * 64 * 4 + 2 * 1024 * 1024  # table slack + rows
    assert engine_bytes(daemon) <= cap + engine.wide[0].state()[SCORES.key].nbytes
    # what Python retains stops growing once the buffer is full (batch 2 onwards)
    growth = retained[-1] - retained[3]
    assert growth < 4 * 1024 * 1024, [r // 1024 for r in retained]


def test_orphan_label_flood_is_bounded_and_counted(tmp_path: Path) -> None:
    cap = 50_000
    daemon = make_daemon(tmp_path, {"max_orphan_labels": cap, "orphan_label_ttl": "10m"}, slices=[])
    engine = daemon.engine
    now = int(time.time() * 1000) - 3600_000
    tracemalloc.start()
    sizes: list[int] = []
    try:
        for b in range(N // BATCH):
            with daemon.lock:
                engine.apply_labels(labels(b * BATCH, BATCH, now + b * 1000))
            assert len(engine.orphans) <= cap
            sizes.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    assert len(engine.orphans) == cap
    assert engine.records["labels", "accepted"] == N
    assert engine.join_events["evicted_orphan_label"] == N - cap  # oldest first, counted
    # the survivors are the newest: the last `cap` labels join their predictions
    with daemon.lock:
        engine.apply_predictions(predictions(N - cap, cap, now + N // BATCH * 1000))
    assert engine.join_events["joined"] == cap
    assert len(engine.orphans) == 0
    # memory: the orphan table (8-byte key, ts, code, alive flag, spare capacity) at the
    # cap, not the flood; retained Python memory flat after the table filled
    orphan_bytes = sum(
        v.nbytes for k, v in state_codec.encode(engine)[1].items() if k.startswith("orphans.")
    )
    assert orphan_bytes <= cap * 32 * 2.5, orphan_bytes / cap
    assert sizes[-1] - sizes[2] < 4 * 1024 * 1024, [s // 1024 for s in sizes]

    # then TTL: labels for unknown ids expire once the prediction stream's progress
    # passes them (its robust watermark: a 99% quantile of the recent prediction times,
    # so one far-future record alone does not; twenty do)
    with daemon.lock:
        engine.apply_labels(labels(10 * N, 1000, now + 2_000_000))
        assert len(engine.orphans) == 1000
        engine.apply_predictions(predictions(20 * N, 1, now + 2_000_000 + 600_001))
        assert len(engine.orphans) == 1000  # one record is no progress
        engine.apply_predictions(predictions(20 * N + 1, 20, now + 2_000_000 + 600_001))
    assert len(engine.orphans) == 0
    assert engine.join_events["expired_orphan_label"] == 1000
    m = scrape(daemon)
    join = m.by_label("mlmon_join_events_total", "event")
    assert join["evicted_orphan_label"] == N - cap
    assert join["expired_orphan_label"] == 1000
    assert m.get("mlmon_orphan_labels") == 0


def test_unlabeled_prediction_flood_is_bounded_and_counted(tmp_path: Path) -> None:
    cap = 100_000
    daemon = make_daemon(tmp_path, {"max_pending": cap, "label_ttl": "10m"}, slices=[])
    engine = daemon.engine
    now = int(time.time() * 1000) - 1800_000
    for b in range(N // BATCH):
        with daemon.lock:
            engine.apply_predictions(predictions(b * BATCH, BATCH, now + b * 1000))
        assert len(engine.preds) <= cap and engine.pending <= cap
    assert engine.pending == cap
    assert engine.join_events["evicted_prediction"] == N - cap
    # bytes per held prediction stay what docs/benchmarks.md says (≈ 45 B of columns,
    # plus the table's spare capacity), so the buffer is bounded by max_pending
    preds_bytes = sum(
        v.nbytes for k, v in state_codec.encode(engine)[1].items() if k.startswith("preds.")
    )
    assert preds_bytes <= cap * 64 * 2.5, preds_bytes / cap
    # a label watermark past ts + label_ttl expires what is left, counted
    with daemon.lock:
        engine.apply_labels(labels(10 * N, 2, now + 20 * 1000 + 600_001))
    assert engine.pending == 0
    assert engine.join_events["expired_prediction"] == cap
    m = scrape(daemon)
    join = m.by_label("mlmon_join_events_total", "event")
    assert join["evicted_prediction"] == N - cap and join["expired_prediction"] == cap
    assert m.get("mlmon_pending_predictions") == 0
    # the predictions still count in their window: coverage shows the missing labels
    assert m.get("mlmon_window_predictions", model="fraud", version="v1", window="1h",
                 slice="all") == N  # fmt: skip
