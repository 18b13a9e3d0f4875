"""Exact always-valid comparison of two error rates by conditioning on the errors.

Why not the plug-in normal mixture (:mod:`.sequential`) for error rates. Its variance
``p̂(1-p̂)/n`` of a small arm with 0–3 errors is nearly zero, so with rare errors and an
unequal split (a 10% canary at a 0.2% error rate) the false decision rate reaches several
times α. The test here has no variance to estimate.

The conditional reduction. Labeled predictions are assigned to the treatment with share
``π`` and err with probability ``p_A`` (control) or ``p_B`` (treatment). Given that a
prediction is an error, it belongs to the treatment with probability::

    θ = π ρ / (π ρ + 1 - π),        ρ = p_B / p_A

so the arm labels of the successive errors are i.i.d. Bernoulli(θ), whatever ``p_A`` is
(the same reduction as the conditional test of two Poisson rates, Lehmann & Romano,
*Testing Statistical Hypotheses*, §4.5, and the "rate ratio" mSPRT of Lindon & Malek 2022).
With a Beta(a, b) mixture over θ, the likelihood ratio against ``θ₀``::

    M_t(θ₀) = B(a + k_B, b + k_A) / B(a, b) / (θ₀^k_B (1 - θ₀)^k_A)

is a nonnegative martingale under θ₀ with ``M_0 = 1``; by Ville's inequality
``P(∃t: M_t(θ₀) ≥ 1/α) ≤ α``. This is Robbins' (1970) beta-binomial mixture, the
"mixture SPRT" of Johari, Pekelis & Walsh (2017) for a Bernoulli stream. Inverting it gives
an exact confidence sequence ``{θ₀ : M_t(θ₀) < 1/α}`` for θ, hence for ρ (a monotone map),
and ``p_t = min(1, 1/M_t(π))`` is the always-valid p-value of "equal error rates".
No burn-in is needed for validity; :class:`ErrorRateComparison` still waits for a few
expected errors in the small arm so that a decision rests on evidence, not on one event.

The decisions are on the *additive* effect ``d = p_B - p_A`` with margin δ. With
``p̄ = (1 - π) p_A + π p_B`` the error rate of a labeled row, ``p_A = p̄ (1 - θ)/(1 - π)``
and ``p_B = p̄ θ/π``, so ``d = p̄ (θ - π) / (π (1 - π))`` — linear in θ. It is bounded over
the product of the θ sequence (level ``α(1-ε)``) and an exact beta-binomial sequence for
``p̄`` from the pooled errors (level ``αε``, Jeffreys mixture), a union bound with
``ε = CONTROL_ALPHA_SHARE``. With δ = 0 the sign of ``d`` is the sign of ``θ - π``, so the
``p̄`` sequence only sizes the interval. For a non-inferiority margin each end is taken at
the least favourable ``p̄`` the sequence allows — the "variance restricted to the margin"
done exactly, instead of a plug-in variance at the observed rates (Farrington & Manning
1990 for the fixed-horizon analogue). The pooled rate rests on every error, so the bound
stays informative when one arm has none.

Shadow mode (both versions score every id) is the same test on the *discordant pairs*
(McNemar 1947): a pair where exactly one version errs is the treatment's with probability
``θ = r_B/(r_A + r_B)``, ``r`` the rates of "only this version wrong", and
``d = p_B - p_A = r_B - r_A = q (2θ - 1)`` with ``q`` the discordance rate per pair — the
formula above with π = ½ and ``p̄ = q/2``; the Beta-mixture sequence on θ is then an
always-valid, exact sequential McNemar test.

The share π. The model needs the labeled share; we plug in the realised share
``n_B / (n_A + n_B)``. Under equal rates that is exactly the conditional mean share of
the errors given which rows were labeled (the hypergeometric, less dispersed than the
binomial the mixture assumes), and rows outnumber errors by the inverse error rate, so its
noise is negligible; the configured split itself is checked by :mod:`.srm`. Simulation
(``bench/stats_sim.py``) measures the result in the hard cases.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import special

from .sequential import ComparisonState, _SequentialDecider, tau2_for_horizon

__all__ = [
    "CONTROL_ALPHA_SHARE",
    "ErrorRateComparison",
    "PairedErrorRateComparison",
    "beta_mixture_cs",
    "beta_mixture_log_lr",
    "error_rate_looks",
    "expected_events_small_arm",
    "horizon_concentration",
    "horizon_cs",
    "horizon_p_value",
    "prior_concentration",
    "rarer_class_rows",
]

CONTROL_ALPHA_SHARE = 0.05  # ε: the share of α spent on the control's error-rate sequence
_JEFFREYS = 0.5
_ITERATIONS = 64


def prior_concentration(expected_errors: float, alpha: float) -> float:
    """Beta prior concentration ``a + b`` tuned for ``expected_errors`` at the horizon.

    A Beta(cθ, c(1-θ)) prior has variance ≈ θ(1-θ)/c; the mixture boundary is tightest
    where that variance is ``r`` times the estimator's variance θ(1-θ)/K, with the same
    ``r`` as the normal mixture (Howard et al. 2021 §3.5; :func:`tau2_for_horizon`), so
    ``c = K / r``. Any positive value keeps the test exact; this only places its power.
    """
    if not (expected_errors > 0 and math.isfinite(expected_errors)):
        raise ValueError(f"expected_errors must be positive, got {expected_errors}")
    r = tau2_for_horizon(1.0, alpha)
    return max(expected_errors / r, 2.0)


def horizon_concentration(
    n_a: int, k_a: int, n_b: int, k_b: int, horizon: float, share: float, alpha: float
) -> float:
    """:func:`prior_concentration` for the errors expected when the smaller arm reaches
    ``horizon`` rows, at the pooled error rate seen so far (1 % before any error).

    The pooled count carries no information on which arm the errors fall in, so tuning on
    it keeps the conditional test exact. ``share`` is the treatment's configured share
    (½ for the discordant pairs of a shadow comparison)."""
    total = n_a + n_b
    rate = (k_a + k_b) / total if total and k_a + k_b else 0.01
    return prior_concentration(rate * horizon / min(share, 1.0 - share), alpha)


def beta_mixture_log_lr(
    k1: np.ndarray | float,
    k0: np.ndarray | float,
    a: float,
    b: float,
    theta0: np.ndarray | float,
) -> np.ndarray:
    """``log M(θ₀)``: Beta(a, b) mixture likelihood ratio of ``k1`` ones and ``k0`` zeros."""
    k1 = np.asarray(k1, dtype=np.float64)
    k0 = np.asarray(k0, dtype=np.float64)
    theta0 = np.asarray(theta0, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_marginal = special.betaln(a + k1, b + k0) - special.betaln(a, b)
        return log_marginal - special.xlogy(k1, theta0) - special.xlog1py(k0, -theta0)


def beta_mixture_cs(
    k1: np.ndarray | float, k0: np.ndarray | float, a: float, b: float, alpha: float
) -> tuple[np.ndarray, np.ndarray]:
    """Exact 1-α confidence sequence for a Bernoulli mean: ``{θ : M(θ) < 1/α}``.

    ``log M(θ)`` is convex in θ with its minimum (≤ 0: marginal ≤ maximum likelihood) at
    ``θ̂ = k1/(k1+k0)``, so each bound is the single root on its side, found by
    vectorized bisection (64 halvings: exact to floating point for any θ̂).
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    k1 = np.asarray(k1, dtype=np.float64)
    k0 = np.asarray(k0, dtype=np.float64)
    k1, k0 = np.broadcast_arrays(k1, k0)
    level = math.log(1.0 / alpha)
    total = k1 + k0
    with np.errstate(divide="ignore", invalid="ignore"):
        hat = np.where(total > 0, k1 / np.where(total > 0, total, 1.0), a / (a + b))

    # log M(θ) = log marginal - log likelihood(θ); the marginal does not depend on θ
    threshold = special.betaln(a + k1, b + k0) - special.betaln(a, b) - level

    def root(inside: np.ndarray, outside: np.ndarray) -> np.ndarray:
        # invariant: log M(inside) < level <= log M(outside)
        if inside.ndim == 0 and np.isfinite([k1, k0, threshold, inside]).all():
            args = (float(k1), float(k0), float(threshold), float(inside), float(outside))
            return np.asarray(_bisect_one(*args))
        inside, outside = inside.copy(), outside.copy()
        with np.errstate(divide="ignore", invalid="ignore"):  # once: it costs µs to enter
            for _ in range(_ITERATIONS):
                mid = 0.5 * (inside + outside)
                loglik = special.xlogy(k1, mid) + special.xlog1py(k0, -mid)
                out = loglik <= threshold
                outside = np.where(out, mid, outside)
                inside = np.where(out, inside, mid)
        return outside

    lower = np.where(k1 > 0, root(hat, np.zeros_like(hat)), 0.0)
    upper = np.where(k0 > 0, root(hat, np.ones_like(hat)), 1.0)
    return lower, upper


