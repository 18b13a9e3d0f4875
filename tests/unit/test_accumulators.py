"""The accumulators one by one: what they count, their state round trip, their refusals,
and that the parts of an engine's checkpoint never write the same name twice."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.config import settings_from_mapping
from monitor.engine import state_codec
from monitor.engine.accumulator import LabeledRows
from monitor.engine.buckets import BucketStore
from monitor.engine.comparison_stats import ShadowPairs, SplitArms
from monitor.engine.delay import DELAY_BOUNDS_S, LabelDelay
from monitor.engine.family_stats import FamilyStats
from monitor.engine.join import Joined
from monitor.metrics.registry import LOSSES
from monitor.plugins import JoinedRows, Metric
from monitor.stats.completeness import MIN_OWN_DELAYS
from monitor.wiring import build_engine


def _rows(pred_ts: list[int], label_ts: list[int], model: int = 0) -> LabeledRows:
    n = len(pred_ts)
    joined = Joined(
        rows=np.arange(n), group=np.zeros(n, np.int32), pred_ts=np.asarray(pred_ts, np.int64),
        y_true=np.ones(n, np.int8), decision=np.ones(n, np.int8), score=np.full(n, 0.9),
        codes=np.zeros(n, np.int32), values=np.full(n, np.nan),
        label_ts=np.asarray(label_ts, np.int64),
    )  # fmt: skip
    return LabeledRows(joined, np.full(n, model, np.int16), np.zeros(n, np.int32))


def test_label_delay_bins_are_inclusive_and_early_labels_count_as_zero() -> None:
    d = LabelDelay(["m"])
    # delays 0 s (label first), exactly 1 s, 1.001 s, 40 days
    d.add(_rows([5000, 0, 0, 0], [0, 1000, 1001, 40 * 86_400_000]))
    assert d.counts[0, 0] == 2  # 0 s and 1 s: le="1"
    assert d.counts[0, 1] == 1  # 1.001 s: le="5"
    assert d.counts[0, len(DELAY_BOUNDS_S)] == 1  # beyond 30 d: +Inf only
    assert d.sums_s[0] == pytest.approx(0 + 1 + 1.001 + 40 * 86_400)
    again = LabelDelay(["m"])
    again.load(*d.state())
    assert again.counts.tolist() == d.counts.tolist() and again.sums_s.tolist() == d.sums_s.tolist()
    meta, arrays = d.state()
    with pytest.raises(ValueError, match="different shape"):
        again.load(meta, {"delay_counts_by_model": arrays["delay_counts_by_model"][:, :-1]})
    with pytest.raises(ValueError, match="not integers"):
        again.load(meta, {"delay_counts_by_model": arrays["delay_counts_by_model"] * 0.5})


def test_label_delay_is_kept_per_model_and_restored_by_name() -> None:
    d = LabelDelay(["clicks", "fraud"])
    rows = _rows([0, 0, 0], [500, 2000, 10 * 86_400_000])
    d.add(LabeledRows(rows.joined, np.array([0, 0, 1], np.int16), rows.base))
    assert d.counts[0].sum() == 2 and d.counts[1].sum() == 1
    assert d.sums_s.tolist() == pytest.approx([2.5, 10 * 86_400])
    # a reordered configuration, a model removed and one added: matched by name
    again = LabelDelay(["new", "fraud"])
    again.load(*d.state())
    assert again.counts[0].sum() == 0 and again.counts[1].tolist() == d.counts[1].tolist()
    assert again.sums_s.tolist() == pytest.approx([0.0, 10 * 86_400])
    assert again.prior is None


def test_an_older_checkpoints_one_histogram_becomes_the_fleet_prior() -> None:
    """A checkpoint from before per-model delays kept one histogram of every model's
    labels (``delay_counts``, ``delay_sum_s``): it loads as the prior, which a model
    reads until it has ``MIN_OWN_DELAYS`` delays of its own, and is saved again."""
    fleet = np.zeros(len(DELAY_BOUNDS_S) + 1, np.int64)
    fleet[3] = 500  # every label within a minute
    d = LabelDelay(["clicks", "fraud"])
    d.load({"delay_sum_s": 20_000.0}, {"delay_counts": fleet})
    assert d.counts.sum() == 0 and d.prior is not None
    fraud_rows = _rows([0] * MIN_OWN_DELAYS, [7 * 86_400_000] * MIN_OWN_DELAYS)
    d.add(LabeledRows(fraud_rows.joined, np.ones(MIN_OWN_DELAYS, np.int16), fraud_rows.base))
    h = d.histograms()
    assert h.of("clicks") == h.prior  # none of its own yet
    assert h.of("fraud") == dict(h.by_model)["fraud"] and h.of("fraud").counts[12] == 100
    again = LabelDelay(["clicks", "fraud"])
    again.load(*d.state())
    assert again.histograms() == h
    assert (
        LabelDelay(["m"]).histograms().of("m") == dict(LabelDelay(["m"]).histograms().by_model)["m"]
    )
    assert LabelDelay([]).histograms().of("m") is None


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 10**9), st.integers(0, 2)),
                max_size=40),
       st.integers(0, 40))  # fmt: skip
def test_label_delay_of_a_split_stream_is_the_delay_of_the_whole(
    rows: list[tuple[int, int, int]], cut: int
) -> None:
    names = ["a", "b", "c"]
    whole, parts = LabelDelay(names), LabelDelay(names)

    def labeled(part: list[tuple[int, int, int]]) -> LabeledRows:
        r = _rows([p for p, _, _ in part], [q for _, q, _ in part])
        return LabeledRows(r.joined, np.array([m for _, _, m in part], np.int16), r.base)

    whole.add(labeled(rows))
    parts.add(labeled(rows[:cut]))
    parts.add(labeled(rows[cut:]))
    assert parts.counts.tolist() == whole.counts.tolist()
    assert parts.sums_s.tolist() == pytest.approx(whole.sums_s.tolist())


class _Boom(Metric):
    name = "boom"

    def width(self) -> int:
        return 1

    def update(self, matrix: np.ndarray, rows: np.ndarray, batch: JoinedRows) -> None:
        raise RuntimeError("boom")


class _Count(Metric):
    name = "count"

    def width(self) -> int:
        return 1

    def update(self, matrix: np.ndarray, rows: np.ndarray, batch: JoinedRows) -> None:
        np.add.at(matrix, (rows, 0), 1.0)


def _family_stats(plugins: list[Metric], store: BucketStore) -> FamilyStats:
    """Model 0 binary (served by the plugins), model 1 regression (served by none)."""
    return FamilyStats({0: plugins, 1: ()}, plugins, {0: store}, ["binary", "regression"],
                       [2, 0], None, None, load_errors=["nope"])  # type: ignore[arg-type]  # fmt: skip


def test_a_plugin_that_raises_is_switched_off_and_the_others_go_on() -> None:
    store = BucketStore(60_000, {"p_boom": (1, np.float64), "p_count": (1, np.float64)})
    stats = _family_stats([_Boom(), _Count()], store)
    stats.add(_rows([0, 1, 2], [5, 5, 5]))
    stats.add(_rows([3], [5]))
    stats.add(_rows([4], [5], model=1))  # a regression model: these plugins do not serve it
    assert stats.failed == {"boom"} and stats.errors == {"boom": 1, "nope": 1}
    assert [p.name for p in stats.active] == ["count"]
    assert store.matrix("p_count").sum() == 4
    again = _family_stats([_Boom(), _Count()], store)
    again.errors.clear()
    again.load(*stats.state())
    assert again.failed == {"boom"} and again.errors == {"boom": 1, "nope": 1}


def _arms() -> SplitArms:
    comparison = {"name": "c", "model": "m", "control": "a", "treatment": "b"}
    cfg = {"models": [{"name": "m", "windows": [{"size": "1h"}]}], "comparisons": [comparison]}
    return build_engine(settings_from_mapping(cfg)).arms


def test_split_arms_state_round_trips_and_pads_older_loss_lists() -> None:
    arms = _arms()
    old = np.arange(2 * 4 * 3, dtype=np.float64).reshape(2, 4, 3)  # four losses then
    arms.load({"arms": {"c": {"start_ms": 7, "predictions": [3, 4], "loss": old.tolist()}}}, {})
    sums = arms.sums
    assert sums.start == {"c": 7} and sums.predictions["c"].tolist() == [3, 4]
    assert sums.loss["c"].shape == (2, len(LOSSES), 3)
    assert sums.loss["c"][:, :4].tolist() == old.tolist() and not sums.loss["c"][:, 4:].any()
    again = _arms()
    again.load(*arms.state())
    assert again.state() == arms.state()
    bad: dict[str, Any] = {"arms": {"c": {"start_ms": 7, "predictions": [1, 2, 3],
                                          "loss": old.tolist()}}}  # fmt: skip
    with pytest.raises(ValueError, match="wrong shape"):
        again.load(bad, {})


def test_shadow_pairs_refuse_statistics_of_the_wrong_shape() -> None:
    pairs = ShadowPairs((), lambda m, v: np.empty(0, np.int32), None, lambda g: g)  # type: ignore[arg-type]
    pairs.load({"paired": {"s": [1.0, 2.0, 3.0, 0.0, 1.0, 1.0]}}, {})
    assert pairs.state()[0] == {"paired": {"s": [1.0, 2.0, 3.0, 0.0, 1.0, 1.0]}}
    # a state written before the positives were counted loads with none counted yet
    pairs.load({"paired": {"s": [1.0, 2.0, 3.0, 0.0, 1.0]}}, {})
    assert pairs.state()[0] == {"paired": {"s": [1.0, 2.0, 3.0, 0.0, 1.0, 0.0]}}
    with pytest.raises(ValueError, match="wrong shape"):
        pairs.load({"paired": {"s": [1.0]}}, {})


def test_checkpoint_parts_never_write_the_same_name() -> None:
    cfg = {
        "models": [
            {"name": "b", "windows": [{"size": "1h"}], "estimation": {"max_ece": 0.05},
             "slices": [{"dimensions": ["c"]}],
             "drift": {"reference_window": "previous:1h", "bootstrap": 100}},
            {"name": "t", "task": "multiclass", "classes": ["x", "y"],
             "windows": [{"size": "1h"}]},
        ],
        "comparisons": [
            {"name": "s", "model": "b", "control": "1", "treatment": "2"},
            {"name": "p", "model": "t", "control": "1", "treatment": "2", "mode": "shadow"},
        ],
    }  # fmt: skip
    engine = build_engine(settings_from_mapping(cfg))
    seen_meta: set[str] = set()
    seen_arrays: set[str] = set()
    parts = (engine.join, *engine.accumulators, *engine.prediction_accumulators)
    assert engine.arms in engine.accumulators and engine.arms in engine.prediction_accumulators
    for part in dict.fromkeys(parts):
        meta, arrays = part.state()
        assert not seen_meta & meta.keys() and not seen_arrays & arrays.keys(), part
        seen_meta |= meta.keys()
        seen_arrays |= arrays.keys()
    full_meta, full_arrays = state_codec.encode(engine)
    assert seen_meta <= full_meta.keys() and seen_arrays <= full_arrays.keys()
