"""Where the quality families go: prometheus-client metric families, or text directly.

A fleet's quality part of /metrics has about a million series (every slice carries the
score catalog and a reliability diagram). Building a ``Sample`` per series and letting
``generate_latest`` sort, validate and escape its labels took ~40 s per evaluation for
a 77 MB page; nearly all of it was per-sample label handling that is the same for every
series of a window result. :class:`TextSink` escapes a result's labels once, keeps them
as one pre-sorted label string, and writes each series as one line of the Prometheus
text format 0.0.4 (the format and label order ``generate_latest`` writes: labels sorted
by name, values escaped, floats as Go prints them), so the page is byte-for-byte the one
the metric families render (tests/unit/test_exposition_text.py).

The same collector code writes to either sink (:class:`FamilySink` for the
``Collector.collect`` path), so family names, help texts and series are defined once.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Iterator, Sequence
from operator import is_
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from .series_budget import series_in

if TYPE_CHECKING:
    from .published import Published

__all__ = ["Family", "FamilySink", "QualityPage", "Section", "Sink", "TextSink", "go_float"]

_QUALITY = ("model", "version", "window", "slice")
_INF = math.inf


def go_float(value: float) -> str:
    """``floatToGoString``: Python's repr below 1e6, Go's exponent form above, +Inf/NaN."""
    d = float(value)
    if -_INF < d < 1e6:
        return repr(d)
    return str(floatToGoString(d))


def _escape(value: str) -> str:
    """A label value as the text format quotes it (backslash, newline, double quote)."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class Family(Protocol):
    def add(self, key: Any, value: float, extra: tuple[str, ...] = ()) -> None:
        """One series: the base labels ``key`` (from :meth:`Sink.key`), then ``extra``."""


class Sink(Protocol):
    def family(
        self, name: str, doc: str, extra: tuple[str, ...] = (), base: tuple[str, ...] = _QUALITY
    ) -> Family:
        """The gauge family ``name`` (created on first use; later calls return it)."""

    def key(self, values: tuple[str, ...], base: tuple[str, ...] = _QUALITY) -> Any:
        """The base label values of a series, prepared once for all its families."""


class _Gauge:
    __slots__ = ("metric",)

    def __init__(self, metric: GaugeMetricFamily) -> None:
        self.metric = metric

    def add(self, key: Any, value: float, extra: tuple[str, ...] = ()) -> None:
        self.metric.add_metric([*key, *extra], value)


class FamilySink:
    """prometheus-client ``GaugeMetricFamily`` objects, in creation order."""

    def __init__(self) -> None:
        self._fams: dict[str, _Gauge] = {}

    def family(
        self, name: str, doc: str, extra: tuple[str, ...] = (), base: tuple[str, ...] = _QUALITY
    ) -> Family:
        fam = self._fams.get(name)
        if fam is None:
            fam = self._fams[name] = _Gauge(GaugeMetricFamily(name, doc, labels=base + extra))
        return fam

    def key(self, values: tuple[str, ...], base: tuple[str, ...] = _QUALITY) -> Any:
        return values

    def families(self) -> Iterator[Metric]:
        return (f.metric for f in self._fams.values())


class _Key:
    """Base label values, escaped, and their ``name="value"`` pairs sorted by name."""

    __slots__ = ("names", "text", "values")

    def __init__(self, values: tuple[str, ...], names: tuple[str, ...]) -> None:
        self.names, self.values = names, tuple(_escape(v) for v in values)
        pairs = sorted(zip(names, self.values, strict=True))
        self.text = ",".join(f'{n}="{v}"' for n, v in pairs)


