"""Exact conditional error-rate test and always-valid SRM: oracles, decisions, simulation.

Oracles: SciPy's beta-binomial and binomial pmfs (the mixture likelihood ratio of a
Bernoulli sequence is the ratio of the two pmfs: binomial coefficients cancel).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from monitor.experiments.conditional import (
    ErrorRateComparison,
    beta_mixture_cs,
    beta_mixture_log_lr,
    error_rate_looks,
    horizon_cs,
    horizon_p_value,
    prior_concentration,
)
from monitor.experiments.simulate import fixed_horizon_power, simulate_error_rate, simulate_srm
from monitor.experiments.srm import log_bayes_factor, sample_ratio_mismatch

ALPHA = 0.05


@given(
    st.integers(0, 300),
    st.integers(0, 300),
    st.floats(0.2, 50.0),
    st.floats(0.2, 50.0),
    st.floats(0.01, 0.99),
)
@settings(max_examples=60)
def test_mixture_lr_matches_beta_binomial_oracle(
    k1: int, k0: int, a: float, b: float, theta0: float
) -> None:
    n = k1 + k0
    oracle = stats.betabinom.logpmf(k1, n, a, b) - stats.binom.logpmf(k1, n, theta0)
    assert float(beta_mixture_log_lr(k1, k0, a, b, theta0)) == pytest.approx(oracle, abs=1e-7)


@given(st.integers(0, 2000), st.integers(0, 2000), st.floats(0.5, 100.0))
@settings(max_examples=60)
def test_cs_bounds_are_the_roots_of_the_boundary(k1: int, k0: int, c: float) -> None:
    a, b = 0.3 * c, 0.7 * c
    lo, hi = (float(x) for x in beta_mixture_cs(k1, k0, a, b, ALPHA))
    level = math.log(1 / ALPHA)
    assert 0.0 <= lo < hi <= 1.0
    if k1 + k0:
        assert lo <= k1 / (k1 + k0) <= hi
    for bound, edge, inward in ((lo, 0.0, 1.0), (hi, 1.0, -1.0)):
        if bound != edge:
            # bisection stops once its bracket is narrower than a float step (or 2⁻⁶⁴): the
            # boundary lies between the bound and one step inward. Near 1 one step moves
            # log M by ~k0·2⁻⁵³/(1-θ), so a tolerance on log M alone would be wrong there.
            step = max(float(np.spacing(bound)), 2.0**-63)
            assert float(beta_mixture_log_lr(k1, k0, a, b, bound)) >= level - 1e-7
            assert float(beta_mixture_log_lr(k1, k0, a, b, bound + inward * step)) < level + 1e-7
    # inside the sequence the martingale is below 1/α
    mid = 0.5 * (lo + hi)
    assert float(beta_mixture_log_lr(k1, k0, a, b, mid)) < level


@given(st.integers(0, 5000), st.integers(0, 5000), st.floats(0.5, 100.0), st.floats(0.05, 0.95))
@settings(max_examples=80, deadline=None)  # two bisections a case: slow under load
def test_one_look_bisects_to_the_vectorized_bounds(
    k1: int, k0: int, c: float, share: float
) -> None:
    """A single look bisects in Python floats (10x cheaper than numpy for one value); its
    bounds must be those of the same look inside an array, to 1e-12 (numpy's vectorized
    log may round differently from libm's in the last bit, which can flip one halving)."""
    a, b = share * c, (1 - share) * c
    one = beta_mixture_cs(k1, k0, a, b, ALPHA)
    many = beta_mixture_cs(np.array([k1, k0 + 1]), np.array([k0, k1]), a, b, ALPHA)
    got = [float(x) for x in one]
    assert got == pytest.approx([float(many[0][0]), float(many[1][0])], rel=1e-12, abs=1e-15)


def test_effect_interval_and_p_value_agree_on_the_sign() -> None:
    """p ≤ α(1-ε) exactly when the effect interval excludes 0 (one test, two readings)."""
    rng = np.random.default_rng(3)
    n_a = rng.integers(1000, 100_000, 500)
    n_b = rng.integers(100, 20_000, 500)
    k_a = rng.binomial(n_a, 0.01)
    k_b = rng.binomial(n_b, rng.choice([0.005, 0.01, 0.02], 500))
    p, lo, hi, effect = error_rate_looks(
        n_a, k_a, n_b, k_b, alpha=ALPHA, share=0.1, concentration=30.0
    )
    excludes = (lo > 0) | (hi < 0)
    rejects = p <= ALPHA * 0.95
    assert np.array_equal(excludes, rejects)
    assert np.all((lo <= effect) & (effect <= hi))
    assert 0 < excludes.sum() < 500  # both outcomes exercised


def test_burn_in_counts_expected_events_and_state_round_trips() -> None:
    cmp = ErrorRateComparison(alpha=ALPHA, share=0.1, concentration=20.0, min_events=10)
    # 90/10 at 0.2%: 2,000 rows in the small arm hold 4.2 expected errors -> burn-in
    s = cmp.update(18_000, 36, 2_000, 6, at_ms=1)
    assert s.decision == "continue" and "expected errors" in s.reason and s.p_value == 1.0
    s = cmp.update(810_000, 1_600, 90_000, 600, at_ms=2)  # 0.2% vs 0.67%: clearly worse
    assert s.decision == "rollback" and s.since_ms == 2 and s.cs_lower > 0
    back = ErrorRateComparison.from_state(json.loads(json.dumps(cmp.state(), allow_nan=False)))
    assert back.state() == cmp.state()
    later = back.update(8_100_000, 16_000, 900_000, 1_800, at_ms=3)  # now equal
    assert later.decision == "rollback" and later.since_ms == 2  # sticky
    with pytest.raises(ValueError):
        cmp.update(10, 11, 10, 0, at_ms=4)
    fresh = ErrorRateComparison(alpha=ALPHA, share=0.1, concentration=20.0)
    assert fresh.update(18_000, 36, 2_000, 6, at_ms=1).decision == "continue"
    assert fresh.update(80, 0, 10, 0, at_ms=2).decision == "invalid"  # counts went back


def test_promote_needs_the_margin_at_the_least_favourable_control_rate() -> None:
    cmp = ErrorRateComparison(
        alpha=ALPHA, share=0.5, concentration=50.0, margin=0.002, min_events=10
    )
    s = cmp.update(500_000, 5_000, 500_000, 5_000, at_ms=1)  # equal at 1%
    assert s.decision == "promote" and not s.superior and s.cs_upper < 0.002 < 0.0 + 1
    worse = ErrorRateComparison(
        alpha=ALPHA, share=0.5, concentration=50.0, margin=0.002, min_events=10
    )
    # worse by exactly the margin: never promoted, whatever the size
    assert worse.update(500_000, 5_000, 500_000, 6_000, at_ms=1).decision != "promote"


def test_srm_always_valid_p_against_beta_binomial_oracle() -> None:
    c = 10_000.0
    res = sample_ratio_mismatch([9_400, 10_600], [1, 1], concentration=c)
    bf = stats.betabinom.pmf(10_600, 20_000, c / 2, c / 2) / stats.binom.pmf(10_600, 20_000, 0.5)
    assert bf > 1 / 0.001 and res.mismatch
    assert res.p_value == pytest.approx(1 / bf, rel=1e-6)
    three = log_bayes_factor(np.array([100, 200, 700]), np.array([0.1, 0.2, 0.7]), 50.0)
    assert float(three) < 0  # exactly on the split: evidence for the null


@pytest.mark.slow
@pytest.mark.parametrize("rate", [0.10, 0.01, 0.002])
@pytest.mark.parametrize("share", [0.5, 0.1, 0.9])
def test_false_decision_rate_at_equal_rates(rate: float, share: float) -> None:
    """Acceptance: ≤ α + 0.01 with a look every 100 rows (CI size; bench: full size)."""
    sim = simulate_error_rate(rate, rate, share, runs=400, looks=300, seed=int(rate * 1e4))
    print(f"\n{rate:.1%} {share:.0%}: rollback {sim.rollback:.4f} promote {sim.promote:.4f}")
    assert sim.any_decision <= ALPHA + 0.01


@pytest.mark.slow
def test_worse_by_the_margin_is_rarely_promoted() -> None:
    sim = simulate_error_rate(0.002, 0.003, 0.1, runs=400, looks=1000, margin=0.001, seed=7)
    print(f"\nworse by the margin: promote {sim.promote:.4f}")
    assert sim.promote <= ALPHA


@pytest.mark.slow
def test_power_one_percent_against_one_point_two() -> None:
    """90/10, 1% vs 1.2%. No test with ≤ α/2 false rollbacks (sequential or not) reaches
    80% by 200k total: the exact fixed-horizon test there has 72%
    (:func:`fixed_horizon_power`); the mixture reaches 80% by 400-500k."""
    sim = simulate_error_rate(0.01, 0.012, 0.1, runs=200, looks=500, batch=1000, seed=11)
    print(f"\npower {sim.rollback:.3f}, median rows {sim.median_rows_to_rollback:.0f}")
    assert sim.rollback >= 0.80 and sim.promote == 0.0
    ceiling = fixed_horizon_power(0.01, 0.012, 0.1, rows=200_000, alpha_side=0.025, runs=20_000)
    assert 0.70 <= ceiling <= 0.745  # 0.722 at 100,000 runs (bench)


@pytest.mark.slow
def test_correct_split_is_rarely_marked_srm_over_4000_looks() -> None:
    rate = simulate_srm(0.1, runs=500, looks=4000, seed=5)
    print(f"\nSRM false alarm over 4,000 looks: {rate:.4f}")
    assert rate <= 0.01


def test_prior_concentration_is_positive_and_grows_with_events() -> None:
    assert prior_concentration(10, ALPHA) >= 2.0
    assert prior_concentration(10_000, ALPHA) > prior_concentration(1_000, ALPHA) > 2.0
    with pytest.raises(ValueError):
        prior_concentration(0, ALPHA)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 3000),
    st.integers(0, 3000),
    st.floats(0.001, 0.2),
    st.floats(100.0, 10_000.0),
)
def test_horizon_cs_bounds_sit_on_the_boundary(
    k1: int, k0: int, alpha: float, k_max: float
) -> None:
    """Each bound solves |k1 − θk| = c·sqrt(θ(1 − θ)K): the p-value there is α."""
    lo, hi = (float(x) for x in horizon_cs(k1, k0, alpha, k_max))
    assert 0.0 <= lo <= hi <= 1.0
    if k1 + k0 > 0:
        assert lo <= k1 / (k1 + k0) <= hi
    for bound in (lo, hi):
        if 0.0 < bound < 1.0:
            assert float(horizon_p_value(k1, k0, bound, k_max)) == pytest.approx(alpha, rel=1e-6)
    mid = 0.5 * (lo + hi)
    if 0.0 < mid < 1.0 and hi - lo > 1e-9:
        assert float(horizon_p_value(k1, k0, mid, k_max)) > alpha


