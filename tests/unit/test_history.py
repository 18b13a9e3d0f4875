"""History points against a fresh computation over the raw records of each point's span
(scikit-learn), for every time tier, with late labels landing in old points; and the
same whatever the order records arrive in (hypothesis)."""

from __future__ import annotations

import math
from dataclasses import astuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.metrics import accuracy_score, f1_score, precision_score, recall_score

from monitor.config import settings_from_mapping
from monitor.engine.history import point_spans, series, take, versions_series
from monitor.engine.narrow import NarrowError, copy_rows, slice_groups
from monitor.engine.records import LabelBatch, PredictionBatch, hash_ids
from monitor.wiring import build_engine

DAY, HOUR, MIN = 86_400_000, 3_600_000, 60_000
T0 = 1_700_006_400_000 - 3 * DAY  # a day boundary minus three days
NOW = T0 + 3 * DAY + 5 * HOUR + 17 * MIN
METRICS = ("accuracy", "precision", "recall", "f1")


def _settings():  # 1h and 30d windows: base, hour, 12-hour and day rows within 3 days
    return settings_from_mapping(
        {"join": {"label_ttl": "30d", "orphan_label_ttl": "30d"},
         "models": [{"name": "fraud", "windows": [{"size": "1h"}, {"size": "30d"}],
                     "slices": [{"dimensions": ["country"], "min_samples": 5}]}]}
    )  # fmt: skip


def _records(seed: int, n: int):
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(T0, NOW, n))
    y = (rng.random(n) < 0.35).astype(int)
    score = np.clip(0.3 * y + rng.random(n) * 0.7, 0, 1)
    country = rng.choice(["US", "BR"], n)
    delay = rng.exponential(20 * MIN, n).astype(np.int64)
    late = rng.random(n) < 0.1  # a tenth of the labels come two days later
    delay[late] += 2 * DAY
    labeled = rng.random(n) < 0.85
    label_ts = ts + delay
    labeled &= label_ts <= NOW
    return ts, y, score, country, label_ts, labeled


def _feed(engine, recs, order: np.ndarray, chunks: int) -> None:
    ts, y, score, country, label_ts, labeled = recs
    ids = np.array([f"p{i}" for i in range(ts.shape[0])])
    events = [("p", i, int(ts[i])) for i in range(ts.shape[0])]
    events += [("l", i, int(label_ts[i])) for i in np.flatnonzero(labeled)]
    events = [events[k] for k in order % len(events)] if order.size else events
    seen: set[tuple[str, int]] = set()
    uniq = [e for e in events if (e[0], e[1]) not in seen and not seen.add((e[0], e[1]))]
    clock = 0
    for part in np.array_split(np.arange(len(uniq)), chunks):
        batch = [uniq[k] for k in part.tolist()]
        p = [i for kind, i, _ in batch if kind == "p"]
        lab = [i for kind, i, _ in batch if kind == "l"]
        if p:
            ix = np.array(p)
            engine.apply_predictions(PredictionBatch(
                hash_ids(ids[ix].tolist()), ts[ix].astype(np.int64), np.zeros(len(p), np.int16),
                ["v1"] * len(p), score[ix], (score[ix] >= 0.5).astype(np.int8),
                segments=[{"country": c} for c in country[ix]]))  # fmt: skip
        if lab:
            ix = np.array(lab)
            keys = hash_ids(ids[ix].tolist())
            engine.apply_labels(LabelBatch(keys, label_ts[ix], [str(v) for v in y[ix]]))
        clock = max([clock, *(t for _, _, t in batch)])
        engine.roll_up(clock)  # as the evaluation pass does
    engine.roll_up(NOW)


def _oracle(recs, start: int, end: int, slice_country: str | None):
    ts, y, score, country, _, labeled = recs
    inside = (ts >= start) & (ts < end)
    if slice_country is not None:
        inside &= country == slice_country
    joined = inside & labeled
    yt, yp = y[joined], (score[joined] >= 0.5).astype(int)
    out = {"predictions": int(inside.sum()), "labeled": int(joined.sum())}
    if joined.sum():
        out.update(accuracy=accuracy_score(yt, yp),
                   precision=precision_score(yt, yp, zero_division=np.nan),
                   recall=recall_score(yt, yp, zero_division=np.nan),
                   f1=f1_score(yt, yp, zero_division=np.nan))  # fmt: skip
    return out


