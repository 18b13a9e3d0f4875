"""[http] max_series holds under a flood of slice values, the excess withheld by lowest
traffic first and counted (export/series_budget.py)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from monitor.config import settings_from_mapping
from monitor.engine.records import LabelBatch, PredictionBatch, hash_ids
from monitor.engine.snapshot import Snapshot
from monitor.export.exposition import Exposition
from monitor.export.published import Published
from monitor.wiring import build_engine

NOW = 1_800_000_000_000


def _flood() -> Snapshot:
    """100,000 predictions, each with its own ``user`` value (a slice on a request id),
    plus a ``country`` slice of 4 values: top_k keeps 1,000 users and ``__other__``."""
    settings = settings_from_mapping(
        {
            "models": [
                {
                    "name": "fraud",
                    "windows": [{"size": "1h"}],
                    "slices": [
                        {"dimensions": ["user"], "top_k": 1000, "min_samples": 1},
                        {"dimensions": ["country"], "min_samples": 1},
                    ],
                }
            ]
        }
    )
    engine = build_engine(settings)
    rng = np.random.default_rng(9)
    n = 100_000
    ts = np.sort(rng.integers(NOW - 3_000_000, NOW, n)).astype(np.int64)
    y = (rng.random(n) < 0.3).astype(np.int8)
    score = 1 / (1 + np.exp(-(2.0 * (y - 0.5) + rng.normal(size=n))))
    keys = hash_ids([f"k{i}" for i in range(n)])
    # the first 1,000 users come back (3 predictions each): the most frequent values
    users = [f"u{i % 1000}" if i < 3000 else f"u{i}" for i in range(n)]
    countries = ["US", "DE", "BR", "IN"]
    segments = [{"user": users[i], "country": countries[i % 4]} for i in range(n)]
    engine.apply_predictions(
        PredictionBatch(keys, ts, np.zeros(n, np.int16), ["v1"] * n, score,
                        (score >= 0.5).astype(np.int8), segments=segments)
    )  # fmt: skip
    engine.apply_labels(LabelBatch(keys, ts + 1000, [str(v) for v in y]))
    return engine.snapshot(NOW)


@pytest.fixture(scope="module")
def flood() -> Snapshot:
    return _flood()


def _page(exp: Exposition) -> tuple[int, dict[str, float]]:
    text = exp.page().decode()
    series = 0
    live: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.startswith("mlmon_") and "slice" in s.labels:
                series += 1
            if s.name in ("mlmon_series_dropped_total", "mlmon_exposition_series",
                          "mlmon_exposition_series_withheld"):  # fmt: skip
                live[s.name] = s.value
    return series, live


def test_max_series_holds_and_the_excess_is_counted(flood: Snapshot) -> None:
    pub = Published(snapshot=flood, ops=flood.ops)
    unbounded = Exposition(lambda: pub, CollectorRegistry(auto_describe=False))
    total, live = _page(unbounded)
    slices = {r.slice for r in flood.results}
    assert len(slices) == 1 + 1001 + 4  # all, 1,000 users + __other__, 4 countries
    # the snapshot part: the slices' series plus a few without a slice (fairness, stamp)
    whole = live["mlmon_exposition_series"]
    assert whole - 50 < total <= whole and total > 50_000
    assert live["mlmon_series_dropped_total"] == 0

    bound = 20_000
    exp = Exposition(lambda: pub, CollectorRegistry(auto_describe=False), max_series=bound)
    exported, live = _page(exp)
    assert exported <= live["mlmon_exposition_series"] <= bound
    assert exported > bound * 0.95  # filled, not emptied
    withheld = live["mlmon_exposition_series_withheld"]
    assert withheld == whole - live["mlmon_exposition_series"] == total - exported
    assert live["mlmon_series_dropped_total"] == withheld
    kept = {
        s.labels["slice"]
        for fam in text_string_to_metric_families(exp.page().decode())
        for s in fam.samples
        if s.name == "mlmon_window_samples"
    }
    # the overall result, the countries and __other__ (the most traffic) stay; the users
    # withheld are those with the fewest predictions
    assert {"all", "user=__other__", "country=US", "country=IN"} <= kept
    by_slice = {r.slice: r.predictions for r in flood.results}
    dropped = [by_slice[k[3]] for k in exp.withheld.results]
    assert dropped and max(dropped) <= min(by_slice[s] for s in kept)
    # a second rendering of another snapshot counts again (the counter sums renderings)
    again = Published(snapshot=replace(flood, at_ms=flood.at_ms + 1), ops=flood.ops)
    exp.published = lambda: again
    _, live = _page(exp)
    assert live["mlmon_series_dropped_total"] == 2 * withheld


def test_under_the_bound_nothing_is_withheld(flood: Snapshot) -> None:
    small = Snapshot(flood.at_ms, tuple(r for r in flood.results if r.slice == "all"))
    pub = Published(snapshot=small)
    exp = Exposition(lambda: pub, CollectorRegistry(auto_describe=False), max_series=100_000)
    exported, live = _page(exp)
    assert exported > 0 and live["mlmon_exposition_series_withheld"] == 0
    assert exp.withheld.results == ()
