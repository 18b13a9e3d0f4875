"""KeyedTable against a dict under random inserts, deletes and compactions."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.engine.table import KeyedTable, stable_order

op = st.one_of(
    st.tuples(st.just("ins"), st.lists(st.integers(0, 300), max_size=40)),
    st.tuples(st.just("del"), st.lists(st.integers(0, 300), max_size=40)),
    st.tuples(st.just("compact"), st.just([])),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(op, max_size=60))
def test_table_behaves_like_a_dict(ops: list[tuple[str, list[int]]]) -> None:
    t = KeyedTable({"v": np.int64})
    ref: dict[int, int] = {}
    for step, (kind, keys) in enumerate(ops):
        k = np.array(sorted(set(keys)), np.uint64)
        if kind == "ins":
            new = k[t.lookup(k) < 0]
            t.insert(new, {"v": new.astype(np.int64) * 10 + step})
            for key in new.tolist():
                ref[key] = key * 10 + step
        elif kind == "del":
            rows = t.lookup(k)
            t.delete(rows[rows >= 0])
            for key in k.tolist():
                ref.pop(key, None)
        else:
            t.compact()
        assert len(t) == len(ref)
        probe = np.arange(0, 301, dtype=np.uint64)
        rows = t.lookup(probe)
        for key, row in zip(probe.tolist(), rows.tolist(), strict=True):
            assert (row >= 0) == (key in ref)
            if row >= 0:
                assert t.col("v")[row] == ref[key]
    state = t.state()
    t2 = KeyedTable({"v": np.int64})
    t2.load(state)
    assert dict(zip(t2.state()["keys"].tolist(), t2.state()["v"].tolist(), strict=True)) == ref


def test_large_table_stays_compact() -> None:
    rng = np.random.default_rng(3)
    t = KeyedTable({"ts": np.int64, "g": np.int32, "s": np.float64, "d": np.int8, "l": np.int8})
    keys = np.unique(rng.integers(0, 2**63, 200_000, dtype=np.int64).astype(np.uint64))
    for i in range(0, keys.shape[0], 5000):
        kk = keys[i : i + 5000]
        z = np.zeros(kk.shape[0])
        t.insert(kk, {"ts": z, "g": z, "s": z, "d": z, "l": z})
    assert len(t) == keys.shape[0]
    assert (t.lookup(keys) >= 0).all()
    assert t.nbytes() / len(t) < 60


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["ins", "del", "compact"]),
                          st.lists(st.integers(0, 30), max_size=20)), max_size=40))  # fmt: skip
def test_multimap_lookup_all_finds_every_live_row(ops: list[tuple[str, list[int]]]) -> None:
    t = KeyedTable({"v": np.int64}, unique=False)
    ref: dict[int, list[int]] = {}
    tag = 0
    for kind, keys in ops:
        k = np.array(keys, np.uint64)
        if kind == "ins":
            vals = np.arange(tag, tag + k.shape[0], dtype=np.int64)
            tag += k.shape[0]
            t.insert(k, {"v": vals})
            for key, v in zip(k.tolist(), vals.tolist(), strict=True):
                ref.setdefault(key, []).append(v)
        elif kind == "del":
            q, rows = t.lookup_all(np.unique(k))
            t.delete(rows)
            for key in set(k.tolist()):
                ref.pop(key, None)
        else:
            t.compact()
        probe = np.arange(31, dtype=np.uint64)
        q, rows = t.lookup_all(probe)
        assert np.all(np.diff(q) >= 0)
        got: dict[int, list[int]] = {}
        for qi, row in zip(q.tolist(), rows.tolist(), strict=True):
            got.setdefault(int(probe[qi]), []).append(int(t.col("v")[row]))
        # a key's rows in arrival order (lookup's newest is the last), through compactions
        assert got == {k: v for k, v in ref.items() if v}
        assert len(t) == sum(len(v) for v in ref.values())
    loaded = KeyedTable({"v": np.int64}, unique=False)
    loaded.load(t.state())
    q, rows = loaded.lookup_all(np.arange(31, dtype=np.uint64))
    again: dict[int, list[int]] = {}
    for qi, row in zip(q.tolist(), rows.tolist(), strict=True):
        again.setdefault(qi, []).append(int(loaded.col("v")[row]))
    assert again == {k: v for k, v in ref.items() if v}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1) | st.integers(0, 5), max_size=200))
def test_stable_order_is_the_stable_argsort(values: list[int]) -> None:
    a = np.array(values, np.uint64)
    assert np.array_equal(stable_order(a), np.argsort(a, kind="stable"))


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 60), max_size=80),
    st.lists(st.integers(0, 60), max_size=80),
    st.lists(st.integers(0, 70), max_size=120),
)
def test_lookup_of_keys_in_any_order(first: list[int], second: list[int], probe: list[int]) -> None:
    """Keys asked in any order, repeated, held in the main segment and in the tail:
    each one's answer is the row it has when asked alone."""
    t = KeyedTable({"v": np.int64})
    a = np.array(sorted(set(first)), np.uint64)
    t.insert(a, {"v": a.astype(np.int64)})
    t.compact()
    b = np.array(sorted(set(second) - set(first)), np.uint64)
    t.insert(b, {"v": b.astype(np.int64)}, compact=False)
    keys = np.array(probe, np.uint64)
    alone = [int(t.lookup(keys[i : i + 1])[0]) for i in range(keys.shape[0])]
    assert t.lookup(keys).tolist() == alone
    for key, row in zip(probe, alone, strict=True):
        assert (row >= 0) == (key in set(first) | set(second))
        assert row < 0 or t.col("v")[row] == key


def test_delete_counts_each_live_row_once() -> None:
    """Rows given twice, or deleted before, leave the live count right."""
    t = KeyedTable({"v": np.int64})
    keys = np.arange(10, dtype=np.uint64)
    rows = t.insert(keys, {"v": keys.astype(np.int64)})
    t.delete(rows[[1, 1, 2]])
    assert len(t) == 8
    t.delete(rows[[2, 3, 3, 1]])
    assert len(t) == 7
    assert t.lookup(keys[[1, 2, 3, 4]]).tolist() == [-1, -1, -1, rows[4]]


def test_delete_keeps_the_live_count_whichever_way_it_counts() -> None:
    """Distinct rows (the count drops by those alive), rows given twice in a big table
    (sorted to count each once) and in a small one (the live rows counted): each leaves
    the live count that of the rows alive."""
    t = KeyedTable({"v": np.int64})
    keys = np.arange(5000, dtype=np.uint64)
    rows = t.insert(keys, {"v": keys.astype(np.int64)}, compact=False)
    t.delete(rows[[7, 8, 9]], distinct=True)
    assert len(t) == 4997
    t.delete(rows[[9, 10, 10, 11, 11]])  # few rows of many: sorted
    assert len(t) == 4995
    t.delete(rows[10:4000].repeat(2))  # most of the table, each twice: counted
    assert len(t) == 1007
    assert len(t) == int(np.count_nonzero(t.alive))
