"""Version-comparison statistics: merge laws, oracles, and the sticky decision machine.

Oracles are independent: numpy for moments, SciPy for binomial/normal/chi-square, the
published formulas (Johari et al. 2017; Waudby-Smith et al.) re-typed here, and
published worked examples (Newcombe 1998).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, stats

from monitor.experiments.fixed_horizon import (
    newcombe_interval,
    proportion_difference,
    sample_size_two_proportions,
    two_proportion_z_test,
)
from monitor.experiments.mcnemar import discordant_counts, mcnemar_exact
from monitor.experiments.moments import LossMoments
from monitor.experiments.sequential import (
    PairedSequentialComparison,
    SequentialComparison,
    always_valid,
    always_valid_arrays,
    always_valid_paired,
    normal_mixture,
    running_always_valid,
    tau2_for_horizon,
)
from monitor.experiments.srm import sample_ratio_mismatch

# ---------------------------------------------------------------- LossMoments

losses = st.lists(
    st.floats(0.0, 100.0, allow_nan=False, allow_infinity=False), min_size=0, max_size=200
)


@given(losses, losses)
def test_moments_merge_equals_union(a: list[float], b: list[float]) -> None:
    merged = LossMoments.of(np.array(a)).merge(LossMoments.of(np.array(b)))
    union = LossMoments.of(np.array(a + b))
    assert merged.n == union.n == len(a) + len(b)
    if union.n >= 1:
        assert merged.mean() == pytest.approx(union.mean(), rel=1e-9, abs=1e-9)
        assert union.mean() == pytest.approx(float(np.mean(a + b)), rel=1e-9, abs=1e-9)
    else:
        assert math.isnan(merged.mean())
    if union.n >= 2:
        assert merged.variance() == pytest.approx(union.variance(), rel=1e-9, abs=1e-9)
        # cancellation in Σx² - n·mean² is bounded by eps·Σx²; tolerance scales with it
        scale = 1e-9 * (1.0 + float(np.mean(np.square(a + b))))
        assert union.variance() == pytest.approx(float(np.var(a + b, ddof=1)), abs=scale)
    else:
        assert math.isnan(merged.variance())


@given(losses)
def test_moments_state_round_trips_through_json(a: list[float]) -> None:
    m = LossMoments.of(np.array(a))
    back = LossMoments.from_state(json.loads(json.dumps(m.state())))
    assert back == m


def test_moments_binary_and_validation() -> None:
    x = np.array([0, 1, 1, 0, 0, 1, 0])
    assert LossMoments.from_binary(3, 7) == LossMoments.of(x)
    assert LossMoments.of(x).variance() == pytest.approx(np.var(x, ddof=1))
    m = LossMoments()
    with pytest.raises(ValueError):
        m.update(np.array([0.1, np.nan]))
    assert m.n == 0  # a rejected batch leaves no trace
    with pytest.raises(ValueError):
        LossMoments.from_state({"n": -1, "sum": 0.0, "sum_sq": 0.0})
    with pytest.raises(ValueError):
        LossMoments.from_binary(8, 7)


# ------------------------------------------------------------ mSPRT formulas


@given(
    st.floats(-1.0, 1.0),
    st.floats(1e-6, 1.0),
    st.floats(1e-6, 1.0),
    st.sampled_from([0.01, 0.05, 0.1]),
    st.floats(-1.0, 1.0),
)
def test_mixture_p_value_and_sequence_are_one_test(
    effect: float, v: float, tau2: float, alpha: float, null: float
) -> None:
    """p(θ₀) ≤ α exactly when θ₀ lies outside the confidence sequence (duality)."""
    p, lo, hi = normal_mixture(effect, v, alpha=alpha, tau2=tau2, null=null)
    assert 0.0 <= float(p) <= 1.0  # may underflow to 0 for overwhelming evidence
    margin = 1e-9 * (1 + abs(null))
    if float(p) < alpha * (1 - 1e-9):
        assert not (lo + margin < null < hi - margin)
    elif float(p) > alpha * (1 + 1e-9):
        assert lo - margin <= null <= hi + margin


def test_mixture_matches_johari_two_stream_formula() -> None:
    """Johari, Pekelis & Walsh (2017), two streams of n with known σ²: V = 2σ²/n."""
    n, sigma2, tau2, theta = 5000.0, 0.09, 1e-4, 0.012
    lam = math.sqrt(2 * sigma2 / (2 * sigma2 + n * tau2)) * math.exp(
        n**2 * tau2 * theta**2 / (4 * sigma2 * (2 * sigma2 + n * tau2))
    )
    p, _, _ = normal_mixture(theta, 2 * sigma2 / n, alpha=0.05, tau2=tau2)
    assert float(p) == pytest.approx(min(1.0, 1.0 / lam), rel=1e-12)
    assert float(p) < 1.0


def test_sequence_matches_waudby_smith_conjugate_mixture_margin() -> None:
    """Radius = σ·sqrt(2(tρ²+1)/(t²ρ²)·log(sqrt(tρ²+1)/α)) in unit-variance time t."""
    alpha, rho2 = 0.05, 0.3
    t = np.array([10.0, 100.0, 1000.0, 1e5])
    ws = np.sqrt(2 * (t * rho2 + 1) / (t**2 * rho2) * np.log(np.sqrt(t * rho2 + 1) / alpha))
    _, lo, hi = normal_mixture(0.0, 1.0 / t, alpha=alpha, tau2=rho2)
    np.testing.assert_allclose(hi, ws, rtol=1e-12)
    np.testing.assert_allclose(lo, -ws, rtol=1e-12)


@pytest.mark.parametrize("alpha", [0.01, 0.05, 0.2])
def test_tau2_for_horizon_minimises_radius_there(alpha: float) -> None:
    v_star = 3.7e-5
    tau2 = tau2_for_horizon(v_star, alpha)

    def radius(log_tau2: float) -> float:
        return float(normal_mixture(0.0, v_star, alpha=alpha, tau2=math.exp(log_tau2))[2])

    best = optimize.minimize_scalar(
        radius, bounds=(-30, 5), method="bounded", options={"xatol": 1e-10}
    )
    assert math.log(tau2) == pytest.approx(best.x, abs=1e-3)


def test_uninformative_without_variance() -> None:
    a, b = LossMoments.of(np.zeros(50)), LossMoments.of(np.zeros(50))
    res = always_valid(a, b, 0.05, 1e-3)
    assert res.p_value == 1.0 and res.cs_lower == -math.inf and res.cs_upper == math.inf
    one = always_valid(LossMoments.of(np.ones(1)), b, 0.05, 1e-3)
    assert one.p_value == 1.0


def test_scalar_and_vectorized_agree() -> None:
    rng = np.random.default_rng(3)
    xa, xb = rng.exponential(1.0, 700), rng.exponential(1.2, 900)
    a, b = LossMoments.of(xa), LossMoments.of(xb)
    res = always_valid(a, b, 0.05, 0.01)
    p, lo, hi, eff = always_valid_arrays(
        a.n, a.total, a.total_sq, b.n, b.total, b.total_sq, alpha=0.05, tau2=0.01
    )
    assert (res.p_value, res.cs_lower, res.cs_upper, res.effect) == pytest.approx(
        (float(p), float(lo), float(hi), float(eff)), rel=1e-12
    )
    assert res.effect == pytest.approx(xb.mean() - xa.mean())
    se = math.sqrt(np.var(xa, ddof=1) / xa.size + np.var(xb, ddof=1) / xb.size)
    assert res.std_error == pytest.approx(se, rel=1e-9)
    assert res.cs_lower < res.effect < res.cs_upper


# ------------------------------------------------------ the decision machine


def _stream(rng: np.random.Generator, p_a: float, p_b: float, looks: int, batch: int):
    """Cumulative 0/1-loss moments per look (A, B)."""
    ka = np.cumsum(rng.binomial(batch, p_a, looks))
    kb = np.cumsum(rng.binomial(batch, p_b, looks))
    n = batch * np.arange(1, looks + 1)
    return n, ka, kb


def test_running_p_never_increases_and_interval_never_widens() -> None:
    rng = np.random.default_rng(5)
    n, ka, kb = _stream(rng, 0.2, 0.2, 200, 50)
    cmp = SequentialComparison(
        alpha=0.05, tau2=tau2_for_horizon(2 * 0.16 / 5000, 0.05), min_samples=100
    )
    states = [
        cmp.update(
            LossMoments.from_binary(int(x), int(m)),
            LossMoments.from_binary(int(y), int(m)),
            at_ms=1000 * i,
        )
        for i, (m, x, y) in enumerate(zip(n, ka, kb, strict=True))
    ]
    p = np.array([s.p_value for s in states])
    lo = np.array([s.cs_lower for s in states])
    hi = np.array([s.cs_upper for s in states])
    assert (np.diff(p) <= 0).all() and (np.diff(lo) >= 0).all() and (np.diff(hi) <= 0).all()
    assert np.isfinite(hi[-1]) and hi[-1] - lo[-1] < 0.1
    # identical to the vectorized path used by the simulations
    p1, lo1, hi1, _ = always_valid_arrays(n, ka, ka, n, kb, kb, alpha=0.05, tau2=cmp.tau2)
    pr, lr, hr = running_always_valid(p1, lo1, hi1, n >= 100)
    np.testing.assert_allclose(p, pr, rtol=1e-12)
    np.testing.assert_allclose(lo, lr, rtol=1e-12)
    np.testing.assert_allclose(hi, hr, rtol=1e-12)


def test_burn_in_blocks_decisions_in_both_directions() -> None:
    cmp = SequentialComparison(alpha=0.05, tau2=0.01, min_samples=500)
    bad = cmp.update(LossMoments.from_binary(1, 400), LossMoments.from_binary(300, 400), 1)
    assert bad.decision == "continue" and "burn-in" in bad.reason
    assert bad.cs_lower == -math.inf and bad.p_value == 1.0
    early = SequentialComparison.from_state(json.loads(json.dumps(cmp.state(), allow_nan=False)))
    assert early.state() == cmp.state()
    assert (
        always_valid(
            LossMoments.from_binary(1, 400), LossMoments.from_binary(300, 400), 0.05, 0.01
        ).cs_lower
        > 0
    )  # the data alone would have decided
    after = cmp.update(LossMoments.from_binary(2, 500), LossMoments.from_binary(380, 500), 2)
    assert after.decision == "rollback" and after.since_ms == 2


def test_decisions_are_sticky_and_state_round_trips_mid_stream() -> None:
    """Reach rollback early, then feed a long good stretch: the decision never flaps."""
    rng = np.random.default_rng(7)
    tau2 = tau2_for_horizon(2 * 0.09 / 2000, 0.05)
    live = SequentialComparison(alpha=0.05, tau2=tau2, margin=0.0, min_samples=200)
    a, b = LossMoments(), LossMoments()
    first: int | None = None
    decisions: list[str] = []
    restored: SequentialComparison | None = None
    for i in range(300):
        # B is much worse for the first 20 batches, then much *better* for 280
        pb = 0.30 if i < 20 else 0.02
        a.update(rng.binomial(1, 0.10, 100))
        b.update(rng.binomial(1, pb, 100))
        s = live.update(a, b, at_ms=10_000 + i)
        decisions.append(s.decision)
        if s.decision != "continue" and first is None:
            first = s.at_ms
        if first is not None:
            assert s.decision == "rollback" and s.since_ms == first
        if i == 150:
            blob = json.dumps(live.state(), allow_nan=False)
            restored = SequentialComparison.from_state(json.loads(blob))
        elif restored is not None:
            r = restored.update(a, b, at_ms=10_000 + i)
            assert (r.decision, r.since_ms, r.superior) == (s.decision, s.since_ms, s.superior)
            assert (r.p_value, r.cs_lower, r.cs_upper) == (s.p_value, s.cs_lower, s.cs_upper)
    assert first is not None and first < 10_000 + 40
    # the cumulative data at the end alone would now say "treatment better"
    assert always_valid(a, b, 0.05, tau2).cs_upper < 0
    assert decisions[-1] == "rollback"


def test_promote_non_inferior_then_superior() -> None:
    rng = np.random.default_rng(11)
    tau2 = tau2_for_horizon(2 * 0.09 / 5000, 0.05)
    # equal error rates, margin 0.02: non-inferior but not superior
    ni = SequentialComparison(alpha=0.05, tau2=tau2, margin=0.02, min_samples=200)
    n, ka, kb = _stream(rng, 0.10, 0.10, 200, 100)
    last = None
    for i, (m, x, y) in enumerate(zip(n, ka, kb, strict=True)):
        last = ni.update(
            LossMoments.from_binary(int(x), int(m)), LossMoments.from_binary(int(y), int(m)), i
        )
    assert last is not None and last.decision == "promote"
    assert last.cs_upper < 0.02 and not last.superior and last.cs_lower < 0
    # B clearly better, margin 0: promote for superiority
    sup = SequentialComparison(alpha=0.05, tau2=tau2, margin=0.0, min_samples=200)
    n, ka, kb = _stream(rng, 0.12, 0.08, 200, 100)
    for i, (m, x, y) in enumerate(zip(n, ka, kb, strict=True)):
        last = sup.update(
            LossMoments.from_binary(int(x), int(m)), LossMoments.from_binary(int(y), int(m)), i
        )
    assert last.decision == "promote" and last.superior and last.cs_upper < 0


def test_invalid_on_srm_or_shrinking_counts_and_it_sticks() -> None:
    a, b = LossMoments.from_binary(50, 1000), LossMoments.from_binary(52, 1000)
    srm = SequentialComparison(alpha=0.05, tau2=1e-4, min_samples=100)
    s = srm.update(a, b, 5, srm_mismatch=True)
    assert s.decision == "invalid" and s.since_ms == 5 and "sample-ratio" in s.reason
    assert srm.update(a, b, 6).decision == "invalid"
    shrink = SequentialComparison(alpha=0.05, tau2=1e-4, min_samples=100)
    assert shrink.update(a, b, 1).decision == "continue"
    s = shrink.update(LossMoments.from_binary(5, 100), b, 2)
    assert s.decision == "invalid" and "decreased" in s.reason
    with pytest.raises(ValueError):
        SequentialComparison(alpha=0.05, tau2=1e-4, margin=-0.1)
    with pytest.raises(ValueError):
        SequentialComparison.from_state({**srm.state(), "kind": "paired"})


# ------------------------------------------------------- paired / McNemar


def _shadow_stream(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Correlated errors on the same predictions; B truly worse (11.5% vs 10%)."""
    err_a = rng.random(n) < 0.10
    flip_to_right = rng.random(n) < 0.30  # B right where A was wrong
    flip_to_wrong = rng.random(n) < 0.05  # B wrong where A was right
    err_b = np.where(err_a, ~flip_to_right, flip_to_wrong)
    return err_a.astype(np.float64), err_b.astype(np.float64)


