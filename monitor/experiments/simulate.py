"""Monte-Carlo operating characteristics of the comparison tests (runs × looks, numpy).

One definition of each simulation, shared by the calibration tests (bounded size,
``tests/unit/test_experiments_conditional.py``) and the full-size tables of
``bench/stats_sim.py`` that docs/comparisons.md quotes. Seeded ``default_rng`` only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from .conditional import error_rate_looks, prior_concentration
from .sequential import running_always_valid
from .srm import log_bayes_factor

__all__ = ["ErrorRateSim", "fixed_horizon_power", "simulate_error_rate", "simulate_srm"]


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
    horizon_rows: int | None = None,
    max_events: float | None = None,
    seed: int = 0,
) -> ErrorRateSim:
    """A/B stream with a look every ``batch`` labeled rows (total), ``looks`` looks.

    Rows go to the treatment with probability ``share``; the prior is tuned as the engine
    tunes it, for ``horizon_rows`` total rows (default: the last look) at the true pooled
    rate. Decisions are those of :class:`.conditional.ErrorRateComparison` (the running
    intersection checked against the margin); a run counts once, at its first decision.
    ``max_events``: the group-sequential :func:`.conditional.horizon_cs` instead, looking
    only while the errors of both arms are at most ``max_events``.
    """
    rng = np.random.default_rng(seed)
    new_b = rng.binomial(batch, share, (runs, looks))
    rows = batch * np.arange(1, looks + 1)
    n_b = np.cumsum(new_b, axis=1)
    n_a = rows - n_b
    k_a = np.cumsum(rng.binomial(batch - new_b, p_control), axis=1)
    k_b = np.cumsum(rng.binomial(new_b, p_treatment), axis=1)
    pooled = p_control * (1 - share) + p_treatment * share
    c = prior_concentration(pooled * (horizon_rows or int(rows[-1])), alpha)
    p, lo, hi, _ = error_rate_looks(
        n_a, k_a, n_b, k_b, alpha=alpha, share=share, concentration=c, max_events=max_events
    )
    events = (k_a + k_b) / rows * np.minimum(n_a, n_b)
    looking = events >= min_events
    if max_events is not None:
        looking &= k_a + k_b <= max_events
    _, lo, hi = running_always_valid(p, lo, hi, looking)
    up, down = lo > margin, hi < margin
    first_up = np.where(up.any(axis=1), np.argmax(up, axis=1), looks)
    first_down = np.where(down.any(axis=1), np.argmax(down, axis=1), looks)
    rollback = first_up < np.minimum(first_down, looks)
    promote = first_down < np.minimum(first_up, looks)
    to_rollback = np.where(rollback, rows[np.minimum(first_up, looks - 1)], np.inf)
    return ErrorRateSim(
        float(rollback.mean()), float(promote.mean()), float(np.median(to_rollback))
    )


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
