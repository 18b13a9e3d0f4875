"""Time tiers: minute rows roll up into hour, 12-hour and day rows; a 7-day window snaps
to the tiers and equals scikit-learn on the rows inside its snapped bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, log_loss, recall_score, roc_auc_score

from monitor.engine import state_codec
from monitor.engine.core import Engine
from monitor.engine.evaluate import evaluate_all
from monitor.engine.models import ModelSpec, SliceSpec, WindowSpec
from monitor.engine.records import LabelBatch, PredictionBatch, hash_ids
from monitor.engine.windows import DAY_MS, HALF_DAY_MS, HOUR_MS
from monitor.stats.scores import ScoreLayout

FINE = ScoreLayout(bins=2048)
NOW = 1_700_000_000_000 + 12_345_678  # not aligned to anything
MODEL = ModelSpec(
    "m",
    windows=(WindowSpec("5m", 300_000), WindowSpec("1h", HOUR_MS), WindowSpec("7d", 7 * DAY_MS)),
    slices=(SliceSpec(("country",), 5, 1),),
    metrics=("accuracy", "recall", "roc_auc", "log_loss"),
)


def _traffic(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(NOW - 10 * DAY_MS, NOW, n)).astype(np.int64)
    y = (rng.random(n) < 0.3).astype(np.int8)
    score = 1 / (1 + np.exp(-(2 * (y - 0.5) + rng.normal(size=n) - 0.8)))
    country = rng.choice(np.array(["de", "fr"]), n)
    return {"ts": ts, "y": y, "score": score, "country": country}


def _feed(engine: Engine, t: dict[str, np.ndarray], rows: np.ndarray, labels: bool) -> None:
    keys = hash_ids([f"id{i}" for i in rows.tolist()])
    k = rows.shape[0]
    if labels:
        engine.apply_labels(LabelBatch(keys, t["ts"][rows] + 1000, [str(v) for v in t["y"][rows]]))
        return
    engine.apply_predictions(
        PredictionBatch(keys, t["ts"][rows], np.zeros(k, np.int16), ["v1"] * k, t["score"][rows],
                        (t["score"][rows] >= 0.5).astype(np.int8),
                        segments=[{"country": c} for c in t["country"][rows].tolist()])
    )  # fmt: skip


def test_seven_day_window_over_minute_traffic_equals_sklearn_inside_snapped_bounds() -> None:
    t = _traffic(40_000, seed=3)
    n = t["ts"].shape[0]
    engine = Engine([MODEL], 60_000, 10**12, 10**12, 10**7, 10**7)
    idx = np.arange(n)
    # day by day as time passes, rolling up as the daemon does at each evaluation
    for day in range(10, 0, -1):
        sel = idx[(t["ts"] >= NOW - day * DAY_MS) & (t["ts"] < NOW - (day - 1) * DAY_MS)]
        _feed(engine, t, sel, labels=False)
        late = sel[: sel.shape[0] // 2]
        _feed(engine, t, sel[sel.shape[0] // 2 :], labels=True)
        engine.roll_up(NOW - (day - 1) * DAY_MS)
        _feed(engine, t, late, labels=True)  # late labels land in rolled-up rows
    engine.retain(NOW)
    rows = engine.buckets.view()
    base_groups = len(engine.groups)
    # a 7d window costs a few hundred rows per group at most, not 10,080 minutes: 2-3 h
    # of minutes, a day of hours, 12-hour rows back to 7 days (day rows, beyond, retired)
    assert len(engine.buckets) / base_groups < 230, len(engine.buckets) / base_groups
    assert set(np.unique(rows["tier"]).tolist()) == {0, 1, 3}
    results, _ = evaluate_all(engine.view(), engine.models, NOW)
    for r in results:
        lo_ms, hi_ms = r.start_ms, r.end_ms
        inside = (t["ts"] >= lo_ms) & (t["ts"] < hi_ms)
        if r.slice != "all":
            inside &= t["country"] == r.slice.split("=")[1]
        y, s = t["y"][inside], t["score"][inside]
        pred = (s >= 0.5).astype(int)
        tn = int(((y == 0) & (pred == 0)).sum())
        fp = int(((y == 0) & (pred == 1)).sum())
        fn = int(((y == 1) & (pred == 0)).sum())
        tp = int(((y == 1) & (pred == 1)).sum())
        where = (r.window, r.slice)
        assert r.predictions == int(inside.sum()), where
        assert r.labeled == int(inside.sum()), where
        assert r.confusion == (tn, fp, fn, tp), where
        got = {m.name: m.value for m in r.metrics}
        assert got["accuracy"] == accuracy_score(y, pred), where
        assert got["log_loss"] == pytest.approx(log_loss(y, s, labels=[0, 1]), abs=1e-9), where
        if 0 < y.sum() < y.shape[0]:
            assert got["recall"] == recall_score(y, pred), where
            # within the histogram's documented tie bound (½ Σ pos_j·neg_j / (P·N))
            layout = MODEL.slice_score_layout if r.slice != "all" else FINE
            assert layout is not None
            vec = layout.empty()
            layout.add(vec, y, s)
            bound = layout.roc_auc_bound(vec)
            assert abs(got["roc_auc"] - roc_auc_score(y, s)) <= bound + 1e-12, where
        else:  # undefined with one class (sklearn would say 0 and warn)
            assert math.isnan(got["roc_auc"]), where
    seven = next(r for r in results if r.window == "7d" and r.slice == "all")
    # the start snapped to the nearest 12 hours (it falls in the 12-hour tier), by at
    # most 6 h: 1/24 of a 1-day window, 3.6 % of this one
    assert seven.start_ms % HALF_DAY_MS == 0
    assert abs((NOW - 7 * DAY_MS) - seven.start_ms) <= HALF_DAY_MS // 2 + 60_000
    assert abs((seven.end_ms - seven.start_ms) / (7 * DAY_MS) - 1) <= 1 / 24
    five = next(r for r in results if r.window == "5m" and r.slice == "all")
    assert five.start_ms == (NOW // 60_000 - 4) * 60_000  # recent windows stay exact


def test_state_round_trip_keeps_tiers() -> None:
    t = _traffic(5_000, seed=4)
    engine = Engine([MODEL], 60_000, 10**12, 10**12, 10**7, 10**7)
    idx = np.arange(t["ts"].shape[0])
    _feed(engine, t, idx, labels=False)
    engine.roll_up(NOW)
    meta, arrays = state_codec.encode(engine)
    again = Engine([MODEL], 60_000, 10**12, 10**12, 10**7, 10**7)
    state_codec.decode(again, meta, arrays)
    assert again.tiers == engine.tiers
    _feed(engine, t, idx, labels=True)
    _feed(again, t, idx, labels=True)
    a, _ = evaluate_all(engine.view(), engine.models, NOW)
    b, _ = evaluate_all(again.view(), again.models, NOW)
    assert repr(a) == repr(b)


def test_roll_up_keeps_every_sum_per_group() -> None:
    """Merge law: rolling rows up never changes a group's totals, in any column."""
    t = _traffic(8_000, seed=5)
    engine = Engine([MODEL], 60_000, 10**12, 10**12, 10**7, 10**7)
    idx = np.arange(t["ts"].shape[0])
    _feed(engine, t, idx, labels=False)
    _feed(engine, t, idx, labels=True)

    def totals() -> dict[str, np.ndarray]:
        out = {}
        stores = [("b", engine.buckets)]
        stores += [(f"s{m}", s) for m, s in engine.sliced.items()]
        stores += [(f"w{m}", s) for m, s in engine.wide.items()]
        for name, store in stores:
            v = store.view()
            for col, arr in v.items():
                if col in ("group", "bucket", "tier"):
                    continue
                sums = np.zeros((len(engine.groups), *arr.shape[1:]))
                np.add.at(sums, v["group"], arr)
                out[f"{name}.{col}"] = sums
        return out

    before = totals()
    merged = engine.roll_up(NOW)
    assert merged > 0
    after = totals()
    assert before.keys() == after.keys()
    for key in before:
        np.testing.assert_allclose(after[key], before[key], rtol=1e-12, err_msg=key)
    assert engine.roll_up(NOW) == 0  # idempotent
