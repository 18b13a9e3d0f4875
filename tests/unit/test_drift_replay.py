"""Drift through the whole pipeline: reference file -> daemon engine -> report/metrics."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import orjson
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitor.config import settings_from_mapping
from monitor.drift.budget import drift_window_end_ms, window_alpha
from monitor.drift.detector import DriftDetector
from monitor.drift.reference import ReferenceProfile
from monitor.drift.summaries import n_cells, numeric_cells
from monitor.engine import state_codec
from monitor.engine.snapshot import Snapshot
from monitor.export.prometheus import MonitorCollector
from monitor.export.published import Published
from monitor.export.report import iso
from monitor.export.status_page import render_report
from monitor.replay import replay

COUNTRIES = np.array(["US", "DE", "BR", "IN"])


def _reference(path: Path, rng: np.random.Generator, n: int = 50_000) -> None:
    profile = ReferenceProfile.from_columns(
        numeric={"x": rng.normal(0, 1, n), "amount": rng.lognormal(3, 1, n)},
        categorical={"country": list(rng.choice(COUNTRIES, n, p=[0.4, 0.3, 0.2, 0.1]))},
        score=rng.beta(2, 5, n),
        labels=[str(v) for v in (rng.random(n) < 0.2).astype(int)],
    )
    path.write_bytes(orjson.dumps(profile.to_json()))


def _traffic(tmp_path: Path, rng: np.random.Generator, n: int = 20_000) -> tuple[Path, Path]:
    start = int(time.time() * 1000) - 2 * 3600_000
    x = rng.normal(0.3, 1, n)  # shifted by 0.3 SD: drift
    amount = rng.lognormal(3, 1, n)  # unchanged
    country = rng.choice(COUNTRIES, n, p=[0.4, 0.3, 0.2, 0.1]).astype(object)
    country[:300] = "XX"  # a category the reference never saw
    score = rng.beta(2, 5, n)
    y = (rng.random(n) < 0.2).astype(int)
    preds, labels = [], []
    for i in range(n):
        feats = {"x": float(x[i]), "amount": float(amount[i]), "country": country[i]}
        if i % 50 == 0:
            feats.pop("amount")  # 2% missing
        preds.append({"id": f"d{i}", "ts": start + i * 100, "model": "fraud", "version": "v1",
                      "score": float(score[i]), "features": feats})  # fmt: skip
        labels.append({"id": f"d{i}", "ts": start + i * 100 + 5000, "label": int(y[i])})
    pf, lf = tmp_path / "p.jsonl", tmp_path / "l.jsonl"
    pf.write_bytes(b"".join(orjson.dumps(p) + b"\n" for p in preds))
    lf.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in labels))
    return pf, lf


def test_drift_detected_for_the_shifted_feature_only(tmp_path: Path) -> None:
    rng = np.random.default_rng(21)
    ref = tmp_path / "baseline.json"
    _reference(ref, rng)
    pf, lf = _traffic(tmp_path, rng)
    settings = settings_from_mapping(
        {
            "state": {"dir": str(tmp_path / "state")},
            "models": [{"name": "fraud", "windows": [{"size": "1h"}],
                        "drift": {"reference": str(ref)}}],
        }
    )  # fmt: skip
    report = replay(settings, pf, lf, progress=None)
    by_window = {d["window"]: d for d in report["drift"]}
    assert set(by_window) == {"1h", "all"}
    whole = by_window["all"]
    feats = {f["feature"]: f for f in whole["features"]}
    assert set(feats) == {"x", "amount", "country", "__score__"}
    assert feats["x"]["detected"] is True
    assert 0.2 < feats["x"]["wasserstein_sd"] < 0.4
    assert feats["amount"]["detected"] is False
    assert feats["__score__"]["detected"] is False
    assert whole["features"][0]["feature"] in ("x", "country")  # ranked by effect
    assert feats["country"]["unseen"] == 300
    assert "XX" in feats["country"]["unseen_values"]
    assert feats["amount"]["missing_rate"] == 400 / 20_000
    assert feats["x"]["samples"] == 20_000
    assert whole["label_prior"] is not None and whole["label_prior"]["detected"] is False


def test_drift_families_in_the_exposition(tmp_path: Path) -> None:
    from monitor.ingest.deadletter import FileDeadLetter
    from monitor.ingest.pipeline import RawRecord
    from monitor.wiring import build_engine, build_pipeline

    rng = np.random.default_rng(22)
    ref = tmp_path / "baseline.json"
    _reference(ref, rng)
    pf, _ = _traffic(tmp_path, rng, 3000)
    settings = settings_from_mapping(
        {"models": [{"name": "fraud", "windows": [{"size": "1d"}],
                     "drift": {"reference": str(ref), "min_samples": 500}}]}
    )  # fmt: skip
    engine = build_engine(settings)
    pipe = build_pipeline(settings, engine, FileDeadLetter(tmp_path / "dl.jsonl"))
    pipe.process("predictions", [RawRecord(line, "p") for line in pf.read_bytes().splitlines()])
    now = int(time.time() * 1000)
    drift = engine.drift.evaluate(engine.view(), now)
    snap = Snapshot(now, (), engine.ops(), drift=drift)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MonitorCollector(lambda: Published(snap, snap.ops)))
    text = generate_latest(registry).decode()
    samples = {
        (s.name, s.labels.get("feature")): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }
    assert samples[("mlmon_drift_detected", "x")] == 1.0
    assert samples[("mlmon_drift_detected", "amount")] == 0.0
    assert samples[("mlmon_drift_unseen", "country")] > 0
    assert 0 <= samples[("mlmon_drift_p_value", "amount")] <= 1
    assert ("mlmon_drift_statistic", "__score__") in samples


def _hours_of_traffic(tmp_path: Path, rng: np.random.Generator, shift_hour: int) -> tuple:
    """3 hours at 2 predictions/s; feature x shifts by 0.5 SD in hour ``shift_hour``."""
    start = int(time.time() * 1000) - 4 * 3600_000
    start -= start % 3600_000
    n = 3 * 3600 * 2
    ts = start + np.arange(n) * 500
    hour = (ts - start) // 3600_000
    x = rng.normal(0, 1, n) + np.where(hour == shift_hour, 0.5, 0.0)
    country = rng.choice(COUNTRIES, n)
    preds = [
        {"id": f"h{i}", "ts": int(ts[i]), "model": "fraud", "version": "v1",
         "score": float(rng.random()), "features": {"x": float(x[i]), "country": country[i]}}
        for i in range(n)
    ]  # fmt: skip
    pf, lf = tmp_path / "p.jsonl", tmp_path / "l.jsonl"
    pf.write_bytes(b"".join(orjson.dumps(p) + b"\n" for p in preds))
    lf.write_bytes(b"")
    return pf, lf


def _live_run(tmp_path: Path, reference_window: str, shift_hour: int) -> dict:
    rng = np.random.default_rng(31)
    tmp_path.mkdir(parents=True, exist_ok=True)
    pf, lf = _hours_of_traffic(tmp_path, rng, shift_hour)
    settings = settings_from_mapping(
        {
            "state": {"dir": str(tmp_path / "state")},
            "models": [{"name": "fraud", "windows": [{"size": "1h"}],
                        "drift": {"reference_window": reference_window, "bootstrap": 2000,
                                  "windows": ["1h"]}}],
        }
    )  # fmt: skip
    report = replay(settings, pf, lf, progress=None)
    (d,) = report["drift"]
    return {f["feature"]: f for f in d["features"]}


def test_live_reference_first_hour(tmp_path: Path) -> None:
    feats = _live_run(tmp_path, "first:1h", shift_hour=2)  # the last hour drifts
    assert feats["x"]["detected"] is True
    assert 0.35 < feats["x"]["wasserstein_sd"] < 0.65
    assert feats["country"]["detected"] is False
    steady = _live_run(tmp_path / "b", "first:1h", shift_hour=99)
    assert not any(f["detected"] for f in steady.values())


def test_live_reference_previous_hour(tmp_path: Path) -> None:
    feats = _live_run(tmp_path, "previous:1h", shift_hour=2)
    assert feats["x"]["detected"] is True
    assert feats["country"]["detected"] is False
    steady = _live_run(tmp_path / "b", "previous:1h", shift_hour=99)
    assert not any(f["detected"] for f in steady.values())


def test_live_reference_survives_a_restart(tmp_path: Path) -> None:
    """Bootstrap half full at the checkpoint, ready and frozen after: equals one pass."""
    from monitor.ingest.deadletter import FileDeadLetter
    from monitor.ingest.files import JsonlReader
    from monitor.wiring import build_engine, build_pipeline

    rng = np.random.default_rng(32)
    pf, _ = _hours_of_traffic(tmp_path, rng, shift_hour=2)
    settings = settings_from_mapping(
        {"models": [{"name": "fraud", "windows": [{"size": "1h"}],
                     "drift": {"reference_window": "first:1h", "bootstrap": 3000}}]}
    )  # fmt: skip

    def run(split_at: int | None) -> tuple:
        engine = build_engine(settings)
        pipe = build_pipeline(settings, engine, FileDeadLetter(tmp_path / "dl.jsonl"))
        reader = JsonlReader(pf, "p", batch_size=1000)
        done = 0
        while not reader.done:
            pipe.process("predictions", reader.next_batch())
            done += 1
            if split_at is not None and done == split_at:
                meta, arrays = state_codec.encode(engine)
                engine = build_engine(settings)
                state_codec.decode(engine, meta, arrays)
                pipe = build_pipeline(settings, engine, FileDeadLetter(tmp_path / "dl.jsonl"))
        engine.freeze_live_references()
        view = engine.wide[0].state()
        return engine, view

    one, view_one = run(None)
    for split in (2, 5):  # mid-bootstrap, after the reference became ready
        two, view_two = run(split)
        assert view_two["m.drift"].tolist() == view_one["m.drift"].tolist()
        assert two.drift.frozen[0].tolist() == one.drift.frozen[0].tolist()
        assert two.drift.live_start == one.drift.live_start


def test_replay_timeline_holds_the_drift_spans_of_every_step(tmp_path: Path) -> None:
    """4 h of input whose feature x shifts by 0.5 SD from 2 h to 3 h: the report's
    timeline has the 1 h window's drift spans as a daemon evaluating every 5 min of
    replayed time would have had them — equal to the detector run at every step over
    the raw values stamped in the window that step tests (the last whole hour, at the
    hour's share of the daily false-alarm budget) — and the HTML report lists them."""
    rng = np.random.default_rng(8)
    profile = ReferenceProfile.from_columns(numeric={"x": rng.normal(0, 1, 20_000)})
    ref = tmp_path / "baseline.json"
    ref.write_bytes(orjson.dumps(profile.to_json()))
    start = 1_700_000_000_000 // 3_600_000 * 3_600_000 + 7 * 60_000
    n = 4 * 3600  # one prediction a second
    ts = start + np.arange(n, dtype=np.int64) * 1000
    shifted = (ts >= start + 2 * 3_600_000) & (ts < start + 3 * 3_600_000)
    x = rng.normal(0, 1, n) + 0.5 * shifted
    pf, lf = tmp_path / "p.jsonl", tmp_path / "l.jsonl"
    pf.write_bytes(b"".join(
        orjson.dumps({"id": f"p{i}", "ts": int(ts[i]), "model": "fraud", "version": "v1",
                      "score": 0.5, "features": {"x": float(x[i])}}) + b"\n"
        for i in range(n)
    ))  # fmt: skip
    lf.write_bytes(b"")
    settings = settings_from_mapping({
        "state": {"dir": str(tmp_path / "state")}, "evaluation": {"interval": "5m"},
        "models": [{"name": "fraud", "windows": [{"size": "1h"}],
                    "drift": {"reference": str(ref)}}]})  # fmt: skip
    report = replay(settings, pf, lf, progress=None, decode_worker="off")
    steps = report["replay_steps"]["steps"]
    assert steps >= 48 and report["replay_steps"]["out_of_order"] == 0
    got = [(s["start"], s["end"], s["detail"]) for s in report["timeline"] if s["kind"] == "drift"]

    detector = DriftDetector(profile)
    (x_ref,) = profile.features
    hour, interval = 3_600_000, 300_000
    level = window_alpha(0.05, 0.05, hour)
    t = -(-start // interval) * interval
    want: list[tuple[str, str | None, str]] = []
    open_at: int | None = None
    for _ in range(steps):
        end = drift_window_end_ms(t, hour)
        inside = (ts >= end - hour) & (ts < end)
        cells = np.bincount(numeric_cells(x_ref, x[inside]), minlength=n_cells(x_ref))
        detected = detector.predict({"x": cells}, None, level).any_detected
        if detected and open_at is None:
            open_at = t
        elif not detected and open_at is not None:
            want.append((iso(open_at), iso(t), "x"))
            open_at = None
        t += interval
    if open_at is not None:
        want.append((iso(open_at), None, "x"))
    assert got == want
    # the shift is found once a tested hour holds most of it, and nothing before it
    (span,) = got
    assert iso(start + 2 * 3_600_000) < span[0] <= iso(start + 3 * 3_600_000)
    assert span[1] is not None and iso(start + 3 * 3_600_000) < span[1]

    page = render_report(report).decode()
    assert "Drift over replayed time" in page and page.count('<tr class="drift-span">') == 1
    assert span[0] in page
