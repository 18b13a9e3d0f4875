"""One /metrics scrape describes one snapshot.

The page is a cached snapshot part plus a live part rendered per scrape. When the
evaluation stamp (``mlmon_last_evaluation_timestamp_seconds``) sat in the live part, a
snapshot published between the two parts paired the *new* stamp with the *old* window
counts: a reader waiting for "an evaluation after X" then read the window of an earlier
evaluation (``test_clock_faults`` once read 0 samples right after 200 pairs were
consumed).
"""

from __future__ import annotations

import threading
import zlib

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from monitor.engine.snapshot import Snapshot, WindowResult
from monitor.export.exposition import Exposition
from monitor.export.published import Published


def _published(at_ms: int, labeled: int) -> Published:
    result = WindowResult("fraud", "v1", "1h", "all", 0, at_ms, labeled, labeled, ())
    return Published(snapshot=Snapshot(at_ms, (result,)))


def _stamp_and_samples(page: bytes) -> tuple[float, float]:
    values = {
        s.name: s.value
        for fam in text_string_to_metric_families(page.decode())
        for s in fam.samples
        if s.name in ("mlmon_last_evaluation_timestamp_seconds", "mlmon_window_samples")
    }
    return values["mlmon_last_evaluation_timestamp_seconds"], values["mlmon_window_samples"]


def test_a_snapshot_published_mid_scrape_does_not_mix_two_evaluations() -> None:
    old, new = _published(1_000_000, 0), _published(2_000_000, 200)
    reads: list[Published] = []

    def published() -> Published:  # the evaluation publishes right after the first read
        reads.append(old if not reads else new)
        return reads[-1]

    exposition = Exposition(published, CollectorRegistry(auto_describe=False))
    for gzip in (False, True):
        reads.clear()
        page = exposition.page(gzip=gzip)
        if gzip:
            page = zlib.decompress(page, 31)
        stamp, samples = _stamp_and_samples(page)
        assert len(reads) >= 2, "the scrape read the published state once: no race to test"
        assert (stamp, samples) in ((1000.0, 0.0), (2000.0, 200.0)), (stamp, samples)


def test_concurrent_publishing_never_pairs_a_stamp_with_another_window() -> None:
    """The same race with real threads: an evaluation thread publishing as fast as it
    can while scrapes run; each scrape's stamp must match its window count."""
    pubs = [_published(1_000_000 + i, i) for i in range(1, 3)]
    current = [pubs[0]]
    exposition = Exposition(lambda: current[0], CollectorRegistry(auto_describe=False))
    stop = threading.Event()

    def evaluate() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            current[0] = pubs[i % 2]
            exposition.refresh()

    thread = threading.Thread(target=evaluate)
    thread.start()
    mixed = []
    try:
        for _ in range(300):
            stamp, samples = _stamp_and_samples(exposition.page())
            if round(stamp * 1000) - 1_000_000 != samples:
                mixed.append((stamp, samples))
    finally:
        stop.set()
        thread.join()
    assert not mixed, f"{len(mixed)} of 300 scrapes mixed two evaluations: {mixed[:3]}"
