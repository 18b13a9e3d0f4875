"""Label delay per model: how long labels take to arrive after their prediction.

Models differ by orders of magnitude here (a click is labeled in seconds, a fraud case in
weeks), and the expected completeness of a window's labels (``stats/completeness.py``)
is only as right as the delay distribution it reads — so each model keeps its own.

A checkpoint written before delays were kept per model holds one histogram of every
model's labels together. It is restored as the *fleet prior*: a model with fewer than
``MIN_OWN_DELAYS`` delays of its own reads the prior instead, so the provisional flags do
not all turn "unknown" on an upgrade (``snapshot.LabelDelays.of``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .accumulator import LabeledRows, StateParts
from .snapshot import DelayHistogram, LabelDelays

__all__ = ["DELAY_BOUNDS_S", "LabelDelay"]

# Label delay histogram bounds, seconds: 1 s .. 30 d.
DELAY_BOUNDS_S: tuple[float, ...] = (
    1,
    5,
    15,
    60,
    300,
    900,
    3600,
    3 * 3600,
    6 * 3600,
    12 * 3600,
    86400,
    3 * 86400,
    7 * 86400,
    14 * 86400,
    30 * 86400,
)
_CELLS = len(DELAY_BOUNDS_S) + 1


class LabelDelay:
    """Per model (by name): counts per delay cell (a Prometheus histogram's cells, ``le``
    inclusive) and the sum of delays in seconds; a label before its prediction counts as
    0 s. ``prior``: the fleet histogram (counts, sum) of an older checkpoint, or None.

    Sums, so the delays of two disjoint streams add (``+`` by model name: commutative,
    associative up to float rounding of the sums, identity ``LabelDelay()``)."""

    def __init__(self, names: Sequence[str] = ()) -> None:
        self.names = tuple(names)
        self.counts = np.zeros((len(self.names), _CELLS), np.int64)
        self.sums_s = np.zeros(len(self.names))
        self.prior: tuple[np.ndarray, float] | None = None

    def __add__(self, other: LabelDelay) -> LabelDelay:
        out = LabelDelay(dict.fromkeys((*self.names, *other.names)))
        index = {n: i for i, n in enumerate(out.names)}
        for part in (self, other):
            rows = [index[n] for n in part.names]
            out.counts[rows] += part.counts
            out.sums_s[rows] += part.sums_s
        priors = [p for p in (self.prior, other.prior) if p is not None]
        if priors:
            out.prior = (sum(c for c, _ in priors), sum(s for _, s in priors))
        return out

    def histograms(self) -> LabelDelays:
        """The immutable histograms a snapshot carries."""

        def hist(counts: np.ndarray, total: float) -> DelayHistogram:
            return DelayHistogram(DELAY_BOUNDS_S, tuple(counts.tolist()), float(total))

        own = zip(self.names, self.counts, self.sums_s, strict=True)
        return LabelDelays(
            tuple((n, hist(c, s)) for n, c, s in own),
            None if self.prior is None else hist(*self.prior),
        )

    @classmethod
    def of(cls, delays: LabelDelays) -> LabelDelay:
        """The accumulator a snapshot's histograms were taken from (ValueError when one
        has other bounds)."""
        hists = [h for _, h in delays.by_model]
        if delays.prior is not None:
            hists.append(delays.prior)
        if any(tuple(h.bounds) != DELAY_BOUNDS_S for h in hists):
            raise ValueError("label delay histogram has other bounds")
        out = cls([n for n, _ in delays.by_model])
        for i, (_, h) in enumerate(delays.by_model):
            out.counts[i] = h.counts
            out.sums_s[i] = h.total
        if delays.prior is not None:
            out.prior = (np.asarray(delays.prior.counts, np.int64), delays.prior.total)
        return out

    def add(self, rows: LabeledRows) -> None:
        """Count joined rows under their model (``rows.model`` indexes ``names``)."""
        j = rows.joined
        delay_s = np.maximum(j.label_ts - j.pred_ts, 0) / 1000.0
        cell = np.searchsorted(DELAY_BOUNDS_S, delay_s, "left")
        model = rows.model.astype(np.intp)
        np.add.at(self.counts, (model, cell), 1)
        self.sums_s += np.bincount(model, weights=delay_s, minlength=len(self.names))

    def state(self) -> StateParts:
        meta: dict[str, Any] = {
            "delay_models": list(self.names),
            "delay_sums_s": self.sums_s.tolist(),
        }
        arrays = {"delay_counts_by_model": self.counts.copy()}
        if self.prior is not None:  # under the names the fleet histogram had
            meta["delay_sum_s"] = self.prior[1]
            arrays["delay_counts"] = self.prior[0].copy()
        return meta, arrays

    def load(self, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        """Restore ``state()``: models matched by name (one no longer configured is
        dropped, a new one starts empty); an older checkpoint's one histogram becomes the
        prior. ValueError when a saved histogram has another shape."""
        self.counts = np.zeros((len(self.names), _CELLS), np.int64)
        self.sums_s = np.zeros(len(self.names))
        self.prior = None
        if "delay_counts" in arrays:
            self.prior = (_cells(arrays["delay_counts"], (_CELLS,)), float(meta["delay_sum_s"]))
        if "delay_counts_by_model" not in arrays:
            return
        names, sums = list(meta["delay_models"]), list(meta["delay_sums_s"])
        counts = _cells(arrays["delay_counts_by_model"], (len(names), _CELLS))
        if len(sums) != len(names):
            raise ValueError("label delay sums and models differ in number")
        index = {n: i for i, n in enumerate(self.names)}
        for name, row, total in zip(names, counts, sums, strict=True):
            i = index.get(str(name))
            if i is not None:
                self.counts[i] = row
                self.sums_s[i] = float(total)


def _cells(saved: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    a = np.asarray(saved)
    if a.shape != shape:
        raise ValueError("label delay histogram has a different shape")
    if a.size and a.dtype.kind not in "iu":
        raise ValueError("label delay counts are not integers")
    return a.astype(np.int64)
