"""Exact bounded-loss confidence sequences from moments (Fan et al. 2015 supermartingale).

Oracles: the supermartingale recomputed per observation with numpy (not from moments), and
time-uniform coverage by simulation with a skewed, heavy-right-tailed bounded loss.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.config import ConfigError, settings_from_mapping
from monitor.experiments.bounded import (
    BoundedComparison,
    PairedBoundedComparison,
    bounded_effect_cs,
    bounded_mean_cs,
    bounded_paired_cs,
    lambda_for_horizon,
    loss_bound,
)
from monitor.experiments.moments import LossMoments


def _direct_log_evidence(
    x: np.ndarray, mu: float, bound: float, above: bool, centre: float
) -> float:
    """log Σ_k w_k Π exp(λ_k Y_i - ψ(λ_k) Y_i²), Y per observation, straight from Fan's
    lemma: λ_k = min(centre·e^(k/2), 0.95/c), |k| <= 7, w_k ∝ exp(-(k/2)²/2)."""
    y = x - mu if above else mu - x
    c = mu if above else bound - mu
    k = 0.5 * np.arange(-7, 8)
    lam = np.minimum(centre * np.exp(k), 0.95 / c)
    logw = -(k**2) / 2
    logw = logw - np.log(np.sum(np.exp(logw)))
    psi = (-np.log1p(-lam * c) - lam * c) / c**2
    parts = zip(logw, lam, psi, strict=True)
    terms = np.array([w + np.sum(lk * y - pk * y * y) for w, lk, pk in parts])
    top = terms.max()
    return float(top + np.log(np.sum(np.exp(terms - top))))


@given(
    st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=5, max_size=300),
    st.sampled_from([0.01, 0.05, 0.2]),
)
@settings(max_examples=40, deadline=None)
def test_bounds_are_where_the_direct_supermartingale_reaches_one_over_alpha(
    xs: list[float], alpha: float
) -> None:
    x = np.array(xs)
    m = LossMoments.of(x)
    centre = lambda_for_horizon(0.05, 1_000, alpha, 1.0)
    lo, hi = (float(v) for v in bounded_mean_cs(m.n, m.total, m.total_sq, 1.0, alpha, centre))
    assert 0.0 <= lo <= m.mean() <= hi <= 1.0
    level = math.log(1 / alpha)
    if lo > 1e-6:
        assert _direct_log_evidence(x, lo, 1.0, True, centre) == pytest.approx(level, abs=1e-4)
    if hi < 1 - 1e-6:
        assert _direct_log_evidence(x, hi, 1.0, False, centre) == pytest.approx(level, abs=1e-4)


def test_interval_shrinks_and_is_symmetric_in_reflection() -> None:
    rng = np.random.default_rng(1)
    x = rng.random(20_000) ** 3
    widths = []
    for n in (100, 1_000, 20_000):
        m = LossMoments.of(x[:n])
        lo, hi = bounded_mean_cs(m.n, m.total, m.total_sq, 1.0, 0.025)
        widths.append(float(hi - lo))
        r = LossMoments.of(1.0 - x[:n])  # reflect: the bounds must swap
        rlo, rhi = bounded_mean_cs(r.n, r.total, r.total_sq, 1.0, 0.025)
        assert float(rlo) == pytest.approx(1 - float(hi), abs=1e-9)
        assert float(rhi) == pytest.approx(1 - float(lo), abs=1e-9)
    assert widths[0] > widths[1] > widths[2]


def test_loss_bounds_per_task() -> None:
    assert loss_bound("binary", "error_rate") == 1.0
    assert loss_bound("binary", "log_loss") == pytest.approx(-math.log(1e-15))
    assert loss_bound("multiclass", "squared_error") == 2.0
    assert loss_bound("regression", "squared_error") is None


def test_deciders_are_sticky_and_round_trip() -> None:
    rng = np.random.default_rng(2)
    cmp = BoundedComparison(alpha=0.05, bound=1.0, min_samples=100)
    a, b = LossMoments(), LossMoments()
    s = cmp.update(a, b, at_ms=0)
    assert s.decision == "continue" and "fewer than 100" in s.reason
    for i in range(50):
        a.update(rng.random(200) * 0.5)
        b.update(rng.random(200) * 0.5 + 0.2)  # worse by 0.2
        s = cmp.update(a, b, at_ms=i)
    assert s.decision == "rollback" and s.cs_lower > 0 and s.p_value == 0.0
    back = BoundedComparison.from_state(json.loads(json.dumps(cmp.state(), allow_nan=False)))
    assert back.state() == cmp.state()
    paired = PairedBoundedComparison(alpha=0.05, bound=1.0, min_samples=10)
    d = LossMoments.of(rng.choice([-1.0, 0.0, 1.0], p=[0.2, 0.7, 0.1], size=50))
    ps = paired.update(d, at_ms=1)  # the burn-in: it only starts the sequence
    assert ps.decision == "continue" and "burn-in" in ps.reason
    d = d + LossMoments.of(rng.choice([-1.0, 0.0, 1.0], p=[0.2, 0.7, 0.1], size=5_000))
    ps = paired.update(d, at_ms=2)
    assert ps.decision == "promote" and ps.superior and ps.cs_upper < 0
    back_p = PairedBoundedComparison.from_state(json.loads(json.dumps(paired.state())))
    assert back_p.state() == paired.state()


def test_exact_sequence_is_rejected_for_regression_losses() -> None:
    with pytest.raises(ConfigError, match=r"comparisons\[0\]\.sequence"):
        settings_from_mapping(
            {
                "models": [{"name": "r", "task": "regression", "windows": [{"size": "1h"}]}],
                "comparisons": [{"name": "c", "model": "r", "control": "a", "treatment": "b",
                                 "loss": "squared_error", "sequence": "exact"}],
            }
        )  # fmt: skip


@pytest.mark.slow
def test_time_uniform_validity_with_a_heavy_right_tail() -> None:
    """Clipped-log-loss-like losses: mostly small, 0.2% at the clip (34.5). Equal arms:
    the unpaired sequence excludes 0 at some look in ≤ α of runs; paired likewise."""
    rng = np.random.default_rng(3)
    runs, looks, batch, clip = 300, 150, 100, -math.log(1e-15)

    def draw(size: tuple[int, ...]) -> np.ndarray:
        x = rng.exponential(0.3, size)
        return np.where(rng.random(size) < 0.002, clip, np.minimum(x, clip))

    n = batch * np.arange(1, looks + 1)
    xa, xb = draw((runs, looks, batch)), draw((runs, looks, batch))
    arm = [(n, np.cumsum(x.sum(2), 1), np.cumsum((x * x).sum(2), 1)) for x in (xa, xb)]
    lo, hi = bounded_effect_cs(arm[0], arm[1], clip, 0.05)
    false = ((np.maximum.accumulate(lo, 1) > 0) | (np.minimum.accumulate(hi, 1) < 0)).any(1)
    d = xb - xa
    plo, phi = bounded_paired_cs(
        n, np.cumsum(d.sum(2), 1), np.cumsum((d * d).sum(2), 1), clip, 0.05
    )
    pfalse = ((np.maximum.accumulate(plo, 1) > 0) | (np.minimum.accumulate(phi, 1) < 0)).any(1)
    print(f"\nbounded: unpaired false {false.mean():.4f}, paired false {pfalse.mean():.4f}")
    assert false.mean() <= 0.05 and pfalse.mean() <= 0.05
