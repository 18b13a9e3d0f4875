"""Version lifecycle (max_versions, version_idle_ttl) and batch-boundary independence."""

from __future__ import annotations

import itertools
import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.config import settings_from_mapping
from monitor.engine import state_codec
from monitor.engine.core import Engine
from monitor.engine.evaluate import evaluate_all
from monitor.engine.models import ModelSpec, SliceSpec, WindowSpec
from monitor.engine.records import LabelBatch, PredictionBatch, hash_ids
from monitor.ingest.deadletter import FileDeadLetter
from monitor.ingest.pipeline import RawRecord
from monitor.wiring import build_engine, build_pipeline

BASE = 1_700_000_000_000
HOUR = 3_600_000
MODEL = ModelSpec(
    "m",
    windows=(WindowSpec("1h", HOUR),),
    slices=(SliceSpec(("country",), 10, 1),),
    max_versions=3,
    version_idle_ttl_ms=2 * HOUR,
)


def _engine(spec: ModelSpec = MODEL) -> Engine:
    return Engine([spec], 60_000, 10**12, 10**12, 10**6, 10**6)


def _preds(rows: list[tuple[str, int, str, str, float]]) -> PredictionBatch:
    """rows of (id, ts offset, version, country, score)."""
    score = np.array([r[4] for r in rows], float)
    return PredictionBatch(
        hash_ids([r[0] for r in rows]),
        np.array([BASE + r[1] for r in rows], np.int64),
        np.zeros(len(rows), np.int16),
        [r[2] for r in rows],
        score,
        (score >= 0.5).astype(np.int8),
        segments=[{"country": r[3]} for r in rows],
    )


def test_versions_over_the_cap_are_rejected_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = _engine()
    rows = [(f"a{i}", i, f"v{i % 10}", "de", 0.7) for i in range(40)]
    with caplog.at_level(logging.WARNING):
        rejects = engine.apply_predictions(_preds(rows[:25]))
        rejects += [(i + 25, r, d) for i, r, d in engine.apply_predictions(_preds(rows[25:]))]
    # arrival order decides: v0, v1, v2 are live; every prediction of v3..v9 is rejected
    assert {v for _, v, _ in engine.groups} == {"v0", "v1", "v2"}
    assert sorted(i for i, _, _ in rejects) == [i for i in range(40) if i % 10 >= 3]
    assert {reason for _, reason, _ in rejects} == {"version_limit"}
    assert engine.registry.rejected["m"] == 28
    assert engine.invalid["predictions", "version_limit"] == 28
    assert engine.records["predictions", "accepted"] == 12
    assert engine.records["predictions", "invalid"] == 28
    assert engine.ops().versions_rejected == (("m", 28),)
    # rate-limited: one line per doubling of the count, not one per prediction
    lines = [r for r in caplog.records if "max_versions" in r.getMessage()]
    assert 1 <= len(lines) <= (28).bit_length() + 1


def test_idle_versions_retire_after_their_windows_and_free_a_slot() -> None:
    engine = _engine()
    engine.apply_predictions(_preds([(f"a{i}", 0, f"v{i}", "de", 0.7) for i in range(3)]))
    assert engine.apply_predictions(_preds([("b", 1000, "v3", "de", 0.7)]))  # full
    # v0 keeps sending; v1, v2 stop
    engine.apply_predictions(_preds([("c", 2 * HOUR, "v0", "de", 0.7)]))
    engine.retain(BASE + 2 * HOUR)  # idle 2 h: not more than version_idle_ttl yet
    assert engine.apply_predictions(_preds([("d", 2 * HOUR + 2, "v3", "de", 0.7)]))
    engine.retain(BASE + 2 * HOUR + 10)  # v1, v2 idle for longer than 2 h (and 1 h window)
    assert engine.apply_predictions(_preds([("e", 2 * HOUR + 20, "v3", "de", 0.7)])) == []
    assert engine.apply_predictions(_preds([("f", 2 * HOUR + 21, "v4", "de", 0.7)])) == []
    # the retired v1 comes back as a new version: no room now
    assert engine.apply_predictions(_preds([("g", 2 * HOUR + 22, "v1", "de", 0.7)]))
    # state keeps the lifecycle
    meta, arrays = state_codec.encode(engine)
    again = _engine()
    state_codec.decode(again, meta, arrays)
    assert again.apply_predictions(_preds([("h", 2 * HOUR + 30, "v2", "de", 0.7)]))
    assert again.apply_predictions(_preds([("i", 2 * HOUR + 31, "v4", "de", 0.7)])) == []
    assert again.registry.rejected["m"] == engine.registry.rejected["m"] + 1 == 4


