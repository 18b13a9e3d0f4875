"""The partitioned global view evaluates with an assembler of its own, built from the
configuration alone: its drift references are the ones a ``rotate_reference`` swaps, and
they reach the next global snapshot (the partition engines only count)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import orjson
import pytest

from monitor.config import settings_from_mapping
from monitor.drift.reference import ReferenceProfile
from monitor.ingest.deadletter import FileDeadLetter
from monitor.ingest.pipeline import RawRecord
from monitor.scale.global_view import GlobalView
from monitor.scale.merge import merge, partition_stats
from monitor.schedule.reference import rotate
from monitor.wiring import build_assembler, build_engine, build_pipeline

START = 1_700_000_000_000
HOUR = 3_600_000


def test_rotated_reference_reaches_the_global_views_drift_test(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    baseline = ReferenceProfile.from_columns(numeric={"x": rng.normal(0.0, 1.0, 20_000)}, bins=20)
    ref_path = tmp_path / "baseline.json"
    ref_path.write_bytes(orjson.dumps(baseline.to_json()))
    s = settings_from_mapping(
        {
            "evaluation": {"bucket_width": "1m"},
            "state": {"dir": str(tmp_path / "state")},
            "models": [
                {
                    "name": "fraud",
                    "windows": [{"size": "1h"}],
                    "drift": {"reference": str(ref_path), "features": ["x"]},
                }
            ],
        }
    )
    parts = {p: build_engine(s) for p in range(2)}
    now = START + HOUR
    for p, engine in parts.items():  # the live traffic has moved two SDs from training
        pipe = build_pipeline(s, engine, FileDeadLetter(tmp_path / f"{p}.jsonl"), lambda: now)
        preds = [
            {"id": f"{p}-{i}", "ts": START + i * 3_000, "model": "fraud", "version": "v1",
             "score": 0.5, "features": {"x": float(rng.normal(2.0, 1.0))}}
            for i in range(1000)
        ]  # fmt: skip
        pipe.process("predictions", [RawRecord(orjson.dumps(r), "predictions") for r in preds])
    width = parts[0].named_stores()["buckets"].width_ms
    merged = merge([partition_stats(e) for e in parts.values()], width)
    view = GlobalView(build_assembler(s))

    before = view.snapshot(merged, now, at_ms=now, confidence=0.95)
    drifted = [d for d in before.drift if d.version == "v1"]
    assert drifted and drifted[0].report.any_detected and drifted[0].reference_period is None

    trained = view.assembler.drift.by_model[0].spec.fingerprint
    outcome, detail = rotate(
        view.assembler, threading.Lock(), merged.view, tmp_path / "state", ref_path,
        "fraud", START, now, None, 500,
    )  # fmt: skip
    assert outcome == "ok", detail
    # the partition engines' own references are untouched: the global view's are swapped
    assert view.assembler.drift.by_model[0].spec.fingerprint != trained
    assert all(e.assembler.drift.by_model[0].spec.fingerprint == trained for e in parts.values())
    after = view.snapshot(merged, now + 60_000, at_ms=now + 60_000, confidence=0.95)
    again = [d for d in after.drift if d.version == "v1"]
    assert again and again[0].reference_period == (START, now)
    assert not again[0].report.any_detected  # tested against its own traffic


def test_partitioned_daemon_evaluates_and_rotates_through_its_global_view(
    tmp_path: Path,
) -> None:
    from monitor.app import Daemon
    from monitor.scale.partitioned import GroupOwner

    def settings(mode: str):  # type: ignore[no-untyped-def]
        return settings_from_mapping(
            {
                "kafka": {"bootstrap_servers": "127.0.0.1:9"},  # never connected here
                "scale": {"mode": mode},
                "http": {"port": 0},
                "state": {"dir": str(tmp_path / mode)},
                "models": [{"name": "fraud", "windows": [{"size": "1d"}]}],
            }
        )

    daemon = Daemon(settings("partitioned"), owner=GroupOwner)
    assert isinstance(daemon.owner, GroupOwner)
    assert daemon.assembler is daemon.owner.global_view.assembler  # what rotate_reference swaps
    with pytest.raises(AttributeError):  # no engine besides the partitions' own
        daemon.engine  # noqa: B018
    single = Daemon(settings("single"))
    assert single.assembler is single.engine.assembler
    assert single.unit.engine is single.engine and single.unit.offsets is single.offsets
