"""Co-partitioning against a real tansu broker: the layout check and the group assignor."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer

from monitor.config import KafkaSettings
from monitor.ingest.assignor import CoPartitionAssignor, copartition_violations
from monitor.ingest.kafka import consumer_config
from monitor.ingest.layout import LayoutError, check_layout, partition_counts
from monitor.localbroker import LocalBroker
from tests.integration.daemon_harness import (
    DaemonProcess,
    base_config,
    run_monitor,
    wait_until,
    write_config,
)

pytestmark = pytest.mark.integration


def _settings(broker: LocalBroker, **kw: object) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers=broker.bootstrap, **kw)  # type: ignore[arg-type]


def test_partition_counts_read_from_broker_metadata(broker: LocalBroker) -> None:
    broker.create_topics(["p6"], partitions=6)
    broker.create_topics(["l4"], partitions=4)
    counts = partition_counts(_settings(broker), ["p6", "l4", "absent"])
    assert counts == {"p6": 6, "l4": 4, "absent": None}
    with pytest.raises(LayoutError, match=r"'p6' has 6 partitions but labels topic 'l4' has 4"):
        check_layout("p6", "l4", counts)
    check_layout("p6", "p6", counts)  # equal counts pass
    check_layout("p6", "absent", counts)  # a missing topic is not refused


def test_daemon_refuses_labels_topic_with_other_partition_count(
    broker: LocalBroker, tmp_path: Path, kafka_client: str
) -> None:
    broker.create_topics(["predictions"], partitions=6)
    broker.create_topics(["labels"], partitions=3)
    cfg = write_config(
        tmp_path / "monitor.toml",
        base_config(broker.bootstrap, tmp_path / "state", kafka={"client": kafka_client}),
    )
    # client-specific extra settings must not reach the (kafka-python) metadata check
    extra = '"fetch.wait.max.ms" = 50' if kafka_client == "confluent" else "fetch_min_bytes = 1"
    with cfg.open("a", encoding="utf-8") as f:
        f.write(f"\n[kafka.extra_consumer_config]\n{extra}\n")
    done = run_monitor(["run", "--config", str(cfg)], timeout=60)
    assert done.returncode == 1, done.stderr
    assert "cannot start" in done.stderr
    assert "'predictions' has 6 partitions but labels topic 'labels' has 3" in done.stderr
    assert "Traceback" not in done.stderr


def _group_member(broker: LocalBroker, group: str) -> KafkaConsumer:
    cfg = consumer_config(_settings(broker, group_id=group))
    cfg.update(session_timeout_ms=6_000, heartbeat_interval_ms=500, max_poll_interval_ms=10_000)
    cfg["partition_assignment_strategy"] = [CoPartitionAssignor]  # no range fallback
    consumer = KafkaConsumer(**cfg)
    consumer.subscribe(["preds", "labs"])
    return consumer


class _Polling:
    """Members polled each from its own thread, as each daemon polls its own consumer."""

    def __init__(self, members: list[KafkaConsumer]) -> None:
        self.members = members
        self._stop: dict[int, threading.Event] = {}
        self._threads: dict[int, threading.Thread] = {}
        for m in members:
            self._start(m)

    def _start(self, m: KafkaConsumer) -> None:
        stop = threading.Event()

        def loop() -> None:
            while not stop.is_set():
                m.poll(timeout_ms=200)

        t = threading.Thread(target=loop, daemon=True)
        self._stop[id(m)], self._threads[id(m)] = stop, t
        t.start()

    def leave(self, m: KafkaConsumer) -> None:
        self._stop[id(m)].set()
        self._threads[id(m)].join()
        m.close()
        self.members.remove(m)

    def close(self) -> None:
        for m in list(self.members):
            self.leave(m)

    def settle(self, total: int, timeout: float = 60.0) -> list[set[Any]]:
        """Wait until the assignment covers ``total`` topic-partitions without overlap and
        stays so for a second (a rebalance can be under way)."""
        deadline = time.monotonic() + timeout
        stable = 0
        owned: list[set[Any]] = []
        while time.monotonic() < deadline:
            owned = [set(m.assignment()) for m in self.members]
            if len(set().union(*owned)) == total and sum(len(o) for o in owned) == total:
                stable += 1
                if stable >= 5:
                    return owned
            else:
                stable = 0
            time.sleep(0.2)
        raise AssertionError(f"group did not settle: {[sorted(o) for o in owned]}")


def test_assignor_gives_each_member_the_same_partitions_of_both_topics(
    broker: LocalBroker,
) -> None:
    broker.create_topics(["preds", "labs"], partitions=6)
    group = _Polling([_group_member(broker, "copart") for _ in range(3)])
    try:
        owned = group.settle(total=12)
        numbers = []
        for o in owned:
            pairs = {(tp.topic, tp.partition) for tp in o}
            assert copartition_violations(pairs, ["preds", "labs"]) == set()
            numbers.append({tp.partition for tp in o})
        assert sorted(len(n) for n in numbers) == [2, 2, 2]  # balanced
        assert set().union(*numbers) == set(range(6))

        # one member leaves: the survivors keep what they had (sticky) and split the rest
        group.leave(group.members[2])
        after = group.settle(total=12)
        for before, now in zip(numbers[:2], after, strict=True):
            now_numbers = {tp.partition for tp in now}
            assert before <= now_numbers
            assert len(now_numbers) == 3
            pairs = {(tp.topic, tp.partition) for tp in now}
            assert copartition_violations(pairs, ["preds", "labs"]) == set()
    finally:
        group.close()


_ASSIGNED = re.compile(r"monitor\.ingest\.\w+: assigned (\[.*\])\s*$", re.M)


def _last_assignment(daemon: DaemonProcess) -> set[tuple[str, int]] | None:
    found = _ASSIGNED.findall(daemon._this_log())
    if not found:
        return None
    pairs = re.findall(r"'([^'\[]+)\[(\d+)\]'", found[-1])
    return {(t, int(p)) for t, p in pairs}


def test_two_daemons_in_one_group_own_the_same_partitions_of_both_topics(
    broker: LocalBroker, tmp_path: Path, kafka_client: str
) -> None:
    """Two daemons of one client in one group (kafka-python: the co-partition assignor;
    confluent: librdkafka's range): each owns the same partition numbers of both topics.

    Mixing the clients in one group needs the broker to pick the protocol both support
    (range); Apache Kafka does, tansu answers "Inconsistent group protocol", so that mix is
    not tested here (docs/scale-out.md)."""
    broker.create_topics(["predictions", "labels"], partitions=4)
    daemons = []
    for i in range(2):
        cfg = base_config(
            broker.bootstrap,
            tmp_path / f"state-{i}",
            client=kafka_client,
            state={"single_instance": False},
        )
        toml = write_config(tmp_path / f"monitor-{i}.toml", cfg)
        daemons.append(DaemonProcess(toml, tmp_path / f"monitor-{i}.log"))
    try:
        for d in daemons:
            d.start()

        def settled() -> bool:
            owned = [_last_assignment(d) for d in daemons]
            if any(not o for o in owned):
                return False
            union = set().union(*owned)  # type: ignore[arg-type]
            return len(union) == 8 and sum(len(o) for o in owned) == 8  # type: ignore[arg-type]

        wait_until(settled, 90, lambda: "\n".join(d.log_tail() for d in daemons))
        for d in daemons:
            owned = _last_assignment(d)
            assert owned and copartition_violations(owned, ["predictions", "labels"]) == set()
            assert "not co-partitioned" not in d._this_log()
    finally:
        for d in daemons:
            d.close()