def test_pipeline_dead_letters_version_limit_rejections(tmp_path: Path) -> None:
    settings = settings_from_mapping({"models": [{"name": "m", "max_versions": 2}]})
    engine = build_engine(settings)
    pipe = build_pipeline(settings, engine, FileDeadLetter(tmp_path / "dl.jsonl"))
    now = BASE
    recs = [{"id": f"x{i}", "ts": now, "model": "m", "version": f"b{i}", "score": 0.5}
            for i in range(5)]  # fmt: skip
    pipe.clock_ms = lambda: now
    out = pipe.process("predictions", [RawRecord(orjson.dumps(r), "p") for r in recs])
    assert [(r.reason, orjson.loads(r.raw)["version"]) for r in out] == [
        ("version_limit", "b2"), ("version_limit", "b3"), ("version_limit", "b4")
    ]  # fmt: skip
    assert engine.invalid["predictions", "version_limit"] == 3


# -- batch boundaries -------------------------------------------------------------------

event = st.one_of(
    st.tuples(st.just("p"), st.integers(0, 15), st.integers(0, 600_000),
              st.sampled_from(["v1", "v2"]), st.sampled_from(["de", "fr", "it"]),
              st.floats(0, 1)),
    st.tuples(st.just("l"), st.integers(0, 15), st.integers(0, 600_000), st.sampled_from("01")),
)  # fmt: skip


def _feed(engine: Engine, events: list[tuple], cuts: list[int]) -> None:
    bounds = sorted({0, len(events), *[c % (len(events) + 1) for c in cuts]})
    for lo, hi in itertools.pairwise(bounds):
        chunk = events[lo:hi]
        # one batch per run of the same kind, as the pipeline sees them
        i = 0
        while i < len(chunk):
            j = i
            while j < len(chunk) and chunk[j][0] == chunk[i][0]:
                j += 1
            run = chunk[i:j]
            if run[0][0] == "p":
                engine.apply_predictions(
                    _preds([(f"id{e[1]}", e[2], e[3], e[4], e[5]) for e in run])
                )
            else:
                engine.apply_labels(
                    LabelBatch(hash_ids([f"id{e[1]}" for e in run]),
                               np.array([BASE + e[2] for e in run], np.int64), [e[3] for e in run])
                )  # fmt: skip
            i = j


def _canonical(engine: Engine) -> tuple:
    """Everything the engine knows, independent of row and group numbering."""
    view = engine.view()
    rows = sorted(
        (engine.groups[g], b, p, lab, tuple(c))
        for g, b, p, lab, c in zip(view.buckets["group"].tolist(), view.buckets["bucket"].tolist(),
                                   view.buckets["predicted"].tolist(),
                                   view.buckets["labeled"].tolist(),
                                   view.buckets["confusion"].tolist(), strict=True)
    )  # fmt: skip
    results, gaps = evaluate_all(view, engine.models, BASE + 600_000)
    return (
        sorted(engine.records.items()),
        sorted(engine.invalid.items()),
        sorted(engine.join_events.items()),
        engine.pending,
        rows,
        repr(sorted(results, key=lambda r: (r.version, r.window, r.slice))),
        repr(sorted(gaps, key=repr)),
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(event, min_size=1, max_size=40),
    st.lists(st.integers(0, 10**6), max_size=6),
)
def test_batch_cuts_never_change_the_state(events: list[tuple], cuts: list[int]) -> None:
    spec = replace(MODEL, max_versions=20)
    one = _engine(spec)
    _feed(one, events, [])
    for split in ([1, 2, 3], cuts):
        other = _engine(spec)
        _feed(other, events, split)
        assert _canonical(other) == _canonical(one)


def test_resent_prediction_with_other_segments_in_one_batch_is_a_duplicate() -> None:
    engine = _engine()
    engine.apply_predictions(
        _preds([("x", 0, "v1", "de", 0.9), ("x", 1, "v1", "fr", 0.9), ("y", 2, "v1", "de", 0.2)])
    )
    assert engine.records["predictions", "accepted"] == 2
    assert engine.records["predictions", "duplicate"] == 1
    assert engine.pending == 2
