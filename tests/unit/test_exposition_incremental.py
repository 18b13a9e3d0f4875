"""/metrics rendered incrementally (export/sinks.py QualityPage): a page kept a window
result at a time is byte-for-byte the page rendered afresh, whatever changed between two
snapshots; an evaluation that changed nothing writes nothing; the gzip form decodes to
the plain page, and an evaluation that changed nothing compresses nothing."""

from __future__ import annotations

import math
import zlib
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from monitor.engine.snapshot import FairnessGap, Snapshot, WindowResult
from monitor.export.exposition import Exposition
from monitor.export.prometheus import MonitorCollector
from monitor.export.published import Published
from monitor.export.sinks import QualityPage
from monitor.stats.results import MetricValue
from monitor.stats.scores import ReliabilityBin

KEYS = [(m, v, w, s) for m in ("a", "b") for v in ("v1", "v2") for w in ("1h", "1d")
        for s in ("all", "country=US", "country=DE")]  # fmt: skip


def _result(key: tuple[str, str, str, str], n: int, extra: bool) -> WindowResult:
    """A window result whose numbers depend on ``n``; with ``extra`` it also has series of
    families few results have (a confusion matrix, excluded rows, withheld bounds)."""
    metrics = [
        MetricValue("accuracy", n / 100, n / 200, min(1.0, n / 50), n),
        MetricValue("recall", 0.5, math.nan, math.nan, n),  # bounds withheld
        MetricValue("precision[cat]", 0.25, 0.1, 0.4, n),
    ]
    if extra:
        metrics.append(MetricValue("mae", 1.5e7 + n, 1e6, 2e9, n))
    return WindowResult(
        *key, 0, 3_600_000, n, n + 1, tuple(metrics),
        reliability=(ReliabilityBin(0.0, 0.5, n, 0.25, 0.3, 0.1, 0.4),),
        class_confusion=(n, 1, 2, 3) if extra and key[3] == "all" else (),
        classes=("x", "y") if extra and key[3] == "all" else (),
        excluded=(("mape", n),) if extra else (),
    )  # fmt: skip


def _page(results: list[WindowResult], fairness: int) -> Published:
    gaps = tuple(
        FairnessGap("a", "v1", "1h", "country", "ece_gap", g / 10, "US", "DE")
        for g in range(fairness)
    )
    return Published(snapshot=Snapshot(1_000, tuple(results), fairness=gaps))


change = st.tuples(st.sampled_from(["same", "equal", "new", "gone", "extra"]), st.integers(1, 40))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(change, min_size=len(KEYS), max_size=len(KEYS)), min_size=1,
                max_size=5), st.lists(st.integers(0, 2), min_size=5, max_size=5))  # fmt: skip
def test_kept_page_equals_the_page_rendered_afresh(
    steps: list[list[tuple[str, int]]], fairness: list[int]
) -> None:
    collector = MonitorCollector(lambda: Published())
    page = QualityPage()
    current = {k: _result(k, 1, False) for k in KEYS}
    shown: dict[tuple[str, ...], WindowResult] = {}  # the results of the previous page
    for step, (changes, fair) in enumerate(zip(steps, fairness, strict=False)):
        results = []
        for key, (what, n) in zip(KEYS, changes, strict=True):
            old = current[key]
            if what == "equal":  # another object with the same content (slice "all")
                current[key] = replace(old)
            elif what in ("new", "extra"):
                current[key] = _result(key, n, what == "extra")
            if what != "gone":
                results.append(current[key])
        pub = _page(results, fair)
        kept = collector.snapshot_text(pub, page)
        fresh = collector.snapshot_text(pub)
        assert kept == fresh, f"step {step}"
        # written: exactly the results the previous page did not show (or not equal)
        assert page.written == sum(shown.get(_key(r)) != r for r in results)
        shown = {_key(r): r for r in results}


def _key(r: WindowResult) -> tuple[str, ...]:
    return (r.model, r.version, r.window, r.slice)


def test_an_evaluation_that_changed_nothing_writes_nothing() -> None:
    results = [_result(k, 7, True) for k in KEYS]
    published = [_page(results, 1)]
    exposition = Exposition(lambda: published[0], CollectorRegistry(auto_describe=False))
    exposition.refresh()
    first = exposition.snapshot_part()
    assert exposition.renders == 1 and exposition._quality.written == len(KEYS)
    # the next evaluation: a new snapshot, the same result objects, and the "all"
    # results new objects with equal contents
    again = [replace(r) if r.slice == "all" else r for r in results]
    published[0] = _page(again, 1)
    exposition.refresh()
    assert exposition.renders == 2 and exposition._quality.written == 0
    assert exposition.snapshot_part() == first
    # one result changed: one written, and the page is the one rendered afresh
    again[3] = _result(KEYS[3], 8, True)
    published[0] = _page(again, 1)
    exposition.refresh()
    assert exposition._quality.written == 1 and exposition.snapshot_part() != first
    lines = exposition.snapshot_part().split(b"\n")
    assert exposition.series == sum(1 for x in lines if x and not x.startswith(b"#"))
    assert exposition.snapshot_part() == MonitorCollector(lambda: published[0]).snapshot_text(
        published[0]
    )


def test_gzip_pages_decode_to_the_plain_page_and_keep_unchanged_families() -> None:
    results = [_result(k, 5, True) for k in KEYS]
    published = [_page(results, 2)]
    exposition = Exposition(lambda: published[0], CollectorRegistry(auto_describe=False))
    for step in range(3):
        packed = zlib.decompress(exposition.page(gzip=True), 31)
        snapshot_part = exposition.snapshot_part()
        assert packed.startswith(snapshot_part) and b"# HELP mlmon_build_info" in packed
        chunks = dict(exposition._quality._deflated)
        published[0] = _page([*results], 2)  # a new snapshot, nothing changed
        exposition.refresh()
        after = exposition._quality._deflated
        assert after.keys() == chunks.keys()
        assert all(after[k][1] is chunks[k][1] for k in chunks)  # kept, not compressed again
        results = [*results]
        results[step] = _result(KEYS[step], 20 + step, step == 1)
        published[0] = _page(results, 2)
        exposition.refresh()
        assert exposition._quality._deflated != chunks
