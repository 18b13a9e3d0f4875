"""Dead letters are a side path: nothing that goes wrong there may stop consumption.

- A full disk while bad records arrive: the dead-letter write fails (``RLIMIT_FSIZE``
  lowered on the running daemon with ``prlimit(2)``: ``EFBIG``, as ``ENOSPC`` on a full
  disk — no tmpfs needed, so it runs unprivileged), is counted, and the daemon keeps
  consuming and stays ready — also when restarted onto the still-full disk.
- The dead-letter file sits where ``state.dead_letter_file`` says and is rotated under
  ``state.dead_letter_file_max_bytes``.
- A record too large for the dead-letter topic (an ``oversize`` reject of 2 MB) goes
  there truncated with its size in a header; one the producer refuses even so goes as a
  placeholder: the spool never blocks head-of-line and readiness never flaps.
"""

from __future__ import annotations

import base64
import resource
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from kafka import KafkaProducer

from monitor.config import KafkaSettings
from monitor.engine.records import Rejection
from monitor.ingest.dead_letter_topic import TopicDeadLetter
from monitor.ingest.deadletter import MAX_VALUE_BYTES
from monitor.localbroker import LocalBroker

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

FSIZE_LIMIT = 256 * 1024


def _good(n: int, start: int = 0) -> list[tuple[str, tuple[bytes, bytes | None]]]:
    now = int(time.time() * 1000)
    return [
        ("predictions", (f"g{i}".encode(), encode({"id": f"g{i}", "ts": now, "model": "fraud",
                                                   "version": "v1", "score": 0.7})))
        for i in range(start, start + n)
    ]  # fmt: skip


def _bad(n: int, size: int, start: int = 0) -> list[tuple[str, tuple[bytes, bytes | None]]]:
    return [
        ("predictions", (b"b", b"{not json %d " % i + b"z" * size)) for i in range(start, start + n)
    ]


def _faults(daemon: DaemonProcess) -> dict[str, float]:
    return daemon.scrape().by_label("mlmon_fault_events_total", "event")


class ReadinessProbe(threading.Thread):
    """Polls /readyz every 50 ms and records every answer that was not 200."""

    def __init__(self, daemon: DaemonProcess) -> None:
        super().__init__(daemon=True)
        self.d = daemon
        self.bad: list[tuple[float, int, bytes]] = []
        self.polls = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.05):
            try:
                code, body = self.d.get("/readyz", timeout=5)
            except OSError as err:
                code, body = 0, repr(err).encode()
            self.polls += 1
            if code != 200:
                self.bad.append((time.time(), code, body))


def test_a_full_disk_with_bad_records_never_stops_consumption(
    broker: LocalBroker, tmp_path: Path
) -> None:
    broker.create_topics(["predictions", "labels"])
    cfg = base_config(broker.bootstrap, tmp_path / "state", state={"checkpoint_interval": "1s"})
    daemon = DaemonProcess(write_config(tmp_path / "c.toml", cfg), tmp_path / "daemon.log")
    try:
        daemon.start()
        daemon.wait_ready()
        produce(broker.bootstrap, _good(50))
        daemon.wait_consumed({"predictions": 50})
        assert daemon.log_path.stat().st_size < FSIZE_LIMIT // 2  # the log stays writable
        _, hard = resource.prlimit(daemon.pid, resource.RLIMIT_FSIZE)
        resource.prlimit(daemon.pid, resource.RLIMIT_FSIZE, (FSIZE_LIMIT, hard))
        # 100 bad records of 5 KB: their dead letters need twice what the disk has left
        produce(broker.bootstrap, _bad(100, 5000) + _good(50, 50))
        daemon.wait_consumed({"predictions": 200})
        wait_until(lambda: _faults(daemon).get("dead_letter_lost", 0) > 0, 30, daemon.log_tail)
        faults = _faults(daemon)
        assert faults.get("dead_letter_write_failed", 0) >= 1, faults
        assert daemon.get("/readyz")[0] == 200, daemon.log_tail()
        assert "dead letters: writing" in daemon._this_log(), daemon.log_tail()
        assert "File too large" in daemon._this_log(), daemon.log_tail()
        m = daemon.scrape()
        assert m.get("mlmon_invalid_records_total", topic="predictions", reason="not_json") == 100
        assert daemon.terminate() == 0, daemon.log_tail()

        # restarted onto the still-full disk: the same records again, the same outcome
        daemon.start()
        resource.prlimit(daemon.pid, resource.RLIMIT_FSIZE, (FSIZE_LIMIT, hard))
        daemon.wait_ready()
        produce(broker.bootstrap, _bad(100, 5000, 100) + _good(50, 100))
        daemon.wait_consumed({"predictions": 350})
        assert daemon.running() and daemon.get("/readyz")[0] == 200, daemon.log_tail()
        assert daemon.terminate() == 0, daemon.log_tail()
    finally:
        daemon.close()


