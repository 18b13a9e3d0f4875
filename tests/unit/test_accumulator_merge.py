"""Merge by ``+``: the accumulators' sums (and the bucket stores, ``sum_views``) of two
disjoint streams add up to those of one accumulator over the union; ``+`` is commutative
and associative and the empty value is its identity (Agarwal et al., "Mergeable
Summaries", PODS 2012). Float moments are drawn integer-valued here, so the laws hold
exactly; the engine-level test compares float sums to 1e-9."""

from __future__ import annotations

import zlib
from collections import defaultdict
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.config import settings_from_mapping
from monitor.engine.comparison_stats import PAIRED_WIDTH, ArmSums, PairedSums
from monitor.engine.core import Engine
from monitor.engine.delay import DELAY_BOUNDS_S, LabelDelay
from monitor.engine.drift_cells import UnseenValues
from monitor.engine.view import StoreView
from monitor.engine.view_sum import sum_views
from monitor.ingest.deadletter import FileDeadLetter
from monitor.ingest.pipeline import RawRecord
from monitor.metrics.registry import LOSSES
from monitor.synthetic import binary_traffic
from monitor.wiring import build_engine, build_pipeline

NAMES = st.sampled_from(["c1", "c2", "c3"])
WHOLE = st.integers(0, 10**6)


def _floats(shape: tuple[int, ...]) -> st.SearchStrategy[np.ndarray]:
    size = int(np.prod(shape))
    return st.lists(WHOLE, min_size=size, max_size=size).map(
        lambda xs: np.asarray(xs, np.float64).reshape(shape)
    )


@st.composite
def arm_sums(draw: st.DrawFn) -> ArmSums:
    out = ArmSums()
    for name in draw(st.sets(NAMES)):
        out.start[name] = draw(st.integers(0, 10**12))
        out.predictions[name] = np.asarray(draw(st.lists(WHOLE, min_size=2, max_size=2)))
        out.loss[name] = draw(_floats((2, len(LOSSES), 3)))
        out.positives[name] = draw(_floats((2,)))
    return out


@st.composite
def paired_sums(draw: st.DrawFn) -> PairedSums:
    return PairedSums({name: draw(_floats((PAIRED_WIDTH,))) for name in draw(st.sets(NAMES))})


@st.composite
def delays(draw: st.DrawFn) -> LabelDelay:
    """Per-model delays of some of three models, in any order, with or without a prior."""
    d = LabelDelay(draw(st.lists(NAMES, unique=True)))
    n = len(DELAY_BOUNDS_S) + 1
    for i in range(len(d.names)):
        d.counts[i] = draw(st.lists(WHOLE, min_size=n, max_size=n))
        d.sums_s[i] = float(draw(WHOLE))
    if draw(st.booleans()):
        prior = np.asarray(draw(st.lists(WHOLE, min_size=n, max_size=n)), np.int64)
        d.prior = (prior, float(draw(WHOLE)))
    return d


unseen_values = st.dictionaries(
    st.tuples(st.sampled_from(["m", "n"]), st.sampled_from(["f", "g"])),
    st.lists(st.text("abc", min_size=1, max_size=2), unique=True, max_size=4),
).map(lambda d: UnseenValues({k: sorted(v) for k, v in d.items()}))


def _arms_key(a: ArmSums) -> Any:
    return (
        a.start,
        {k: v.tolist() for k, v in a.predictions.items()},
        {k: v.tolist() for k, v in a.loss.items()},
    )


def _key(x: Any) -> Any:
    if isinstance(x, ArmSums):
        return _arms_key(x)
    if isinstance(x, PairedSums):
        return {k: v.tolist() for k, v in x.by_name.items()}
    if isinstance(x, LabelDelay):
        own = {n: (c.tolist(), s) for n, c, s in zip(x.names, x.counts, x.sums_s, strict=True)}
        return own, None if x.prior is None else (x.prior[0].tolist(), x.prior[1])
    return x.by_feature


LAWS = [
    (arm_sums(), ArmSums),
    (paired_sums(), PairedSums),
    (delays(), LabelDelay),
    (unseen_values, UnseenValues),
]


@pytest.mark.parametrize(("values", "empty"), LAWS, ids=lambda x: getattr(x, "__name__", ""))
def test_plus_is_commutative_associative_with_the_empty_value_as_identity(
    values: st.SearchStrategy[Any], empty: type
) -> None:
    @settings(max_examples=60, deadline=None)
    @given(values, values, values)
    def laws(a: Any, b: Any, c: Any) -> None:
        before = _key(a)
        assert _key(a + b) == _key(b + a)
        assert _key((a + b) + c) == _key(a + (b + c))
        assert _key(a + empty()) == _key(empty() + a) == before
        assert _key(a) == before  # + leaves its operands alone

    laws()


