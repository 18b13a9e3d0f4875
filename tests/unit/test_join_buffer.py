"""JoinBuffer on its own: joins, duplicates, conflicts, expiry, caps and its state."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.engine.join import JoinBuffer


def _classify(codes: np.ndarray, values: np.ndarray, group: np.ndarray) -> np.ndarray:
    # label code 0 -> class 0, 1 -> class 1, anything else does not fit the model
    return np.where((codes == 0) | (codes == 1), codes, -1).astype(np.int8)


def _buffer(max_pending: int = 100) -> JoinBuffer:
    return JoinBuffer({}, label_ttl_ms=1000, orphan_label_ttl_ms=500,
                      max_pending=max_pending, max_orphan_labels=100)  # fmt: skip


def _insert(j: JoinBuffer, keys: list[int], ts: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Insert new predictions of group 0; returns (keys, their rows)."""
    k = np.asarray(keys, np.uint64)
    n = len(keys)
    cols = {"ts": np.asarray(ts, np.int64), "group": np.zeros(n, np.int32),
            "score": np.full(n, 0.5), "decision": np.ones(n, np.int8)}  # fmt: skip
    return k, j.insert_predictions(k, cols)


def test_labels_join_waiting_predictions_and_wait_for_missing_ones() -> None:
    j = _buffer()
    _insert(j, [1, 2], [10, 20])
    keys = np.asarray([2, 3, 2, 1], np.uint64)
    ts = np.asarray([30, 40, 50, 60], np.int64)
    codes = np.asarray([1, 0, 0, 7], np.int32)
    values = np.full(4, np.nan)
    rejects: list[tuple[int, str, str]] = []
    joined_rows, dups = [], 0
    for idx in j.rounds(keys):
        joined, d = j.add_labels(keys, ts, codes, values, idx, _classify, rejects)
        dups += d
        if joined is not None:
            joined_rows.append(joined)
    assert [len(x) for x in joined_rows] == [1]  # id 2 joined; id 1's label fits no class
    assert joined_rows[0].y_true.tolist() == [1] and joined_rows[0].label_ts.tolist() == [30]
    assert sorted(r[:2] for r in rejects) == [(2, "conflicting_label"), (3, "unknown_class")]
    assert dups == 0 and j.pending == 1 and len(j.orphans) == 1  # id 3 waits
    # a prediction for the waiting label joins on arrival
    k = np.asarray([3], np.uint64)
    held = j.unseen(k, np.zeros(1, np.int64), identity_of_group=np.asarray([0]))
    k, rows = _insert(j, [3], [35])
    joined, unknown = j.join_new(k, rows, held, _classify)
    assert joined is not None and joined.y_true.tolist() == [0] and unknown == 0
    assert len(j.orphans) == 0 and j.pending == 1


def test_duplicates_are_found_by_key_and_identity() -> None:
    j = _buffer()
    _insert(j, [5], [1])
    keys = np.asarray([5, 5, 6, 6], np.uint64)
    identity = np.asarray([0, 1, 0, 0])
    held = j.unseen(keys, identity, identity_of_group=np.asarray([0]))
    assert held.positions.tolist() == [1, 2]  # (5, 0) is held; (6, 0) twice: the first only
    # (5, 1) is new, and the row of (5, 0) is its sibling
    assert held.index.tolist() == [0] and j.preds.keys[held.rows].tolist() == [5]


def test_expiry_counts_only_waiting_predictions_and_caps_evict_the_oldest() -> None:
    j = _buffer(max_pending=2)
    _insert(j, [1, 2, 3], [100, 200, 300])
    events = j.expire(None, None)
    assert events == {"evicted_prediction": 1} and j.pending == 2
    assert sorted(j.preds.keys[j.preds.alive].tolist()) == [2, 3]
    events = j.expire(label_mark_ms=1250, pred_mark_ms=None)  # cutoff 250: id 2 expires
    assert events == {"expired_prediction": 1} and j.pending == 1


def test_state_round_trips() -> None:
    j = _buffer()
    _insert(j, [1, 2], [10, 20])
    rejects: list[tuple[int, str, str]] = []
    keys = np.asarray([2, 9], np.uint64)
    j.add_labels(keys, np.asarray([30, 40]), np.asarray([1, 0], np.int32), np.full(2, np.nan),
                 np.arange(2), _classify, rejects)  # fmt: skip
    meta, arrays = j.state()
    again = _buffer()
    again.load(meta, arrays)
    assert again.consistent() and again.pending == j.pending == 1
    assert again.state()[0] == meta
    for name, value in arrays.items():
        assert again.state()[1][name].tolist() == value.tolist(), name
    assert again.expire(None, 9 + 10_000) == {"expired_orphan_label": 1}


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.booleans(),  # a batch of predictions (else of labels)
            st.lists(st.integers(0, 40), min_size=1, max_size=25),
            st.booleans(),  # predictions: two identities (shadow versions)
        ),
        max_size=12,
    )
)
def test_the_batchs_key_order_handed_on_changes_nothing(
    batches: list[tuple[bool, list[int], bool]],
) -> None:
    """``unseen`` hands its sort of a batch's keys to the insert and the orphans' lookup:
    the buffer ends as one that sorts them again at each step."""
    fast, slow = _buffer(1000), _buffer(1000)
    for step, (predictions, ids, shadow) in enumerate(batches):
        keys = np.asarray(ids, np.uint64)
        n = keys.shape[0]
        ts = np.arange(n, dtype=np.int64) + 10 * step
        outs = []
        for j, keep_order in ((fast, True), (slow, False)):
            if predictions:
                identity = (np.arange(n) % 2) if shadow else np.zeros(n, np.int64)
                held = j.unseen(keys, identity, identity_of_group=np.asarray([0, 1]))
                if not keep_order:
                    held = replace(held, order=None)
                pos = held.positions
                if pos.shape[0] == 0:  # (all duplicates: the engine inserts nothing)
                    outs.append(None)
                    continue
                cols = {"ts": ts[pos], "group": identity[pos].astype(np.int32),
                        "score": np.full(pos.shape[0], 0.5),
                        "decision": np.ones(pos.shape[0], np.int8)}  # fmt: skip
                rows = j.insert_predictions(keys[pos], cols, held.order)
                joined, _ = j.join_new(keys[pos], rows, held, _classify)
                j.settle()
            else:
                codes = (keys % 2).astype(np.int32)
                rejects: list[tuple[int, str, str]] = []
                joined = None
                for idx in j.rounds(keys):
                    joined, _ = j.add_labels(
                        keys, ts, codes, np.full(n, np.nan), idx, _classify, rejects
                    )
            outs.append(None if joined is None else (joined.rows.tolist(), joined.codes.tolist()))
        assert outs[0] == outs[1]
    for a, b in zip(fast.state()[1].values(), slow.state()[1].values(), strict=True):
        assert np.array_equal(a, b)
    assert fast.pending == slow.pending
