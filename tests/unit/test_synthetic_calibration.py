"""The demo's model is calibrated on undrifted input and stops being so under drift, so
the demo flags its label-free estimates unreliable only in the drift phase."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.synthetic import scored_population


def _ece(y: np.ndarray, p: np.ndarray, bins: int = 10) -> float:
    """Expected calibration error, equal-width bins (Guo et al. 2017)."""
    idx = np.minimum((p * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        m = idx == b
        if m.any():
            total += m.mean() * abs(y[m].mean() - p[m].mean())
    return total


@pytest.mark.parametrize("separation", [1.2, 3.0])
def test_calibrated_scores_have_small_ece_and_drift_breaks_them(separation: float) -> None:
    rng = np.random.default_rng(11)
    y, _, p = scored_population(rng, 200_000, 0.2, separation, 0.0, calibrated=True)
    # sampling noise of a 10-bin ECE at n = 200k is ~0.002; the ranking score's is ~0.1
    assert _ece(y, p) < 0.01
    y, _, p = scored_population(rng, 200_000, 0.2, separation, 1.2, calibrated=True)
    assert _ece(y, p) > 0.1
    y, _, p = scored_population(rng, 200_000, 0.2, separation, 0.0)
    assert _ece(y, p) > 0.03  # the uncalibrated ranking score, for contrast
