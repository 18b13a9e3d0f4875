"""Monte-Carlo operating characteristics of the drift gate (windows as multinomial counts).

One definition shared by the bounded CI simulations
(``tests/unit/test_drift_gate_simulation.py``) and the full-size figures of
``bench/stats_sim.py --part drift`` that docs/drift.md quotes. A live window is drawn as a
multinomial count vector over the reference's cells with the cell probabilities of the
live distribution — exactly the distribution binning i.i.d. events produces, without
materializing a million values per window. Seeded ``default_rng`` only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .detector import DriftDetector, FeatureDrift
from .reference import CategoricalReference, NumericReference, ReferenceProfile

__all__ = ["FlagRate", "flag_rate", "numeric_cell_probs"]


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
