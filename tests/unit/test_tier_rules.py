"""Tier rules: rolling minute rows up into hour, 12-hour and day rows and then summing a
window equals summing the minute rows inside the window's snapped bounds; edges snap to
the nearest boundary of the row they fall in, by at most 1/24 of the window; state
written before 12-hour rows loads."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.engine.buckets import BucketStore
from monitor.engine.windows import DAY_MS, HALF_DAY_MS, HOUR_MS, Tiers, tier_reach

WIDTH = 60_000
NOW = 1_700_000_000_000 + 7_654_321  # aligned to nothing
SIZES = [300_000, HOUR_MS, DAY_MS, 2 * DAY_MS, 7 * DAY_MS, 30 * DAY_MS]
windows_st = st.lists(
    st.tuples(st.sampled_from(SIZES), st.sampled_from([0, 0, 10 * 60_000, 3 * HOUR_MS])),
    min_size=1,
    max_size=4,
)


def _store(ts: np.ndarray, groups: np.ndarray, steps: list[int], reach: tuple[int, int, int]):
    """Minute events fed in time order, the tiers advanced (and rows rolled up) at each
    of ``steps``, as the engine does at each evaluation; late events land in old rows."""
    store = BucketStore(WIDTH, {"h": 3})
    fed = 0
    for at in [*steps, NOW]:
        upto = int(np.searchsorted(ts, at, side="right"))
        if upto > fed:
            rows = store.rows_for(groups[fed:upto], ts[fed:upto])
            np.add.at(store._cols["predicted"], rows, 1)
            store.add_cells("h", rows, (ts[fed:upto] // WIDTH % 3).astype(np.int64))
            fed = upto
        store.roll_up(store.tiers.advanced(at, *reach))
    return store


@settings(max_examples=40, deadline=None)
@given(
    windows=windows_st,
    seed=st.integers(0, 2**16),
    n_steps=st.integers(1, 12),
)
def test_rolled_up_window_sums_equal_the_minute_rows_inside_the_snapped_bounds(
    windows: list[tuple[int, int]], seed: int, n_steps: int
) -> None:
    rng = np.random.default_rng(seed)
    reach = tier_reach(windows)
    span_ms = max(s + d for s, d in windows) + DAY_MS
    ts = np.sort(rng.integers(NOW - span_ms, NOW, 3_000)).astype(np.int64)
    groups = rng.integers(0, 3, ts.shape[0])
    steps = sorted(rng.integers(NOW - span_ms, NOW, n_steps).tolist())
    store = _store(ts, groups, steps, reach)
    # a late event (an hour old, say) after the last roll-up lands in its tier's row
    late = np.array([NOW - HOUR_MS - 1, NOW - 3 * DAY_MS], np.int64)
    rows = store.rows_for(np.array([0, 1]), late)
    np.add.at(store._cols["predicted"], rows, 1)
    store.add_cells("h", rows, (late // WIDTH % 3).astype(np.int64))
    ts, groups = np.r_[ts, late], np.r_[groups, [0, 1]]
    tiers, v = store.tiers, store.view()
    for size, delay in windows:
        lo, hi = tiers.window(NOW, size, delay)
        inside = (v["bucket"] >= lo) & (v["bucket"] <= hi)
        events = (ts >= lo * WIDTH) & (ts < (hi + 1) * WIDTH)
        for g in range(3):
            mine = inside & (v["group"] == g)
            exp = events & (groups == g)
            assert int(v["predicted"][mine].sum()) == int(exp.sum())  # counts stay exact
            cells = np.bincount(ts[exp] // WIDTH % 3, minlength=3)
            np.testing.assert_array_equal(v["m.h"][mine].sum(axis=0), cells)
        # no row straddles the bounds: every row in the window lies wholly inside (the
        # row a tier boundary cuts holds only what is before the boundary)
        ends = v["bucket"] + store.span()
        ends = np.where(v["tier"] == 1, np.minimum(ends, tiers.hour_from), ends)
        ends = np.where(v["tier"] == 3, np.minimum(ends, tiers.half_from), ends)
        assert (ends[inside] - 1 <= hi).all()


@settings(max_examples=200, deadline=None)
@given(windows=windows_st, now=st.integers(10**12, 2 * 10**12))
def test_window_edges_snap_to_the_nearest_row_boundary_by_at_most_a_24th(
    windows: list[tuple[int, int]], now: int
) -> None:
    reach = tier_reach(windows)
    fine, hour, half = reach
    assert HOUR_MS <= fine < hour < half
    tiers = Tiers.for_width(WIDTH).advanced(now, *reach)
    assert tiers.day_from <= tiers.half_from <= tiers.hour_from
    for size, delay in windows:
        nominal_lo = (now - delay) // WIDTH - size // WIDTH + 1
        lo, hi = tiers.window(now, size, delay)
        nominal_hi = (now - delay) // WIDTH
        t = tiers.tier_of(nominal_lo)
        span = tiers.span(t)
        assert lo % span == 0  # a row boundary: the nearest one
        assert abs(lo - nominal_lo) * 2 <= span
        assert abs(lo - nominal_lo) * WIDTH <= size / 24
        assert span * WIDTH <= max(WIDTH, size // 12)  # rows at most 1/12 of the window
        if size < DAY_MS:
            assert lo == nominal_lo  # windows under a day stay exact
        t_hi = tiers.tier_of(nominal_hi)
        assert (hi + 1) % tiers.span(t_hi) == 0  # ends where a row ends
        assert abs(hi - nominal_hi) * 2 <= tiers.span(t_hi)
        assert hi < lo + size // WIDTH * 2  # never collapses or runs away


def test_twelve_hour_rows_hold_a_seven_day_window_start() -> None:
    reach = tier_reach([(300_000, 0), (HOUR_MS, 0), (DAY_MS, 0), (7 * DAY_MS, 0)])
    assert reach == (HOUR_MS, DAY_MS, 7 * DAY_MS)
    tiers = Tiers.for_width(WIDTH).advanced(NOW, *reach)
    lo, _ = tiers.window(NOW, 7 * DAY_MS, 0)
    assert tiers.tier_of(NOW // WIDTH - 7 * 1440 + 1) == 3 and lo * WIDTH % HALF_DAY_MS == 0
    assert abs(lo * WIDTH - (NOW - 7 * DAY_MS)) <= HALF_DAY_MS // 2 + WIDTH
    lo, _ = tiers.window(NOW, DAY_MS, 0)
    assert tiers.tier_of(NOW // WIDTH - 1440 + 1) == 1 and lo * WIDTH % HOUR_MS == 0


def test_state_written_before_twelve_hour_rows_loads_and_rolls_on() -> None:
    """Old state: tiers [hour_from, day_from] and hour rows back 8 days. It loads with
    no 12-hour region (every old row keeps its meaning), and the next roll-up merges the
    old hour rows into 12-hour rows without changing any total."""
    old = Tiers.for_width(WIDTH)
    per_hour = old.per_hour
    now_b = NOW // WIDTH
    old = Tiers(
        WIDTH,
        per_hour,
        (now_b - 120) // per_hour * per_hour,
        (now_b - 8 * 24 * per_hour) // old.per_day * old.per_day,
    )
    assert old.tier_of(now_b - 5 * 24 * per_hour) == 1  # no 12-hour region: hour rows
    store = BucketStore(WIDTH, {"h": 3})
    store.tiers = old
    rng = np.random.default_rng(9)
    ts = np.sort(rng.integers(NOW - 9 * DAY_MS, NOW, 5_000)).astype(np.int64)
    groups = rng.integers(0, 2, ts.shape[0])
    rows = store.rows_for(groups, ts)
    np.add.at(store._cols["predicted"], rows, 1)
    state = store.state()
    assert set(np.unique(state["tier"]).tolist()) == {0, 1, 2}
    again = BucketStore(WIDTH, {"h": 3})
    again.tiers = old
    again.load(state)
    before = np.bincount(again.group, again.view()["predicted"], minlength=2)
    reach = tier_reach([(DAY_MS, 0), (7 * DAY_MS, 0)])
    assert again.roll_up(again.tiers.advanced(NOW, *reach)) > 0
    v = again.view()
    assert set(np.unique(v["tier"]).tolist()) >= {0, 1, 2, 3}
    np.testing.assert_array_equal(np.bincount(v["group"], v["predicted"], minlength=2), before)


def test_checkpointed_bounds_round_trip_and_old_ones_mean_no_twelve_hour_rows() -> None:
    base = Tiers.for_width(WIDTH)
    old = [28_000_020, 27_990_720]  # [hour_from, day_from], as written before 12-hour rows
    tiers = base.with_bounds(old)
    assert tiers.bounds() == old  # saved back unchanged: older readers still read it
    assert tiers.tier_of(old[0] - 1) == 1 and tiers.tier_of(old[1]) == 1
    assert tiers.tier_of(old[1] - 1) == 2
    new = base.advanced(NOW, *tier_reach([(DAY_MS, 0), (7 * DAY_MS, 0)]))
    assert len(new.bounds()) == 3 and base.with_bounds(new.bounds()) == new
