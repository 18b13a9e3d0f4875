"""A scheduled report's period is kept in the buckets beyond the windows' reach, and the
period evaluates from them as one window (what the report job reads)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from monitor.config import settings_from_mapping
from monitor.engine.evaluate import evaluate_all
from monitor.engine.models import WindowSpec
from monitor.engine.records import LabelBatch, PredictionBatch, hash_ids
from monitor.wiring import build_engine

HOUR = 3_600_000
NOW = 1_800_000_000_000


def _engine(tmp_path: Path, schedules: list[dict[str, object]]):  # type: ignore[no-untyped-def]
    settings = settings_from_mapping(
        {"models": [{"name": "fraud", "windows": [{"size": "1h"}]}], "schedules": schedules}
    )
    engine = build_engine(settings)
    rng = np.random.default_rng(4)
    n = 2_000
    ts = np.sort(rng.integers(NOW - 40 * HOUR, NOW, n)).astype(np.int64)  # the last 40 hours
    y = (rng.random(n) < 0.3).astype(np.int8)
    score = 1 / (1 + np.exp(-(2.0 * (y - 0.5) + rng.normal(size=n))))
    keys = hash_ids([f"k{i}" for i in range(n)])
    engine.apply_predictions(
        PredictionBatch(keys, ts, np.zeros(n, np.int16), ["v1"] * n, score,
                        (score >= 0.5).astype(np.int8))
    )  # fmt: skip
    engine.apply_labels(LabelBatch(keys, ts + 1000, [str(v) for v in y]))
    engine.retain(NOW)
    return engine, int(((ts >= NOW - 48 * HOUR) & (ts < NOW)).sum())


def _period_labeled(engine) -> int:  # type: ignore[no-untyped-def]
    models = tuple(
        replace(m, windows=(WindowSpec("last_2d", 48 * HOUR, 0),)) for m in engine.models
    )
    results, _ = evaluate_all(engine.view(copy=True), models, NOW)
    (r,) = [r for r in results if r.slice == "all"]
    return r.labeled


def test_a_report_period_is_retained_beyond_the_windows(tmp_path: Path) -> None:
    report = {"job": "report", "cron": "0 7 * * *", "period": "2d", "directory": str(tmp_path)}
    kept, n = _engine(tmp_path, [report])
    assert _period_labeled(kept) == n == 2_000  # every labeled prediction of the 2 days
    dropped, _ = _engine(tmp_path, [])
    assert _period_labeled(dropped) < n / 2  # without it only the 1h window's reach is kept
