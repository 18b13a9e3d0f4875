"""Monte-Carlo operating characteristics of the comparison tests (runs × looks, numpy).

One definition of each simulation, shared by the calibration tests (bounded size,
``tests/unit/test_experiments_conditional.py``, ``tests/unit/test_comparison_simulation.py``)
and the full-size tables of ``bench/stats_sim.py`` that docs/comparisons.md quotes. Each
follows the engine's own path (``monitor/engine/comparisons.py``): the same burn-in rules,
the same tuning at the look where the burn-in ends (:func:`.conditional.horizon_concentration`,
:func:`.bounded.lambda_for_horizon`, :func:`.sequential.tau2_for_horizon` from the
configured ``horizon``), the same sequences and the same sticky decisions — vectorized
over runs and looks; ``tests/unit/test_comparison_simulation.py`` checks that the real
``ComparisonTracker`` reaches the same decision at the same look. Seeded ``default_rng``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from .bounded import bounded_effect_cs, bounded_paired_cs, lambda_for_horizon, loss_bound
from .conditional import (
    error_rate_looks,
    expected_events_small_arm,
    horizon_concentration,
    rarer_class_rows,
)
from .sequential import (
    always_valid_arrays,
    always_valid_paired_arrays,
    running_always_valid,
    tau2_for_horizon,
)
from .srm import log_bayes_factor

__all__ = [
    "ComparisonStream",
    "ErrorRateSim",
    "fixed_horizon_power",
    "simulate_comparison",
    "simulate_error_rate",
    "simulate_srm",
    "stream_sums",
]


@dataclass(frozen=True, slots=True)
class ErrorRateSim:
    """Share of runs reaching each decision, and the rows (total) at the first one."""

    rollback: float
    promote: float
    median_rows_to_rollback: float

    @property
    def any_decision(self) -> float:
        return self.rollback + self.promote


def simulate_error_rate(
    p_control: float,
    p_treatment: float,
    share: float,
    *,
    runs: int,
    looks: int,
    batch: int = 100,
    alpha: float = 0.05,
    margin: float = 0.0,
    min_events: float = 10.0,
    horizon: int = 10_000,
    max_events: float | None = None,
    seed: int = 0,
) -> ErrorRateSim:
    """A/B stream with a look every ``batch`` labeled rows (total), ``looks`` looks.

    Rows go to the treatment with probability ``share``. As in the engine, the
    comparison starts at the first look with ``min_events`` expected errors in the smaller
    arm, and its prior is tuned there for ``horizon`` rows of the smaller arm at the
    pooled rate seen so far (:func:`.conditional.horizon_concentration`, the
    configuration's default ``horizon``). Decisions are those of
    :class:`.conditional.ErrorRateComparison` (the running intersection checked against
    the margin); a run counts once, at its first decision. ``max_events``: the
    group-sequential :func:`.conditional.horizon_cs` instead, looking only while the
    errors of both arms are at most ``max_events``.
    """
    rng = np.random.default_rng(seed)
    new_b = rng.binomial(batch, share, (runs, looks))
    rows = batch * np.arange(1, looks + 1)
    n_b = np.cumsum(new_b, axis=1)
    n_a = rows - n_b
    k_a = np.cumsum(rng.binomial(batch - new_b, p_control), axis=1)
    k_b = np.cumsum(rng.binomial(new_b, p_treatment), axis=1)
    looking = expected_events_small_arm(n_a, k_a, n_b, k_b) >= min_events
    start = _first(looking)
    at = np.minimum(start, looks - 1)[:, None]
    pick = [np.take_along_axis(x, at, axis=1) for x in (n_a, k_a, n_b, k_b)]
    c = _horizon_concentration(*pick, horizon, share, alpha)
    p, lo, hi, _ = error_rate_looks(
        n_a, k_a, n_b, k_b, alpha=alpha, share=share, concentration=c, max_events=max_events
    )
    if max_events is not None:
        looking &= k_a + k_b <= max_events
    _, lo, hi = running_always_valid(p, lo, hi, looking)
    first_up, first_down = _first(lo > margin), _first(hi < margin)
    rollback = first_up < np.minimum(first_down, looks)
    promote = first_down < np.minimum(first_up, looks)
    to_rollback = np.where(rollback, rows[np.minimum(first_up, looks - 1)], np.inf)
    return ErrorRateSim(
        float(rollback.mean()), float(promote.mean()), float(np.median(to_rollback))
    )


def _first(hit: np.ndarray) -> np.ndarray:
    """Index of the first True along the last axis, or its length where there is none."""
    return np.where(hit.any(axis=-1), np.argmax(hit, axis=-1), hit.shape[-1])


def _horizon_concentration(
    n_a: np.ndarray, k_a: np.ndarray, n_b: np.ndarray, k_b: np.ndarray,
    horizon: float, share: float, alpha: float,
) -> np.ndarray:  # fmt: skip
    """:func:`.conditional.horizon_concentration` of each run, as a column."""
    flat = zip(n_a.ravel().tolist(), k_a.ravel().tolist(), n_b.ravel().tolist(),
               k_b.ravel().tolist(), strict=True)  # fmt: skip
    out = [horizon_concentration(a, ka, b, kb, horizon, share, alpha) for a, ka, b, kb in flat]
    return np.asarray(out, dtype=np.float64).reshape(n_a.shape)


def fixed_horizon_power(
    p_control: float,
    p_treatment: float,
    share: float,
    *,
    rows: int,
    alpha_side: float,
    runs: int,
    seed: int = 0,
) -> float:
    """Power of the exact conditional binomial test looked at once, after ``rows`` rows.

    Given the errors K and the treatment's rows, the treatment's errors are
    Binomial(K, π) under equal rates; reject "treatment worse" when the upper tail
    P(X ≥ k_B) ≤ ``alpha_side``. For a one-parameter exponential family this is the
    uniformly most powerful unbiased test (Lehmann & Romano §4.5), so no procedure whose
    false rollbacks are ≤ ``alpha_side`` — sequential or not — decides "worse" by ``rows``
    more often (up to the discreteness a randomized test would recover): the ceiling of
    the sequential power at that size."""
    rng = np.random.default_rng(seed)
    n_b = rng.binomial(rows, share, runs)
    k_a = rng.binomial(rows - n_b, p_control)
    k_b = rng.binomial(n_b, p_treatment)
    upper_tail = stats.binom.sf(k_b - 1, k_a + k_b, n_b / rows)
    return float(np.mean(upper_tail <= alpha_side))


def simulate_srm(
    share: float,
    *,
    runs: int,
    looks: int,
    batch: int = 100,
    threshold: float = 0.001,
    seed: int = 0,
) -> float:
    """Share of runs with a *correct* two-arm split ever marked a mismatch over ``looks``."""
    rng = np.random.default_rng(seed)
    n_b = np.cumsum(rng.binomial(batch, share, (runs, looks)), axis=1)
    n_a = batch * np.arange(1, looks + 1) - n_b
    log_bf = log_bayes_factor(np.stack([n_a, n_b], axis=-1), np.array([1 - share, share]))
    return float(np.mean((log_bf >= np.log(1.0 / threshold)).any(axis=1)))


LOSS_NAMES = ("error_rate", "log_loss", "squared_error", "absolute_error", "estimated_error_rate")


@dataclass(frozen=True, slots=True)
class ComparisonStream:
    """A synthetic binary-classifier stream for two versions.

    Labels are Bernoulli(``prevalence``); each version's score is the calibrated
    probability of a binormal model with separation ``d′`` (score given the label
    N(d′·y, 1), so P(y = 1 | x) is a logistic function of x); the decision is
    ``score >= threshold`` (default: twice the prevalence, at most ½ — "risk doubled").
    ``mode = "split"``: each row goes to the treatment with probability ``share``;
    ``"shadow"``: both versions score every row, their noise correlated ``rho``."""

    prevalence: float
    share: float = 0.5
    mode: str = "split"
    dprime_control: float = 2.0
    dprime_treatment: float = 2.0
    rho: float = 0.9
    threshold: float | None = None

    def decision_threshold(self) -> float:
        return self.threshold if self.threshold is not None else min(0.5, 2 * self.prevalence)


def _calibrated(x: np.ndarray, prevalence: float, dprime: float) -> np.ndarray:
    logit = np.log(prevalence / (1.0 - prevalence)) + dprime * x - dprime * dprime / 2.0
    return 1.0 / (1.0 + np.exp(-logit))


def _row_losses(y: np.ndarray, p: np.ndarray, threshold: float) -> np.ndarray:
    """(LOSS_NAMES, ...) per-row losses as the engine computes them (log loss clipped)."""
    yf = y.astype(np.float64)
    pc = np.clip(p, 1e-15, 1.0 - 1e-15)
    decided = p >= threshold
    return np.stack(
        [
            (decided != y).astype(np.float64),
            -(yf * np.log(pc) + (1.0 - yf) * np.log1p(-pc)),
            (p - yf) ** 2,
            np.abs(p - yf),
            np.where(decided, 1.0 - p, p),
        ]
    )


def stream_sums(
    stream: ComparisonStream,
    loss: str,
    *,
    runs: int,
    rows: int,
    batch: int,
    seed: int,
    chunk_rows: int = 4_000_000,
) -> dict[str, np.ndarray]:
    """Cumulative sums at each look (one every ``batch`` rows), each (runs, looks): split
    ``n_a, s_a, q_a, n_b, s_b, q_b, pos_a, pos_b, err_a, err_b`` (q: Σx²); shadow
    ``n, s, q, pos, only_a, only_b`` (d = loss_B − loss_A; only_a: only the control wrong).
    The engine's arm and pair sums, from row-level draws."""
    li = LOSS_NAMES.index(loss)
    looks = rows // batch
    rng = np.random.default_rng(seed)
    per = max(1, chunk_rows // rows)
    t = stream.decision_threshold()
    parts: list[dict[str, np.ndarray]] = []
    for at in range(0, runs, per):
        r = min(per, runs - at)
        y = rng.random((r, looks * batch)) < stream.prevalence

        def cum(x: np.ndarray, r: int = r) -> np.ndarray:
            return np.cumsum(x.reshape(r, looks, batch).sum(axis=2), axis=1)

        if stream.mode == "shadow":
            z = rng.standard_normal(y.shape)
            k = np.sqrt(1.0 - stream.rho**2)
            xa = stream.dprime_control * y + stream.rho * z + k * rng.standard_normal(y.shape)
            xb = stream.dprime_treatment * y + stream.rho * z + k * rng.standard_normal(y.shape)
            la = _row_losses(y, _calibrated(xa, stream.prevalence, stream.dprime_control), t)
            lb = _row_losses(y, _calibrated(xb, stream.prevalence, stream.dprime_treatment), t)
            d = lb[li] - la[li]
            n = np.broadcast_to(batch * np.arange(1, looks + 1, dtype=np.float64), (r, looks))
            parts.append(
                {
                    "n": n.copy(),
                    "s": cum(d),
                    "q": cum(d * d),
                    "pos": cum(y.astype(float)),
                    "only_a": cum((la[0] > 0) & (lb[0] == 0)),
                    "only_b": cum((la[0] == 0) & (lb[0] > 0)),
                }
            )
            continue
        arm = rng.random(y.shape) < stream.share
        d = np.where(arm, stream.dprime_treatment, stream.dprime_control)
        x = rng.standard_normal(y.shape) + d * y
        lx = _row_losses(y, _calibrated(x, stream.prevalence, d), t)
        v = lx[li]
        out: dict[str, np.ndarray] = {}
        for name, mask in (("a", ~arm), ("b", arm)):
            out[f"n_{name}"] = cum(mask.astype(np.float64))
            out[f"s_{name}"] = cum(np.where(mask, v, 0.0))
            out[f"q_{name}"] = cum(np.where(mask, v * v, 0.0))
            out[f"pos_{name}"] = cum((mask & y).astype(np.float64))
            out[f"err_{name}"] = cum(np.where(mask, lx[0], 0.0))
        parts.append(out)
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _at(x: np.ndarray, start: np.ndarray) -> np.ndarray:
    """x at each run's start look, as a column (the last look where it never starts)."""
    return np.take_along_axis(x, np.minimum(start, x.shape[1] - 1)[:, None], axis=1)


def simulate_comparison(
    stream: ComparisonStream,
    loss: str,
    method: str,
    *,
    runs: int,
    rows: int,
    batch: int = 500,
    alpha: float = 0.05,
    margin: float = 0.0,
    min_samples: int = 1000,
    min_events: float = 10.0,
    horizon: int = 10_000,
    seed: int = 0,
    sums: dict[str, np.ndarray] | None = None,
) -> ErrorRateSim:
    """Operating characteristics of one comparison as the engine runs it.

    ``method``: ``"conditional"`` (split error rate), ``"paired_conditional"`` (shadow
    error rate), ``"bounded"`` / ``"paired_bounded"`` (exact bounded-loss sequences),
    ``"mixture"`` / ``"paired_mixture"`` (plug-in normal mixture) — the decider the engine
    picks (``monitor.engine.comparisons``). ``sums``: :func:`stream_sums` already drawn.
    A look every ``batch`` rows; a run counts once, at its first decision."""
    s = sums if sums is not None else stream_sums(
        stream, loss, runs=runs, rows=rows, batch=batch, seed=seed
    )  # fmt: skip
    looks = next(iter(s.values())).shape[1]
    rare_losses = ("log_loss", "squared_error", "absolute_error")
    if method == "conditional":
        n_a, k_a, n_b, k_b = s["n_a"], s["err_a"], s["n_b"], s["err_b"]
        looking = expected_events_small_arm(n_a, k_a, n_b, k_b) >= min_events
        start = _first(looking)
        c = _horizon_concentration(
            *(_at(x, start) for x in (n_a, k_a, n_b, k_b)), horizon, stream.share, alpha
        )
        p, lo, hi, _ = error_rate_looks(
            n_a, k_a, n_b, k_b, alpha=alpha, share=stream.share, concentration=c
        )
        rows_at = s["n_a"] + s["n_b"]
    elif method == "paired_conditional":
        n, only_a, only_b = s["n"], s["only_a"], s["only_b"]
        looking = only_a + only_b >= min_events
        start = _first(looking)
        c = _horizon_concentration(
            *(_at(x, start) for x in (n, only_a, n, only_b)), horizon, 0.5, alpha
        )
        p, lo, hi, _ = error_rate_looks(
            n, only_a, n, only_b, alpha=alpha, share=0.5, concentration=c, paired=True
        )
        rows_at = n
    elif method.startswith("paired_"):
        n, total, total_sq = s["n"], s["s"], s["q"]
        burned = n >= min_samples
        if loss in rare_losses:
            burned &= rarer_class_rows(s["pos"], n, n) >= min_events
        start = _first(burned)
        idx = np.arange(looks)[None, :]
        n0, s0, q0 = (_at(x, start) for x in (n, total, total_sq))
        var0 = np.maximum(q0 - s0 * s0 / n0, 0.0) / np.maximum(n0 - 1.0, 1.0)
        if method == "paired_bounded":
            bound = float(loss_bound("binary", loss) or 1.0)
            centre = _lambdas(var0, np.full_like(var0, horizon), alpha / 2.0, bound)
            looking = idx > start[:, None]
            dn = np.where(looking, n - n0, 1.0)
            lo, hi = bounded_paired_cs(
                dn, np.where(looking, total - s0, 0.0), np.where(looking, total_sq - q0, 0.0),
                bound, alpha, centre,
            )  # fmt: skip
            p = np.ones_like(lo)
        else:
            tau2 = _tau2s(var0 / horizon, alpha)
            looking = idx >= start[:, None]
            p, lo, hi, _ = always_valid_paired_arrays(n, total, total_sq, alpha=alpha, tau2=tau2)
        rows_at = n
    else:
        n_a, n_b = s["n_a"], s["n_b"]
        small = np.minimum(n_a, n_b)
        burned = small >= min_samples
        if loss in rare_losses:
            burned &= rarer_class_rows(s["pos_a"] + s["pos_b"], n_a + n_b, small) >= min_events
        start = _first(burned)
        idx = np.arange(looks)[None, :]
        base = {k: _at(s[k], start) for k in ("n_a", "s_a", "q_a", "n_b", "s_b", "q_b")}

        def var(arm: str) -> np.ndarray:
            n0, s0, q0 = base[f"n_{arm}"], base[f"s_{arm}"], base[f"q_{arm}"]
            return np.maximum(q0 - s0 * s0 / n0, 0.0) / np.maximum(n0 - 1.0, 1.0)

        if method == "bounded":
            bound = float(loss_bound("binary", loss) or 1.0)
            small0 = np.minimum(base["n_a"], base["n_b"])
            centres = tuple(
                _lambdas(var(arm), horizon * base[f"n_{arm}"] / small0, alpha / 4.0, bound)
                for arm in ("a", "b")
            )
            looking = idx > start[:, None]
            arms = []
            for arm in ("a", "b"):
                dn = s[f"n_{arm}"] - base[f"n_{arm}"]
                looking &= dn > 0
                arms.append((dn, s[f"s_{arm}"] - base[f"s_{arm}"],
                             np.maximum(s[f"q_{arm}"] - base[f"q_{arm}"], 0.0)))  # fmt: skip
            safe = [(np.where(looking, a[0], 1.0), np.where(looking, a[1], 0.0),
                     np.where(looking, a[2], 0.0)) for a in arms]  # fmt: skip
            lo, hi = bounded_effect_cs(safe[0], safe[1], bound, alpha, centres)
            p = np.ones_like(lo)
        else:
            tau2 = _tau2s((var("a") + var("b")) / horizon, alpha)
            looking = idx >= start[:, None]
            p, lo, hi, _ = always_valid_arrays(
                s["n_a"], s["s_a"], s["q_a"], s["n_b"], s["s_b"], s["q_b"], alpha=alpha,
                tau2=tau2,
            )  # fmt: skip
        rows_at = n_a + n_b
    _, lo, hi = running_always_valid(p, lo, hi, looking)
    first_up, first_down = _first(lo > margin), _first(hi < margin)
    rollback = first_up < np.minimum(first_down, looks)
    promote = first_down < np.minimum(first_up, looks)
    at_rollback = np.take_along_axis(rows_at, np.minimum(first_up, looks - 1)[:, None], 1)[:, 0]
    to_rollback = np.where(rollback, at_rollback, np.inf)
    return ErrorRateSim(
        float(rollback.mean()), float(promote.mean()), float(np.median(to_rollback))
    )


def _lambdas(var: np.ndarray, rows: np.ndarray, alpha: float, bound: float) -> np.ndarray:
    """:func:`.bounded.lambda_for_horizon` of each run, as a column."""
    out = [lambda_for_horizon(v, r, alpha, bound) for v, r in
           zip(var.ravel().tolist(), rows.ravel().tolist(), strict=True)]  # fmt: skip
    return np.asarray(out, dtype=np.float64).reshape(var.shape)


def _tau2s(v: np.ndarray, alpha: float) -> np.ndarray:
    """τ² of each run as the engine tunes it (a tiny default for a degenerate variance)."""
    out = [tau2_for_horizon(x if np.isfinite(x) and x > 0 else 1e-4, alpha) for x in
           v.ravel().tolist()]  # fmt: skip
    return np.asarray(out, dtype=np.float64).reshape(v.shape)
