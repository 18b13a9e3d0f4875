"""GroupRegistry on its own: interning (codes in arrival order, base groups, segments
folded), the version cap (rejections with their reason, counted), retirement of idle
versions, outcome counts and the state round trip."""

from __future__ import annotations

import itertools
import logging

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.engine.groups import GroupRegistry
from monitor.engine.models import ModelSpec, SliceSpec, WindowSpec

HOUR = 3_600_000
SLICED = ModelSpec(
    "m",
    windows=(WindowSpec("1h", HOUR),),
    slices=(SliceSpec(("country",), 10, 1),),
    max_versions=2,
    version_idle_ttl_ms=2 * HOUR,
)
PLAIN = ModelSpec("n", windows=(WindowSpec("1h", HOUR),), max_versions=5)


def _codes(reg: GroupRegistry, rows: list[tuple[int, str, str | None]]) -> list[int]:
    model = np.array([m for m, _, _ in rows], np.int16)
    segments = [None if c is None else {"country": c} for _, _, c in rows]
    return reg.codes(model, [v for _, v, _ in rows], segments).tolist()


def test_groups_are_interned_in_arrival_order_with_their_base_group() -> None:
    reg = GroupRegistry([SLICED, PLAIN])
    codes = _codes(reg, [(0, "v1", "de"), (1, "a", None), (0, "v1", "de"), (0, "v1", "fr")])
    assert codes[0] == codes[2] and len(set(codes)) == 3
    assert reg.groups[codes[0]] == (0, "v1", ("de",))
    # a segment group brings its version's base group (the wide, per-version rows)
    base = reg.groups.index((0, "v1", ()))
    assert reg.base[codes[0]] == reg.base[codes[3]] == base and reg.base[base] == base
    assert reg.model.tolist() == [g[0] for g in reg.groups]
    assert sorted(reg.version_groups(0, "v1").tolist()) == sorted({base, codes[0], codes[3]})
    assert reg.version_groups(0, "nope").tolist() == []
    assert _codes(reg, [(0, "v1", "fr")]) == [codes[3]]  # stable across batches


def test_versions_over_the_cap_are_rejected_with_a_reason_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reg = GroupRegistry([SLICED])
    rows = [(0, f"v{i % 4}", "de") for i in range(8)]
    codes = np.array(_codes(reg, rows))
    assert (codes[[0, 1, 4, 5]] >= 0).all() and (codes[[2, 3, 6, 7]] == -1).all()
    with caplog.at_level(logging.WARNING):
        rejects = reg.reject(
            np.zeros(8, np.int16),
            [v for _, v, _ in rows],
            np.flatnonzero(codes < 0),
            np.zeros(8, np.int64),
        )
    assert [i for i, _, _ in rejects] == [2, 3, 6, 7]
    assert {reason for _, reason, _ in rejects} == {"version_limit"}
    assert all("max_versions=2" in detail for _, _, detail in rejects)
    assert reg.rejected == {"m": 4}
    assert any("v3" in r.getMessage() for r in caplog.records)
    assert reg.lifecycle_state()["versions_rejected"] == {"m": 4}


def test_idle_versions_retire_once_their_windows_passed_and_free_a_slot() -> None:
    reg = GroupRegistry([SLICED])
    g = np.array(_codes(reg, [(0, "v1", None), (0, "v2", None)]))
    reg.seen(g, np.array([0, 0]))
    assert _codes(reg, [(0, "v3", None)]) == [-1]
    reg.seen(g[:1], np.array([2 * HOUR]))  # v1 keeps sending
    reg.retire_idle(2 * HOUR)  # v2 idle 2 h: not more than version_idle_ttl yet
    assert _codes(reg, [(0, "v3", None)]) == [-1]
    reg.retire_idle(2 * HOUR + 1)
    assert reg.retired == {(0, "v2")} and reg.live[0] == 1
    assert _codes(reg, [(0, "v3", None)]) != [-1]
    # a retired version comes back as a new one, and only when there is room
    assert _codes(reg, [(0, "v2", None)]) == [-1]