def _check(engine, recs, slice_label: str = "all", point_ms: int | None = None) -> set[int]:
    view, spec = take(engine.models, engine.view(copy=False), "fraud", "v1", slice_label)
    got = series(view, spec, "v1", slice_label, METRICS, engine.delay.histograms().of("fraud"), NOW,
                 point_ms=point_ms)  # fmt: skip
    points = got["accuracy"].points
    assert points, "no history"
    country = None if slice_label == "all" else slice_label.split("=")[1]
    widths = set()
    prev_end = None
    for i, p in enumerate(points):
        assert prev_end is None or p.start_ms >= prev_end  # points never overlap
        prev_end = p.end_ms
        widths.add(p.end_ms - p.start_ms)
        want = _oracle(recs, p.start_ms, p.end_ms, country)
        assert (p.predictions, p.labeled) == (want["predictions"], want["labeled"]), p
        for metric in METRICS:
            q = got[metric].points[i]
            if want["labeled"] == 0 or math.isnan(want[metric]):
                assert math.isnan(q.value)
                continue
            assert q.value == pytest.approx(want[metric], abs=1e-12), (metric, p)
            assert math.isnan(q.lower) or q.lower <= q.value <= q.upper
    covered = sum(p.predictions for p in points)
    assert covered == _oracle(recs, T0, NOW + 1, country)["predictions"]
    return widths


def test_history_points_equal_sklearn_over_each_span_in_every_tier() -> None:
    engine = build_engine(_settings())
    recs = _records(1, 3000)
    _feed(engine, recs, np.empty(0, np.int64), 40)
    rows = engine.buckets.view()
    assert set(np.unique(rows["tier"]).tolist()) == {0, 1, 2, 3}  # base, hour, day, 12 h
    widths = _check(engine, recs)
    assert {MIN, HOUR, 12 * HOUR, DAY} <= widths
    _check(engine, recs, "country=BR")
    hourly = _check(engine, recs, point_ms=HOUR)
    assert min(hourly) >= MIN and HOUR in hourly and MIN not in hourly - {MIN}


def test_late_labels_land_in_old_points() -> None:
    engine = build_engine(_settings())
    recs = _records(2, 1500)
    ts, y, score, country, label_ts, labeled = recs
    early = labeled & (label_ts <= NOW - DAY)
    _feed(engine, (ts, y, score, country, label_ts, early), np.empty(0, np.int64), 20)
    view, spec = take(engine.models, engine.view(copy=False), "fraud", "v1", "all")
    before = series(
        view, spec, "v1", "all", ["accuracy"], engine.delay.histograms().of("fraud"), NOW
    )
    late = labeled & ~early  # now the rest of the labels arrive, days after their predictions
    ids = np.array([f"p{i}" for i in range(ts.shape[0])])
    ix = np.flatnonzero(late)
    engine.apply_labels(
        LabelBatch(hash_ids(ids[ix].tolist()), label_ts[ix], [str(v) for v in y[ix]])
    )
    engine.roll_up(NOW)
    after = _check(engine, recs)
    assert after
    old = [p for p in before["accuracy"].points if p.end_ms <= NOW - 2 * DAY]
    assert old and sum(p.labeled for p in old) < sum(
        _oracle(recs, p.start_ms, p.end_ms, None)["labeled"] for p in old
    )


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.permutations(list(range(64))), st.integers(2, 12))
def test_history_is_the_same_whatever_the_arrival_order(perm: list[int], chunks: int) -> None:
    recs = _records(3, 400)
    n_events = 400 + int(recs[5].sum())
    # a permutation of the events: blocks of the time-ordered stream in the drawn order
    blocks = np.array_split(np.arange(n_events), 64)
    order = np.concatenate([blocks[k] for k in perm])
    engine = build_engine(_settings())
    _feed(engine, recs, order, chunks)
    _check(engine, recs)


