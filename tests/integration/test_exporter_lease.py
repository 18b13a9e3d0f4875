"""The exporter lease on a real tansu broker: one holder at a time, a holder that stops
renewing (paused) stops exporting before anyone else starts, failover within the lease
plus one renewal interval, and a clean release hands over at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from monitor.localbroker import LocalBroker
from monitor.scale.lease import ExporterLease, LeaseLog

pytestmark = pytest.mark.integration

LEASE_S = 2.0
GROUP = "lease-test"


class Member:
    """One instance's lease, ticked by its own thread unless paused."""

    def __init__(self, broker: LocalBroker) -> None:
        client = {"bootstrap_servers": [broker.bootstrap]}
        self.lease = ExporterLease(client, GROUP, LEASE_S, eligible=lambda: True)
        self.paused = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.lease.run, args=(self.stop,), daemon=True)
        self.thread.start()
        tick = self.lease.tick
        self.lease.tick = lambda: None if self.paused.is_set() else tick()  # type: ignore[method-assign]

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.lease.close()


@pytest.fixture
def members(broker: LocalBroker) -> Iterator[list[Member]]:
    ExporterLease(
        {"bootstrap_servers": [broker.bootstrap]}, GROUP, LEASE_S, lambda: True
    ).ensure_topic()
    made = [Member(broker) for _ in range(3)]
    yield made
    for m in made:
        m.close()


def holders(members: list[Member]) -> list[int]:
    return [i for i, m in enumerate(members) if m.lease.valid()]


def watch(members: list[Member], seconds: float) -> list[list[int]]:
    """Who holds the lease, sampled every 20 ms; never two at once."""
    seen = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        now = holders(members)
        assert len(now) <= 1, now
        seen.append(now)
        time.sleep(0.02)
    return seen


def test_one_holder_failover_within_the_lease_and_no_overlap(members: list[Member]) -> None:
    seen = watch(members, 4.0)
    assert seen[-1] and all(h == seen[-1] for h in seen[-20:])  # one settled holder
    first = seen[-1][0]
    assert members[first].lease.acquired == 1

    # the holder is paused (SIGSTOP): it stops on its own, another takes over
    members[first].paused.set()
    paused_at = time.monotonic()
    took_over = None
    while took_over is None:
        now = holders(members)
        assert len(now) <= 1, now
        if now and now[0] != first:
            took_over = time.monotonic() - paused_at
        assert time.monotonic() - paused_at < 10, "nobody took over"
        time.sleep(0.01)
    # expiry is measured from the last renewal read, at most one interval before the pause
    assert took_over <= LEASE_S + 3 * members[first].lease.interval + 0.5, took_over
    second = holders(members)[0]

    # the paused holder resumes: the log says it lost, it never exports again
    members[first].paused.clear()
    seen = watch(members, 2.0)
    assert all(h == [second] for h in seen)

    # a clean release hands over without waiting for the lease to run out
    members[second].paused.set()
    members[second].lease.release()
    released_at = time.monotonic()
    while not [h for h in holders(members) if h != second]:
        assert time.monotonic() - released_at < LEASE_S, "release was not taken at once"
        time.sleep(0.01)


def test_lease_log_first_claim_wins_and_renewals_are_authoritative() -> None:
    log = LeaseLog()
    assert log.expired(0.0, 1.0)
    log.apply(b'{"op": "claim", "epoch": 1, "holder": "a", "seq": 1}', 0.0)
    log.apply(b'{"op": "claim", "epoch": 1, "holder": "b", "seq": 1}', 0.1)  # lost the race
    assert (log.epoch, log.holder, log.seq, log.seen_at, log.last) == (1, "a", 1, 0.0, "a/1")
    assert not log.expired(0.9, 1.0) and log.expired(1.0, 1.0)
    log.apply(b'{"op": "renew", "epoch": 0, "holder": "c", "seq": 9}', 0.5)  # stale
    # b read a's claim and claims epoch 2 after it, but a's renewal landed first
    log.apply(b'{"op": "renew", "epoch": 1, "holder": "a", "seq": 2}', 0.8)
    log.apply(b'{"op": "claim", "epoch": 2, "holder": "b", "seq": 2, "after": "a/1"}', 0.85)
    assert (log.epoch, log.holder, log.seq, log.seen_at) == (1, "a", 2, 0.8)
    log.apply(b"not json", 0.9)
    log.apply(b'{"op": "claim"}', 0.9)
    assert log.malformed == 2 and log.holder == "a"
    log.apply(b'{"op": "release", "epoch": 1, "holder": "b", "seq": 3}', 1.0)  # not the holder
    assert log.holder == "a"
    log.apply(b'{"op": "release", "epoch": 1, "holder": "a", "seq": 3}', 1.0)
    assert log.holder is None and log.expired(1.0, 1.0)
    log.apply(b'{"op": "claim", "epoch": 2, "holder": "b", "seq": 7, "after": "a/3"}', 1.1)
    assert (log.epoch, log.holder) == (2, "b")