@pytest.mark.slow
def test_horizon_design_power_and_error_at_the_planned_size() -> None:
    """The group-sequential horizon sequence at the audit's power point, in the same number of
    errors as 1 % vs 1.2 % (90/10) at 200k rows: 10 % vs 12 % at 20k rows, 2,040 expected
    errors, a look every 100 rows. Bench (full size): 0.70 vs 0.44 for the mixture; the
    exact fixed-horizon test at α/2 per side reaches 0.72, so no design reaches 0.80."""
    kw = {"runs": 400, "looks": 200, "batch": 100, "seed": 13}
    horizon = simulate_error_rate(0.10, 0.12, 0.1, max_events=2040, **kw)
    mixture = simulate_error_rate(0.10, 0.12, 0.1, **kw)
    print(f"\nhorizon {horizon.rollback:.3f} mixture {mixture.rollback:.3f}")
    assert horizon.promote == 0.0 and horizon.rollback >= mixture.rollback + 0.15
    assert 0.62 <= horizon.rollback <= 0.78  # ±3 s.e. of 400 runs around 0.70
    null = simulate_error_rate(0.10, 0.10, 0.1, max_events=2040, **kw)
    print(f"null: {null.any_decision:.4f}")
    assert null.any_decision <= ALPHA + 0.01
