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

The decisions are on the *additive* effect ``d = p_B - p_A = p_A (ρ - 1)`` with margin δ.
It is bounded over the product of the ρ sequence (level ``α(1-ε)``) and an exact
beta-binomial sequence for ``p_A`` (level ``αε``, Jeffreys mixture), a union bound with
``ε = CONTROL_ALPHA_SHARE``. With δ = 0 the sign of ``d`` is the sign of ``ρ - 1``, so the
``p_A`` sequence only sizes the interval. For a non-inferiority margin the null
``p_B = p_A + δ`` is the ratio ``1 + δ/p_A``, evaluated at the least favourable ``p_A`` the
sequence allows — the "variance restricted to the margin" done exactly, instead of a
plug-in variance at the observed rates (Farrington & Manning 1990 for the fixed-horizon
analogue).

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
    "beta_mixture_cs",
    "beta_mixture_log_lr",
    "error_rate_looks",
    "expected_events_small_arm",
    "horizon_cs",
    "horizon_p_value",
    "prior_concentration",
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


def _ratio(theta: np.ndarray, share: np.ndarray) -> np.ndarray:
    """ρ = p_B/p_A from θ = P(error is the treatment's) and the treatment's share π."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(theta >= 1.0, np.inf, theta * (1.0 - share) / (share * (1.0 - theta)))


def error_rate_looks(
    n_a: np.ndarray,
    k_a: np.ndarray,
    n_b: np.ndarray,
    k_b: np.ndarray,
    *,
    alpha: float,
    share: float,
    concentration: float,
    max_events: float | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Exact conditional test per look from cumulative counts (any broadcastable shape).

    ``share`` is the prior mean of θ's share π (the configured treatment share) and
    ``concentration`` the prior's ``a + b`` (:func:`prior_concentration`); both are fixed
    for the life of a comparison. Returns ``(p_value, cs_lower, cs_upper, effect)`` for
    each look separately, on ``effect = p_B - p_A``; fold over looks with
    :func:`monitor.experiments.sequential.running_always_valid`. With ``max_events`` the
    θ sequence is the group-sequential :func:`horizon_cs` instead of the mixture (valid
    only for looks with at most ``max_events`` errors in total: mask the others).
    """
    if not 0.0 < share < 1.0:
        raise ValueError(f"share must be in (0, 1), got {share}")
    if not concentration > 0.0:
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
    rho_lo, rho_hi = _ratio(theta_lo, pi), _ratio(theta_hi, pi)
    pa_lo, pa_hi = beta_mixture_cs(k_a, n_a - k_a, _JEFFREYS, _JEFFREYS, alpha_control)
    with np.errstate(invalid="ignore"):
        lower = (rho_lo - 1.0) * np.where(rho_lo >= 1.0, pa_lo, pa_hi)
        scale_hi = np.where(rho_hi >= 1.0, pa_hi, pa_lo)
        upper = np.where(np.isinf(rho_hi), np.inf, (rho_hi - 1.0) * scale_hi)
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


def expected_events_small_arm(n_a: int, k_a: int, n_b: int, k_b: int) -> float:
    """Errors the smaller arm is expected to hold at the pooled rate (the burn-in unit)."""
    total = n_a + n_b
    return (k_a + k_b) / total * min(n_a, n_b) if total > 0 else 0.0


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
