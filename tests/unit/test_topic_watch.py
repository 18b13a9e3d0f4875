"""TopicWatch: a topic's identity from its id and partition count, and how long stale
metadata may hold records back."""

from __future__ import annotations

from monitor.ingest.topic_watch import MAX_METADATA_WAIT_S, TopicWatch


def test_a_new_topic_id_is_a_recreation_and_more_partitions_are_counted() -> None:
    w = TopicWatch({"preds": "id-a"})
    assert not w.observe("preds", "id-a", 3).recreated
    assert w.observe("preds", "id-b", 3).recreated  # same name, another log
    assert not w.observe("preds", "id-b", 3).recreated
    change = w.observe("preds", "id-b", 5)
    assert change.added == 2 and not change.recreated
    assert w.faults["partitions_added"] == 2
    assert not w.observe("preds", None, None).recreated  # no metadata yet: nothing known


def test_a_restart_by_the_offset_checks_is_learnt_not_taken_for_another() -> None:
    w = TopicWatch({"preds": "id-a"})
    w.restarted("preds", at=10.0)
    assert not w.observe("preds", "id-a", 3, fetched_at=9.0).recreated  # older: ignored
    assert not w.observe("preds", "id-b", 3, fetched_at=11.0).recreated  # learnt
    assert w.ids["preds"] == "id-b"
    assert w.observe("preds", "id-c", 3, fetched_at=12.0).recreated


def test_stale_metadata_holds_records_back_for_a_bounded_time() -> None:
    w = TopicWatch()
    assert not w.hold_back(age_s=1.0, limit_s=10.0, now=100.0)  # fresh
    assert w.hold_back(age_s=11.0, limit_s=10.0, now=100.0)  # a pause: wait for a refresh
    assert w.hold_back(age_s=20.0, limit_s=10.0, now=100.0 + MAX_METADATA_WAIT_S - 1)
    # metadata that never refreshes does not stop consumption for ever
    assert not w.hold_back(age_s=50.0, limit_s=10.0, now=100.0 + MAX_METADATA_WAIT_S)
    # fresh again, then stale again: a new wait starts
    assert not w.hold_back(age_s=1.0, limit_s=10.0, now=200.0)
    assert w.hold_back(age_s=11.0, limit_s=10.0, now=201.0)
