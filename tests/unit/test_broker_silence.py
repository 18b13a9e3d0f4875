"""A broker that stops answering keeps its connections: librdkafka reports it "UP" until a
request times out. ``BrokerSilence`` reads the statistics for a broker whose waiting
requests get no answer, and only that."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import _missing

try:
    import confluent_kafka  # noqa: F401
except ImportError:  # (the module under test needs the client)
    _missing("confluent-kafka not installed; install with: pip install -e '.[test]'")

from monitor.ingest.confluent import BrokerSilence


def _broker(rx: int, waiting: int = 1, state: str = "UP", queued: int = 0) -> dict[str, Any]:
    return {"state": state, "rx": rx, "waitresp_cnt": waiting, "outbuf_cnt": queued}


def test_a_broker_answering_is_never_silent() -> None:
    silence = BrokerSilence()
    for second in range(100):
        assert silence.observe({"b1": _broker(rx=second)}, now=float(second)) is None


def test_waiting_requests_unanswered_count_from_the_last_answer() -> None:
    silence = BrokerSilence()
    assert silence.observe({"b1": _broker(rx=7)}, now=10.0) is None
    assert silence.observe({"b1": _broker(rx=7)}, now=11.0) == pytest.approx(1.0)
    assert silence.observe({"b1": _broker(rx=7)}, now=25.5) == pytest.approx(15.5)
    assert silence.observe({"b1": _broker(rx=8)}, now=26.0) is None  # it answered


def test_queued_requests_count_as_waiting() -> None:
    silence = BrokerSilence()
    silence.observe({"b1": _broker(rx=3, waiting=0, queued=2)}, now=0.0)
    assert silence.observe({"b1": _broker(rx=3, waiting=0, queued=2)}, now=4.0) == 4.0


def test_a_broker_asked_nothing_is_not_silent() -> None:
    """An idle connection's ``rx`` stands still; a request sent later counts from the last
    statistics that showed nothing waiting (at most one interval early)."""
    silence = BrokerSilence()
    for second in range(10):
        assert silence.observe({"b1": _broker(rx=5, waiting=0)}, now=float(second)) is None
    assert silence.observe({"b1": _broker(rx=5)}, now=10.0) == pytest.approx(1.0)
    assert silence.observe({"b1": _broker(rx=5)}, now=13.0) == pytest.approx(4.0)


def test_the_longest_silence_of_brokers_that_are_up() -> None:
    silence = BrokerSilence()
    silence.observe({"b1": _broker(rx=1), "b2": _broker(rx=1), "b3": _broker(rx=1)}, now=0.0)
    got = silence.observe(
        {"b1": _broker(rx=2), "b2": _broker(rx=1), "b3": _broker(rx=1, state="CONNECT")},
        now=6.0,
    )
    assert got == pytest.approx(6.0)  # b2; b3 is down (its own state says so), b1 answers
    # a broker that went down and came back starts afresh
    silence.observe({"b2": _broker(rx=1, state="DOWN")}, now=7.0)
    assert silence.observe({"b2": _broker(rx=1)}, now=8.0) is None
    assert silence.observe({"b2": _broker(rx=1)}, now=9.0) == pytest.approx(1.0)