def test_outcomes_and_lifecycle_survive_the_state_round_trip() -> None:
    reg = GroupRegistry([SLICED, PLAIN])
    g = np.array(_codes(reg, [(0, "v1", "de"), (0, "v1", "fr"), (1, "a", None), (0, "v2", None)]))
    reg.seen(g, np.array([5, 7, 9, 11]))
    reg.count_outcomes(g[[0, 1, 1, 2]], np.array([True, False, True, False]))
    reg.retire_idle(10 * HOUR)
    assert sorted(reg.outcome_counts()) == [(0, "v1", 3, 2), (0, "v2", 0, 0), (1, "a", 1, 0)]
    meta = {**reg.groups_state(), **reg.lifecycle_state(), "pred_watermark_ms": 11}
    again = GroupRegistry([SLICED, PLAIN])
    again.load(meta)
    assert again.groups == reg.groups and again.outcome_counts() == reg.outcome_counts()
    assert again.retired == reg.retired and again.live == reg.live
    assert again.last_seen.tolist() == reg.last_seen.tolist()
    assert {**again.groups_state(), **again.lifecycle_state()} == {
        **reg.groups_state(),
        **reg.lifecycle_state(),
    }
    # a model no longer configured keeps its groups as model -1, outside every count
    alone = GroupRegistry([PLAIN])
    alone.load(meta)
    assert [m for m, _, _ in alone.groups].count(-1) == [m for m, _, _ in reg.groups].count(0) > 3
    assert alone.outcome_counts() == [(0, "a", 1, 0)]


rows = st.lists(
    st.tuples(st.sampled_from([0, 1]), st.sampled_from(["v1", "v2", "v3", "v4"]),
              st.sampled_from(["de", "fr", None])),
    min_size=1, max_size=40,
)  # fmt: skip


@settings(max_examples=50, deadline=None)
@given(rows, st.lists(st.integers(0, 40), max_size=4))
def test_batch_boundaries_never_change_which_groups_exist(
    events: list[tuple[int, str, str | None]], cuts: list[int]
) -> None:
    one, many = GroupRegistry([SLICED, PLAIN]), GroupRegistry([SLICED, PLAIN])
    whole = _codes(one, events)
    split: list[int] = []
    bounds = sorted({0, len(events), *[c % (len(events) + 1) for c in cuts]})
    for lo, hi in itertools.pairwise(bounds):
        split += _codes(many, events[lo:hi])
    assert set(one.groups) == set(many.groups)
    assert [w < 0 for w in whole] == [s < 0 for s in split]
    assert [one.groups[w] if w >= 0 else None for w in whole] == [
        many.groups[s] if s >= 0 else None for s in split
    ]


@settings(max_examples=50, deadline=None)
@given(rows, rows)
def test_known_groups_keep_their_codes_across_batches_and_a_state_round_trip(
    first: list[tuple[int, str, str | None]], second: list[tuple[int, str, str | None]]
) -> None:
    reg = GroupRegistry([SLICED, PLAIN])
    _codes(reg, first)
    meta = {**reg.groups_state(), **reg.lifecycle_state(), "pred_watermark_ms": 0}
    loaded = GroupRegistry([SLICED, PLAIN])
    loaded.load(meta)
    # the second batch meets groups both registries know (looked up by packed ids) and
    # new ones (added in the same order), so both hand out the same codes
    codes = _codes(reg, second)
    assert _codes(loaded, second) == codes
    assert loaded.groups == reg.groups
    for (m, v, c), code in zip(second, codes, strict=True):
        if code >= 0:
            segment = (c if c is not None else "__none__",) if m == 0 else ()
            assert reg.groups[code] == (m, v, segment)
            assert reg.groups.count(reg.groups[code]) == 1
