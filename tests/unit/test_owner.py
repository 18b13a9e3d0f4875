"""The daemon's owner strategies: one consume loop applies each poll through the owner
(one engine for every partition, or one engine per partition number), and in
partitioned mode history, trends and the causes in alerts read the global view's merged
rows: the same figures one instance gives over the same records."""

from __future__ import annotations

import math
import time
from dataclasses import astuple
from pathlib import Path
from typing import Any

import orjson
import pytest

from monitor.app import Daemon, SingleOwner
from monitor.config import settings_from_mapping
from monitor.engine.models import WindowSpec
from monitor.engine.partition import ALL, Partition
from monitor.ingest.deadletter import FileDeadLetter
from monitor.ingest.pipeline import RawBatch
from monitor.insight import key_metrics
from monitor.scale.partitioned import GroupOwner
from monitor.scale.partitioned_ingest import PartitionedIngest
from monitor.synthetic import binary_traffic
from monitor.wiring import build_pipeline

PARTITIONS = 3
TOLERANCE = 1e-9  # relative: sums over partitions add in another order than one engine's


def _settings(tmp_path: Path, mode: str):  # type: ignore[no-untyped-def]
    return settings_from_mapping(
        {
            "kafka": {"bootstrap_servers": "127.0.0.1:9"},  # nothing listens: never connected
            "scale": {"mode": mode},
            "http": {"port": 0},
            "state": {"dir": str(tmp_path / mode)},
            "evaluation": {"bucket_width": "1m"},
            "models": [
                {
                    "name": "fraud",
                    "threshold": 0.5,
                    "windows": [{"size": "1h"}, {"size": "1d"}],
                    "slices": [{"dimensions": ["country"]}],
                }
            ],
        }
    )


def _records(now_ms: int) -> list[tuple[str, int, bytes]]:
    """(kind, partition, value) in log order: two versions over the last three hours, a
    label beside its prediction's partition (co-partitioned by id)."""
    out: list[tuple[int, str, int, bytes]] = []
    start = now_ms - 3 * 3_600_000
    for seed, version in ((1, "v1"), (2, "v2")):
        t = binary_traffic(3000, seed=seed, start_ms=start, rate_per_s=0.3, version=version)
        part = {p["id"]: i % PARTITIONS for i, p in enumerate(t.predictions)}
        for i, p in enumerate(t.predictions):
            p["segments"] = {"country": ("US", "BR", "DE")[(i * 7 + seed) % 3]}
            out.append((int(p["ts"]), "predictions", part[p["id"]], orjson.dumps(p)))
        out += [(int(x["ts"]), "labels", part[x["id"]], orjson.dumps(x)) for x in t.labels]
    out.sort(key=lambda e: (e[0], e[1] == "labels"))
    return [(kind, p, value) for _, kind, p, value in out]


def _mid_quarter(now_ms: int) -> int:
    """The latest time at or before ``now_ms`` half way through a quarter hour.

    Each engine rolls minute rows up every quarter hour, at the time its own events have
    reached: a high quantile of its recent event times, which lags the stream's end by
    more in a partition (a third of the events) than in one instance. A stream ending
    half way through a quarter hour keeps every engine's roll-up on the same side of the
    boundary, so both modes hold the same tiers and history has the same points."""
    quarter = 900_000
    return now_ms - (now_ms - quarter // 2) % quarter


class _Polls:
    """A source handing out prepared polls, in order (what the loop asks of a source)."""

    def __init__(self, polls: list[Any]) -> None:
        self.polls = polls

    def poll(self, timeout_ms: int) -> Any:
        return self.polls.pop(0)


def _batch(values: list[bytes], topic: str, partition: int) -> RawBatch:
    return RawBatch(values, lambda i: (topic, partition, i), {f"{topic}:{partition}": 1})


def _single(tmp_path: Path, records: list[tuple[str, int, bytes]]) -> Daemon:
    daemon = Daemon(_settings(tmp_path, "single"))
    assert isinstance(daemon.owner, SingleOwner) and daemon.unit.number == ALL
    daemon.owner.start(FileDeadLetter(tmp_path / "single-dl.jsonl"))
    polls = []
    for i in range(0, len(records), 500):  # one poll: each kind's records of 500
        chunk = records[i : i + 500]
        polls.append(
            {
                kind: _batch([v for k, _, v in chunk if k == kind], kind, 0)
                for kind in ("predictions", "labels")
            }
        )
    source = _Polls(polls)
    while source.polls:
        assert daemon._poll_and_apply(source)
    return daemon


def _partitioned(tmp_path: Path, records: list[tuple[str, int, bytes]]) -> Daemon:
    daemon = Daemon(_settings(tmp_path, "partitioned"), owner=GroupOwner)
    owner = daemon.owner
    assert isinstance(owner, GroupOwner)
    sink = FileDeadLetter(tmp_path / "partitioned-dl.jsonl")
    template = build_pipeline(daemon.settings, daemon._new_engine(), sink, lock=daemon.lock)
    owner._ingest = PartitionedIngest(template, sink, daemon.clock.now_ms, daemon.lock)
    owner.parts = {p: Partition(p, daemon._new_engine()) for p in range(PARTITIONS)}
    polls = []
    for i in range(0, len(records), 500):
        chunk = records[i : i + 500]
        poll: dict[tuple[str, int], RawBatch] = {}
        for kind in ("predictions", "labels"):
            for p in range(PARTITIONS):
                values = [v for k, q, v in chunk if k == kind and q == p]
                if values:
                    poll[kind, p] = _batch(values, kind, p)
        polls.append(poll)
    source = _Polls(polls)
    while source.polls:
        assert daemon._poll_and_apply(source)
    return daemon


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=TOLERANCE, abs_tol=1e-12)


