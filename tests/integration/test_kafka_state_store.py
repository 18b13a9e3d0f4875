"""Partition state in a compacted topic, against a real tansu broker.

tansu accepts ``cleanup.policy=compact`` at topic creation but does not report topic configs
and does not compact, so these tests check the property that must hold either way: the
reader returns the newest *complete* generation, whatever older or partial chunks remain.
"""

from __future__ import annotations

import os
import signal
import time
import zlib

import pytest
from kafka import KafkaProducer

from monitor.localbroker import LocalBroker
from monitor.state.kafka_store import KafkaStateStore

from .daemon_harness import wait_until

pytestmark = pytest.mark.integration


def _store(broker: LocalBroker, group: str = "g", chunk_bytes: int = 1000) -> KafkaStateStore:
    return KafkaStateStore(
        {"bootstrap_servers": [broker.bootstrap]}, group, chunk_bytes=chunk_bytes
    )


def _write_partial(
    broker: LocalBroker,
    store: KafkaStateStore,
    partition: int,
    generation: int,
    blob: bytes,
    chunks_written: int,
) -> None:
    """What a writer killed after ``chunks_written`` acknowledged chunks leaves behind."""
    size = store.chunk_bytes
    chunks = [blob[i : i + size] for i in range(0, len(blob), size)]
    producer = KafkaProducer(bootstrap_servers=[broker.bootstrap], acks="all")
    try:
        for i in range(chunks_written):
            producer.send(
                store.topic,
                key=f"{store.group_id}/{partition}/{generation % 2}/{i}".encode(),
                value=chunks[i],
                partition=partition % 2,
                headers=[
                    ("generation", str(generation).encode()),
                    ("chunk", f"{i}/{len(chunks)}".encode()),
                    ("crc", str(zlib.crc32(blob)).encode()),
                    ("size", str(len(blob)).encode()),
                ],
            )
        producer.flush()
    finally:
        producer.close()


def test_chunked_blob_round_trips_and_newest_generation_wins(broker: LocalBroker) -> None:
    writer = _store(broker)
    writer.ensure_topic(partitions=2)
    blobs = [os.urandom(5_500), os.urandom(3_200), b"", os.urandom(999)]
    try:
        for expected_gen, blob in enumerate(blobs, start=1):
            assert writer.store(4, blob) == expected_gen
            restored = _store(broker).restore(4)  # a fresh instance, as after a failover
            assert restored is not None
            assert (restored.generation, restored.blob) == (expected_gen, blob)
    finally:
        writer.close()


def test_partitions_and_groups_do_not_see_each_other(broker: LocalBroker) -> None:
    a, b = _store(broker, "a"), _store(broker, "b", chunk_bytes=700)
    for s in (a, b):
        s.ensure_topic(partitions=2)
    try:
        # 0 and 2 share state partition 0 of topic a-state
        a.store(0, b"zero" * 500)
        a.store(2, b"two" * 300)
        b.store(0, b"other group")
        assert _store(broker, "a").restore(0).blob == b"zero" * 500  # type: ignore[union-attr]
        assert _store(broker, "a").restore(2).blob == b"two" * 300  # type: ignore[union-attr]
        assert _store(broker, "a").restore(1) is None
        assert _store(broker, "b").restore(0).blob == b"other group"  # type: ignore[union-attr]
    finally:
        a.close()
        b.close()


