"""The /metrics page, rendered once per evaluation and served from bytes.

A scrape used to rebuild every metric family from the snapshot: 50 parallel scrapers of a
2 MB page took seconds each and starved the probes and ingestion. The page is now two
parts:

- the *snapshot part* (quality, comparisons, drift, SLO states) is rendered once per
  published snapshot, kept as bytes, and its gzip stream is kept too, flushed at a block
  boundary (``Z_SYNC_FLUSH``) with the compressor state saved, so a gzip scrape only
  compresses what follows (RFC 1950/1952; zlib's ``compressobj.copy``);
- the *live part* (operations counters, process and Python collectors, build info, the
  page's own size) is a few dozen series rendered per scrape from the app's registry.

Both parts form one valid text exposition (families never span the two). The format
follows the scraper's ``Accept`` header through prometheus-client's ``choose_encoder``:
OpenMetrics 1.0 when asked for (Prometheus asks first), else text 0.0.4. The snapshot part
holds only gauges, whose OpenMetrics lines are the text format's very bytes
(tests/unit/test_exposition_text.py checks it), so one cached part serves both; the live
part (counters, which OpenMetrics writes differently, and the closing ``# EOF``) is
rendered by the negotiated encoder.
"""

from __future__ import annotations

import platform
import threading
import time
import zlib
from collections.abc import Callable, Iterator

from prometheus_client import (
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry

from ..version import app_version, build
from .http import Request, Response
from .prometheus import MonitorCollector
from .published import Published
from .series_budget import Withheld, series_in

__all__ = ["Exposition", "app_version"]


class _Live(Collector):
    """Operations, build info and the cached page's own size, per scrape."""

    def __init__(self, exposition: Exposition) -> None:
        self._exp = exposition

    def collect(self) -> Iterator[Metric]:
        exp = self._exp
        yield from exp.collector.operation_families(exp.published())
        yield build_info()
        yield GaugeMetricFamily(
            "mlmon_exposition_series",
            "Series in the cached snapshot part of /metrics (quality, comparisons, drift, "
            "SLO states), rendered once per evaluation",
            value=exp.series,
        )
        yield CounterMetricFamily(
            "mlmon_series_dropped",
            "Series withheld from /metrics by [http] max_series, summed over every rendering "
            "(one per evaluation); the lowest-traffic slices go first",
            value=exp.dropped_total,
        )
        yield GaugeMetricFamily(
            "mlmon_exposition_series_withheld",
            "Series the latest rendering withheld by [http] max_series",
            value=exp.withheld.series,
        )
        yield GaugeMetricFamily(
            "mlmon_exposition_bytes",
            "Uncompressed size of the cached snapshot part of /metrics",
            value=exp.size,
        )
        yield CounterMetricFamily(
            "mlmon_exposition_renders",
            "Times the snapshot part of /metrics was rendered (once per evaluation, never "
            "per scrape)",
            value=exp.renders,
        )
        yield GaugeMetricFamily(
            "mlmon_exposition_render_seconds",
            "Time the latest rendering of the snapshot part took",
            value=exp.render_seconds,
        )


def build_info() -> GaugeMetricFamily:
    """Version, commit and branch (monitor/version.py: the image's build arguments, or
    the git checkout of an editable install) and the Python version."""
    b = build()
    fam = GaugeMetricFamily(
        "mlmon_build_info",
        "Always 1; the monitor's version, build revision and branch, and Python version",
        labels=("version", "revision", "branch", "python"),
    )
    fam.add_metric([app_version(), b.revision, b.branch, platform.python_version()], 1.0)
    return fam


class Exposition:
    """/metrics as cached bytes (see the module docstring).

    ``registry`` is the app's own registry (never the process-global one): the live
    collectors are registered on it here, so tests and several daemons in one process
    do not share series.
    """

    def __init__(
        self,
        published: Callable[[], Published],
        registry: CollectorRegistry,
        clock: Callable[[], float] = time.time,
        max_series: int | None = None,
    ) -> None:
        self.published = published
        self.registry = registry
        self.collector = MonitorCollector(published, clock, max_series)
        self._lock = threading.Lock()
        self._key: tuple[object, object] | None = None
        self._text = b""
        self._gz_head = b""
        self._gz: zlib._Compress | None = None
        self._gzip_wanted = False  # set by the first gzip scrape; then refresh compresses
        self.series = 0
        self.size = 0
        self.renders = 0
        self.render_seconds = 0.0
        self.withheld = Withheld(max_series)  # the latest rendering's (series_budget.py)
        self.dropped_total = 0
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
        registry.register(_Live(self))

    def refresh(self) -> None:
        """Render the snapshot part if the published snapshot changed (the daemon calls
        this right after each evaluation, so no scrape pays for it)."""
        with self._lock:
            self._refresh_locked()

    def _refresh_locked(self) -> None:
        pub = self.published()
        key = (pub.snapshot, pub.slos)
        if self._key is not None and self._key[0] is key[0] and self._key[1] is key[1]:
            return
        started = time.perf_counter()
        text = self.collector.snapshot_text(pub)
        self._text = text
        self._gz = None
        if self._gzip_wanted:  # compress here, in the evaluation thread, not in a scrape
            self._compress_locked()
        self.series = series_in(text)
        self.withheld = self.collector.budget(pub).withheld
        self.dropped_total += self.withheld.series
        self.size = len(text)
        self.renders += 1
        self.render_seconds = time.perf_counter() - started
        self._key = key

    def _compress_locked(self) -> None:
        """The snapshot part as the start of a gzip stream, flushed to a byte boundary
        with the compressor kept, so each scrape appends the live part to a copy."""
        gz = zlib.compressobj(6, zlib.DEFLATED, 31)
        self._gz_head = gz.compress(self._text) + gz.flush(zlib.Z_SYNC_FLUSH)
        self._gz = gz

    def page(
        self, gzip: bool = False, live: Callable[[CollectorRegistry], bytes] = generate_latest
    ) -> bytes:
        """The whole page; with ``gzip`` one gzip stream (RFC 1952); ``live`` renders the
        live part (the negotiated encoder)."""
        with self._lock:
            self._refresh_locked()
            text = self._text
            if gzip:
                self._gzip_wanted = True
                if self._gz is None:
                    self._compress_locked()
                assert self._gz is not None
                head, gz = self._gz_head, self._gz.copy()
        rest = live(self.registry)
        if not gzip:
            return text + rest
        return head + gz.compress(rest) + gz.flush()

    def route(self, req: Request) -> Response:
        """The /metrics handler: the format the ``Accept`` header asks for, gzip when
        ``Accept-Encoding`` allows it."""
        encoder, content_type = choose_encoder(req.headers.get("accept", ""))
        vary = ("Vary", "Accept, Accept-Encoding")
        if req.accepts_gzip():
            return Response(
                200,
                self.page(gzip=True, live=encoder),
                content_type,
                (("Content-Encoding", "gzip"), vary),
            )
        return Response(200, self.page(live=encoder), content_type, (vary,))
