"""Exact always-valid confidence sequences for the mean of a bounded loss, from moments.

Why. The plug-in normal mixture (:mod:`.sequential`) is valid only asymptotically, and for
the losses of a classifier with a rare class it is not valid at realistic sizes: with
equal models, a 90/10 split and 1 % positives the small arm's log loss or Brier score rests
on a handful of high-loss rows, its plug-in variance is small exactly when it has drawn few
of them, and the mixture promoted a treatment in 7 % of runs (21 % at 0.2 % positives)
at α = 0.05. For a loss known to lie in ``[0, B]`` (Brier score, clipped log loss,
absolute error) an exact sequence exists, and it can be computed from the mergeable
moments ``(n, Σx, Σx²)``.

Method. For ``Y_i ≥ -c`` with ``E[Y_i | past] = 0`` and ``λ ∈ [0, 1/c)``::

    exp(λ Σ Y_i - ψ_c(λ) Σ Y_i²),    ψ_c(λ) = (-log(1 - cλ) - cλ) / c²

is a nonnegative supermartingale — Fan, Grama & Liu (2015), "Exponential inequalities for
martingales with applications", Electron. J. Probab. 20(1), Lemma 4.1; it is the
inequality behind the empirical-Bernstein and betting confidence sequences of Howard,
Ramdas, McAuliffe & Sekhon (2021) and Waudby-Smith & Ramdas (2023), "Estimating means of
bounded random variables by betting" (JRSS-B). For a candidate mean μ, ``Y_i = x_i - μ ≥
-μ`` (``x ≥ 0``) tests "mean > μ", and ``Y_i = μ - x_i ≥ μ - B`` tests "mean < μ"; both
``Σ Y_i`` and ``Σ Y_i²`` are functions of the moments and μ. Note ``c = μ`` on the lower
side: a loss that is mostly tiny with rare large values (log loss at 1 % prevalence has a
mean near 0.04 and a bound of 34.5) pays for its bound only on the upper side.

A fixed mixture over a geometric grid of λ keeps the supermartingale property (the
discrete mixture of Howard et al. 2021 §3.2, Waudby-Smith & Ramdas' "hedged" grid), so
Ville's inequality gives exact time-uniform bounds for every μ at once. The weights are a
Gaussian in log λ centred where the boundary is tightest at the horizon,
``λ* = sqrt(2 log(1/α) / (n_h σ²))`` (the Chernoff choice; :func:`lambda_for_horizon`),
with σ² measured during the burn-in; a grid point with ``cλ`` beyond 0.95 is not defined
for that μ and moves to ``0.95/c`` — a mixture that depends on μ but not on the data,
which keeps every per-μ mixture a supermartingale. Any centre keeps the sequence exact; it
only places its power (like τ² of the normal mixture). To keep the burn-in's variance from
touching the sequence that it tuned, the deciders start their sums after the burn-in.
Unlike a betting sequence with predictable bets it needs no per-observation state, which
is what lets the engine keep one mergeable triple per arm.

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
    "lambda_for_horizon",
    "loss_bound",
]

LOG_LOSS_CLIP = 1e-15  # scores are clipped to [ε, 1-ε] before the log (scikit-learn's ε)

_OFFSETS = 0.5 * np.arange(-7, 8)  # log(λ/λ*) of the grid: ±3.5 SDs of the weights
_LOG_WEIGHTS = -(_OFFSETS**2) / 2.0 - np.log(np.sum(np.exp(-(_OFFSETS**2) / 2.0)))
_ITERATIONS = 40  # Illinois steps (superlinear; the bracket is kept, so never wrong)
_TOLERANCE = 1e-9  # of the bound
_ETA_MAX = 0.95  # cλ below 1 (ψ_c is infinite at 1)


def loss_bound(task: str, loss: str) -> float | None:
    """The largest value a per-prediction loss can take, or None when it is unbounded."""
    if task == "regression":
        return None
    if loss == "log_loss":
        return -math.log(LOG_LOSS_CLIP)
    if loss == "squared_error" and task == "multiclass":
        return 2.0  # Σₖ(pₖ - 1[y=k])² ≤ 2
    return 1.0


def lambda_for_horizon(variance: float, rows: float, alpha: float, bound: float) -> float:
    """λ where the one-sided bound at level ``alpha`` is tightest after ``rows`` losses of
    ``variance``: the Chernoff choice sqrt(2 log(1/α)/(n σ²)) (Howard et al. 2021, §3.5,
    for the normal-mixture analogue). A degenerate variance (no spread seen during the
    burn-in) falls back to a hundredth of the bound's square, a small, valid default."""
    if not (variance > 0 and math.isfinite(variance)):
        variance = (bound * bound) / 100.0
    return math.sqrt(2.0 * math.log(1.0 / alpha) / (max(rows, 1.0) * variance))