def test_paired_test_and_mcnemar_agree_with_truth() -> None:
    rng = np.random.default_rng(17)
    err_a, err_b = _shadow_stream(rng, 40_000)
    true_effect = 0.9 * 0.05 - 0.1 * 0.30  # P(B wrong) - P(A wrong) = +0.015
    cmp = PairedSequentialComparison(
        alpha=0.05, tau2=tau2_for_horizon(0.08 / 5000, 0.05), min_samples=200
    )
    diffs = LossMoments()
    state = None
    for i, (ea, eb) in enumerate(zip(np.split(err_a, 400), np.split(err_b, 400), strict=True)):
        diffs.update(eb - ea)
        state = cmp.update(diffs, at_ms=i)
    assert state is not None and state.decision == "rollback" and state.effect > 0
    assert state.cs_lower <= true_effect <= state.cs_upper
    assert state.n_a == state.n_b == 40_000
    one = always_valid_paired(diffs, 0.05, cmp.tau2)
    assert one.effect == pytest.approx(err_b.mean() - err_a.mean())

    b, c = discordant_counts(err_a, err_b)
    assert b == int(np.sum((err_a == 1) & (err_b == 0)))
    assert c == int(np.sum((err_a == 0) & (err_b == 1)))
    res = mcnemar_exact(b, c)
    assert res.direction == "treatment_worse" and res.p_value < 0.05
    # McNemar's p against an independent exact computation: both binomial tails
    k, m = min(b, c), b + c
    tails = (
        stats.binom.pmf(np.arange(0, k + 1), m, 0.5).sum()
        + stats.binom.pmf(np.arange(m - k, m + 1), m, 0.5).sum()
    )
    assert res.p_value == pytest.approx(min(1.0, tails), rel=1e-9)


