"""False-page budget of an interval SLO: per-evaluation confidence from a page rate per day.

Why. An SLO is evaluated every ``Δ`` seconds (10 s) on a trailing window of ``W`` seconds.
Each evaluation is a one-sided test at the engine's confidence (2.5% at 95%), but a day
holds 8,640 strongly correlated evaluations: with the true metric exactly on the objective
an hour-window SLO paged on 95–97% of days. The quantity an on-call rotation cares about is
P(≥ 1 page per day) when nothing is wrong — the *false-page budget* ``b``.

Method. The standardized estimate ``Z_t`` over a sliding window of i.i.d. contributions is
a stationary Gaussian process (asymptotically) with correlation ``1 - |τ|/W`` for
``|τ| ≤ W``: locally like Brownian motion with ``β = 1/W``. For such a process sampled every
``Δ``, the scan-statistic approximation of Siegmund & Venkatraman (1995, Ann. Statist.
23(1)) and Siegmund & Yakir (2007, *The Statistics of Gene Mapping*, ch. 4, 7) gives::

    P(max_{t ≤ T} Z_t ≥ u) ≈ 1 - exp( -T β u φ(u) ν(u √(2βΔ)) )

with Siegmund's discreteness correction ``ν(x) ≈ (2/x)(Φ(x/2) - ½) / ((x/2)Φ(x/2) + φ(x/2))``.
Setting it equal to ``b`` for ``T`` = one day and solving for ``u`` gives the one-sided
critical value of each evaluation — a Bonferroni correction over the *effectively*
independent evaluations of a day, without treating overlapping windows as independent.
The daemon then asks, at each evaluation, whether ``value ± u·se`` is past the objective,
``se`` being read off the exported interval on the side of the objective (``(upper -
value)/z_c`` for a lower objective bound, ``z_c`` the engine's two-sided quantile).
``for`` only removes pages, so the budget holds for every ``for ≥ 0``.

Assumptions: contributions independent and the window full (a burst of traffic makes
``Z_t`` less smooth and the approximation optimistic); the normal approximation of the
metric at the window's ``n``. ``bench/stats_sim.py`` measures P(≥ 1 page per day) by
simulation against the budget.

One budget for a deployment. On-call is paged by the deployment, not by one SLO: twenty
SLOs with 5 % each page falsely on up to 1 − 0.95²⁰ ≈ 64 % of days. So the budget
configured in ``[alerting]`` is the deployment's, and :func:`allocate_budget` splits it
across the *instances* of its interval SLOs — a union (Bonferroni) bound, so
P(≥ 1 false page per day anywhere) ≤ the budget whatever the dependence between them.
An SLO pinned to a version is one instance; one with ``version = "all"`` counts as
:data:`VERSIONS_PER_SLO` (a live version and a canary). An SLO with its own
``false_page_budget`` takes that much per instance first; the rest is shared equally.
Point SLOs page on the point estimate and are outside any budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# scipy is imported where it is used: configuration checks import this module for the
# budget allocation, and `monitor check-config` needs none of scipy (~1 s of CPU)

__all__ = [
    "DAY_S",
    "VERSIONS_PER_SLO",
    "BudgetShare",
    "PageSim",
    "SloDay",
    "allocate_budget",
    "critical_z",
    "default_for",
    "false_page_probability",
    "interval_scale",
    "simulate_deployment_day",
    "simulate_slo_day",
]

DAY_S = 86_400.0

VERSIONS_PER_SLO = 2
"""Instances a ``version = "all"`` SLO is budgeted for: the live version and one canary.
More versions live at once spend proportionally more (each instance pages alone)."""


@dataclass(frozen=True, slots=True)
class BudgetShare:
    """What :func:`allocate_budget` needs of one SLO: its instances (1, or
    :data:`VERSIONS_PER_SLO` for ``version = "all"``), its own per-instance budget if
    configured, and whether it is an interval SLO (point SLOs take no share)."""

    instances: int
    own: float | None
    interval: bool


def allocate_budget(total: float, slos: list[BudgetShare]) -> list[float | None]:
    """Per-instance false-page budget of each SLO (None for point SLOs) so that the
    deployment pages falsely on at most ``total`` of days: the SLOs with their own budget
    keep it, the remainder is split equally over the other interval SLOs' instances.

    ValueError (naming the problem) when the configured budgets leave nothing for the
    rest, or exceed the deployment's budget."""
    if not 0.0 < total < 1.0:
        raise ValueError(f"false_page_budget must be in (0, 1), got {total}")
    fixed = sum(s.instances * s.own for s in slos if s.interval and s.own is not None)
    shared = sum(s.instances for s in slos if s.interval and s.own is None)
    rest = total - fixed
    if fixed > total * (1 + 1e-9):
        raise ValueError(
            f"the SLOs' own false_page_budget values spend {fixed:.4g} per day (per "
            f"instance × instances), more than the deployment's {total:g}"
        )
    if shared and rest <= total * 1e-9:
        raise ValueError(
            f"the SLOs' own false_page_budget values spend the deployment's whole budget "
            f"{total:g}; {shared} interval SLO instances are left without any"
        )
    each = rest / shared if shared else 0.0
    return [None if not s.interval else (s.own if s.own is not None else each) for s in slos]


