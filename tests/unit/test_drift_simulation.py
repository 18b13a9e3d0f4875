"""Calibration of the drift detector by simulation.

Raw events go through the real pipeline — ``numeric_cells`` into per-window count
vectors, then ``DriftDetector.predict`` with default settings — so the figures measure what
production would see. Seeded ``default_rng``; one window's features are drawn as one
(events x features) array.

- H0: no feature drifts -> windows with any alert <= α + 0.01.
- H1: a 0.1-SD mean shift in 3 of 20 features at 10,000 events -> each flagged in >= 95% of
  windows, the 17 others in <= 5%.
- Large n: a 0.01-SD shift at 1,000,000 events is significant yet not flagged: the effect
  gate, not the p-value, is what stops it.
"""

from __future__ import annotations

import numpy as np
import pytest

from monitor.drift.detector import DriftDetector, DriftReport
from monitor.drift.reference import NumericReference, ReferenceProfile
from monitor.drift.summaries import n_cells, numeric_cells

ALPHA = 0.05
N_FEATURES = 20
N_REF = 100_000
EVENTS = 10_000
WINDOWS = 200


def _profile(rng: np.random.Generator, n_features: int, n_ref: int) -> ReferenceProfile:
    data = rng.standard_normal((n_ref, n_features))
    return ReferenceProfile.from_columns(numeric={f"f{j}": data[:, j] for j in range(n_features)})


def _window_counts(refs: list[NumericReference], x: np.ndarray) -> dict[str, np.ndarray]:
    """Count one window (events x features) into every feature's cells, vectorized."""
    width = n_cells(refs[0])
    cells = np.stack([numeric_cells(r, x[:, j]) for j, r in enumerate(refs)], axis=1)
    offsets = np.arange(len(refs)) * width
    flat = np.bincount((cells + offsets).ravel(), minlength=width * len(refs))
    return {r.name: flat[j * width : (j + 1) * width] for j, r in enumerate(refs)}


def _run(
    rng: np.random.Generator,
    profile: ReferenceProfile,
    shifts: np.ndarray,
    events: int,
    windows: int,
) -> list[DriftReport]:
    refs = [f for f in profile.features if isinstance(f, NumericReference)]
    detector = DriftDetector(profile)
    reports = []
    for _ in range(windows):
        x = rng.standard_normal((events, len(refs))) + shifts
        reports.append(detector.predict(_window_counts(refs, x)))
    return reports


def _matrix(reports: list[DriftReport], names: list[str], attr: str) -> np.ndarray:
    return np.array([[getattr(r.get(n), attr) for n in names] for r in reports])


@pytest.mark.slow
def test_no_drift_false_alarm_rate() -> None:
    rng = np.random.default_rng(20240611)
    profile = _profile(rng, N_FEATURES, N_REF)
    names = [f.name for f in profile.features]
    reports = _run(rng, profile, np.zeros(N_FEATURES), EVENTS, WINDOWS)
    detected = _matrix(reports, names, "detected")
    p_adj = _matrix(reports, names, "p_adjusted")
    p_raw = _matrix(reports, names, "p_value")
    effect = _matrix(reports, names, "effect")
    any_rate = float(np.mean(detected.any(axis=1)))
    any_significant = float(np.mean((p_adj < ALPHA).any(axis=1)))
    per_test = float(np.mean(p_raw < ALPHA))
    print(
        f"\nH0, {WINDOWS} windows x {N_FEATURES} features x {EVENTS} events vs {N_REF} ref: "
        f"windows with any alert {any_rate:.3f}; with any BH p_adj < α {any_significant:.3f}; "
        f"single-test rate p < α {per_test:.4f}; effect (SD) mean {effect.mean():.4f} "
        f"max {effect.max():.4f}"
    )
    assert any_rate <= ALPHA + 0.01
    # the p-value side alone is calibrated (binned KS is conservative, BH controls FWER
    # under the global null) — allow three binomial standard errors of sampling noise
    se_windows = np.sqrt(ALPHA * (1 - ALPHA) / WINDOWS)
    assert any_significant <= ALPHA + 3 * se_windows
    se_tests = np.sqrt(ALPHA * (1 - ALPHA) / p_raw.size)
    assert per_test <= ALPHA + 3 * se_tests
    assert all(r.n_tested == N_FEATURES for r in reports)


@pytest.mark.slow
def test_small_shift_in_three_features_is_found() -> None:
    rng = np.random.default_rng(20240612)
    profile = _profile(rng, N_FEATURES, N_REF)
    names = [f.name for f in profile.features]
    shifts = np.zeros(N_FEATURES)
    drifted = [2, 9, 15]
    shifts[drifted] = 0.1
    reports = _run(rng, profile, shifts, EVENTS, WINDOWS)
    detected = _matrix(reports, names, "detected")
    effect = _matrix(reports, names, "effect")
    rate = detected.mean(axis=0)
    stable = np.setdiff1d(np.arange(N_FEATURES), drifted)
    print(
        f"\nH1 0.1 SD in {len(drifted)}/{N_FEATURES} features, {WINDOWS} windows x {EVENTS}: "
        f"detection rate of drifted {np.round(rate[drifted], 3).tolist()}, "
        f"max false-flag rate of the others {rate[stable].max():.3f}; "
        f"Wasserstein (SD) of drifted mean {effect[:, drifted].mean():.4f} "
        f"min {effect[:, drifted].min():.4f}"
    )
    assert (rate[drifted] >= 0.95).all()
    assert (rate[stable] <= 0.05).all()
    # ranking: the drifted features lead every window where all three are detected
    for report, row in zip(reports, detected, strict=True):
        if row[drifted].all():
            assert {f.feature for f in report.features[:3]} == {names[j] for j in drifted}


@pytest.mark.slow
def test_tiny_shift_at_large_volume_is_significant_but_not_flagged() -> None:
    rng = np.random.default_rng(20240613)
    events, windows, n_ref = 1_000_000, 20, 1_000_000
    profile = _profile(rng, 2, n_ref)  # f0 shifted, f1 stable
    names = [f.name for f in profile.features]
    reports = _run(rng, profile, np.array([0.01, 0.0]), events, windows)
    detected = _matrix(reports, names, "detected")
    p_adj = _matrix(reports, names, "p_adjusted")
    effect = _matrix(reports, names, "effect")
    significant = float(np.mean(p_adj[:, 0] < ALPHA))
    print(
        f"\nLarge n: 0.01 SD at {events} events vs {n_ref} ref, {windows} windows: "
        f"p_adj < α in {significant:.2f} of windows (median p_adj {np.median(p_adj[:, 0]):.2g}), "
        f"flagged {detected[:, 0].mean():.2f}; Wasserstein (SD) mean {effect[:, 0].mean():.4f} "
        f"max {effect[:, 0].max():.4f}"
    )
    assert not detected.any()
    assert significant >= 0.8  # the test alone would alert ...
    assert (effect[:, 0] < DriftDetector(profile).numeric_effect).all()  # ... the gate stops it
    reasons = {r.get("f0").reason.split(":")[0] for r in reports if r.get("f0").p_adjusted < ALPHA}
    assert reasons == {"significant but small"}
