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
from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.utils import floatToGoString

__all__ = ["Family", "FamilySink", "Sink", "TextSink", "go_float"]

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
    __slots__ = ("extra", "head", "lines", "name", "prefix", "prefixes")

    def __init__(self, name: str, doc: str, extra: tuple[str, ...], base: tuple[str, ...]):
        doc = doc.replace("\\", r"\\").replace("\n", r"\n")
        self.name = name
        self.head = f"# HELP {name} {doc}\n# TYPE {name} gauge\n"
        self.lines: list[str] = []
        self.extra = extra
        # extra labels that all sort before the base ones go in front of the base text
        self.prefix = not extra or (list(extra) == sorted(extra) and max(extra) < min(base))
        self.prefixes: dict[tuple[str, ...], str] = {}  # extra values -> their label text

    def add(self, key: _Key, value: float, extra: tuple[str, ...] = ()) -> None:
        v = float(value)
        number = repr(v) if -_INF < v < 1e6 else go_float(v)
        if not extra:
            self.lines.append(f"{self.name}{{{key.text}}} {number}\n")
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
        self.lines.append(f"{self.name}{{{text}}} {number}\n")


class TextSink:
    """The text exposition of gauge families, written as they are filled."""

    def __init__(self) -> None:
        self._fams: dict[str, _TextFamily] = {}
        self._keys: dict[tuple[tuple[str, ...], tuple[str, ...]], _Key] = {}

    def family(
        self, name: str, doc: str, extra: tuple[str, ...] = (), base: tuple[str, ...] = _QUALITY
    ) -> Family:
        fam = self._fams.get(name)
        if fam is None:
            fam = self._fams[name] = _TextFamily(name, doc, extra, base)
        return fam

    def key(self, values: tuple[str, ...], base: tuple[str, ...] = _QUALITY) -> Any:
        at = (values, base)
        k = self._keys.get(at)
        if k is None:
            k = self._keys[at] = _Key(values, base)
        return k

    def text(self) -> str:
        return "".join(part for f in self._fams.values() for part in (f.head, *f.lines))
