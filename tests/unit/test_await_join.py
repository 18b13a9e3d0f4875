"""``kafka_compat.await_join``'s choice of when to wait, over the coordinator state it
reads (the real client's join is exercised with a broker in
tests/integration/test_topic_recreated.py; a join left in flight with ``need_rejoin()``
false, the case below, is rare there and hard to provoke)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from monitor.kafka_compat import await_join


@dataclass
class _Coordinator:
    unknown: bool = False
    rejoin: bool = False
    _join_task: object | None = None
    calls: list[str] = field(default_factory=list)

    def coordinator_unknown(self) -> bool:
        return self.unknown

    def need_rejoin(self) -> bool:
        return self.rejoin

    def request_rejoin(self) -> None:
        self.calls.append("request_rejoin")
        self.rejoin = True

    def poll(self, timeout_ms: int) -> bool:
        self.calls.append(f"poll {timeout_ms}")
        return True


@pytest.mark.parametrize(
    ("state", "awaited", "calls"),
    [
        ({}, False, []),  # a stable member: nothing to wait for
        ({"unknown": True, "rejoin": True}, False, []),  # no coordinator: the poll's timeout
        ({"rejoin": True}, True, ["poll 5000"]),  # a join due
        ({"rejoin": True, "_join_task": object()}, True, ["poll 5000"]),  # due, in flight
        # in flight, no longer "needed": no poll would await it without the request
        ({"_join_task": object()}, True, ["request_rejoin", "poll 5000"]),
    ],
)
def test_a_join_is_awaited_when_due_or_in_flight(
    state: dict[str, object], awaited: bool, calls: list[str]
) -> None:
    coordinator = _Coordinator(**state)  # type: ignore[arg-type]
    assert await_join(SimpleNamespace(_coordinator=coordinator), 5000) is awaited
    assert coordinator.calls == calls


def test_a_consumer_without_a_coordinator_is_left_alone() -> None:
    assert await_join(SimpleNamespace(), 5000) is False
