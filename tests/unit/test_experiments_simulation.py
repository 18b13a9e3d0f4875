"""Calibration of the sequential comparison by simulation.

Under H0 the always-valid test, consulted after every 100 labels per arm, must keep its
false-positive rate near α — while the naive repeated z-test, read the same way, does not.
Under H1 it must detect a 1-point error-rate regression with useful power and a delay
comparable to the fixed-horizon sample size. Seeded ``default_rng``; runs × looks arrays.
"""

from __future__ import annotations

import numpy as np
import pytest

from monitor.experiments.fixed_horizon import (
    sample_size_two_proportions,
    two_proportion_z_test,
)
from monitor.experiments.moments import LossMoments
from monitor.experiments.sequential import (
    PairedSequentialComparison,
    SequentialComparison,
    always_valid_arrays,
    always_valid_paired_arrays,
    running_always_valid,
    tau2_for_horizon,
)

ALPHA = 0.05
BATCH = 100  # labels per arm between looks
LOOKS = 400  # up to 40,000 per arm
RUNS = 2000
MIN_SAMPLES = 200
# tightest around 10,000 per arm for a 10% error rate: V* = 2·0.09/10⁴
TAU2 = tau2_for_horizon(2 * 0.10 * 0.90 / 10_000, ALPHA)
N = BATCH * np.arange(1, LOOKS + 1)


def _cumulative_errors(rng: np.random.Generator, p: float) -> np.ndarray:
    return np.cumsum(rng.binomial(BATCH, p, (RUNS, LOOKS)), axis=1)


