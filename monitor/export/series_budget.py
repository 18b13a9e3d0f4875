"""The series budget: ``[http] max_series`` bounds the series /metrics exports.

Prometheus's cost grows with active series (its memory about 1–3 KB each, every query
over them), and a monitor's series multiply: models × versions × windows × slice values ×
the metric catalog. A bound at the exporter keeps one misconfigured slice dimension (a
user id, a request id) from taking the Prometheus server down, as kube-state-metrics and
most exporters bound theirs.

What is withheld when the page would exceed the bound: whole window results (every
series of a (model, version, window, slice)), the segment slices with the fewest
predictions first, then — only if the overall results alone exceed it — the ``all``
results with the fewest predictions. Comparisons, drift, SLO states, fairness gaps and
the operational series are never withheld: they are few and fixed by configuration, and
alerts read them. Withheld series are counted (``mlmon_series_dropped_total``) and named
on the status page; the JSON API still has every result.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..engine.snapshot import WindowResult

__all__ = ["CountSink", "SeriesBudget", "Withheld", "series_in", "within_budget"]

Key = tuple[str, ...]


def series_in(text: bytes) -> int:
    """Series (sample lines) in a text exposition: lines not starting with ``#``."""
    return text.count(b"\n") - text.count(b"\n#") - text.startswith(b"#")


class _Counted:
    __slots__ = ("counts",)

    def __init__(self, counts: Counter[Key]) -> None:
        self.counts = counts

    def add(self, key: Any, value: float, extra: tuple[str, ...] = ()) -> None:
        self.counts[key] += 1


class CountSink:
    """A quality sink (export/sinks.py protocol) that only counts series per base key."""

    def __init__(self) -> None:
        self.counts: Counter[Key] = Counter()
        self._fam = _Counted(self.counts)

    def family(self, name: str, doc: str, extra: tuple[str, ...] = (), base: Any = ()) -> Any:
        return self._fam

    def key(self, values: tuple[str, ...], base: Any = ()) -> Any:
        return values


@dataclass(frozen=True, slots=True)
class Withheld:
    """What the latest rendering left out to stay within ``max_series``."""

    max_series: int | None = None
    exported: int = 0  # series in the snapshot part as rendered
    series: int = 0  # series withheld
    results: tuple[Key, ...] = ()  # (model, version, window, slice) withheld, fewest first


@dataclass(frozen=True, slots=True)
class SeriesBudget:
    """The quality results to write (None: all) and what that withholds."""

    keep: frozenset[Key] | None
    withheld: Withheld


def within_budget(
    results: Iterable[WindowResult], counts: Counter[Key], fixed: int, max_series: int
) -> SeriesBudget:
    """Keep results by priority — every ``all`` result before any segment slice, more
    predictions first — while their series (``counts`` per result key) and the ``fixed``
    series fit in ``max_series``."""
    ranked = sorted(
        results,
        key=lambda r: (r.slice != "all", -r.predictions, r.model, r.version, r.window, r.slice),
    )
    room = max_series - fixed
    keep: set[Key] = set()
    dropped: list[tuple[int, Key]] = []
    used = 0
    for r in ranked:
        key = (r.model, r.version, r.window, r.slice)
        n = counts.get(key, 0)
        if used + n <= room:
            keep.add(key)
            used += n
        else:
            dropped.append((r.predictions, key))
    withheld = sum(counts.get(k, 0) for _, k in dropped)
    dropped.sort()
    return SeriesBudget(
        frozenset(keep),
        Withheld(max_series, fixed + used, withheld, tuple(k for _, k in dropped)),
    )
