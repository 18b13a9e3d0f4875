"""Calibration of the slice attribution (``cause.py``) by simulation: how often the slice
that really changed ranks first, and how often some slice is named explaining when
nothing changed. Recall per slice (positives as units), Wilson intervals as the engine
gives them; seeded by the caller's ``numpy.random.Generator``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cause import SliceValues, attribute, corrected_level
from .intervals import wilson_interval

__all__ = ["CauseCalibration", "simulate_cause"]


@dataclass(frozen=True, slots=True)
class CauseCalibration:
    runs: int
    first: float  # share of runs where the changed slice ranks first
    named: float  # share of runs where any slice is named explaining


def _recall_values(
    rng: np.random.Generator, n: np.ndarray, rate: np.ndarray, level: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    hits = rng.binomial(n, rate)
    lo, hi = wilson_interval(hits, n, level)
    return hits, hits / n, lo, hi


def simulate_cause(
    rng: np.random.Generator,
    runs: int,
    slices: int = 8,
    positives: int = 150,
    recall: float = 0.8,
    dropped_to: float | None = 0.45,
    confidence: float = 0.95,
) -> CauseCalibration:
    """``runs`` pairs of windows with ``slices`` slices of ``positives`` positives each
    (±50 %, drawn per run); recall ``recall`` everywhere before, and after too except
    slice 0, whose recall drops to ``dropped_to`` (None: nothing changes)."""
    first = named = 0
    level = corrected_level(confidence, slices)
    for _ in range(runs):
        n0 = rng.integers(positives // 2, positives * 3 // 2 + 1, slices)
        n1 = rng.integers(positives // 2, positives * 3 // 2 + 1, slices)
        after = np.full(slices, recall)
        if dropped_to is not None:
            after[0] = dropped_to
        h0, r0, l0, u0 = _recall_values(rng, n0, np.full(slices, recall), level)
        h1, r1, l1, u1 = _recall_values(rng, n1, after, level)
        values = [
            SliceValues(f"s={i}", r0[i], l0[i], u0[i], int(n0[i]), r1[i], l1[i], u1[i], int(n1[i]))
            for i in range(slices)
        ]
        a = attribute("recall", h0.sum() / n0.sum(), h1.sum() / n1.sum(), values, level, confidence)
        named += bool(a.explaining)
        first += bool(a.slices and a.slices[0].slice == "s=0")
    return CauseCalibration(runs, first / runs, named / runs)
