"""Always-valid sequential comparison of mean loss: mixture SPRT and confidence sequence.

Why sequential. A rollout controller reads the comparison after every batch. A fixed-horizon
test read that way rejects a true null far more often than α (with 400 looks at α = 0.05,
roughly one run in four). An *always-valid* p-value ``p_t`` satisfies
``P(∃t: p_t ≤ α) ≤ α`` under the null, and a *confidence sequence* ``CS_t`` covers the true
effect at every time simultaneously with probability ≥ 1 - α, so any look, any number of
looks, and stopping whenever the answer is good enough are all allowed.

Method chosen: the Gaussian mixture SPRT (mSPRT) of Johari, Pekelis & Walsh (2017),
"Always valid inference: continuous monitoring of A/B tests" (Operations Research 70(3),
2022), with mixing distribution N(θ₀, τ²). With the estimated effect ``θ̂`` and its
variance ``V`` the mixture likelihood ratio against ``H₀: θ = θ₀`` is::

    Λ = sqrt(V / (V + τ²)) · exp( τ² (θ̂ - θ₀)² / (2 V (V + τ²)) )

the always-valid p-value is the running minimum of ``min(1, 1/Λ)``, and inverting
``Λ < 1/α`` in θ₀ gives the confidence sequence ``θ̂ ± r`` with::

    r² = V (V + τ²) / τ² · ( 2 log(1/α) + log((V + τ²) / V) )

For two streams with ``n`` observations each and known variance σ² this is exactly
Johari et al.'s two-stream normal mSPRT (``V = 2σ²/n``). Written in the *information time*
``1/V`` it is also exactly the two-sided normal-mixture boundary of Howard, Ramdas,
McAuliffe & Sekhon (2021), "Time-uniform, nonparametric, nonasymptotic confidence
sequences" (Ann. Statist. 49(2)), with ``ρ² = τ²`` — which is the boundary that the
*asymptotic* confidence sequences of Waudby-Smith, Arbour, Sinha, Kennedy & Ramdas
(2021/2024), "Time-uniform central limit theory and asymptotic confidence sequences", apply
to sample means with plug-in variances. So the p-value and the interval are two readings of
one test (``p ≤ α`` ⇔ ``θ₀ ∉ CS``). We chose the mSPRT formulation because it gives the
p-value that the dashboards export and the interval that the decisions need from one
formula, and it is the method docs/comparisons.md documents (Johari et al. 2017).

Assumptions (document them wherever a decision is shown):

* Independent observations within and between arms, with finite variance; for the paired
  (shadow) variant, independent *pairs* — the two losses of one prediction may be
  arbitrarily dependent.
* A stable effect over time (no trend) and, unpaired, a stable allocation ratio between the
  arms — which the sample-ratio-mismatch check (:mod:`.srm`) guards.
* **Asymptotic, plug-in variance.** Losses are not Gaussian and σ² is unknown; we plug in
  ``V = s²_A/n_A + s²_B/n_B`` (unpaired, Welch-style) or ``V = s²_d/n`` (paired). Validity
  then holds in the time-uniform CLT sense of Waudby-Smith et al.: the error is
  asymptotically ≤ α, not exactly. A **burn-in** (``min_samples`` per arm) keeps the early,
  noisy variance estimates (e.g. zero observed errors ⇒ s² = 0) out of the running
  minimum/intersection; before it, the state is ``continue`` whatever the data say, in both
  directions. The simulations in ``tests/unit/test_experiments_simulation.py`` measure the
  resulting false-positive rate at realistic sizes.

Choosing τ². The boundary is tightest where ``V ≈ V*`` and τ² = ``r·V*`` with
``r = 2 log(1/α) + log(1 + r)`` (:func:`tau2_for_horizon`; Howard et al. 2021 §3.5 give the
one-step approximation ``r ≈ 2 log(1/α) + log(1 + 2 log(1/α))``). Any τ² > 0 is valid;
it trades early detection of large effects against power for small ones. τ² is in squared
loss units, so it must be set per loss metric.

Decisions (sticky, see :class:`SequentialComparison`): with margin δ ≥ 0, ``rollback`` once
the intersected sequence lies entirely above +δ, ``promote`` once it lies entirely below +δ
(non-inferior; ``superior`` also records whether it lies below 0), ``invalid`` on broken
inputs or a sample-ratio mismatch, else ``continue``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Self

import numpy as np

from .moments import LossMoments

__all__ = [
    "AlwaysValid",
    "ComparisonState",
    "Decision",
    "PairedSequentialComparison",
    "SequentialComparison",
    "always_valid",
    "always_valid_arrays",
    "always_valid_paired",
    "always_valid_paired_arrays",
    "normal_mixture",
    "running_always_valid",
    "tau2_for_horizon",
]

Decision = Literal["continue", "promote", "rollback", "invalid"]
_TERMINAL: frozenset[str] = frozenset({"promote", "rollback", "invalid"})
_STATE_VERSION = 1


def _check_alpha_tau2(alpha: float, tau2: float | np.ndarray) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    t = np.asarray(tau2, dtype=np.float64)
    if not (np.all(t > 0.0) and np.all(np.isfinite(t))):
        raise ValueError(f"tau2 must be positive and finite, got {tau2}")


def tau2_for_horizon(effect_variance: float, alpha: float) -> float:
    """Mixing variance τ² making the confidence sequence tightest where ``V = effect_variance``.

    ``effect_variance`` is the variance of the estimated effect at the sample size one
    cares most about, e.g. ``2σ²/n`` for two balanced arms of ``n`` or ``σ²_d/n`` paired.
    Minimising ``r²/V = (1 + 1/ρ)(2 log(1/α) + log(1 + ρ))`` over ``ρ = τ²/V`` gives the
    fixed point ``ρ = 2 log(1/α) + log(1 + ρ)`` (Howard et al. 2021, §3.5), solved here by
    iteration (a contraction: the derivative is 1/(1+ρ) < 1).
    """
    if not (effect_variance > 0.0 and math.isfinite(effect_variance)):
        raise ValueError(f"effect_variance must be positive, got {effect_variance}")
    _check_alpha_tau2(alpha, 1.0)
    two_l = 2.0 * math.log(1.0 / alpha)
    rho = two_l
    for _ in range(100):
        nxt = two_l + math.log1p(rho)
        if abs(nxt - rho) < 1e-12:
            break
        rho = nxt
    return rho * effect_variance


def normal_mixture(
    effect: np.ndarray | float,
    effect_variance: np.ndarray | float,
    *,
    alpha: float,
    tau2: float | np.ndarray,
    null: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One look of the Gaussian mSPRT, vectorized: ``(p_value, cs_lower, cs_upper)``.

    Not yet running-minimum / intersected — see :func:`running_always_valid`. Where the
    variance is not positive and finite (fewer than 2 samples, or all losses equal) the
    look is uninformative: ``p = 1`` and the interval is the whole line.
    """
    _check_alpha_tau2(alpha, tau2)
    theta = np.asarray(effect, dtype=np.float64)
    v = np.asarray(effect_variance, dtype=np.float64)
    ok = np.isfinite(v) & (v > 0.0) & np.isfinite(theta)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        vt = v + tau2
        log_growth = np.log(vt / v)  # log((V + τ²)/V) ≥ 0
        log_lr = -0.5 * log_growth + tau2 * (theta - null) ** 2 / (2.0 * v * vt)
        p = np.exp(np.minimum(0.0, -log_lr))
        radius = np.sqrt(v * vt / tau2 * (2.0 * math.log(1.0 / alpha) + log_growth))
        lower = theta - radius
        upper = theta + radius
    p = np.where(ok, p, 1.0)
    lower = np.where(ok, lower, -np.inf)
    upper = np.where(ok, upper, np.inf)
    return p, lower, upper