def test_writer_killed_mid_generation_leaves_previous_generation(broker: LocalBroker) -> None:
    first = _store(broker)
    first.ensure_topic(partitions=2)
    good = os.urandom(4_000)
    try:
        assert first.store(1, good) == 1
        assert first.store(1, good[::-1]) == 2
    finally:
        first.close()
    # generation 3 dies after 2 of 5 chunks: generation 2 is still the latest complete
    _write_partial(broker, first, 1, 3, os.urandom(4_500), chunks_written=2)
    successor = _store(broker)
    restored = successor.restore(1)
    assert restored is not None
    assert (restored.generation, restored.blob) == (2, good[::-1])
    # the successor's next write must not reuse generation 2's slot: kill it too, half way
    _write_partial(broker, successor, 1, 5, os.urandom(4_500), chunks_written=3)
    again = _store(broker).restore(1)
    assert again is not None and (again.generation, again.blob) == (2, good[::-1])
    # and a completed write by the successor supersedes everything
    try:
        gen = successor.store(1, b"after failover")
    finally:
        successor.close()
    assert gen % 2 != 2 % 2 and gen > 3
    final = _store(broker).restore(1)
    assert final is not None and (final.generation, final.blob) == (gen, b"after failover")


def test_corrupt_chunk_fails_the_crc_and_is_not_restored(broker: LocalBroker) -> None:
    store = _store(broker)
    store.ensure_topic(partitions=2)
    try:
        store.store(0, b"a" * 2_500)
    finally:
        store.close()
    # generation 2 with every chunk present but a body that does not match its crc
    blob = b"b" * 2_500
    _write_partial(broker, store, 0, 2, blob, chunks_written=3)
    producer = KafkaProducer(bootstrap_servers=[broker.bootstrap], acks="all")
    try:
        producer.send(
            store.topic,
            key=b"g/0/0/1",
            value=b"X" * 1000,
            partition=0,
            headers=[
                ("generation", b"2"),
                ("chunk", b"1/3"),
                ("crc", str(zlib.crc32(blob)).encode()),
                ("size", b"2500"),
            ],
        )
        producer.flush()
    finally:
        producer.close()
    restored = _store(broker).restore(0)
    assert restored is not None and (restored.generation, restored.blob) == (1, b"a" * 2_500)


def test_reused_generation_overwriting_keys_is_judged_as_after_compaction(
    broker: LocalBroker,
) -> None:
    """A zombie writer reusing the newest generation's number overwrites one of its keys:
    compaction would leave that generation incomplete, so the reader must already judge it
    so (and fall back to the other slot) whether or not the broker compacted."""
    store = _store(broker)
    store.ensure_topic(partitions=2)
    older, newer = os.urandom(2_500), os.urandom(2_500)
    try:
        assert store.store(3, older) == 1
        assert store.store(3, newer) == 2
    finally:
        store.close()
    _write_partial(broker, store, 3, 2, os.urandom(2_200), chunks_written=1)
    restored = _store(broker).restore(3)
    assert restored is not None and (restored.generation, restored.blob) == (1, older)


def test_fenced_off_owner_cannot_outrank_or_overwrite_its_successor(broker: LocalBroker) -> None:
    """A zombie (an owner evicted while paused) keeps writing after the next owner
    restored: its later, higher-numbered generations must not win, nor may its keys
    overwrite the new owner's (what compaction would keep)."""
    first = _store(broker)
    first.ensure_topic(partitions=2)
    assert first.restore_many([0], group_generation=3)[0] == []
    assert first.owner(0) == (1, 3)
    first.store(0, b"first owner, before the pause" * 50)

    second = _store(broker)  # the next owner, in the next group generation
    got = second.restore_many([0], group_generation=4)[0][0]  # the newest complete one
    assert got.blob.startswith(b"first owner") and got.fence == 1
    assert second.owner(0) == (2, 4)

    # the zombie resumes and writes twice (both slots) with generation numbers above
    # everything the new owner has written so far
    first.store(0, b"zombie 1" * 50)
    first.store(0, b"zombie 2" * 50)
    assert _store(broker).restore(0).blob.startswith(b"zombie 2")  # nobody fenced it yet
    second.store(0, b"new owner" * 50)
    first.store(0, b"zombie 3" * 50)
    first.store(0, b"zombie 4" * 50)

    reader = _store(broker)
    best = reader.restore(0)
    assert best is not None
    assert best.blob == b"new owner" * 50
    assert (best.fence, best.group_generation) == (2, 4)
    # and the owner after it fences both
    third = _store(broker)
    ranked = third.restore_many([0], group_generation=5)[0]
    assert ranked[0].blob == b"new owner" * 50
    # every complete generation, best first (the fallbacks when the first is unusable)
    assert [s.fence for s in ranked] == sorted((s.fence for s in ranked), reverse=True)
    assert any(s.blob.startswith(b"zombie") for s in ranked[1:])
    assert third.owner(0) == (3, 5)