class _TextFamily:
    """A family's head and label formatting; the lines go to the sink's open section."""

    __slots__ = ("extra", "head", "name", "prefix", "prefixes", "sink")

    def __init__(
        self, sink: TextSink, name: str, doc: str, extra: tuple[str, ...], base: tuple[str, ...]
    ) -> None:
        doc = doc.replace("\\", r"\\").replace("\n", r"\n")
        self.sink = sink
        self.name = name
        self.head = f"# HELP {name} {doc}\n# TYPE {name} gauge\n".encode()
        self.extra = extra
        # extra labels that all sort before the base ones go in front of the base text
        self.prefix = not extra or (list(extra) == sorted(extra) and max(extra) < min(base))
        self.prefixes: dict[tuple[str, ...], str] = {}  # extra values -> their label text

    def add(self, key: _Key, value: float, extra: tuple[str, ...] = ()) -> None:
        v = float(value)
        number = repr(v) if -_INF < v < 1e6 else go_float(v)
        section = self.sink.section
        lines = section.get(self.name)
        if lines is None:
            lines = section[self.name] = []
        if not extra:
            lines.append(f"{self.name}{{{key.text}}} {number}\n")
            return
        if self.prefix:
            pre = self.prefixes.get(extra)
            if pre is None:
                pairs = zip(self.extra, map(_escape, extra), strict=True)
                pre = self.prefixes[extra] = "".join(f'{n}="{v}",' for n, v in pairs)
            text = pre + key.text
        else:
            pairs = sorted(
                [
                    *zip(key.names, key.values, strict=True),
                    *zip(self.extra, map(_escape, extra), strict=True),
                ]
            )
            text = ",".join(f'{n}="{v}"' for n, v in pairs)
        lines.append(f"{self.name}{{{text}}} {number}\n")


Section = dict[str, bytes]  # family name -> its lines of one window result, in write order


class TextSink:
    """The text exposition of gauge families, written a *section* at a time (a window
    result's series): :meth:`close` returns the section's lines per family, and
    :func:`assemble` puts sections together as one page."""

    def __init__(self) -> None:
        self._fams: dict[str, _TextFamily] = {}
        self._keys: dict[tuple[tuple[str, ...], tuple[str, ...]], _Key] = {}
        self.section: dict[str, list[str]] = {}
        self.requested: dict[str, None] = {}  # families asked for since ``clear``, in order

    def family(
        self, name: str, doc: str, extra: tuple[str, ...] = (), base: tuple[str, ...] = _QUALITY
    ) -> Family:
        fam = self._fams.get(name)
        if fam is None:
            fam = self._fams[name] = _TextFamily(self, name, doc, extra, base)
        self.requested[name] = None
        return fam

    def key(self, values: tuple[str, ...], base: tuple[str, ...] = _QUALITY) -> Any:
        at = (values, base)
        k = self._keys.get(at)
        if k is None:
            k = self._keys[at] = _Key(values, base)
        return k

    def close(self) -> Section:
        """The open section's lines per family (in the order first written), as bytes."""
        out = {name: "".join(lines).encode() for name, lines in self.section.items()}
        self.section = {}
        return out

    def clear(self) -> None:
        """Forget the escaped label keys and requested families (a new page)."""
        self._keys = {}
        self.requested = {}

    def head(self, name: str) -> bytes:
        return self._fams[name].head

    def assemble(self, first: Sequence[str], sections: Iterable[Section]) -> dict[str, list[bytes]]:
        """Each family's head and lines, in page order: ``first`` (created before any
        series, so on the page even if empty), then as the sections first write them."""
        parts: dict[str, list[bytes]] = {name: [self.head(name)] for name in first}
        for section in sections:
            for name, lines in section.items():
                got = parts.get(name)
                if got is None:
                    got = parts[name] = [self.head(name)]
                got.append(lines)
        return parts