def test_bad_parameters_name_themselves() -> None:
    engine = build_engine(_settings())
    _feed(engine, _records(4, 200), np.empty(0, np.int64), 2)
    bad = [(("nope", "v1", "all"), "model"), (("fraud", "v9", "all"), "version"),
           (("fraud", "v1", "device=ios"), "slice"), (("fraud", "v1", "x"), "slice")]  # fmt: skip
    for args, param in bad:
        with pytest.raises(NarrowError) as err:
            take(engine.models, engine.view(copy=False), *args)
        assert err.value.param == param
    view, spec = take(engine.models, engine.view(copy=False), "fraud", "v1", "all")
    with pytest.raises(NarrowError) as err:
        series(view, spec, "v1", "all", ["nonsense"], engine.delay.histograms().of("fraud"), NOW)
    assert err.value.param == "metric"
    with pytest.raises(NarrowError) as err:
        series(
            view,
            spec,
            "v1",
            "all",
            ["accuracy"],
            engine.delay.histograms().of("fraud"),
            NOW,
            point_ms=90_000,
        )
    assert err.value.param == "window"


def test_point_spans_cut_at_tier_boundaries() -> None:
    from monitor.engine.windows import Tiers

    t = Tiers(60_000, 60, hour_from=1000 * 60 + 15, day_from=900 * 60 // 1440 * 1440,
              half_from=990 * 60)  # fmt: skip
    tier = np.array([1, 0, 3])
    bucket = np.array([1000 * 60, 1000 * 60 + 15, 984 * 60])
    spans = point_spans(tier, bucket, t)
    assert spans == [
        (984 * 60, 990 * 60),
        (1000 * 60, 1000 * 60 + 15),
        (1000 * 60 + 15, 1000 * 60 + 16),
    ]


def _fields(found: dict) -> dict:
    """Every field of every series and point, NaN spelled out (NaN != NaN)."""
    return {
        k: (s.model, s.version, s.slice, s.metric, s.point_ms, s.first_seen_ms,
            [tuple("nan" if v != v else v for v in astuple(p)) for p in s.points])
        for k, s in found.items()
    }  # fmt: skip


def test_versions_evaluated_together_equal_each_version_alone() -> None:
    """The trends evaluate a model's versions in one pass over the union of their points;
    each version's series must be the one it has alone — also for a version whose rows
    (and so points) are a subset of the other's, and without the sliced store a binary
    model's slice ``all`` does not read."""
    engine = build_engine(_settings())
    _feed(engine, _records(4, 3000), np.array([], np.int64), 6)
    rng = np.random.default_rng(9)
    n = 400  # v2: the last 10 hours only
    ts = np.sort(rng.integers(NOW - 10 * HOUR, NOW, n)).astype(np.int64)
    y, score = (rng.random(n) < 0.3).astype(int), rng.random(n)
    keys = hash_ids([f"v2-{i}" for i in range(n)])
    engine.apply_predictions(PredictionBatch(
        keys, ts, np.zeros(n, np.int16), ["v2"] * n, score, (score >= 0.5).astype(np.int8),
        segments=[{"country": c} for c in rng.choice(["US", "BR"], n)]))  # fmt: skip
    engine.apply_labels(LabelBatch(keys, ts + MIN, [str(v) for v in y]))
    engine.roll_up(NOW)
    delay = engine.delay.histograms().of("fraud")
    stores = engine.view(copy=False)
    for slice_label in ("all", "country=BR"):
        for point in (None, HOUR, 6 * HOUR):
            view, spec = take(engine.models, stores, "fraud", ["v1", "v2"], slice_label)
            together = versions_series(view, spec, ["v1", "v2"], slice_label, METRICS, delay,
                                       NOW, point_ms=point)  # fmt: skip
            for v in ("v1", "v2"):
                alone = series(*take(engine.models, stores, "fraud", v, slice_label), v,
                               slice_label, METRICS, delay, NOW, point_ms=point)  # fmt: skip
                assert _fields(together[v]) == _fields(alone), (slice_label, point, v)
                gids = slice_groups(engine.groups, spec, 0, v, slice_label)
                every_store = series(copy_rows(stores, 0, gids), spec, v, slice_label,
                                     METRICS, delay, NOW, point_ms=point)  # fmt: skip
                assert _fields(every_store) == _fields(alone), (slice_label, point, v)
            v1, v2 = (len(together[v]["accuracy"].points) for v in ("v1", "v2"))
            assert 0 < v2 < v1, (slice_label, point)  # the versions' points differ
            assert any(p.n for p in together["v2"]["accuracy"].points)