def test_equal_fences_are_ordered_by_group_generation(broker: LocalBroker) -> None:
    """Two owners that restored before either wrote take the same fence; the later
    group generation wins whatever the write order."""
    a, b = _store(broker), _store(broker)
    a.ensure_topic(partitions=2)
    a.restore_many([1], group_generation=7)
    b.restore_many([1], group_generation=8)
    assert a.owner(1)[0] == b.owner(1)[0] == 1
    b.store(1, b"generation 8")
    a.store(1, b"generation 7, later")
    a.store(1, b"generation 7, even later")
    assert _store(broker).restore(1).blob == b"generation 8"


def test_unchanged_keeps_only_partitions_nobody_else_wrote(broker: LocalBroker) -> None:
    """A partition given back after a rebalance is resumed from memory only when the
    state topic's records after this owner's last known one are all its own."""
    a = _store(broker)
    a.ensure_topic(partitions=2)
    a.restore_many([0, 1], group_generation=3)
    a.store(0, b"a0 first")
    a.store(1, b"a1 first")
    a.store(0, b"a0 second")
    # given back in the next generation, nobody else wrote: kept, with a new fence
    assert a.unchanged([0, 1], group_generation=4) == [0, 1]
    assert a.owner(0) == (2, 4) and a.owner(1) == (2, 4)
    a.store(0, b"a0 third", (1, 3))  # a hand-over taken under the old fence lands late
    assert a.unchanged([0], group_generation=5) == [0]  # its own writes do not count

    # partition 1 was owned by b in between (it restored and wrote): a must restore it
    b = _store(broker)
    assert b.restore_many([1], group_generation=6)[1][0].blob == b"a1 first"
    b.store(1, b"b1")
    assert a.unchanged([0, 1], group_generation=7) == [0]
    assert _store(broker).restore(1).blob == b"b1"
    a.store(0, b"a0 fourth")
    assert _store(broker).restore(0).blob == b"a0 fourth"


def test_writes_succeed_again_after_a_broker_stall_that_outlasted_the_writes(
    broker: LocalBroker,
) -> None:
    """A broker that stops answering (here: stopped) for longer than the store waits: the
    chunks of the failed write are dropped while it is away, and once it answers again
    the next write is acknowledged. (kafka-python 3's default idempotent producer never
    delivered again after dropping a batch: every later write of the state, the
    statistics and the exporter lease timed out.)"""
    store = KafkaStateStore(
        {"bootstrap_servers": [broker.bootstrap]}, "stall", chunk_bytes=1000, timeout_s=2.0
    )
    assert broker.pid is not None
    try:
        store.ensure_topic(partitions=1)
        assert store.store(0, b"a" * 3000) == 1
        os.killpg(broker.pid, signal.SIGSTOP)
        try:
            with pytest.raises(Exception, match=r"(?i)timeout|timed out"):
                store.store(0, b"b" * 3000)
            time.sleep(4.0)  # the dropped chunks' requests time out and expire meanwhile
        finally:
            os.killpg(broker.pid, signal.SIGCONT)
        written: list[bytes] = []

        def write() -> bool:
            blob = f"c{len(written)}".encode() * 1000
            try:
                store.store(0, blob)
            except Exception:
                return False
            written.append(blob)
            return True

        wait_until(write, 60, "a state write acknowledged after the broker answers again")
        reader = _store(broker, group="stall")
        try:
            got = reader.restore(0)
        finally:
            reader.close()
        assert got is not None and got.blob == written[-1]
    finally:
        store.close()
