"""Exact always-valid confidence sequences for the mean of a bounded loss, from moments.

Why. The plug-in normal mixture (:mod:`.sequential`) is valid only asymptotically. For a
loss known to lie in ``[0, B]`` (Brier score, clipped log loss, 0/1 error) an exact
sequence exists, and it can be computed from the mergeable moments ``(n, Σx, Σx²)``.

Method. For ``Y_i ≥ -c`` with ``E[Y_i | past] = 0`` and ``λ ∈ [0, 1/c)``::

    exp(λ Σ Y_i - ψ_c(λ) Σ Y_i²),    ψ_c(λ) = (-log(1 - cλ) - cλ) / c²

is a nonnegative supermartingale — Fan, Grama & Liu (2015), "Exponential inequalities for
martingales with applications", Electron. J. Probab. 20(1), Lemma 4.1; it is the
inequality behind the empirical-Bernstein and betting confidence sequences of Howard,
Ramdas, McAuliffe & Sekhon (2021) and Waudby-Smith & Ramdas (2023), "Estimating means of
bounded random variables by betting" (JRSS-B). For a candidate mean μ, ``Y_i = x_i - μ ≥
-μ`` (``x ≥ 0``) tests "mean > μ", and ``Y_i = μ - x_i ≥ μ - B`` tests "mean < μ"; both
``Σ Y_i`` and ``Σ Y_i²`` are functions of the moments and μ. A fixed mixture over a
geometric grid of ``cλ`` keeps the supermartingale property (it is the discrete mixture
of Howard et al. 2021 §3.2 and Waudby-Smith & Ramdas' "hedged" grid), so Ville's
inequality gives exact time-uniform bounds for every μ at once. Unlike a betting sequence
with predictable bets it needs no per-observation state, which is what lets the engine
keep one mergeable triple per arm.

Combination: for two arms the effect ``mean_B - mean_A`` is bounded by the four one-sided
bounds, each at α/4 (a union bound); a paired difference ``d ∈ [-B, B]`` is shifted to
``[0, 2B]`` and bounded at α/2 per side.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .moments import LossMoments
from .sequential import ComparisonState, _SequentialDecider

__all__ = [
    "LOG_LOSS_CLIP",
    "BoundedComparison",
    "PairedBoundedComparison",
    "bounded_effect_cs",
    "bounded_mean_cs",
    "bounded_paired_cs",
    "loss_bound",
]

LOG_LOSS_CLIP = 1e-15  # scores are clipped to [ε, 1-ε] before the log (scikit-learn's ε)

_ETAS = np.geomspace(1e-3, 0.95, 24)  # the grid of c·λ; equal weights
_LOG_K = math.log(_ETAS.size)
_ITERATIONS = 64


def loss_bound(task: str, loss: str) -> float | None:
    """The largest value a per-prediction loss can take, or None when it is unbounded."""
    if task == "regression":
        return None
    if loss == "log_loss":
        return -math.log(LOG_LOSS_CLIP)
    if loss == "squared_error" and task == "multiclass":
        return 2.0  # Σₖ(pₖ - 1[y=k])² ≤ 2
    return 1.0


def _log_mixture(s: np.ndarray, v: np.ndarray, c: np.ndarray) -> np.ndarray:
    """log of the equal-weight mixture over the η grid of exp(η/c·s - ψ(η)/c²·v)."""
    eta = _ETAS.reshape((-1,) + (1,) * np.ndim(s))
    psi = -np.log1p(-eta) - eta
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        expo = eta * s / c - psi * v / (c * c)
        top = np.max(expo, axis=0)
        return top + np.log(np.mean(np.exp(expo - top), axis=0))


def bounded_mean_cs(
    n: np.ndarray | float,
    total: np.ndarray | float,
    total_sq: np.ndarray | float,
    bound: float,
    alpha: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact time-uniform bounds ``(lower, upper)`` for the mean of losses in ``[0, bound]``.

    Each side has error α: use ``alpha/2`` for a two-sided 1-α sequence. Vectorized.
    """
    if not (bound > 0 and math.isfinite(bound)):
        raise ValueError(f"bound must be positive and finite, got {bound}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    n = np.asarray(n, dtype=np.float64)
    s1 = np.asarray(total, dtype=np.float64)
    s2 = np.asarray(total_sq, dtype=np.float64)
    n, s1, s2 = np.broadcast_arrays(n, s1, s2)
    level = math.log(1.0 / alpha)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.clip(np.where(n > 0, s1 / np.where(n > 0, n, 1.0), 0.5 * bound), 0.0, bound)

    def evidence(mu: np.ndarray, above: bool) -> np.ndarray:
        # Σ(x-μ) and Σ(x-μ)² from the moments
        s = s1 - n * mu
        v = np.maximum(s2 - 2.0 * mu * s1 + n * mu * mu, 0.0)
        if above:  # "mean > μ": Y = x - μ ≥ -μ
            return _log_mixture(s, v, np.maximum(mu, 1e-300))
        return _log_mixture(-s, v, np.maximum(bound - mu, 1e-300))

    def root(inside: np.ndarray, outside: np.ndarray, above: bool) -> np.ndarray:
        inside, outside = inside.copy(), outside.copy()
        for _ in range(_ITERATIONS):
            mid = 0.5 * (inside + outside)
            out = evidence(mid, above) >= level
            outside = np.where(out, mid, outside)
            inside = np.where(out, inside, mid)
        return outside

    lower = root(mean, np.zeros_like(mean), True)
    upper = root(mean, np.full_like(mean, bound), False)
    lower = np.where(n > 0, lower, 0.0)
    upper = np.where(n > 0, upper, bound)
    return lower, upper


def bounded_effect_cs(
    a: tuple[Any, Any, Any], b: tuple[Any, Any, Any], bound: float, alpha: float
) -> tuple[np.ndarray, np.ndarray]:
    """1-α sequence for ``mean_B - mean_A`` from each arm's ``(n, Σx, Σx²)``."""
    lo_a, hi_a = bounded_mean_cs(*a, bound, alpha / 4.0)
    lo_b, hi_b = bounded_mean_cs(*b, bound, alpha / 4.0)
    return lo_b - hi_a, hi_b - lo_a


def bounded_paired_cs(
    n: Any, total: Any, total_sq: Any, bound: float, alpha: float
) -> tuple[np.ndarray, np.ndarray]:
    """1-α sequence for the mean of paired differences ``d ∈ [-bound, bound]``."""
    n = np.asarray(n, dtype=np.float64)
    s1 = np.asarray(total, dtype=np.float64) + n * bound
    s2 = np.asarray(total_sq, dtype=np.float64) + 2.0 * bound * np.asarray(total) + n * bound**2
    lo, hi = bounded_mean_cs(n, s1, s2, 2.0 * bound, alpha / 2.0)
    return lo - bound, hi - bound


class _BoundedDecider(_SequentialDecider):
    """Bounded-loss variants: a loss bound and a burn-in in samples per arm."""

    __slots__ = ("bound", "min_samples")

    def __init__(
        self, *, alpha: float = 0.05, bound: float, margin: float = 0.0, min_samples: int = 2
    ) -> None:
        super().__init__(alpha=alpha, margin=margin)
        if not (bound > 0 and math.isfinite(bound)):
            raise ValueError(f"bound must be positive and finite, got {bound}")
        if min_samples < 1:
            raise ValueError(f"min_samples must be >= 1, got {min_samples}")
        self.bound = float(bound)
        self.min_samples = int(min_samples)

    def _burn_in_text(self) -> str:
        return f"fewer than {self.min_samples} samples per arm"

    def _config(self) -> dict[str, Any]:
        return {**super()._config(), "bound": self.bound, "min_samples": self.min_samples}

    @classmethod
    def _config_from(cls, state: dict[str, Any]) -> dict[str, Any]:
        return {
            **super()._config_from(state),
            "bound": float(state["bound"]),
            "min_samples": int(state["min_samples"]),
        }


def _p_value(lo: float, hi: float) -> float:
    """No exact p-value is computed here: report 1 unless the sequence excludes 0."""
    return 1.0 if lo <= 0.0 <= hi else 0.0


class BoundedComparison(_BoundedDecider):
    """Exact unpaired comparison of a loss in ``[0, bound]`` (split mode, not error_rate)."""

    __slots__ = ()
    _kind = "bounded"

    def update(
        self, stats_a: LossMoments, stats_b: LossMoments, at_ms: int, *, srm_mismatch: bool = False
    ) -> ComparisonState:
        effect = stats_b.mean() - stats_a.mean()
        look = None
        if min(stats_a.n, stats_b.n) >= self.min_samples:
            lo, hi = bounded_effect_cs(
                (stats_a.n, stats_a.total, stats_a.total_sq),
                (stats_b.n, stats_b.total, stats_b.total_sq),
                self.bound,
                self.alpha,
            )
            look = (_p_value(float(lo), float(hi)), float(lo), float(hi))
        return self._fold(look, effect, stats_a.n, stats_b.n, at_ms, srm_mismatch)


class PairedBoundedComparison(_BoundedDecider):
    """Exact paired (shadow) comparison of a loss in ``[0, bound]``: d ∈ [-bound, bound]."""

    __slots__ = ()
    _kind = "bounded_paired"

    def update(self, diffs: LossMoments, at_ms: int) -> ComparisonState:
        look = None
        if diffs.n >= self.min_samples:
            lo, hi = bounded_paired_cs(diffs.n, diffs.total, diffs.total_sq, self.bound, self.alpha)
            look = (_p_value(float(lo), float(hi)), float(lo), float(hi))
        return self._fold(look, diffs.mean(), diffs.n, diffs.n, at_ms, False)
