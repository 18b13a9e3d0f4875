"""False-page budget of interval SLOs: the critical value, the wiring, and by simulation
P(>= 1 page per day) with the metric exactly on the objective (CI size; the full table is
``bench/stats_sim.py --part slo``)."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from monitor.alert_wiring import slo_specs
from monitor.alerting.slo import SloSpec
from monitor.alerting.slo_budget import (
    BudgetShare,
    SloDay,
    allocate_budget,
    critical_z,
    default_for,
    false_page_probability,
    interval_scale,
    simulate_deployment_day,
    simulate_slo_day,
)
from monitor.config import ConfigError, settings_from_mapping


@pytest.mark.parametrize("window_s", [300.0, 3600.0, 86_400.0])
@pytest.mark.parametrize("budget", [0.01, 0.05, 0.2])
def test_critical_value_spends_exactly_the_budget(window_s: float, budget: float) -> None:
    u = critical_z(budget, window_s, 10.0)
    spent = false_page_probability(u, window_s, 10.0)
    # never looser than one evaluation alone, never tighter than Bonferroni over all
    assert u >= stats.norm.isf(budget) - 1e-12
    if u > stats.norm.isf(budget) + 1e-9:
        assert spent == pytest.approx(budget, rel=1e-6)
    else:  # a day-long window: the single-evaluation level is the binding one
        assert spent <= budget
    assert u <= stats.norm.isf(budget / (86_400 / 10.0)) + 1e-9


def test_longer_windows_and_bigger_budgets_need_less_widening() -> None:
    assert critical_z(0.05, 3600, 10) < critical_z(0.05, 300, 10)
    assert critical_z(0.2, 3600, 10) < critical_z(0.05, 3600, 10)
    assert interval_scale(0.05, 3600, 10, 0.95) == pytest.approx(
        critical_z(0.05, 3600, 10) / stats.norm.ppf(0.975)
    )
    with pytest.raises(ValueError):
        critical_z(0.0, 3600, 10)


def test_the_old_rule_overspends_the_budget() -> None:
    """A plain 95% interval on a 1h window evaluated every 10 s: most days page."""
    assert false_page_probability(stats.norm.ppf(0.975), 3600, 10) > 0.8


def test_breach_uses_the_widened_interval() -> None:
    spec = SloSpec("r", "m", "recall", "1h", 0.8, "above", interval_scale=2.0)
    assert spec.paging_bound(0.75, 0.72, 0.78) == pytest.approx(0.81)
    assert not spec.breached(0.75, 0.72, 0.78)  # the plain interval would breach
    assert spec.breached(0.70, 0.68, 0.72)
    below = SloSpec("e", "m", "ece", "1h", 0.05, "below", interval_scale=2.0)
    assert below.paging_bound(0.08, 0.06, 0.10) == pytest.approx(0.04)
    assert not below.breached(0.08, 0.06, 0.10)


def test_wiring_derives_scale_and_for_from_window_and_budget() -> None:
    """The deployment's budget 0.05: "b" keeps its own 0.01 (one instance, a pinned
    version); "a" (version "all": two instances) shares the rest, 0.02 per instance;
    the point SLO "c" takes none."""
    settings = settings_from_mapping(
        {
            "models": [{"name": "m", "windows": [{"size": "1h"}, {"size": "5m"}]}],
            "slos": [
                {"name": "a", "model": "m", "metric": "recall", "window": "1h",
                 "objective": 0.8, "direction": "above"},
                {"name": "b", "model": "m", "metric": "recall", "window": "5m",
                 "objective": 0.8, "direction": "above", "for": "1m", "version": "v1",
                 "false_page_budget": 0.01},
                {"name": "c", "model": "m", "metric": "recall", "window": "1h",
                 "objective": 0.8, "direction": "above", "confidence": "point"},
            ],
        }
    )  # fmt: skip
    a, b, c = slo_specs(settings)
    assert a.for_s == default_for(3600) == 360.0 and a.false_page_budget == pytest.approx(0.02)
    assert a.interval_scale == pytest.approx(interval_scale(0.02, 3600, 10, 0.95), rel=1e-5)
    assert b.for_s == 60.0 and b.false_page_budget == 0.01
    assert b.interval_scale == pytest.approx(interval_scale(0.01, 300, 10, 0.95), rel=1e-5)
    assert c.interval_scale == 1.0 and c.false_page_budget is None
    assert c.for_s == 0.0  # point SLOs are chosen for speed: no default `for`
    assert default_for(86_400) == 900.0


@pytest.mark.slow
@pytest.mark.parametrize(("window_s", "per_second"), [(3600.0, 1.0), (300.0, 2.0)])
def test_metric_on_the_objective_pages_within_budget(window_s: float, per_second: float) -> None:
    """Acceptance: recall exactly 0.9 = objective, every 10 s, a simulated day."""
    with_for = simulate_slo_day(
        0.9, 0.9, per_second=per_second, window_s=window_s, for_s=default_for(window_s),
        runs=300, seed=int(window_s),
    )  # fmt: skip
    bare = simulate_slo_day(
        0.9, 0.9, per_second=per_second, window_s=window_s, runs=300, seed=int(window_s) + 1
    )
    print(f"\nW={window_s:.0f}s: page days {with_for.page_days:.3f} (for), {bare.page_days:.3f}")
    assert with_for.page_days <= 0.05
    # `for` = 0: the budget by the scan approximation (binomial s.e. 0.013 at 300 runs)
    assert bare.page_days <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 300)


@pytest.mark.slow
def test_a_ten_point_drop_is_paged_within_a_window() -> None:
    sim = simulate_slo_day(
        0.9, 0.9, per_second=1.0, window_s=3600.0, for_s=default_for(3600.0), runs=60,
        drop_at_s=43_200.0, truth_after=0.8, seed=3,
    )  # fmt: skip
    print(f"\n10-point drop, 1h window, 1 event/s: median delay {sim.median_delay_s:.0f}s")
    assert sim.median_delay_s < 3600.0


def test_the_deployment_budget_is_shared_and_checked() -> None:
    shares = [BudgetShare(1, None, True), BudgetShare(2, None, True), BudgetShare(1, None, False)]
    assert allocate_budget(0.06, shares) == [pytest.approx(0.02), pytest.approx(0.02), None]
    with pytest.raises(ValueError, match="more than the deployment"):
        allocate_budget(0.05, [BudgetShare(2, 0.03, True)])
    with pytest.raises(ValueError, match="left without any"):
        allocate_budget(0.05, [BudgetShare(1, 0.05, True), BudgetShare(1, None, True)])
    base = {"models": [{"name": "m", "windows": [{"size": "1h"}]}]}
    slo = {"model": "m", "metric": "recall", "window": "1h", "objective": 0.8,
           "direction": "above", "false_page_budget": 0.04}  # fmt: skip
    with pytest.raises(ConfigError, match=r"alerting\.false_page_budget: .*0\.08"):
        settings_from_mapping({**base, "slos": [{"name": "x", **slo}]})  # 2 instances


@pytest.mark.slow
def test_twenty_slos_on_their_objectives_page_on_few_days() -> None:
    """Acceptance: a deployment of 20 interval SLOs (windows 5m-6h, 0.1-2 events/s),
    every metric exactly on its objective, at the defaults (budget 0.05 shared, default
    `for`), pages falsely on ≤ 5 % of days; with `for` = 0 too. 150 simulated days each
    (s.e. 0.018 at 0.05): the bound asserted is 0.05 + 2 s.e. Full size: bench."""
    kinds = [(2.0, 300.0), (1.0, 900.0), (1.0, 3600.0), (0.1, 3600.0), (0.1, 21_600.0)]
    budgets = allocate_budget(0.05, [BudgetShare(1, None, True)] * 20)
    bound = 0.05 + 2 * math.sqrt(0.05 * 0.95 / 150)
    for use_for in (True, False):
        slos = [
            SloDay(rate, window, budgets[i] or 0.0, default_for(window) if use_for else 0.0)
            for i, (rate, window) in enumerate(kinds * 4)
        ]
        days = simulate_deployment_day(slos, runs=150, seed=21 + use_for)
        print(f"\n20 SLOs, default for={use_for}: false page days {days:.3f}")
        assert days <= bound