def _same_series(one: Any, other: Any) -> None:
    assert (one.model, one.version, one.slice, one.metric, one.point_ms, one.first_seen_ms) == (
        other.model, other.version, other.slice, other.metric, other.point_ms,
        other.first_seen_ms,
    )  # fmt: skip
    assert len(one.points) == len(other.points) > 0
    for p, q in zip(one.points, other.points, strict=True):
        for a, b in zip(astuple(p), astuple(q), strict=True):
            if isinstance(a, float) or isinstance(b, float):
                assert _close(float(a), float(b)), (one.metric, p, q)
            else:
                assert a == b, (one.metric, p, q)


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> tuple[Daemon, Daemon]:
    tmp = tmp_path_factory.mktemp("owner")
    records = _records(_mid_quarter(int(time.time() * 1000)))
    single, partitioned = _single(tmp, records), _partitioned(tmp, records)
    for d in (single, partitioned):
        assert d.evaluate_now() is not None
    return single, partitioned


def test_the_consume_loop_applies_each_poll_through_either_owner(
    daemons: tuple[Daemon, Daemon],
) -> None:
    single, partitioned = daemons
    assert isinstance(partitioned.owner, GroupOwner)
    one = single.engine.records
    parts = [e.records for e in partitioned.engines()]
    assert len(parts) == PARTITIONS and all(sum(r.values()) for r in parts)
    assert sum(one.values()) > 0
    for key, n in one.items():
        assert sum(r[key] for r in parts) == n, key
    assert single.offsets == {"predictions:0": 1, "labels:0": 1}
    assert partitioned.owner.parts[1].offsets == {"predictions:1": 1, "labels:1": 1}


def test_partitioned_history_equals_one_instance(daemons: tuple[Daemon, Daemon]) -> None:
    single, partitioned = daemons
    now = int(time.time() * 1000)
    for version, slice_label, width in (
        ("v1", "all", None),
        ("v2", "all", 3_600_000),
        ("v1", "country=BR", 900_000),
    ):
        found = [
            d.insight.history("fraud", version, slice_label, ["accuracy", "recall"], now, width)
            for d in (single, partitioned)
        ]
        for metric in ("accuracy", "recall"):
            _same_series(found[0][metric], found[1][metric])


def test_partitioned_trends_and_causes_equal_one_instance(
    daemons: tuple[Daemon, Daemon],
) -> None:
    single, partitioned = daemons
    now = int(time.time() * 1000)
    trends = [
        d.insight.trends(now, lambda spec: key_metrics(spec, ("accuracy",)))
        for d in (single, partitioned)
    ]
    assert len(trends[0]) == len(trends[1]) >= 2
    for one, other in zip(trends[0], trends[1], strict=True):
        _same_series(one, other)
    window = WindowSpec("1h", 3_600_000, 0)
    before = WindowSpec("previous", 3_600_000, 3_600_000)
    causes = [
        d.insight._cause("fraud", "accuracy", ("v1", before), ("v2", window), now)
        for d in (single, partitioned)
    ]
    assert causes[0] is not None and causes[1] is not None
    assert causes[0].attributions  # a cause over the configured slice
    for a, b in zip(astuple(causes[0]), astuple(causes[1]), strict=True):
        assert _deep_close(a, b), (a, b)


def _deep_close(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return _close(float(a), float(b))
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_deep_close(x, y) for x, y in zip(a, b, strict=True))
    if hasattr(a, "__dataclass_fields__"):
        return _deep_close(astuple(a), astuple(b))
    return bool(a == b)


def test_both_owners_answer_everything_the_daemon_asks() -> None:
    from monitor.app import Owner

    asked = [n for n in vars(Owner) if not n.startswith("_")]
    assert "apply" in asked and "checkpoint" in asked and len(asked) > 20
    for owner in (SingleOwner, GroupOwner):
        assert [n for n in asked if not callable(getattr(owner, n, None)) and not isinstance(
            getattr(owner, n, None), property)] == [], owner  # fmt: skip