def _bisect_one(k1: float, k0: float, threshold: float, inside: float, outside: float) -> float:
    """:func:`beta_mixture_cs`'s bisection for one look in Python floats: the same
    halvings as the vectorized one (its bounds to the last bit or two: numpy's log may
    round differently from libm's), without numpy's per-call cost — the daemon and
    replay look once per evaluation step."""
    for _ in range(_ITERATIONS):
        mid = 0.5 * (inside + outside)
        loglik = _xlogy(k1, mid) + _xlogy1p(k0, -mid)
        if loglik <= threshold:
            outside = mid
        else:
            inside = mid
    return outside


def _xlogy(x: float, y: float) -> float:
    if x == 0.0:
        return 0.0
    return x * math.log(y) if y > 0.0 else (-math.inf if y == 0.0 else math.nan)


def _xlogy1p(x: float, y: float) -> float:
    if x == 0.0:
        return 0.0
    return x * math.log1p(y) if y > -1.0 else (-math.inf if y == -1.0 else math.nan)


def horizon_cs(
    k1: np.ndarray | float, k0: np.ndarray | float, alpha: float, max_events: float
) -> tuple[np.ndarray, np.ndarray]:
    """1-α confidence sequence for a Bernoulli mean, valid up to ``max_events`` trials.

    The group-sequential alternative to :func:`beta_mixture_cs` for a comparison with a
    planned maximum size: the O'Brien–Fleming-type boundary of Lan & DeMets (1983) with
    continuous monitoring, i.e. a *constant* boundary on the score scale,
    ``|k1 − θk| < c·sqrt(θ(1 − θ)·K)`` with K = ``max_events``. By the reflection principle
    a Brownian path crosses a constant level c·√K before time K with probability
    2(1 − Φ(c)) (Jennison & Turnbull 2000, §7.4), so ``c = Φ⁻¹(1 − α/4)`` puts α/2 on each
    side; looks at discrete times cross less often. Solving the boundary for θ gives a
    Wilson-type quadratic. Beyond ``max_events`` trials it guarantees nothing (callers stop
    looking there). Its power at the horizon is that of a fixed-horizon test at level
    ≈ α/2 per side less about one point, the price of looking; ``bench/stats_sim.py``
    measures it.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if not (max_events > 0 and math.isfinite(max_events)):
        raise ValueError(f"max_events must be positive, got {max_events}")
    k1 = np.asarray(k1, dtype=np.float64)
    k0 = np.asarray(k0, dtype=np.float64)
    k = k1 + k0
    c2k = float(special.ndtri(1.0 - alpha / 4.0)) ** 2 * max_events
    # (k1 − θk)² = c²K·θ(1 − θ)  ⇔  (k² + c²K)θ² − (2k1k + c²K)θ + k1² = 0
    a = k * k + c2k
    b = 2.0 * k1 * k + c2k
    disc = np.sqrt(np.maximum(b * b - 4.0 * a * k1 * k1, 0.0))
    lower = np.where(k1 > 0, np.clip((b - disc) / (2.0 * a), 0.0, 1.0), 0.0)
    upper = np.where(k0 > 0, np.clip((b + disc) / (2.0 * a), 0.0, 1.0), 1.0)  # exact roots
    return lower, upper


def horizon_p_value(
    k1: np.ndarray | float, k0: np.ndarray | float, theta0: np.ndarray | float, max_events: float
) -> np.ndarray:
    """The smallest α at which :func:`horizon_cs` excludes ``theta0`` (two-sided)."""
    k1 = np.asarray(k1, dtype=np.float64)
    k = k1 + np.asarray(k0, dtype=np.float64)
    theta0 = np.asarray(theta0, dtype=np.float64)
    z = np.abs(k1 - theta0 * k) / np.sqrt(theta0 * (1.0 - theta0) * max_events)
    return np.minimum(1.0, 4.0 * special.ndtr(-z))


def error_rate_looks(
    n_a: np.ndarray,
    k_a: np.ndarray,
    n_b: np.ndarray,
    k_b: np.ndarray,
    *,
    alpha: float,
    share: float,
    concentration: float | np.ndarray,
    max_events: float | None = None,
    paired: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Exact conditional test per look from cumulative counts (any broadcastable shape).

    ``share`` is the prior mean of θ's share π (the configured treatment share) and
    ``concentration`` the prior's ``a + b`` (:func:`prior_concentration`); both are fixed
    for the life of a comparison. Returns ``(p_value, cs_lower, cs_upper, effect)`` for
    each look separately, on ``effect = p_B - p_A``; fold over looks with
    :func:`monitor.experiments.sequential.running_always_valid`. With ``max_events`` the
    θ sequence is the group-sequential :func:`horizon_cs` instead of the mixture (valid
    only for looks with at most ``max_events`` errors in total: mask the others).
    ``paired``: the counts are a shadow comparison's discordant pairs — ``n_a == n_b``
    pairs, ``k_a`` with only A wrong, ``k_b`` with only B wrong — and π is ½.
    """
    if not 0.0 < share < 1.0:
        raise ValueError(f"share must be in (0, 1), got {share}")
    if not np.all(np.asarray(concentration) > 0.0):
        raise ValueError(f"concentration must be positive, got {concentration}")
    n_a, k_a, n_b, k_b = (np.asarray(x, dtype=np.float64) for x in (n_a, k_a, n_b, k_b))
    a, b = concentration * share, concentration * (1.0 - share)
    alpha_ratio = alpha * (1.0 - CONTROL_ALPHA_SHARE)
    alpha_control = alpha * CONTROL_ALPHA_SHARE
    ok = (n_a > 0) & (n_b > 0)
    safe_a, safe_b = np.where(ok, n_a, 1.0), np.where(ok, n_b, 1.0)
    pi = safe_b / (safe_a + safe_b)  # realised labeled share of the treatment
    if max_events is None:
        theta_lo, theta_hi = beta_mixture_cs(k_b, k_a, a, b, alpha_ratio)
    else:
        theta_lo, theta_hi = horizon_cs(k_b, k_a, alpha_ratio, max_events)
    # d = p_B − p_A = p̄·(θ − π)/(π(1 − π)), p̄ the pooled error rate of a labeled row
    # (of a pair, halved, when paired): linear in θ, so each end is the θ end times the
    # least favourable p̄ of its sequence
    errors = k_a + k_b
    trials = np.where(ok, safe_a, 0.0) if paired else n_a + n_b
    pool_lo, pool_hi = beta_mixture_cs(
        errors, np.maximum(trials - errors, 0.0), _JEFFREYS, _JEFFREYS, alpha_control
    )
    if paired:
        pool_lo, pool_hi = pool_lo / 2.0, pool_hi / 2.0
    scale = 1.0 / (pi * (1.0 - pi))
    g_lo, g_hi = (theta_lo - pi) * scale, (theta_hi - pi) * scale
    lower = g_lo * np.where(g_lo >= 0.0, pool_lo, pool_hi)
    upper = g_hi * np.where(g_hi >= 0.0, pool_hi, pool_lo)
    if max_events is None:
        p = np.minimum(1.0, np.exp(-beta_mixture_log_lr(k_b, k_a, a, b, pi)))
    else:
        p = horizon_p_value(k_b, k_a, pi, max_events)
    effect = k_b / safe_b - k_a / safe_a
    return (
        np.where(ok, p, 1.0),
        np.where(ok, lower, -np.inf),
        np.where(ok, upper, np.inf),
        np.where(ok, effect, np.nan),
    )