def _nu(x: float) -> float:
    """Siegmund's approximation of the discrete-sampling overshoot correction ν(x)."""
    from scipy import stats

    if x <= 0:
        return 1.0
    h = x / 2.0
    return (2.0 / x) * (stats.norm.cdf(h) - 0.5) / (h * stats.norm.cdf(h) + stats.norm.pdf(h))


def false_page_probability(
    u: float, window_s: float, interval_s: float, horizon_s: float = DAY_S
) -> float:
    """P(some evaluation in ``horizon_s`` exceeds ``u``) for a null on the objective."""
    from scipy import stats

    beta = 1.0 / window_s
    rate = beta * u * float(stats.norm.pdf(u)) * _nu(u * math.sqrt(2.0 * beta * interval_s))
    # at most one crossing per evaluation: never more than a union bound over them
    union = horizon_s / interval_s * float(stats.norm.sf(u))
    return min(1.0 - math.exp(-horizon_s * rate), union)


def critical_z(
    budget: float, window_s: float, interval_s: float, horizon_s: float = DAY_S
) -> float:
    """One-sided critical value making P(≥ 1 false page per ``horizon_s``) = ``budget``."""
    from scipy import optimize, stats

    if not 0.0 < budget < 1.0:
        raise ValueError(f"false_page_budget must be in (0, 1), got {budget}")
    if not (window_s > 0 and interval_s > 0):
        raise ValueError("window and evaluation interval must be positive")

    def excess(u: float) -> float:
        return false_page_probability(u, window_s, interval_s, horizon_s) - budget

    # one evaluation alone must not exceed the budget: the critical value is at least that
    floor = float(stats.norm.isf(budget))
    if excess(floor) <= 0:
        return floor
    return float(optimize.brentq(excess, floor, 40.0, xtol=1e-9))


def interval_scale(budget: float, window_s: float, interval_s: float, confidence: float) -> float:
    """Factor on the exported half-interval: ``u / z_c`` (> 1 widens it for the budget)."""
    from scipy import stats

    z_c = float(stats.norm.ppf(0.5 + confidence / 2.0))
    return critical_z(budget, window_s, interval_s) / z_c


def default_for(window_s: float) -> float:
    """``for`` of an interval SLO when none is configured: a tenth of the window, ≤ 15 min.

    Long enough to drop a breach that a single late batch or a restart produces, short
    against the window's own fill time, which dominates the detection delay.
    """
    return min(window_s / 10.0, 900.0)


@dataclass(frozen=True, slots=True)
class PageSim:
    """Share of simulated days with ≥ 1 page, and the median delay to the first page."""

    page_days: float
    median_delay_s: float