def _psi_ratio(eta: np.ndarray) -> np.ndarray:
    """ψ_c(λ)/λ² = (-log(1 - η) - η)/η² at η = cλ, by its series where η is small (the
    closed form cancels catastrophically there)."""
    small = eta < 1e-3
    e = np.where(small, 0.5, eta)
    exact = (-np.log1p(-e) - e) / (e * e)
    series = 0.5 + eta / 3.0 + eta * eta / 4.0
    return np.where(small, series, exact)


def _log_mixture(s: np.ndarray, v: np.ndarray, c: np.ndarray, centre: np.ndarray) -> np.ndarray:
    """log Σ_k w_k exp(λ_k s - ψ_c(λ_k) v) over the grid λ_k = λ*·e^(k/2), |k| ≤ 7, the
    weights a normalized Gaussian in log λ around λ* (SD 1). A λ_k at or beyond 1/c is
    moved to η_max/c (per element; a function of μ, never of the data), so every
    candidate μ keeps a full mixture."""
    shape = (-1,) + (1,) * np.ndim(s)
    lam = np.minimum(np.exp(_OFFSETS).reshape(shape) * centre, _ETA_MAX / c)
    logw = _LOG_WEIGHTS.reshape(shape)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        psi = lam * lam * _psi_ratio(lam * c)
        expo = logw + lam * s - psi * v
        top = np.max(expo, axis=0)
        return top + np.log(np.sum(np.exp(expo - top), axis=0))


