"""A partitioned instance's memory while it evaluates with no new input: flat.

Each evaluation merges every partition's statistics into a new global view (the size
of the whole state). Nothing of an evaluation may outlive the next one: a reference
kept by accident — a client library's exception cycle holding the evaluating frame,
frozen out of the cyclic collector's reach — grew one instance by the state's size
every second, to gigabytes within minutes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from monitor.localbroker import LocalBroker

from .daemon_harness import DaemonProcess, produce, rss_mb, wait_until
from .test_partitioned_failover import PARTITIONS, WINDOW, config, status, stream

pytestmark = [pytest.mark.integration, pytest.mark.slow]

N_PREDICTIONS = 20_000
EVALUATIONS = 30


def test_an_idle_partitioned_instance_keeps_its_memory_flat(
    broker: LocalBroker, tmp_path: Path
) -> None:
    messages, n, _ = stream(N_PREDICTIONS, seed=16, now=int(time.time() * 1000))
    broker.create_topics(["predictions", "labels"], partitions=PARTITIONS)
    produce(broker.bootstrap, [(kind, (key, value)) for kind, key, value in messages])
    d = DaemonProcess(config(broker, tmp_path, "solo", None), tmp_path / "solo.log").start()
    try:
        assert d.proc is not None
        pid = d.proc.pid
        seen: set[str] = set()

        def evaluated() -> int:
            snap = status(d)["snapshot"]
            if snap is not None:
                r = [x for x in snap["results"] if (x["version"], x["window"], x["slice"])
                     == ("v1", WINDOW, "all")]  # fmt: skip
                if r and r[0]["predictions"] == n:
                    seen.add(snap["evaluated_at"])
            return len(seen)

        def after(k: int) -> None:
            goal = len(seen) + k
            wait_until(lambda: evaluated() >= goal, 30.0 + 2.0 * k,
                       lambda: f"{len(seen)} of {goal} evaluations\n{d.log_tail()}",
                       interval=0.1, progress=lambda: len(seen))  # fmt: skip

        after(5)  # everything consumed and read back from the stats topic
        settled = rss_mb(pid)
        after(EVALUATIONS)
        grown = rss_mb(pid) - settled
        # allocator slack and the collector's pacing, not a copy of the state per tick
        assert grown < max(100.0, 0.25 * settled), (
            f"RSS {settled:.0f} MB -> +{grown:.0f} MB over {EVALUATIONS} idle evaluations"
        )
    finally:
        d.close()