@pytest.mark.parametrize(("b", "c"), [(3, 12), (12, 3), (0, 7), (5, 5), (40, 61)])
def test_mcnemar_small_counts_against_binomial_tails(b: int, c: int) -> None:
    res = mcnemar_exact(b, c)
    m, k = b + c, min(b, c)
    pmf = stats.binom.pmf(np.arange(m + 1), m, 0.5)
    expected = min(1.0, pmf[: k + 1].sum() + pmf[m - k :].sum())
    assert res.p_value == pytest.approx(expected, rel=1e-9)
    assert res.direction == {True: "treatment_worse", False: "treatment_better"}.get(
        c > b if b != c else None, "no_difference"
    )
    assert mcnemar_exact(0, 0).p_value == 1.0


# ------------------------------------------------------------------- SRM


def test_srm_detects_55_45_and_accepts_50_50() -> None:
    bad = sample_ratio_mismatch([11_000, 9_000], [0.5, 0.5])
    assert bad.mismatch and bad.p_value < 0.001
    assert bad.statistic == pytest.approx((1000**2 / 10_000) * 2)  # Σ(o-e)²/e by hand
    assert "mismatch" in bad.reason and "55.0%" in bad.reason
    rng = np.random.default_rng(23)
    n_a = int(rng.binomial(20_000, 0.5))
    ok = sample_ratio_mismatch([n_a, 20_000 - n_a], [1, 1])
    assert not ok.mismatch and ok.p_value >= 0.001
    assert ok.statistic == pytest.approx((n_a - 10_000) ** 2 / 10_000 * 2, rel=1e-9)
    # always-valid p (was the fixed-sample chi-square p, which repeated looks inflate):
    # 1 / (beta-binomial marginal / binomial likelihood), an independent SciPy oracle
    c = 10_000.0
    bf = stats.betabinom.pmf(n_a, 20_000, c / 2, c / 2) / stats.binom.pmf(n_a, 20_000, 0.5)
    assert ok.p_value == pytest.approx(min(1.0, 1.0 / bf), rel=1e-6)
    # uneven configured split (90/10) is the expectation, not a mismatch
    canary = sample_ratio_mismatch([18_000, 2_000], [9, 1])
    assert not canary.mismatch and canary.statistic == pytest.approx(0.0)
    assert not sample_ratio_mismatch([0, 0], [1, 1]).mismatch
    with pytest.raises(ValueError):
        sample_ratio_mismatch([1, 2], [1, 0])