class QualityPage:
    """The quality part of /metrics, kept a window result at a time between renders.

    Each window result's series are written as a section of their own; the next render
    writes only the results that are not the same object as, or equal to, the result of
    the same (model, version, window, slice) last time (the evaluation reuses a window's
    result object while its counts and bounds stay), and assembles the page from the
    kept sections. So an evaluation in which nothing changed writes nothing and returns
    the page it has; a tick with some new events writes the windows they reached. The
    gzip form is kept in chunks of consecutive families, compressed again only when a
    family of the chunk changed (raw deflate ended by a full flush: they concatenate).
    The price: the page is held twice, as the kept sections and as the assembled text."""

    def __init__(self) -> None:
        self.sink = TextSink()
        self._kept: dict[tuple[str, ...], tuple[Any, Section]] = {}
        self._fairness: Section = {}
        self._families: dict[str, list[bytes]] = {}
        self._text = b""
        self._series: int | None = None  # of ``_text``, once asked for
        self._gzip: tuple[bytes, int] | None = None  # ``_text`` deflated, its CRC-32
        # chunk of consecutive families -> (their parts, deflated)
        self._deflated: dict[tuple[str, ...], tuple[list[bytes], bytes]] = {}
        self.written = 0  # window results the last render wrote (the others were kept)

    def render(self, pub: Published, collector: Any) -> bytes:
        """The quality text of ``pub``'s snapshot (``collector``: the MonitorCollector
        whose ``exported_results``, ``result_writer`` and ``write_fairness`` define the
        series)."""
        sink = self.sink
        sink.clear()
        snap = pub.snapshot
        write = collector.result_writer(sink, snap.series if snap is not None else {})
        first = list(sink.requested)
        kept, self._kept = self._kept, {}
        sections: list[Section] = []
        written = 0
        for r in collector.exported_results(pub):
            key = (r.model, r.version, r.window, r.slice)
            old = kept.get(key)
            if old is not None and (old[0] is r or old[0] == r):
                section = old[1]
            else:
                write(r)
                section = sink.close()
                written += 1
            self._kept[key] = (r, section)
            sections.append(section)
        collector.write_fairness(snap.fairness if snap is not None else (), sink)
        fairness = sink.close()
        if fairness == self._fairness:
            fairness = self._fairness  # (the same objects: its family's chunk is kept)
        self.written = written
        if (
            not written
            and fairness == self._fairness
            and len(kept) == len(self._kept)
            and self._text
        ):
            return self._text  # nothing changed: the same page
        self._fairness = fairness
        sections.append(fairness)
        self._families = sink.assemble(first, sections)
        self._text = b"".join(b"".join(parts) for parts in self._families.values())
        self._series = self._gzip = None
        return self._text

    def series(self) -> int:
        """Sample lines of the last rendered text (lines that are no comment)."""
        if self._series is None:
            self._series = series_in(self._text)
        return self._series

    def deflated(self) -> tuple[bytes, int, int]:
        """The last rendered text as raw deflate data ending in a full flush (no final
        block), its CRC-32 and its length: the start of a gzip stream (RFC 1951/1952).
        Consecutive families are compressed together in chunks of about 256 KiB (small
        chunks compress badly: each starts with an empty window), a chunk again only
        when one of its families' lines changed; at zlib level 1 (``_LEVEL``)."""
        if self._gzip is not None:  # the same text as last time
            return *self._gzip, len(self._text)
        out: list[bytes] = []
        done: dict[tuple[str, ...], tuple[list[bytes], bytes]] = {}
        names: list[str] = []
        parts: list[bytes] = []
        size = 0
        families = list(self._families.items())
        for i, (name, lines) in enumerate(families):
            names.append(name)
            parts.extend(lines)
            size += sum(map(len, lines))
            if size < _CHUNK_BYTES and i + 1 < len(families):
                continue
            key = tuple(names)
            old = self._deflated.get(key)
            if old is None or len(old[0]) != len(parts) or not all(map(is_, old[0], parts)):
                c = zlib.compressobj(_LEVEL, zlib.DEFLATED, -15)
                old = (parts, c.compress(b"".join(parts)) + c.flush(zlib.Z_FULL_FLUSH))
            done[key] = old
            out.append(old[1])
            names, parts, size = [], [], 0
        self._deflated = done
        self._gzip = (b"".join(out), zlib.crc32(self._text))
        return *self._gzip, len(self._text)


_CHUNK_BYTES = 1 << 18
# zlib level 1: a fleet's 65 MB page in 0.46 s at 10.6x, level 6 in 1.22 s at 12.8x (the
# page is compressed again, in the evaluation thread, whenever a family of a chunk changed)
_LEVEL = 1