def simulate_slo_day(
    objective: float,
    truth: float,
    *,
    per_second: float,
    window_s: float,
    interval_s: float = 10.0,
    budget: float = 0.05,
    for_s: float = 0.0,
    confidence: float = 0.95,
    runs: int,
    drop_at_s: float | None = None,
    truth_after: float | None = None,
    seed: int = 0,
) -> PageSim:
    """A day of an ``above`` SLO on a proportion (e.g. recall) with Wilson intervals.

    Events arrive at ``per_second`` (Poisson) and are bucketed per evaluation interval;
    each evaluation reads the trailing ``window_s`` and applies the daemon's breach rule
    (:func:`monitor.alerting.slo.scaled_bound`) and ``for``. With ``drop_at_s`` the true
    value becomes ``truth_after`` then, and the delay to the first page after it is
    reported (``inf`` where none).
    """
    rng = np.random.default_rng(seed)
    breach, width = _breaches(
        rng, objective, truth, per_second, window_s, interval_s, budget, for_s, confidence,
        runs, drop_at_s, truth_after,
    )  # fmt: skip
    steps = breach.shape[1]
    first = np.where(breach.any(axis=1), np.argmax(breach, axis=1), steps)
    if drop_at_s is not None:
        t0 = width + int(drop_at_s / interval_s)
        after = breach[:, t0:]
        hit = after.any(axis=1)
        delay = np.where(hit, (np.argmax(after, axis=1) + 1) * interval_s, np.inf)
        return PageSim(float((first < t0).mean()), float(np.median(delay)))
    return PageSim(float((first < steps).mean()), math.inf)  # first >= width by `full`


@dataclass(frozen=True, slots=True)
class SloDay:
    """One SLO of a simulated deployment: its metric (a proportion) sits exactly on the
    objective; events per second, window, per-instance budget and ``for``."""

    per_second: float
    window_s: float
    budget: float
    for_s: float
    objective: float = 0.9


def simulate_deployment_day(
    slos: list[SloDay], *, runs: int, interval_s: float = 10.0, seed: int = 0
) -> float:
    """Share of simulated days on which at least one of ``slos`` pages, every metric on
    its objective and the SLOs independent (each as :func:`simulate_slo_day`)."""
    rng = np.random.default_rng(seed)
    paged = np.zeros(runs, dtype=bool)
    for s in slos:
        breach, _ = _breaches(
            rng, s.objective, s.objective, s.per_second, s.window_s, interval_s, s.budget,
            s.for_s, 0.95, runs, None, None,
        )  # fmt: skip
        paged |= breach.any(axis=1)
    return float(paged.mean())


def _breaches(
    rng: np.random.Generator,
    objective: float,
    truth: float,
    per_second: float,
    window_s: float,
    interval_s: float,
    budget: float,
    for_s: float,
    confidence: float,
    runs: int,
    drop_at_s: float | None,
    truth_after: float | None,
) -> tuple[np.ndarray, int]:
    """(runs, steps) firing evaluations of a simulated day after a warm-up window, and
    the window's length in steps."""
    from ..stats.intervals import wilson_interval
    from .slo import scaled_bound

    width = max(1, round(window_s / interval_s))
    steps = int(DAY_S / interval_s) + width  # a warm-up window, then a full day
    n_new = rng.poisson(per_second * interval_s, (runs, steps))
    p = np.full(steps, truth)
    if drop_at_s is not None and truth_after is not None:
        p[width + int(drop_at_s / interval_s) :] = truth_after
    k_new = rng.binomial(n_new, p)
    cn = np.concatenate([np.zeros((runs, 1)), np.cumsum(n_new, axis=1)], axis=1)
    ck = np.concatenate([np.zeros((runs, 1)), np.cumsum(k_new, axis=1)], axis=1)
    idx = np.arange(1, steps + 1)
    start = np.maximum(idx - width, 0)
    n = cn[:, idx] - cn[:, start]
    k = ck[:, idx] - ck[:, start]
    full = idx >= width  # the window has filled once: a day in steady state
    scale = interval_scale(budget, window_s, interval_s, confidence)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = k / n
        _, upper = wilson_interval(k, n, confidence)
        bound = scaled_bound(value, upper, scale)
    breach = (bound < objective) & full & (n > 0)
    need = max(1, math.ceil(for_s / interval_s) + 1)  # consecutive breaching evaluations
    if need > 1:  # fired where the last `need` evaluations all breached
        held = np.concatenate([np.zeros((runs, 1)), np.cumsum(breach, axis=1)], axis=1)
        fired = np.zeros_like(breach)
        fired[:, need - 1 :] = held[:, need:] - held[:, : steps - need + 1] >= need
        breach = fired
    return breach, width
