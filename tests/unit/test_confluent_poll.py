"""The confluent source's per-poll bookkeeping: each partition's first and last message of
a poll, found in C-level passes (keyed by topic alone when one partition number is all
there is), equal what a loop over the messages gives."""

from __future__ import annotations

from itertools import compress

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import _missing

try:
    from confluent_kafka import Message
except ImportError:  # (the whole module needs the client)
    _missing("confluent-kafka not installed; install with: pip install -e '.[test]'")

from monitor.config import KafkaSettings
from monitor.ingest import confluent
from monitor.ingest.confluent import ConfluentSource, _partition_ends, _selected

MESSAGES = st.lists(
    st.tuples(st.sampled_from(["predictions", "labels"]), st.integers(0, 2)), min_size=1
)


def _reference(msgs: list[tuple[str, int]]) -> dict[tuple[bool, int], tuple[int, int]]:
    """(of the first message's topic, partition) -> (first index, last index), by a loop."""
    out: dict[tuple[bool, int], tuple[int, int]] = {}
    for i, (topic, part) in enumerate(msgs):
        key = (topic == msgs[0][0], part)
        out[key] = (out[key][0] if key in out else i, i)
    return out


@settings(max_examples=200, deadline=None)
@given(msgs=MESSAGES, one_partition=st.booleans())
def test_each_partitions_first_and_last_message_as_a_loop_finds_them(
    msgs: list[tuple[str, int]], one_partition: bool
) -> None:
    if one_partition:
        msgs = [(t, msgs[0][1]) for t, _ in msgs]
    sel = np.array([t == msgs[0][0] for t, _ in msgs])
    parts = [p for _, p in msgs]
    assert _partition_ends(sel, parts) == _reference(msgs)
    if sel.all():  # a poll of one topic passes no flags
        assert _partition_ends(None, parts) == _reference(msgs)


@settings(max_examples=200, deadline=None)
@given(runs=st.lists(st.integers(1, 40), min_size=1, max_size=30), first=st.booleans())
def test_a_kinds_values_cut_out_of_runs_are_those_of_a_test_per_message(
    runs: list[int], first: bool
) -> None:
    """Runs of one topic (long, as librdkafka queues them, or alternating message by
    message): each kind's values are the messages of its topic, in order."""
    sel = np.concatenate([np.full(k, (j % 2 == 0) == first) for j, k in enumerate(runs)])
    values = [str(i).encode() for i in range(sel.shape[0])]
    for mine in (True, False):
        want = list(compress(values, [bool(x) is mine for x in sel]))
        assert _selected(values, sel, mine) == want


class _Queued:
    """librdkafka's local queue as ``consume`` hands it out (real ``Message`` objects)."""

    def __init__(self, msgs: list[Message]) -> None:
        self.msgs = msgs

    def consume(self, n: int, timeout: float) -> list[Message]:
        out, self.msgs = self.msgs[:n], self.msgs[n:]
        return out

    def poll(self, timeout: float) -> None:
        return None

    def subscribe(self, topics: list[str], **callbacks: object) -> None:
        pass


@pytest.mark.parametrize("partitions", [(0,), (0, 1)])
def test_poll_splits_by_topic_and_advances_each_partition(
    partitions: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Values per kind in order, the offset after each partition's last message, and a
    client's reset (a first record below the expected position) reported once."""
    monkeypatch.setattr(confluent, "Consumer", lambda conf: _Queued([]))
    resumed: list[tuple[str, int, int, int]] = []
    src = ConfluentSource(
        KafkaSettings(max_poll_records=1000),
        dict,
        on_resume=lambda t, p, was, r: resumed.append((t, p, was, r.offset)),
    )
    msgs, expect = [], {"predictions": [], "labels": []}
    for i in range(60):
        topic = "predictions" if i % 3 else "labels"
        part = partitions[i % len(partitions)]
        value = f"{topic}-{part}-{i}".encode()
        msgs.append(Message(topic=topic, partition=part, offset=10 + i, value=value))
        expect[topic].append(value)
    src._position = {("labels", partitions[0]): 50}  # the client went back below this
    src.consumer = _Queued(msgs)
    out = src.poll(100)
    assert {k: b.values for k, b in out.items()} == expect
    for kind, batch in out.items():
        want = {}
        for i, m in enumerate(msgs):
            if m.topic() == kind:
                want[f"{kind}:{m.partition()}"] = m.offset() + 1
                assert batch.origin(batch.values.index(m.value())) == (kind, m.partition(), 10 + i)
        assert batch.next_offsets == want
    assert [(t, p, was) for t, p, was, _ in resumed] == [("labels", partitions[0], 50)]
    assert src._position[("labels", partitions[0])] == max(
        m.offset() + 1 for m in msgs if (m.topic(), m.partition()) == ("labels", partitions[0])
    )


@pytest.mark.parametrize("partitions", [(0,), (0, 1)])
def test_poll_of_one_topic_hands_out_every_value_in_order(
    partitions: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A poll whose messages are all of one topic (librdkafka queues long runs of one
    partition): one batch, the values as they came, each partition's next offset."""
    monkeypatch.setattr(confluent, "Consumer", lambda conf: _Queued([]))
    src = ConfluentSource(KafkaSettings(max_poll_records=1000), dict)
    msgs = [
        Message(topic="labels", partition=partitions[i % len(partitions)], offset=5 + i,
                value=f"l{i}".encode())
        for i in range(40)
    ]  # fmt: skip
    src.consumer = _Queued(msgs)
    out = src.poll(100)
    assert list(out) == ["labels"]
    batch = out["labels"]
    assert batch.values == [m.value() for m in msgs]
    assert batch.next_offsets == {
        f"labels:{p}": max(m.offset() for m in msgs if m.partition() == p) + 1 for p in partitions
    }
    assert batch.origin(7) == ("labels", msgs[7].partition(), 12)