def _sequential(ka: np.ndarray, kb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Running (lower, upper) of the sequence per run and look (0/1 losses: Σx² = Σx)."""
    p, lo, hi, _ = always_valid_arrays(N, ka, ka, N, kb, kb, alpha=ALPHA, tau2=TAU2)
    _, lo_run, hi_run = running_always_valid(p, lo, hi, N >= MIN_SAMPLES)
    return lo_run, hi_run


@pytest.mark.slow
def test_h0_false_positives_sequential_vs_naive_peeking() -> None:
    rng = np.random.default_rng(20240601)
    ka, kb = _cumulative_errors(rng, 0.10), _cumulative_errors(rng, 0.10)
    lo, hi = _sequential(ka, kb)
    rollback = (lo > 0).any(axis=1)
    superior = (hi < 0).any(axis=1)
    sequential_rate = float(np.mean(rollback | superior))
    _, p_naive = two_proportion_z_test(ka, N, kb, N)
    naive_rate = float(np.mean((p_naive < ALPHA).any(axis=1)))
    print(
        f"\nH0, {RUNS} runs x {LOOKS} looks: sequential false-positive rate "
        f"{sequential_rate:.4f} (rollback {rollback.mean():.4f}, superior {superior.mean():.4f});"
        f" naive repeated z-test {naive_rate:.4f}"
    )
    assert sequential_rate <= ALPHA + 0.01
    assert naive_rate > 2 * ALPHA
    # and the naive single look at the horizon is fine: peeking is what breaks it
    assert float(np.mean(p_naive[:, -1] < ALPHA)) <= ALPHA + 0.015


@pytest.mark.slow
def test_h1_power_and_delay_against_fixed_horizon() -> None:
    rng = np.random.default_rng(20240602)
    ka, kb = _cumulative_errors(rng, 0.10), _cumulative_errors(rng, 0.11)
    lo, hi = _sequential(ka, kb)
    rollback = lo > 0
    reached = rollback.any(axis=1)
    power = float(reached.mean())
    samples_to_decision = np.where(reached, N[np.argmax(rollback, axis=1)], np.inf)
    median = float(np.median(samples_to_decision))
    fixed_n = sample_size_two_proportions(0.10, 0.11, ALPHA, 0.8)
    wrong_way = float(np.mean((hi < 0).any(axis=1)))
    print(
        f"\nH1 10% vs 11%: rollback in {power:.4f} of runs within {N[-1]} per arm; "
        f"median samples per arm to decision {median:.0f}; fixed-horizon n per arm for "
        f"80% power {fixed_n}; wrong-direction decisions {wrong_way:.4f}"
    )
    assert power >= 0.80
    assert np.isfinite(median)
    assert wrong_way <= ALPHA / 2


@pytest.mark.slow
def test_paired_h0_calibration() -> None:
    """Shadow mode: correlated 0/1 losses, equal error rates (10%); d_i ∈ {-1, 0, 1}."""
    rng = np.random.default_rng(20240603)
    # discordant pairs: each direction with probability 0.03 per prediction
    counts = rng.multinomial(BATCH, [0.03, 0.03, 0.94], size=(RUNS, LOOKS))
    plus = np.cumsum(counts[..., 0], axis=1)  # B wrong, A right: d = +1
    minus = np.cumsum(counts[..., 1], axis=1)  # A wrong, B right: d = -1
    tau2 = tau2_for_horizon(0.06 / 10_000, ALPHA)
    p, lo, hi, _ = always_valid_paired_arrays(N, plus - minus, plus + minus, alpha=ALPHA, tau2=tau2)
    _, lo_run, hi_run = running_always_valid(p, lo, hi, N >= MIN_SAMPLES)
    rate = float(np.mean(((lo_run > 0) | (hi_run < 0)).any(axis=1)))
    print(f"\npaired H0 false-positive rate {rate:.4f}")
    assert rate <= ALPHA + 0.01


@pytest.mark.slow
def test_stateful_comparison_reproduces_vectorized_decisions() -> None:
    """The controller-facing object and the simulation path make the same decisions."""
    rng = np.random.default_rng(20240604)
    runs = 12
    ka = np.cumsum(rng.binomial(BATCH, 0.10, (runs, LOOKS)), axis=1)
    kb = np.cumsum(rng.binomial(BATCH, 0.115, (runs, LOOKS)), axis=1)
    p, lo, hi, _ = always_valid_arrays(N, ka, ka, N, kb, kb, alpha=ALPHA, tau2=TAU2)
    _, lo_run, hi_run = running_always_valid(p, lo, hi, N >= MIN_SAMPLES)
    decided = 0
    for r in range(runs):
        cmp = SequentialComparison(alpha=ALPHA, tau2=TAU2, min_samples=MIN_SAMPLES)
        for j in range(LOOKS):
            s = cmp.update(
                LossMoments.from_binary(int(ka[r, j]), int(N[j])),
                LossMoments.from_binary(int(kb[r, j]), int(N[j])),
                at_ms=j,
            )
        hits = np.flatnonzero((lo_run[r] > 0) | (hi_run[r] < 0))
        if hits.size:
            decided += 1
            expected = "rollback" if lo_run[r, hits[0]] > 0 else "promote"
            assert (s.decision, s.since_ms) == (expected, int(hits[0]))
        else:
            assert s.decision == "continue" and s.since_ms is None
    assert decided >= runs // 2  # the cross-check exercised real decisions


@pytest.mark.slow
def test_paired_stateful_detects_regression_before_unpaired_would() -> None:
    """Pairing removes shared variance: shadow detection needs fewer samples."""
    rng = np.random.default_rng(20240605)
    n_total = 40_000
    err_a = rng.random(n_total) < 0.10
    err_b = np.where(err_a, rng.random(n_total) < 0.85, rng.random(n_total) < 0.028)
    tau2 = tau2_for_horizon(0.04 / 10_000, ALPHA)
    paired = PairedSequentialComparison(alpha=ALPHA, tau2=tau2, min_samples=MIN_SAMPLES)
    unpaired = SequentialComparison(alpha=ALPHA, tau2=TAU2, min_samples=MIN_SAMPLES)
    diffs, a, b = LossMoments(), LossMoments(), LossMoments()
    first_paired = first_unpaired = None
    for j, (ea, eb) in enumerate(zip(np.split(err_a, LOOKS), np.split(err_b, LOOKS), strict=True)):
        diffs.update(eb.astype(float) - ea)
        a.update(ea.astype(float))
        b.update(eb.astype(float))
        sp = paired.update(diffs, at_ms=j)
        su = unpaired.update(a, b, at_ms=j)
        first_paired = (
            first_paired if first_paired is not None else (j if sp.decision != "continue" else None)
        )
        first_unpaired = (
            first_unpaired
            if first_unpaired is not None
            else (j if su.decision != "continue" else None)
        )
    print(
        f"\nshadow regression: paired decided at look {first_paired}, unpaired at {first_unpaired}"
    )
    assert sp.decision == "rollback"
    assert first_paired is not None
    assert first_unpaired is None or first_paired <= first_unpaired