def test_arm_sums_start_at_the_earlier_start_and_refuse_mismatched_names() -> None:
    ones = np.ones((2, len(LOSSES), 3))
    a = ArmSums({"c": 5}, {"c": np.array([1, 2])}, {"c": ones}, {"c": np.array([1.0, 0.0])})
    b = ArmSums({"c": 3}, {"c": np.array([10, 20])}, {"c": ones}, {"c": np.array([2.0, 3.0])})
    s = a + b
    assert s.start == {"c": 3} and s.predictions["c"].tolist() == [11, 22]
    assert (s.loss["c"] == 2).all() and s.positives["c"].tolist() == [3.0, 3.0]
    with pytest.raises(ValueError, match="different comparisons"):
        ArmSums({"c": 1}, {}, {}).check()
    with pytest.raises(ValueError, match="wrong shape"):
        ArmSums({"c": 1}, {"c": np.zeros(3)}, {"c": 0 * ones}, {"c": np.zeros(2)}).check()
    with pytest.raises(ValueError, match="wrong shape"):  # positives per arm
        ArmSums({"c": 1}, {"c": np.zeros(2)}, {"c": 0 * ones}, {"c": np.zeros(3)}).check()


def test_label_delay_of_a_snapshot_histogram_round_trips() -> None:
    d = LabelDelay(["a", "b"])
    d.counts[1, [0, 3, -1]] = (4, 1, 2)
    d.sums_s[1] = 12.5
    d.prior = (np.arange(len(DELAY_BOUNDS_S) + 1), 3.0)
    again = LabelDelay.of(d.histograms())
    assert _key(again) == _key(d)
    assert again.histograms() == d.histograms()


def test_summing_views_of_other_widths_is_refused() -> None:
    engine = build_engine(settings_from_mapping({"models": [{"name": "m"}]}))
    view = engine.view(copy=True)
    with pytest.raises(ValueError, match="bucket width"):
        sum_views([view], view.width_ms * 2)
    empty = sum_views([], view.width_ms)
    assert empty.groups == () and empty.buckets == {} and empty.wide == {}


# -- one engine over the union, two over its parts ------------------------------------------

START = 1_700_000_000_000
NOW = START + 60 * 60_000
CONFIG: dict[str, Any] = {
    "evaluation": {"bucket_width": "1m"},
    "models": [{"name": "fraud", "windows": [{"size": "1h"}],
                "slices": [{"dimensions": ["country"]}]}],
    "comparisons": [
        {"name": "split", "model": "fraud", "control": "v1", "treatment": "v2",
         "loss": "squared_error"},
        {"name": "shadow", "model": "fraud", "control": "v1", "treatment": "v3",
         "mode": "shadow", "loss": "log_loss"},
    ],
}  # fmt: skip


def _stream(seed: int, n: int) -> list[tuple[str, dict[str, Any]]]:
    """v1 and v2 split by id, v3 shadowing v1 (same ids); labels of v1's and v2's ids."""
    one = binary_traffic(n, seed=seed, start_ms=START, rate_per_s=1.0, version="v1")
    two = binary_traffic(n // 2, seed=seed + 1, start_ms=START, rate_per_s=0.5,
                         version="v2", id_prefix="q")  # fmt: skip
    three = binary_traffic(n, seed=seed + 2, start_ms=START, rate_per_s=1.0, version="v3")
    events = [(int(p["ts"]), 0, "predictions", p) for t in (one, two, three)
              for p in t.predictions]  # fmt: skip
    events += [(int(x["ts"]), 1, "labels", x) for t in (one, two) for x in t.labels]
    # every part sees the treatment first, so each part's split counting starts with the
    # union's (docs/scale-out.md: otherwise a part's early control predictions are left out)
    for i in range(2):
        first = {"id": f"first{i}", "ts": START - 1000, "model": "fraud", "version": "v2",
                 "score": 0.5, "prediction": 1, "segments": {"country": "US"}}  # fmt: skip
        events.append((START - 1000, 0, "predictions", first))
    events.sort(key=lambda e: (e[0], e[1]))
    return [(kind, rec) for _, _, kind, rec in events]


def _feed(engine: Engine, stream: list[tuple[str, dict[str, Any]]], tmp: Any) -> None:
    s = settings_from_mapping(CONFIG)
    pipe = build_pipeline(s, engine, FileDeadLetter(tmp / f"{id(engine)}.jsonl"), lambda: NOW)
    batch: dict[str, list[RawRecord]] = defaultdict(list)
    for i, (kind, rec) in enumerate(stream):
        batch[kind].append(RawRecord(orjson.dumps(rec), kind, 0, i))
        if i % 97 == 96 or i == len(stream) - 1:
            for k in ("predictions", "labels"):
                if batch[k]:
                    pipe.process(k, batch.pop(k))