def bounded_mean_cs(
    n: np.ndarray | float,
    total: np.ndarray | float,
    total_sq: np.ndarray | float,
    bound: float,
    alpha: float,
    centre: np.ndarray | float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact time-uniform bounds ``(lower, upper)`` for the mean of losses in ``[0, bound]``.

    Each side has error α: use ``alpha/2`` for a two-sided 1-α sequence. Vectorized.
    ``centre``: the λ the mixture is tuned for (:func:`lambda_for_horizon`; default: the
    λ of a variance of bound²/100 after 10,000 losses).
    """
    if not (bound > 0 and math.isfinite(bound)):
        raise ValueError(f"bound must be positive and finite, got {bound}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if centre is None:
        centre = lambda_for_horizon(math.nan, 10_000, alpha, bound)
    n = np.asarray(n, dtype=np.float64)
    s1 = np.asarray(total, dtype=np.float64)
    s2 = np.asarray(total_sq, dtype=np.float64)
    n, s1, s2 = np.broadcast_arrays(n, s1, s2)
    lam0 = np.broadcast_to(np.asarray(centre, dtype=np.float64), n.shape)
    level = math.log(1.0 / alpha)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.clip(np.where(n > 0, s1 / np.where(n > 0, n, 1.0), 0.5 * bound), 0.0, bound)

    def evidence(mu: np.ndarray, above: bool) -> np.ndarray:
        # Σ(x-μ) and Σ(x-μ)² from the moments
        s = s1 - n * mu
        v = np.maximum(s2 - 2.0 * mu * s1 + n * mu * mu, 0.0)
        if above:  # "mean > μ": Y = x - μ ≥ -μ
            return _log_mixture(s, v, np.maximum(mu, 1e-300), lam0)
        return _log_mixture(-s, v, np.maximum(bound - mu, 1e-300), lam0)

    def root(inside: np.ndarray, outside: np.ndarray, above: bool) -> np.ndarray:
        # the bound is where the evidence reaches log(1/α): Illinois regula falsi on the
        # bracket [inside (evidence below), outside (at or above)], which it never leaves
        f_in, f_out = evidence(inside, above) - level, evidence(outside, above) - level
        inside, outside = inside.copy(), outside.copy()
        reached = f_out >= 0.0  # else the whole side is inside: the bound is the end point
        f_in = np.where(np.isfinite(f_in), f_in, -1.0)
        f_out = np.where(np.isfinite(f_out), f_out, 1.0)  # only where `reached`
        side = np.zeros(inside.shape, dtype=np.int8)
        for _ in range(_ITERATIONS):
            width = np.abs(outside - inside)
            if not np.any(reached & (width > _TOLERANCE * bound)):
                break
            with np.errstate(divide="ignore", invalid="ignore"):
                t = f_in / (f_in - f_out)
            t = np.where(np.isfinite(t), np.clip(t, 0.01, 0.99), 0.5)
            mid = inside + t * (outside - inside)
            f_mid = evidence(mid, above) - level
            f_mid = np.where(np.isfinite(f_mid), f_mid, -1.0)  # no evidence: keep μ
            out = f_mid >= 0.0
            # Illinois: halve the value of the end point kept twice in a row
            f_in = np.where(out, np.where(side == -1, f_in / 2.0, f_in), f_mid)
            f_out = np.where(out, f_mid, np.where(side == 1, f_out / 2.0, f_out))
            side = np.where(out, -1, 1).astype(np.int8)
            outside = np.where(out, mid, outside)
            inside = np.where(out, inside, mid)
        return outside

    lower = root(mean, np.zeros_like(mean), True)
    upper = root(mean, np.full_like(mean, bound), False)
    lower = np.where(n > 0, lower, 0.0)
    upper = np.where(n > 0, upper, bound)
    return lower, upper


def bounded_effect_cs(
    a: tuple[Any, Any, Any],
    b: tuple[Any, Any, Any],
    bound: float,
    alpha: float,
    centres: tuple[Any, Any] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """1-α sequence for ``mean_B - mean_A`` from each arm's ``(n, Σx, Σx²)``; ``centres``
    the λ each arm's mixture is tuned for (default as :func:`bounded_mean_cs`)."""
    c_a, c_b = centres if centres is not None else (None, None)
    lo_a, hi_a = bounded_mean_cs(*a, bound, alpha / 4.0, c_a)
    lo_b, hi_b = bounded_mean_cs(*b, bound, alpha / 4.0, c_b)
    return lo_b - hi_a, hi_b - lo_a


def bounded_paired_cs(
    n: Any,
    total: Any,
    total_sq: Any,
    bound: float,
    alpha: float,
    centre: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """1-α sequence for the mean of paired differences ``d ∈ [-bound, bound]``."""
    n = np.asarray(n, dtype=np.float64)
    s1 = np.asarray(total, dtype=np.float64) + n * bound
    s2 = np.asarray(total_sq, dtype=np.float64) + 2.0 * bound * np.asarray(total) + n * bound**2
    lo, hi = bounded_mean_cs(n, s1, s2, 2.0 * bound, alpha / 2.0, centre)
    return lo - bound, hi - bound


class _BoundedDecider(_SequentialDecider):
    """Bounded-loss variants: a loss bound, a burn-in in samples per arm and the horizon
    the mixtures are tuned for.

    The sequence starts at the first update that has ``min_samples`` per arm: that update
    only records the moments so far (``_base``) and tunes each mixture's λ to their
    variance at ``horizon`` rows of the smaller arm; every later look bounds the losses
    since then, so the data that chose the weights are not the data they test."""

    __slots__ = ("_base", "_centres", "bound", "horizon", "min_samples")

    def __init__(
        self,
        *,
        alpha: float = 0.05,
        bound: float,
        margin: float = 0.0,
        min_samples: int = 2,
        horizon: int = 10_000,
    ) -> None:
        super().__init__(alpha=alpha, margin=margin)
        if not (bound > 0 and math.isfinite(bound)):
            raise ValueError(f"bound must be positive and finite, got {bound}")
        if min_samples < 2:
            raise ValueError(f"min_samples must be >= 2 (a variance is needed), got {min_samples}")
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        self.bound = float(bound)
        self.min_samples = int(min_samples)
        self.horizon = int(horizon)
        self._base: list[LossMoments] | None = None  # moments at the start of the sequence
        self._centres: list[float] = []

    def _start(self, arms: list[LossMoments], side_alpha: float, rows: list[float]) -> None:
        self._base = [LossMoments(m.n, m.total, m.total_sq) for m in arms]
        self._centres = [
            lambda_for_horizon(m.variance(), r, side_alpha, self.bound)
            for m, r in zip(arms, rows, strict=True)
        ]

    def _since(self, arms: list[LossMoments]) -> list[tuple[int, float, float]]:
        assert self._base is not None
        return [
            (m.n - b.n, m.total - b.total, max(m.total_sq - b.total_sq, 0.0))
            for m, b in zip(arms, self._base, strict=True)
        ]

    def _burn_in_text(self) -> str:
        return f"fewer than {self.min_samples} samples per arm"

    def _config(self) -> dict[str, Any]:
        return {
            **super()._config(),
            "bound": self.bound,
            "min_samples": self.min_samples,
            "horizon": self.horizon,
        }

    @classmethod
    def _config_from(cls, state: dict[str, Any]) -> dict[str, Any]:
        return {
            **super()._config_from(state),
            "bound": float(state["bound"]),
            "min_samples": max(2, int(state["min_samples"])),
            "horizon": int(state.get("horizon", 10_000)),
        }

    def state(self) -> dict[str, Any]:
        base = None if self._base is None else [m.state() for m in self._base]
        return {**super().state(), "base": base, "centres": list(self._centres)}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Any:
        obj = super().from_state(state)
        if "base" not in state:  # a sequence started before the tuned mixture: sums from 0
            width = 1 if cls._kind == "bounded_paired" else 2
            obj._base = [LossMoments()] * width
            obj._centres = [lambda_for_horizon(math.nan, obj.horizon, obj.alpha, obj.bound)] * width
        elif state["base"] is not None:
            obj._base = [LossMoments.from_state(b) for b in state["base"]]
            obj._centres = [float(c) for c in state["centres"]]
        return obj


def _p_value(lo: float, hi: float) -> float:
    """No exact p-value is computed here: report 1 unless the sequence excludes 0."""
    return 1.0 if lo <= 0.0 <= hi else 0.0


class BoundedComparison(_BoundedDecider):
    """Exact unpaired comparison of a loss in ``[0, bound]`` (split mode: the default for
    the log loss, Brier score and absolute error of classifiers)."""

    __slots__ = ()
    _kind = "bounded"

    def update(
        self, stats_a: LossMoments, stats_b: LossMoments, at_ms: int, *, srm_mismatch: bool = False
    ) -> ComparisonState:
        effect = stats_b.mean() - stats_a.mean()
        look = None
        if self._base is None and min(stats_a.n, stats_b.n) >= self.min_samples:
            small = min(stats_a.n, stats_b.n)
            rows = [self.horizon * m.n / small for m in (stats_a, stats_b)]
            self._start([stats_a, stats_b], self.alpha / 4.0, rows)
        elif self._base is not None:
            a, b = self._since([stats_a, stats_b])
            if min(a[0], b[0]) > 0:
                lo, hi = bounded_effect_cs(
                    a, b, self.bound, self.alpha, (self._centres[0], self._centres[1])
                )
                look = (_p_value(float(lo), float(hi)), float(lo), float(hi))
        return self._fold(look, effect, stats_a.n, stats_b.n, at_ms, srm_mismatch)


class PairedBoundedComparison(_BoundedDecider):
    """Exact paired (shadow) comparison of a loss in ``[0, bound]``: d ∈ [-bound, bound]."""

    __slots__ = ()
    _kind = "bounded_paired"

    def update(self, diffs: LossMoments, at_ms: int) -> ComparisonState:
        look = None
        if self._base is None and diffs.n >= self.min_samples:
            # the shifted difference d + B in [0, 2B] has the variance of d
            # d + B in [0, 2B] has the variance of d, and λ is in loss units either way
            self._start([diffs], self.alpha / 2.0, [float(self.horizon)])
        elif self._base is not None:
            ((n, total, total_sq),) = self._since([diffs])
            if n > 0:
                lo, hi = bounded_paired_cs(
                    n, total, total_sq, self.bound, self.alpha, self._centres[0]
                )
                look = (_p_value(float(lo), float(hi)), float(lo), float(hi))
        return self._fold(look, diffs.mean(), diffs.n, diffs.n, at_ms, False)
