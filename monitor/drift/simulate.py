"""Monte-Carlo operating characteristics of the drift gate (windows as multinomial counts).

One definition shared by the bounded CI simulations
(``tests/unit/test_drift_gate_simulation.py``) and the full-size figures of
``bench/stats_sim.py --part drift`` that docs/drift.md quotes. A live window is drawn as a
multinomial count vector over the reference's cells with the cell probabilities of the
live distribution — exactly the distribution binning i.i.d. events produces, without
materializing a million values per window. Seeded ``default_rng`` only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .budget import DAY_MS, window_alpha
from .detector import DEFAULT_ALPHA, DriftDetector, FeatureDrift
from .reference import CategoricalReference, NumericReference, ReferenceProfile

__all__ = ["FlagRate", "alarm_days", "flag_rate", "numeric_cell_probs", "windows_to_detect"]


class _Cdf(Protocol):
    def cdf(self, x: np.ndarray) -> np.ndarray: ...


def numeric_cell_probs(ref: NumericReference, dist: _Cdf) -> np.ndarray:
    """Live cell probabilities ``[missing, under, bins..., over]`` under ``dist``."""
    f = dist.cdf(ref.edges)
    return np.concatenate([[0.0, f[0]], np.diff(f), [1.0 - f[-1]]])


@dataclass(frozen=True, slots=True)
class FlagRate:
    flagged: float  # share of windows flagged (significant and past the effect gate)
    effect_passes: float  # share whose effect alone passes the gate
    features: list[FeatureDrift]


def flag_rate(
    rng: np.random.Generator,
    ref: NumericReference | CategoricalReference,
    probs: np.ndarray,
    events: int,
    windows: int,
) -> FlagRate:
    """Run ``windows`` live windows of ``events`` events drawn from ``probs``."""
    detector = DriftDetector(ReferenceProfile((ref,), None, None, ref.n))
    probs = np.asarray(probs, dtype=np.float64) / np.sum(probs)
    out = [
        detector.predict({ref.name: rng.multinomial(events, probs)}).features[0]
        for _ in range(windows)
    ]
    return FlagRate(
        float(np.mean([f.detected for f in out])),
        float(np.mean([f.effect >= f.effect_threshold for f in out])),
        out,
    )


def _profile(ref: NumericReference, features: int) -> ReferenceProfile:
    """``features`` independent copies of one numeric reference (renamed x0, x1, ...)."""
    refs = tuple(dataclasses.replace(ref, name=f"x{i}") for i in range(features))
    return ReferenceProfile(refs, None, None, ref.n)


def alarm_days(
    rng: np.random.Generator,
    ref: NumericReference,
    probs: np.ndarray,
    *,
    features: int,
    events: int,
    window_ms: int,
    days: int,
    budget: float,
    alpha: float = DEFAULT_ALPHA,
) -> float:
    """Share of days on which a model with ``features`` features drawn from ``probs``
    (each window ``events`` events) raises at least one drift alarm, testing each of the
    day's windows as the engine does (:func:`monitor.drift.budget.window_alpha`)."""
    detector = DriftDetector(_profile(ref, features))
    level = window_alpha(alpha, budget, window_ms)
    per_day = max(1, DAY_MS // window_ms)
    p = np.asarray(probs, dtype=np.float64) / np.sum(probs)
    alarmed = 0
    for _ in range(days):
        for _ in range(per_day):
            live = {f"x{i}": rng.multinomial(events, p) for i in range(features)}
            if detector.predict(live, alpha=level).any_detected:
                alarmed += 1
                break
    return alarmed / days


def windows_to_detect(
    rng: np.random.Generator,
    ref: NumericReference,
    before: np.ndarray,
    after: np.ndarray,
    *,
    events: int,
    window_ms: int,
    runs: int,
    budget: float,
    alpha: float = DEFAULT_ALPHA,
    horizon: int = 3,
) -> np.ndarray:
    """For each run, the window (1, 2, ...) in which one feature shifting from ``before``
    to ``after`` at a uniformly random moment of the first window is first flagged
    (``horizon + 1`` if not within ``horizon`` windows): window 1 holds a share of
    shifted events, later windows only shifted ones."""
    detector = DriftDetector(_profile(ref, 1))
    level = window_alpha(alpha, budget, window_ms)
    p0 = np.asarray(before, np.float64) / np.sum(before)
    p1 = np.asarray(after, np.float64) / np.sum(after)
    out = np.full(runs, horizon + 1)
    for r in range(runs):
        shifted = rng.random()  # the share of window 1 after the change
        for k in range(1, horizon + 1):
            share = shifted if k == 1 else 1.0
            n1 = rng.binomial(events, share)
            counts = rng.multinomial(n1, p1) + rng.multinomial(events - n1, p0)
            if detector.predict({"x0": counts}, alpha=level).any_detected:
                out[r] = k
                break
    return out