# ---------------------------------------------------------- fixed horizon


@pytest.mark.parametrize(
    ("k_b", "n_b", "k_a", "n_a", "lower", "upper"),
    [
        # Newcombe (1998), Table II, method 10 (hybrid score), examples (a) and (b)
        (56, 70, 48, 80, 0.0524, 0.3339),
        (9, 10, 3, 10, 0.1705, 0.8090),
    ],
)
def test_newcombe_published_examples(
    k_b: int, n_b: int, k_a: int, n_a: int, lower: float, upper: float
) -> None:
    lo, hi = newcombe_interval(k_a, n_a, k_b, n_b)
    assert float(lo) == pytest.approx(lower, abs=1e-4)
    assert float(hi) == pytest.approx(upper, abs=1e-4)


@given(st.integers(1, 400), st.integers(1, 400), st.data())
@settings(max_examples=200, deadline=None)  # a wall-clock deadline fails on a loaded machine
def test_newcombe_matches_independent_construction(n_a: int, n_b: int, data: st.DataObject) -> None:
    k_a, k_b = data.draw(st.integers(0, n_a)), data.draw(st.integers(0, n_b))
    ci_a = stats.binomtest(k_a, n_a).proportion_ci(0.95, method="wilson")
    ci_b = stats.binomtest(k_b, n_b).proportion_ci(0.95, method="wilson")
    pa, pb = k_a / n_a, k_b / n_b
    lo = (pb - pa) - math.hypot(pb - ci_b.low, ci_a.high - pa)
    hi = (pb - pa) + math.hypot(ci_b.high - pb, pa - ci_a.low)
    res = proportion_difference(k_a, n_a, k_b, n_b)
    assert res.lower == pytest.approx(lo, abs=1e-10)
    assert res.upper == pytest.approx(hi, abs=1e-10)
    assert res.lower <= res.difference <= res.upper


