"""The drift false-alarm budget: the level of each window and the windows the engine tests.

The daily rate itself is simulated in tests/unit/test_drift_gate_simulation.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import orjson
import pytest

from monitor.config import Settings, settings_from_mapping
from monitor.drift.budget import DAY_MS, drift_step_ms, drift_window_end_ms, window_alpha
from monitor.drift.reference import ReferenceProfile
from monitor.ingest.deadletter import FileDeadLetter
from monitor.ingest.pipeline import RawRecord
from monitor.wiring import build_engine, build_pipeline

HOUR, MINUTE = 3_600_000, 60_000


def _hourly_drift(tmp_path: Path, rng: np.random.Generator) -> Settings:
    """One model, a 1 h window, drift of feature x against a standard normal reference."""
    profile = ReferenceProfile.from_columns(numeric={"x": rng.normal(0, 1, 20_000)})
    ref = tmp_path / "ref.json"
    ref.write_bytes(orjson.dumps(profile.to_json()))
    return settings_from_mapping(
        {"models": [{"name": "m", "windows": [{"size": "1h"}],
                     "drift": {"reference": str(ref), "min_samples": 100}}]}
    )  # fmt: skip


def test_each_window_gets_its_share_of_the_day() -> None:
    assert window_alpha(0.05, 0.05, HOUR) == pytest.approx(0.05 / 24)
    assert window_alpha(0.05, 0.05, 5 * MINUTE) == pytest.approx(0.05 / 288)
    # beyond an hour the windows are tested hourly (overlapping): still 24 a day
    assert window_alpha(0.05, 0.05, DAY_MS) == pytest.approx(0.05 / 24)
    assert window_alpha(0.01, 0.5, HOUR) == 0.01  # never above alpha
    assert drift_step_ms(15 * MINUTE) == 15 * MINUTE and drift_step_ms(7 * DAY_MS) == HOUR
    assert drift_window_end_ms(10 * HOUR + 59 * MINUTE, HOUR) == 10 * HOUR
    assert drift_window_end_ms(10 * HOUR + 59 * MINUTE, HOUR, delay_ms=HOUR) == 9 * HOUR
    with pytest.raises(ValueError):
        window_alpha(0.05, 0.0, HOUR)


def test_the_engine_tests_one_window_per_step_at_its_level(tmp_path: Path) -> None:
    """Evaluations all through an hour test the same complete hour, at α·budget/24; the
    next hour's evaluations test the next one."""
    rng = np.random.default_rng(3)
    settings = _hourly_drift(tmp_path, rng)
    engine = build_engine(settings)
    pipe = build_pipeline(settings, engine, FileDeadLetter(tmp_path / "dl.jsonl"))
    start = (int(time.time() * 1000) - 5 * HOUR) // HOUR * HOUR
    ts = start + np.arange(0, 3 * HOUR, 2000)
    lines = [
        orjson.dumps({"id": f"r{i}", "ts": int(t), "model": "m", "version": "v", "score": 0.5,
                      "features": {"x": float(rng.normal())}})
        for i, t in enumerate(ts)
    ]  # fmt: skip
    pipe.process("predictions", [RawRecord(line, "p") for line in lines])
    seen = set()
    for minute in (1, 17, 44, 59):
        (d,) = engine.drift.evaluate(engine.view(), start + 2 * HOUR + minute * MINUTE)
        seen.add((d.start_ms, d.end_ms))
        assert d.report.alpha == pytest.approx(0.05 / 24)
    assert seen == {(start + HOUR, start + 2 * HOUR)}
    (d,) = engine.drift.evaluate(engine.view(), start + 3 * HOUR + MINUTE)
    assert (d.start_ms, d.end_ms) == (start + 2 * HOUR, start + 3 * HOUR)


def test_a_window_tested_again_reuses_its_test_until_its_counts_change(tmp_path: Path) -> None:
    """Evaluations through an hour test the same hour: its report is computed once and
    reused; a late prediction stamped inside that hour changes the counts, and the next
    evaluation tests again, giving what a fresh engine with the same rows reports."""
    rng = np.random.default_rng(4)
    settings = _hourly_drift(tmp_path, rng)
    start = (int(time.time() * 1000) - 5 * HOUR) // HOUR * HOUR
    ts = start + np.arange(0, 3 * HOUR, 2000)
    lines = [
        orjson.dumps({"id": f"r{i}", "ts": int(t), "model": "m", "version": "v", "score": 0.5,
                      "features": {"x": float(rng.normal(0.3, 1.0))}})
        for i, t in enumerate(ts)
    ]  # fmt: skip
    late = [
        orjson.dumps({"id": f"late{i}", "ts": start + HOUR + 1000 * i, "model": "m",
                      "version": "v", "score": 0.5, "features": {"x": 4.0 + i}})
        for i in range(50)
    ]  # fmt: skip
    engine = build_engine(settings)
    pipe = build_pipeline(settings, engine, FileDeadLetter(tmp_path / "dl.jsonl"))
    pipe.process("predictions", [RawRecord(line, "p") for line in lines])
    first = [
        engine.drift.evaluate(engine.view(), start + 2 * HOUR + m * MINUTE)[0] for m in (1, 30)
    ]
    assert first[0].report is first[1].report  # computed once
    pipe.process("predictions", [RawRecord(line, "p") for line in late])
    (again,) = engine.drift.evaluate(engine.view(), start + 2 * HOUR + 31 * MINUTE)
    assert again.report is not first[0].report
    (x_before,) = first[0].report.features
    (x_after,) = again.report.features
    assert x_after.n == x_before.n + 50
    fresh = build_engine(settings)
    fresh_pipe = build_pipeline(settings, fresh, FileDeadLetter(tmp_path / "dl2.jsonl"))
    fresh_pipe.process("predictions", [RawRecord(line, "p") for line in lines + late])
    (oracle,) = fresh.drift.evaluate(fresh.view(), start + 2 * HOUR + 31 * MINUTE)
    assert again.report == oracle.report
