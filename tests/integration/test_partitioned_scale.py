"""``scale.mode = "partitioned"`` on a real tansu broker, with each Kafka client: instances
of one group hand partitions over through the state topic, merge every partition's
statistics through the stats topic, and serve the same global view as one instance would
— counts exactly, metrics to 1e-9 against scikit-learn — across a scale-out and a SIGKILL
(kafka-python with the co-partition assignor, librdkafka with its range assignor)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest

from monitor.localbroker import LocalBroker
from monitor.synthetic import binary_traffic

from .daemon_harness import (
    DaemonProcess,
    StreamProducer,
    assert_quality,
    base_config,
    encode,
    sklearn_oracle,
    wait_until,
    write_config,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WINDOW = "30d"
N_PREDICTIONS = 4_000


def _stream(now: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[Any]]:
    traffic = binary_traffic(
        N_PREDICTIONS, seed=11, start_ms=now - 100 * 60_000, rate_per_s=1.0, delay_mean_s=20.0
    )
    preds, labels = traffic.predictions, traffic.labels
    events = sorted(
        [(int(p["ts"]), 0, "predictions", p) for p in preds]  # type: ignore[arg-type]
        + [(int(lab["ts"]), 1, "labels", lab) for lab in labels],  # type: ignore[arg-type]
        key=lambda e: (e[0], e[1]),
    )
    # keyed by prediction id: co-partitioned (the producer's murmur2 partitioner)
    messages = [(t, str(r["id"]).encode(), encode(r)) for _, _, t, r in events]
    return preds, labels, messages  # type: ignore[return-value]


def _daemon(broker: LocalBroker, tmp_path: Path, name: str, client: str) -> DaemonProcess:
    cfg = base_config(
        broker.bootstrap,
        tmp_path / f"state-{name}",  # own directory each: no shared disk
        windows=[{"size": WINDOW}],
        state={"checkpoint_interval": "1s", "single_instance": False},
        client=client,
    )
    cfg["scale"] = {"mode": "partitioned", "stats_interval": "1s"}
    toml = write_config(tmp_path / f"{name}.toml", cfg)
    return DaemonProcess(toml, tmp_path / f"{name}.log")


def _status(d: DaemonProcess) -> dict[str, Any]:
    code, body = d.get("/api/v1/status")
    assert code in (200, 503), body[:300]
    return json.loads(body)


def _global(d: DaemonProcess) -> dict[str, Any]:
    """The global part of /api/v1/status: window results by (version, window, slice)."""
    snap = _status(d)["snapshot"] or {"results": []}
    return {(r["version"], r["window"], r["slice"]): r for r in snap["results"]}


def _samples(d: DaemonProcess) -> tuple[int, int]:
    r = _global(d).get(("v1", WINDOW, "all"))
    return (r["predictions"], r["labeled"]) if r else (0, 0)


def _same_results(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for key, ra in a.items():
        rb = b[key]
        assert (ra["predictions"], ra["labeled"]) == (rb["predictions"], rb["labeled"]), key
        for name, m in ra["metrics"].items():
            x, y = m["value"], rb["metrics"][name]["value"]
            if x is None or y is None or (isinstance(x, float) and math.isnan(x)):
                assert x == y or (x is None) == (y is None), (key, name)
                continue
            assert x == pytest.approx(y, rel=1e-9, abs=1e-9), (key, name)


def test_two_instances_hand_over_partitions_and_agree_with_one(
    broker: LocalBroker, tmp_path: Path, kafka_client: str
) -> None:
    now = int(time.time() * 1000)
    preds, labels, messages = _stream(now)
    oracle = sklearn_oracle(preds, labels)
    broker.create_topics(["predictions", "labels"], partitions=4)
    a, b = (
        _daemon(broker, tmp_path, "a", kafka_client),
        _daemon(broker, tmp_path, "b", kafka_client),
    )
    producer = StreamProducer(broker.bootstrap, messages, 12.0)
    want = (len(preds), len(labels))
    try:
        a.start()
        a.wait_ready()
        producer.start()
        wait_until(lambda: _samples(a)[0] >= 0.3 * len(preds), 90, a.log_tail)
        b.start()  # scale 1 -> 2 during traffic: a hands two partitions over
        wait_until(lambda: "state stored, handed over" in a._this_log(), 60, a.log_tail)
        producer.join(timeout=120)
        assert producer.error is None, repr(producer.error)

        def both_complete() -> bool:
            owned = [_status(d)["scale"]["owned_partitions"] for d in (a, b)]
            settled = sorted(owned[0] + owned[1]) == [0, 1, 2, 3] and all(owned)
            return settled and _samples(a) == want and _samples(b) == want

        wait_until(both_complete, 120, lambda: f"{_samples(a)} {_samples(b)}\n{a.log_tail()}")
        time.sleep(2.5)  # one more publication round: both read the same final stats
        ga, gb = _global(a), _global(b)
        _same_results(ga, gb)
        # a partition's counters travel with its state: the sum is every record once
        ma, mb = a.scrape(), b.scrape()
        for topic, n in (("predictions", len(preds)), ("labels", len(labels))):
            total = ma.total("mlmon_records_total", topic=topic) + mb.total(
                "mlmon_records_total", topic=topic
            )
            assert total == n, (topic, a.log_tail(), b.log_tail())
        # exactly one exporter of the global quality series, equal to scikit-learn
        exporters = [m for m in (ma, mb) if m.find("mlmon_window_samples", window=WINDOW)]
        assert len(exporters) == 1, (a.log_tail(), b.log_tail())
        assert [m.get("mlmon_exporter") for m in (ma, mb)].count(1) == 1
        assert exporters[0].get("mlmon_exporter") == 1
        assert_quality(exporters[0], oracle, WINDOW, a.log_tail() + b.log_tail())

        # SIGKILL b: a takes its partitions back from b's last stored state
        restored = a._this_log().count("restored generation")
        b.kill()
        killed = time.monotonic()

        def a_owns_all() -> bool:
            m = a.scrape()
            return (
                a._this_log().count("restored generation") >= restored + 2
                and _status(a)["scale"]["owned_partitions"] == [0, 1, 2, 3]
                and m.get("mlmon_exporter") == 1
                and bool(m.find("mlmon_window_samples", window=WINDOW))
                and m.total("mlmon_records_total", topic="predictions") == len(preds)
            )

        wait_until(a_owns_all, 60, a.log_tail)
        failover = time.monotonic() - killed
        ma, _ = a.wait_consumed({"predictions": len(preds), "labels": len(labels)}, 30)
        assert_quality(ma, oracle, WINDOW, a.log_tail())
        _same_results(_global(a), ga)
        print(f"failover (kill -> global series from the survivor): {failover:.1f}s")
    finally:
        a.close()
        b.close()