def _rows_by_key(view: StoreView) -> dict[Any, np.ndarray]:
    """Every store's rows summed by (store, group key, bucket, column)."""
    out: dict[Any, np.ndarray] = {}
    stores = [("light", -1, view.buckets)]
    stores += [("wide", m, a) for m, a in view.wide.items()]
    stores += [("sliced", m, a) for m, a in view.sliced.items()]
    for kind, m, arrays in stores:
        for col, values in arrays.items():
            if col in ("group", "bucket"):
                continue
            for i in range(values.shape[0]):
                key = (kind, m, view.groups[arrays["group"][i]], int(arrays["bucket"][i]), col)
                out[key] = out[key] + values[i] if key in out else values[i].astype(np.float64)
    return out


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 1000), st.integers(40, 160), st.integers(0, 2**31))
def test_parts_of_a_stream_add_up_to_the_whole(
    tmp_path_factory: pytest.TempPathFactory, seed: int, n: int, salt: int
) -> None:
    tmp = tmp_path_factory.mktemp("merge")
    stream = _stream(seed, n)

    def part(rec: dict[str, Any]) -> int:
        rid = str(rec["id"])
        return int(rid[-1]) if rid.startswith("first") else zlib.crc32(f"{salt}{rid}".encode()) % 2

    whole = build_engine(settings_from_mapping(CONFIG))
    _feed(whole, stream, tmp)
    parts = [build_engine(settings_from_mapping(CONFIG)) for _ in range(2)]
    for p, engine in enumerate(parts):
        _feed(engine, [(k, r) for k, r in stream if part(r) == p], tmp)
    a, b = parts

    assert whole.pairs.sums.by_name["shadow"][0] > 0  # the stream exercises every sum
    arms = a.arms.sums + b.arms.sums
    assert arms.start == whole.arms.sums.start
    assert arms.predictions["split"].tolist() == whole.arms.sums.predictions["split"].tolist()
    np.testing.assert_allclose(arms.loss["split"], whole.arms.sums.loss["split"], rtol=1e-9)
    pairs = a.pairs.sums + b.pairs.sums
    np.testing.assert_allclose(pairs.by_name["shadow"], whole.pairs.sums.by_name["shadow"],
                               rtol=1e-9)  # fmt: skip
    delay = a.delay + b.delay
    assert delay.counts.tolist() == whole.delay.counts.tolist()
    assert delay.sums_s.tolist() == pytest.approx(whole.delay.sums_s.tolist(), rel=1e-12)

    width = whole.buckets.width_ms
    summed = sum_views([a.view(copy=True), b.view(copy=True)], width)
    got, want = _rows_by_key(summed), _rows_by_key(whole.view(copy=True))
    assert got.keys() == want.keys()
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-9, atol=1e-12, err_msg=str(key))
    # the order of the parts changes row order only
    swapped = _rows_by_key(sum_views([b.view(copy=True), a.view(copy=True)], width))
    assert swapped.keys() == got.keys()
    assert all(np.array_equal(swapped[k], got[k]) for k in got)


def test_parts_rolled_up_on_either_side_of_a_boundary_add_up_to_the_whole(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Partitions roll up at the time their own events reached, so one may have rolled a
    quarter hour of minute rows into an hour row that another still keeps as minutes: the
    sum holds every row in the tier the sum's time gives it, as one engine over the union
    rolled up at the later time does (history reads one point per period)."""
    tmp = tmp_path_factory.mktemp("tiers")
    stream = _stream(5, 150)
    whole = build_engine(settings_from_mapping(CONFIG))
    _feed(whole, stream, tmp)
    parts = [build_engine(settings_from_mapping(CONFIG)) for _ in range(2)]
    for p, engine in enumerate(parts):
        _feed(engine, [(k, r) for k, r in stream if zlib.crc32(str(r["id"]).encode()) % 2 == p],
              tmp)  # fmt: skip
    # the stream's minutes are START's and the next two; at ``later`` the 1h window's
    # minute rows start (a quarter-hour step) after the first two, at ``earlier`` before
    later = (START // 60_000 + 67) * 60_000
    earlier = later - 15 * 60_000
    whole.roll_up(later)
    parts[0].roll_up(earlier)
    parts[1].roll_up(later)
    a, b = (e.view(copy=True) for e in parts)
    assert a.tiers.hour_from < b.tiers.hour_from == whole.tiers.hour_from  # the two differ
    behind = a.buckets["tier"] == 0
    assert (a.buckets["bucket"][behind] < b.tiers.hour_from).any()  # minute rows b rolled

    summed = sum_views([a, b], whole.buckets.width_ms)
    assert summed.tiers == whole.view(copy=True).tiers
    for arrays in (summed.buckets, *summed.wide.values(), *summed.sliced.values()):
        assert not summed.tiers.moving(arrays["bucket"], arrays["tier"]).any()

    def by_key(view: StoreView) -> dict[Any, np.ndarray]:
        tiers = {}
        for kind, arrays in (("light", view.buckets), *(("wide", a) for a in view.wide.values()),
                             *(("sliced", a) for a in view.sliced.values())):  # fmt: skip
            for i in range(len(arrays["group"])):
                key = (kind, view.groups[arrays["group"][i]], int(arrays["bucket"][i]))
                tiers.setdefault(key, set()).add(int(arrays["tier"][i]))
        assert all(len(t) == 1 for t in tiers.values())  # a period in one tier only
        rows = _rows_by_key(view)
        return {k: v for k, v in rows.items() if k[-1] != "tier"}

    got, want = by_key(summed), by_key(whole.view(copy=True))
    assert got.keys() == want.keys()
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-9, atol=1e-12, err_msg=str(key))