def test_z_test_against_scipy() -> None:
    rng = np.random.default_rng(29)
    n_a, n_b = rng.integers(50, 5000, 200), rng.integers(50, 5000, 200)
    k_a, k_b = rng.binomial(n_a, 0.1), rng.binomial(n_b, 0.12)
    z, p = two_proportion_z_test(k_a, n_a, k_b, n_b)
    for i in range(0, 200, 20):
        table = [[k_a[i], n_a[i] - k_a[i]], [k_b[i], n_b[i] - k_b[i]]]
        chi2 = stats.chi2_contingency(table, correction=False)
        assert z[i] ** 2 == pytest.approx(chi2.statistic, rel=1e-9)
        assert p[i] == pytest.approx(chi2.pvalue, rel=1e-9)
        pooled = (k_a[i] + k_b[i]) / (n_a[i] + n_b[i])
        se = math.sqrt(pooled * (1 - pooled) * (1 / n_a[i] + 1 / n_b[i]))
        z_ref = (k_b[i] / n_b[i] - k_a[i] / n_a[i]) / se
        assert p[i] == pytest.approx(2 * stats.norm.sf(abs(z_ref)), rel=1e-9)
        assert z[i] == pytest.approx(z_ref, rel=1e-12)
    assert two_proportion_z_test(0, 10, 0, 10)[1] == 1.0


def test_sample_size_reaches_power_just_there() -> None:
    pa, pb, alpha = 0.10, 0.11, 0.05
    n = sample_size_two_proportions(pa, pb, alpha, 0.8)
    za = stats.norm.isf(alpha / 2)
    pbar = (pa + pb) / 2

    def power(m: int) -> float:
        sd1 = math.sqrt(pa * (1 - pa) + pb * (1 - pb))
        shift = abs(pb - pa) * math.sqrt(m) - za * math.sqrt(2 * pbar * (1 - pbar))
        return float(stats.norm.cdf(shift / sd1))

    assert power(n) >= 0.8 > power(n - 1)