def expected_events_small_arm(n_a: Any, k_a: Any, n_b: Any, k_b: Any) -> Any:
    """Errors the smaller arm is expected to hold at the pooled rate (the burn-in unit;
    vectorized, 0 without rows)."""
    n_a, n_b = np.asarray(n_a, np.float64), np.asarray(n_b, np.float64)
    k = np.asarray(k_a, np.float64) + np.asarray(k_b, np.float64)
    total = n_a + n_b
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(total > 0, k / np.where(total > 0, total, 1.0), 0.0) * np.minimum(n_a, n_b)
    return float(out) if out.ndim == 0 else out


def rarer_class_rows(positives: Any, rows: Any, small_arm: Any) -> Any:
    """Expected rows of the rarer class in the smaller arm: the pooled share of the rarer
    class (positives or negatives) times the smaller arm's rows — the burn-in unit of a
    binary classifier's log loss, Brier score and absolute error, whose spread comes from
    that class (vectorized; 0 without rows)."""
    pos, n = np.asarray(positives, np.float64), np.asarray(rows, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(n > 0, np.minimum(pos, n - pos) / np.where(n > 0, n, 1.0), 0.0)
    out = share * np.asarray(small_arm, np.float64)
    return float(out) if out.ndim == 0 else out


class ErrorRateComparison(_SequentialDecider):
    """Exact always-valid A/B (canary) comparison of error rates (conditional test).

    ``update`` takes the *cumulative* labeled rows and errors of each arm. Burn-in is
    counted in expected errors of the smaller arm (``min_events``), not rows: what makes
    a rare-event comparison informative is events. Same sticky decisions, p-value and
    interval semantics as :class:`monitor.experiments.sequential.SequentialComparison`;
    the interval is on ``p_B - p_A``.
    """

    __slots__ = ("concentration", "min_events", "share")
    _kind = "error_rate"

    def __init__(
        self,
        *,
        alpha: float = 0.05,
        share: float,
        concentration: float,
        margin: float = 0.0,
        min_events: float = 10.0,
    ) -> None:
        super().__init__(alpha=alpha, margin=margin)
        if not 0.0 < share < 1.0:
            raise ValueError(f"share must be in (0, 1), got {share}")
        if not (concentration > 0.0 and math.isfinite(concentration)):
            raise ValueError(f"concentration must be positive, got {concentration}")
        if not min_events >= 0.0:
            raise ValueError(f"min_events must be >= 0, got {min_events}")
        self.share = float(share)
        self.concentration = float(concentration)
        self.min_events = float(min_events)

    def update(
        self, n_a: int, k_a: int, n_b: int, k_b: int, at_ms: int, *, srm_mismatch: bool = False
    ) -> ComparisonState:
        if not (0 <= k_a <= n_a and 0 <= k_b <= n_b):
            raise ValueError(f"need 0 <= errors <= rows, got {k_a}/{n_a}, {k_b}/{n_b}")
        p, lo, hi, effect = error_rate_looks(
            n_a, k_a, n_b, k_b, alpha=self.alpha, share=self.share, concentration=self.concentration
        )
        burned = expected_events_small_arm(n_a, k_a, n_b, k_b) >= self.min_events
        look = (float(p), float(lo), float(hi)) if burned and min(n_a, n_b) > 0 else None
        return self._fold(look, float(effect), n_a, n_b, at_ms, srm_mismatch)

    def _burn_in_text(self) -> str:
        return f"fewer than {self.min_events:g} expected errors in the smaller arm"

    def _config(self) -> dict[str, Any]:
        return {
            **super()._config(),
            "share": self.share,
            "concentration": self.concentration,
            "min_events": self.min_events,
        }

    @classmethod
    def _config_from(cls, state: dict[str, Any]) -> dict[str, Any]:
        return {
            **super()._config_from(state),
            "share": float(state["share"]),
            "concentration": float(state["concentration"]),
            "min_events": float(state["min_events"]),
        }


class PairedErrorRateComparison(ErrorRateComparison):
    """Exact always-valid shadow comparison of error rates: the conditional test on the
    discordant pairs (a sequential McNemar test; see the module docstring).

    ``update`` takes the cumulative pairs and the pairs where only the control (A) or only
    the treatment (B) is wrong. Burn-in: ``min_events`` discordant pairs. The share is ½.
    """

    __slots__ = ()
    _kind = "error_rate_paired"

    def __init__(
        self,
        *,
        alpha: float = 0.05,
        concentration: float,
        margin: float = 0.0,
        min_events: float = 10.0,
        share: float = 0.5,
    ) -> None:
        if share != 0.5:
            raise ValueError(f"a paired comparison's share is 1/2, got {share}")
        super().__init__(
            alpha=alpha,
            share=0.5,
            concentration=concentration,
            margin=margin,
            min_events=min_events,
        )

    def update_pairs(
        self, pairs: int, only_a_wrong: int, only_b_wrong: int, at_ms: int
    ) -> ComparisonState:
        if min(only_a_wrong, only_b_wrong) < 0 or only_a_wrong + only_b_wrong > pairs:
            raise ValueError(
                f"need discordant pairs within the pairs, got {only_a_wrong} + {only_b_wrong} "
                f"of {pairs}"
            )
        p, lo, hi, effect = error_rate_looks(
            pairs, only_a_wrong, pairs, only_b_wrong, alpha=self.alpha, share=0.5,
            concentration=self.concentration, paired=True,
        )  # fmt: skip
        burned = only_a_wrong + only_b_wrong >= self.min_events
        look = (float(p), float(lo), float(hi)) if burned and pairs > 0 else None
        return self._fold(look, float(effect), pairs, pairs, at_ms, False)

    def _burn_in_text(self) -> str:
        return f"fewer than {self.min_events:g} discordant pairs"