def _moment_arrays(
    n: np.ndarray, total: np.ndarray, total_sq: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(mean, unbiased variance) from arrays of moments; NaN where undefined."""
    n = np.asarray(n, dtype=np.float64)
    total = np.asarray(total, dtype=np.float64)
    total_sq = np.asarray(total_sq, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(n > 0, total / n, np.nan)
        ss = np.maximum(total_sq - total * mean, 0.0)
        var = np.where(n > 1, ss / (n - 1.0), np.nan)
    return mean, var


def always_valid_arrays(
    n_a: np.ndarray,
    sum_a: np.ndarray,
    sumsq_a: np.ndarray,
    n_b: np.ndarray,
    sum_b: np.ndarray,
    sumsq_b: np.ndarray,
    *,
    alpha: float,
    tau2: float | np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Unpaired mSPRT per look from arrays of cumulative moments (any broadcastable shape).

    Returns ``(p_value, cs_lower, cs_upper, effect)`` for each look *separately*; fold
    them over the look axis with :func:`running_always_valid`. Made for simulations
    (runs × looks) and backfills; :func:`always_valid` is the scalar view.
    """
    mean_a, var_a = _moment_arrays(n_a, sum_a, sumsq_a)
    mean_b, var_b = _moment_arrays(n_b, sum_b, sumsq_b)
    effect = mean_b - mean_a
    with np.errstate(divide="ignore", invalid="ignore"):
        v = var_a / np.asarray(n_a, dtype=np.float64) + var_b / np.asarray(n_b, np.float64)
    p, lo, hi = normal_mixture(effect, v, alpha=alpha, tau2=tau2)
    return p, lo, hi, effect


def always_valid_paired_arrays(
    n: np.ndarray,
    sum_d: np.ndarray,
    sumsq_d: np.ndarray,
    *,
    alpha: float,
    tau2: float | np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Paired mSPRT per look from cumulative moments of ``d_i = loss_B - loss_A``."""
    mean, var = _moment_arrays(n, sum_d, sumsq_d)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = var / np.asarray(n, dtype=np.float64)
    p, lo, hi = normal_mixture(mean, v, alpha=alpha, tau2=tau2)
    return p, lo, hi, mean


def running_always_valid(
    p_value: np.ndarray,
    cs_lower: np.ndarray,
    cs_upper: np.ndarray,
    burned_in: np.ndarray | None = None,
    *,
    axis: int = -1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Running minimum of p and running intersection of the sequence along ``axis``.

    This is what makes one-look quantities always valid to *read*: the p-value never
    increases and the interval never widens. Looks where ``burned_in`` is False are
    ignored (treated as p = 1 and the whole line), exactly as
    :class:`SequentialComparison` does.
    """
    p = np.asarray(p_value, dtype=np.float64)
    lo = np.asarray(cs_lower, dtype=np.float64)
    hi = np.asarray(cs_upper, dtype=np.float64)
    if burned_in is not None:
        mask = np.asarray(burned_in, dtype=bool)
        p = np.where(mask, p, 1.0)
        lo = np.where(mask, lo, -np.inf)
        hi = np.where(mask, hi, np.inf)
    return (
        np.minimum.accumulate(p, axis=axis),
        np.maximum.accumulate(lo, axis=axis),
        np.minimum.accumulate(hi, axis=axis),
    )


@dataclass(frozen=True, slots=True)
class AlwaysValid:
    """One look of the mSPRT (not intersected with earlier looks).

    ``p_value`` tests ``effect == 0``; ``[cs_lower, cs_upper]`` is the 1-α confidence
    sequence for ``effect = mean_loss(B) - mean_loss(A)`` at this look; ``std_error`` is
    ``sqrt(V)``, the plug-in standard error of the effect.
    """

    p_value: float
    cs_lower: float
    cs_upper: float
    effect: float
    std_error: float


def _effect_variance(stats_a: LossMoments, stats_b: LossMoments) -> float:
    if stats_a.n < 2 or stats_b.n < 2:
        return math.nan
    return stats_a.variance() / stats_a.n + stats_b.variance() / stats_b.n


def _paired_variance(diffs: LossMoments) -> float:
    return diffs.variance() / diffs.n if diffs.n >= 2 else math.nan


def _look(effect: float, v: float, alpha: float, tau2: float) -> AlwaysValid:
    p, lo, hi = normal_mixture(effect, v, alpha=alpha, tau2=tau2)
    se = math.sqrt(v) if v >= 0 else math.nan
    return AlwaysValid(float(p), float(lo), float(hi), float(effect), se)


def always_valid(
    stats_a: LossMoments, stats_b: LossMoments, alpha: float, tau2: float
) -> AlwaysValid:
    """Unpaired mSPRT for ``mean(B) - mean(A)`` at one look, from cumulative moments."""
    effect = stats_b.mean() - stats_a.mean()
    return _look(effect, _effect_variance(stats_a, stats_b), alpha, tau2)


def always_valid_paired(diffs: LossMoments, alpha: float, tau2: float) -> AlwaysValid:
    """Paired mSPRT for the mean of ``d_i = loss_B - loss_A`` at one look."""
    return _look(diffs.mean(), _paired_variance(diffs), alpha, tau2)


@dataclass(frozen=True, slots=True)
class ComparisonState:
    """What a comparison says now; the rollout controller reads ``decision``.

    ``p_value`` (H₀: no difference) and ``[cs_lower, cs_upper]`` are the running
    minimum and running intersection since burn-in; ``effect`` is the current point
    estimate of ``mean_loss(B) - mean_loss(A)`` (positive = treatment worse). ``since_ms``
    is when the current decision was first reached (None while ``continue``);
    ``superior`` is True once a ``promote`` also has the sequence entirely below 0.
    """

    decision: Decision
    superior: bool
    reason: str
    p_value: float
    cs_lower: float
    cs_upper: float
    effect: float
    n_a: int
    n_b: int
    since_ms: int | None
    at_ms: int


def _to_json(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _from_json(x: float | None, default: float) -> float:
    return default if x is None else float(x)


class _SequentialDecider:
    """Running p / intersection and the sticky decision machine shared by every variant.

    Subclasses compute one look (``p``, interval, effect) and say whether the burn-in is
    over; this class folds the looks and owns the decision.
    """

    __slots__ = (
        "_decision",
        "_hi",
        "_lo",
        "_n_a",
        "_n_b",
        "_p",
        "_since_ms",
        "_superior",
        "alpha",
        "margin",
    )
    _kind: str = ""

    def __init__(self, *, alpha: float, margin: float) -> None:
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {alpha}")
        if not (margin >= 0.0 and math.isfinite(margin)):
            raise ValueError(f"margin must be finite and >= 0, got {margin}")
        self.alpha = float(alpha)
        self.margin = float(margin)
        self._p = 1.0
        self._lo = -math.inf
        self._hi = math.inf
        self._decision: Decision = "continue"
        self._superior = False
        self._since_ms: int | None = None
        self._n_a = 0
        self._n_b = 0

    @property
    def decision(self) -> Decision:
        return self._decision

    def _fold(
        self,
        look: tuple[float, float, float] | None,
        effect: float,
        n_a: int,
        n_b: int,
        at_ms: int,
        srm_mismatch: bool,
    ) -> ComparisonState:
        """Fold one look (``(p, lower, upper)``, None during burn-in) into the state."""
        notes: list[str] = []
        shrunk = n_a < self._n_a or n_b < self._n_b
        burned_in = look is not None
        if shrunk:
            notes.append(
                f"cumulative counts decreased (n_a {self._n_a}->{n_a}, n_b {self._n_b}->{n_b});"
                " statistics must be cumulative since the start of the comparison"
            )
        elif look is not None:
            p, lo, hi = look
            self._p = min(self._p, float(p))
            new_lo, new_hi = max(self._lo, float(lo)), min(self._hi, float(hi))
            if new_lo <= new_hi:
                self._lo, self._hi = new_lo, new_hi
            else:
                notes.append("confidence sequences disjoint over time: effect not stationary?")
            self._n_a, self._n_b = n_a, n_b
        else:
            self._n_a, self._n_b = n_a, n_b

        if self._decision == "continue":
            if shrunk:
                self._set("invalid", at_ms)
            elif srm_mismatch:
                self._set("invalid", at_ms)
                notes.append("sample-ratio mismatch: the split is not as configured")
            elif burned_in and self._lo > self.margin:
                self._set("rollback", at_ms)
            elif burned_in and self._hi < self.margin:
                self._set("promote", at_ms)
        if self._decision == "promote" and self._hi < 0.0:
            self._superior = True
        return ComparisonState(
            decision=self._decision,
            superior=self._superior,
            reason=self._reason(burned_in, notes),
            p_value=self._p,
            cs_lower=self._lo,
            cs_upper=self._hi,
            effect=float(effect),
            n_a=int(n_a),
            n_b=int(n_b),
            since_ms=self._since_ms,
            at_ms=int(at_ms),
        )

    def _set(self, decision: Decision, at_ms: int) -> None:
        self._decision = decision
        self._since_ms = int(at_ms)

    def _burn_in_text(self) -> str:
        raise NotImplementedError

    def _reason(self, burned_in: bool, notes: list[str]) -> str:
        cs = f"{1 - self.alpha:.0%} CS [{self._lo:.4g}, {self._hi:.4g}]"
        d = self.margin
        base = {
            "rollback": f"treatment worse than control by more than {d:g}: {cs}",
            "promote": (
                f"treatment superior to control: {cs} below 0"
                if self._superior
                else f"treatment non-inferior within margin {d:g}: {cs}"
            ),
            "invalid": "comparison invalid; do not act on it",
            "continue": (
                f"not enough evidence yet: {cs} contains {d:g}"
                if burned_in
                else f"burn-in: {self._burn_in_text()}"
            ),
        }[self._decision]
        return "; ".join([base, *notes])

    def _config(self) -> dict[str, Any]:
        """The constructor's keyword arguments (JSON-able)."""
        return {"alpha": self.alpha, "margin": self.margin}

    def state(self) -> dict[str, Any]:
        """JSON-able state: configuration plus the running quantities and decision."""
        return {
            "version": _STATE_VERSION,
            "kind": self._kind,
            **self._config(),
            "p_value": self._p,
            "cs_lower": _to_json(self._lo),
            "cs_upper": _to_json(self._hi),
            "decision": self._decision,
            "superior": self._superior,
            "since_ms": self._since_ms,
            "n_a": self._n_a,
            "n_b": self._n_b,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        if state.get("version") != _STATE_VERSION or state.get("kind") != cls._kind:
            raise ValueError(f"not a {cls.__name__} state (version {_STATE_VERSION})")
        obj = cls(**cls._config_from(state))
        decision = state["decision"]
        if decision not in ("continue", *_TERMINAL):
            raise ValueError(f"unknown decision {decision!r}")
        obj._p = float(state["p_value"])
        obj._lo = _from_json(state["cs_lower"], -math.inf)
        obj._hi = _from_json(state["cs_upper"], math.inf)
        obj._decision = decision
        obj._superior = bool(state["superior"])
        obj._since_ms = None if state["since_ms"] is None else int(state["since_ms"])
        obj._n_a = int(state["n_a"])
        obj._n_b = int(state["n_b"])
        return obj

    @classmethod
    def _config_from(cls, state: dict[str, Any]) -> dict[str, Any]:
        return {"alpha": float(state["alpha"]), "margin": float(state["margin"])}


class _MixtureDecider(_SequentialDecider):
    """The normal-mixture variants: τ² and a burn-in in samples per arm."""

    __slots__ = ("min_samples", "tau2")

    def __init__(
        self, *, alpha: float = 0.05, tau2: float, margin: float = 0.0, min_samples: int = 100
    ) -> None:
        _check_alpha_tau2(alpha, tau2)
        if min_samples < 2:
            raise ValueError(f"min_samples must be >= 2 (a variance is needed), got {min_samples}")
        super().__init__(alpha=alpha, margin=margin)
        self.tau2 = float(tau2)
        self.min_samples = int(min_samples)

    def _observe(
        self, effect: float, v: float, n_a: int, n_b: int, at_ms: int, srm_mismatch: bool
    ) -> ComparisonState:
        look = None
        if min(n_a, n_b) >= self.min_samples:
            p, lo, hi = normal_mixture(effect, v, alpha=self.alpha, tau2=self.tau2)
            look = (float(p), float(lo), float(hi))
        return self._fold(look, effect, n_a, n_b, at_ms, srm_mismatch)

    def _burn_in_text(self) -> str:
        return f"fewer than {self.min_samples} samples per arm"

    def _config(self) -> dict[str, Any]:
        return {**super()._config(), "tau2": self.tau2, "min_samples": self.min_samples}

    @classmethod
    def _config_from(cls, state: dict[str, Any]) -> dict[str, Any]:
        return {
            **super()._config_from(state),
            "tau2": float(state["tau2"]),
            "min_samples": int(state["min_samples"]),
        }


class SequentialComparison(_MixtureDecider):
    """Unpaired always-valid comparison (A/B, canary): configured once, then asked.

    ``update`` takes the *cumulative* moments of each arm since the comparison started
    and may be called after every batch. The p-value is a running minimum and the
    confidence sequence a running intersection, so neither can move back; the first
    terminal decision (``promote``, ``rollback`` or ``invalid``) sticks with the
    ``since_ms`` at which it was reached, even if later data alone would not reach it —
    controllers must not see a decision flap. A ``promote`` may later gain
    ``superior=True`` (monotone), never lose it.

    ``invalid`` is reached on a sample-ratio mismatch (pass ``srm_mismatch`` from
    :func:`monitor.experiments.srm.sample_ratio_mismatch`) or when counts decrease
    (statistics that are not cumulative).
    """

    __slots__ = ()
    _kind = "unpaired"

    def update(
        self,
        stats_a: LossMoments,
        stats_b: LossMoments,
        at_ms: int,
        *,
        srm_mismatch: bool = False,
    ) -> ComparisonState:
        effect = stats_b.mean() - stats_a.mean()
        v = _effect_variance(stats_a, stats_b)
        return self._observe(effect, v, stats_a.n, stats_b.n, at_ms, srm_mismatch)


class PairedSequentialComparison(_MixtureDecider):
    """Paired always-valid comparison (shadow mode) on ``d_i = loss_B - loss_A``.

    Both versions score the same predictions, so the one-sample mSPRT on the
    differences removes the between-prediction variance the arms share (usually much
    more powerful than the unpaired test). ``n_a == n_b ==`` number of pairs; the burn-in
    counts pairs. Same sticky decisions as :class:`SequentialComparison`.
    """

    __slots__ = ()
    _kind = "paired"

    def update(self, diffs: LossMoments, at_ms: int) -> ComparisonState:
        return self._observe(diffs.mean(), _paired_variance(diffs), diffs.n, diffs.n, at_ms, False)