def test_the_dead_letter_file_is_where_configured_and_rotated(
    broker: LocalBroker, tmp_path: Path
) -> None:
    broker.create_topics(["predictions", "labels"])
    path = tmp_path / "dead-letters" / "monitor-dlq.jsonl"
    cfg = base_config(
        broker.bootstrap,
        tmp_path / "state",
        state={"dead_letter_file": str(path), "dead_letter_file_max_bytes": 65536,
               "dead_letter_file_keep": 2},
    )  # fmt: skip
    daemon = DaemonProcess(write_config(tmp_path / "c.toml", cfg), tmp_path / "daemon.log")
    try:
        daemon.start()
        daemon.wait_ready()
        produce(broker.bootstrap, _bad(3000, 100))
        daemon.wait_consumed({"predictions": 3000})
        assert daemon.terminate() == 0, daemon.log_tail()
    finally:
        daemon.close()
    files = sorted(p.name for p in path.parent.iterdir())
    assert files == ["monitor-dlq.jsonl", "monitor-dlq.jsonl.1", "monitor-dlq.jsonl.2"], files
    assert all((path.parent / f).stat().st_size <= 65536 for f in files)
    assert not (tmp_path / "state" / "dead-letter.jsonl").exists()
    last = orjson.loads(path.read_bytes().splitlines()[-1])
    assert base64.b64decode(last["value_b64"]).startswith(b"{not json 2999 ")


def _headers(rec: Any) -> dict[str, bytes]:
    return dict(rec.headers)


def test_an_oversize_dead_letter_never_blocks_the_topic(
    broker: LocalBroker, tmp_path: Path, kafka_client: str
) -> None:
    """Reported: a 2 MB record (rejected as oversize) could never be produced, blocked
    the spool across restarts (15 spooled, 0 delivered) and /readyz flapped."""
    broker.create_topics(["predictions", "labels", "dlq"])
    cfg = base_config(
        broker.bootstrap, tmp_path / "state", client=kafka_client,
        kafka={"dead_letter_topic": "dlq"}, state={"checkpoint_interval": "1s"},
    )  # fmt: skip
    daemon = DaemonProcess(write_config(tmp_path / "c.toml", cfg), tmp_path / "daemon.log")
    big = b'{"id": "huge", "pad": "' + b"q" * (2 << 20) + b'"}'
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, max_request_size=4 << 20)
    probe = ReadinessProbe(daemon)
    try:
        daemon.start()
        daemon.wait_ready()
        probe.start()
        for i in range(15):  # interleaved with small bad records and good ones
            producer.send("predictions", key=b"h", value=big)
            producer.send("predictions", key=b"b", value=b"{not json %d" % i)
        producer.flush(timeout=60)
        produce(broker.bootstrap, _good(10))
        daemon.wait_consumed({"predictions": 40}, timeout=120)

        def delivered() -> bool:
            return len(read_topic(broker.bootstrap, "dlq")) == 30

        wait_until(delivered, 60, daemon.log_tail)
        m = daemon.scrape()
        assert m.get("mlmon_dead_letter_spooled") == 0, daemon.log_tail()
        probe.stop.set()
        probe.join(10)
        assert probe.polls > 10 and not probe.bad, probe.bad[:5]
        assert daemon.terminate() == 0, daemon.log_tail()
    finally:
        probe.stop.set()
        producer.close(timeout=10)
        daemon.close()
    got = read_topic(broker.bootstrap, "dlq")
    huge = [r for r in got if _headers(r)["mlmon-reason"] == b"oversize"]
    assert len(huge) == 15
    for rec in huge:
        assert _headers(rec)["mlmon-truncated"] == str(len(big)).encode()
        assert rec.value == big[:MAX_VALUE_BYTES]
    spool = tmp_path / "state" / "dead-letter.spool.jsonl"
    assert not spool.exists() or spool.stat().st_size == 0


def test_a_record_the_producer_refuses_even_cut_goes_as_a_placeholder(
    broker: LocalBroker, tmp_path: Path
) -> None:
    """A producer (or broker) whose size limit is below even the cut value: the record
    goes without its value, never into the spool, and the next ones are not held up."""
    broker.create_topics(["dlq"])
    k = KafkaSettings(bootstrap_servers=broker.bootstrap)

    def small_producer() -> KafkaProducer:
        return KafkaProducer(bootstrap_servers=k.bootstrap_servers, max_request_size=64 * 1024)

    sink = TopicDeadLetter(small_producer, "dlq", tmp_path / "spool.jsonl", 1 << 20)
    try:
        wait_until(sink.connected, 30, "dead-letter producer not connected")
        rejected = [
            Rejection("oversize", "big", b"w" * (300 * 1024), "predictions", 0, 0),
            Rejection("not_json", "bad", b"{x", "predictions", 0, 1),
        ]
        sink.write(rejected)
        sink.flush()
        assert sink.spooled == 0 and sink.error is None
        assert sink.faults["dead_letter_placeholder"] == 1
    finally:
        sink.close()
    got = {_headers(r)["mlmon-source"]: r for r in read_topic(broker.bootstrap, "dlq")}
    assert set(got) == {b"predictions/0/0", b"predictions/0/1"}
    assert got[b"predictions/0/0"].value == b""
    assert _headers(got[b"predictions/0/0"])["mlmon-truncated"] == str(300 * 1024).encode()
    assert got[b"predictions/0/1"].value == b"{x"
