"""Properties of the co-partition plan (pure function behind the group assignor)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.ingest.assignor import _decode_owned, copartition_plan, copartition_violations

TOPICS = ("predictions", "labels")


@settings(max_examples=200, deadline=None)
@given(
    n_members=st.integers(1, 8),
    n_parts=st.integers(0, 24),
    prev=st.lists(st.lists(st.integers(-2, 30), max_size=10), max_size=8),
)
def test_plan_is_copartitioned_balanced_complete_and_sticky(
    n_members: int, n_parts: int, prev: list[list[int]]
) -> None:
    members = {f"m{i}": TOPICS for i in range(n_members)}
    previous = {f"m{i}": p for i, p in enumerate(prev[:n_members])}
    plan = copartition_plan(members, {t: n_parts for t in TOPICS}, previous)
    numbers = {}
    for m, topics in plan.items():
        pairs = {(t, p) for t, ps in topics.items() for p in ps}
        assert copartition_violations(pairs, TOPICS) == set()
        numbers[m] = set(topics["predictions"])
    owned = [p for ns in numbers.values() for p in ns]
    assert sorted(owned) == list(range(n_parts))  # every partition exactly once
    sizes = [len(ns) for ns in numbers.values()]
    assert max(sizes) - min(sizes) <= 1
    # sticky: a member keeps its previous partitions up to its fair share
    claimed: set[int] = set()
    for m in sorted(members):
        valid = sorted({p for p in previous.get(m, []) if 0 <= p < n_parts} - claimed)
        kept = numbers[m] & set(valid)
        assert len(kept) == min(len(valid), len(numbers[m]))
        claimed |= kept


def test_violations_name_partitions_owned_for_one_topic_only() -> None:
    pairs = {("predictions", 0), ("labels", 0), ("predictions", 3), ("labels", 5)}
    assert copartition_violations(pairs, TOPICS) == {3, 5}


def test_member_subscribed_to_one_topic_gets_only_that_topic() -> None:
    plan = copartition_plan({"a": ["predictions"], "b": TOPICS}, {t: 4 for t in TOPICS})
    assert set(plan["a"]) == {"predictions"}
    assert plan["a"]["predictions"] == [0, 1]
    assert plan["b"] == {"labels": [2, 3], "predictions": [2, 3]}


def test_unreadable_user_data_counts_as_no_previous_assignment() -> None:
    assert _decode_owned(b"") == []
    assert _decode_owned(b"\xff\x00") == []
    assert _decode_owned(b'{"a": 1}') == []
    assert _decode_owned(b"[1, true, 2.5, 3]") == [1, 3]
