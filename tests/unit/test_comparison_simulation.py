"""Comparisons of every loss under the null, through the engine's own choices.

The vectorized simulation (``monitor.experiments.simulate.simulate_comparison``) must make
the decision the real ``ComparisonTracker`` makes, at the same look; then its false
decision rate at equal models is measured in the hard cells (rare positives, 90/10 and
10/90 splits, split and shadow). Full size: ``python bench/stats_sim.py --part losses``
(docs/comparisons.md). CI size: 200 runs per cell, so a cell's Monte-Carlo s.e. at
α + 0.01 = 0.06 is 0.017; the bound asserted is α + 0.01 + 2 s.e.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitor.engine.comparison_stats import PAIRED_WIDTH, ArmSums, PairedSums
from monitor.engine.comparisons import ComparisonTracker
from monitor.engine.comparisons import simulation_method as engine_method
from monitor.engine.models import ComparisonSpec, ModelSpec
from monitor.experiments.simulate import (
    ComparisonStream,
    simulate_comparison,
    stream_sums,
)
from monitor.metrics.registry import LOSSES

ALPHA = 0.05
MODEL = ModelSpec("m")


def tracker_decisions(
    sums: dict[str, np.ndarray], loss: str, mode: str, share: float, **spec: object
) -> list[tuple[str, int]]:
    """Each run fed look by look to a real ComparisonTracker: (decision, first look)."""
    comp = ComparisonSpec(
        "c", 0, "a", "b", loss=loss, mode=mode, traffic_split=(1 - share, share), **spec
    )  # type: ignore[arg-type]
    li = LOSSES.index(loss)
    runs, looks = next(iter(sums.values())).shape
    out = []
    for r in range(runs):
        tracker = ComparisonTracker([comp], [MODEL])
        decided = ("continue", looks)
        for j in range(looks):
            arms, pairs = ArmSums(), PairedSums()
            if mode == "shadow":
                v = np.zeros(PAIRED_WIDTH)
                v[:6] = [sums[k][r, j] for k in ("n", "s", "q", "only_a", "only_b", "pos")]
                pairs.by_name["c"] = v
            else:
                loss_m = np.zeros((2, len(LOSSES), 3))
                for arm, a in enumerate("ab"):
                    n = sums[f"n_{a}"][r, j]
                    loss_m[arm, 0] = (n, sums[f"err_{a}"][r, j], sums[f"err_{a}"][r, j])
                    loss_m[arm, li] = (n, sums[f"s_{a}"][r, j], sums[f"q_{a}"][r, j])
                arms.start["c"] = 0
                arms.predictions["c"] = np.array([sums["n_a"][r, j], sums["n_b"][r, j]], int)
                arms.loss["c"] = loss_m
                arms.positives["c"] = np.array([sums["pos_a"][r, j], sums["pos_b"][r, j]])
            tracker.look(arms, pairs, (), now_ms=j)
            decider = tracker.deciders.get("c")  # the sequential state (an estimated loss's
            if decider is not None and decider.decision in ("promote", "rollback"):  # is
                decided = (decider.decision, j)  # withheld without calibrated results)
                break
        out.append(decided)
    return out


def sim_decisions(
    stream: ComparisonStream, sums: dict[str, np.ndarray], loss: str, method: str, **kw: object
) -> list[tuple[str, int]]:
    """The vectorized simulation's decision of each run, one run at a time."""
    runs, looks = next(iter(sums.values())).shape
    out = []
    for r in range(runs):
        one = {k: v[r : r + 1] for k, v in sums.items()}
        for j in range(looks):  # the first look at which the one-run simulation decides
            part = {k: v[:, : j + 1] for k, v in one.items()}
            s = simulate_comparison(stream, loss, method, runs=1, rows=0, sums=part, **kw)
            if s.any_decision:
                out.append(("rollback" if s.rollback else "promote", j))
                break
        else:
            out.append(("continue", looks))
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("loss", "mode", "share"),
    [
        ("error_rate", "split", 0.1),
        ("log_loss", "split", 0.5),
        ("estimated_error_rate", "split", 0.5),
        ("error_rate", "shadow", 0.5),
        ("squared_error", "shadow", 0.5),
    ],
)
def test_simulation_decides_as_the_tracker(loss: str, mode: str, share: float) -> None:
    """Worse treatments (so that decisions happen), 6 runs, small sizes: the same decision
    at the same look as ComparisonTracker.look, including the burn-in and tuning look."""
    worse = 0.5 if mode == "split" else 1.8  # shadow pairs decide fast: a smaller effect
    stream = ComparisonStream(0.1, share, mode=mode, dprime_control=2.5, dprime_treatment=worse)
    kw = {"min_samples": 200, "min_events": 5.0, "horizon": 2000}
    sums = stream_sums(stream, loss, runs=6, rows=12_000, batch=400, seed=17)
    method = engine_method(loss, mode)
    expected = tracker_decisions(sums, loss, mode, share, **kw)
    assert any(d != "continue" for d, _ in expected)  # the check has teeth
    assert sim_decisions(stream, sums, loss, method, **kw) == expected


CELLS = [
    ("split", 0.1, 0.002, "log_loss"),
    ("split", 0.9, 0.002, "squared_error"),
    ("split", 0.1, 0.01, "absolute_error"),
    ("split", 0.9, 0.01, "log_loss"),
    ("split", 0.1, 0.002, "error_rate"),
    ("shadow", 0.5, 0.002, "error_rate"),
    ("shadow", 0.5, 0.01, "log_loss"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "share", "prevalence", "loss"), CELLS)
def test_false_decisions_at_equal_models(
    mode: str, share: float, prevalence: float, loss: str
) -> None:
    """Acceptance: ≤ α + 0.01 at the configuration defaults (200 runs, 50,000 rows, a look
    every 500 rows; ±2 s.e.). The cells where the plug-in mixture failed before (false
    promotes 0.07 at 1 % and 0.21 at 0.2 % with a 90/10 split)."""
    stream = ComparisonStream(prevalence, share, mode=mode)
    method = engine_method(loss, mode)
    sim = simulate_comparison(
        stream, loss, method, runs=200, rows=50_000, batch=500, seed=int(prevalence * 1e4)
    )
    se = math.sqrt((ALPHA + 0.01) * (1 - ALPHA - 0.01) / 200)
    print(f"\n{mode} {share:.0%} {prevalence:.1%} {loss} ({method}): {sim.any_decision:.4f}")
    assert sim.any_decision <= ALPHA + 0.01 + 2 * se


@pytest.mark.slow
def test_the_plug_in_mixture_fails_where_the_default_does_not() -> None:
    """The failure the exact default removes, reproduced on the same draws: the plug-in
    mixture with the old burn-in (rows only) promotes an equal 10 % canary at 0.2 %
    positives in about a fifth of runs (the audit: 0.21)."""
    stream = ComparisonStream(0.002, 0.1)
    sums = stream_sums(stream, "log_loss", runs=300, rows=50_000, batch=500, seed=5)
    kw = {"runs": 300, "rows": 50_000, "sums": sums, "min_events": 0.0}
    mixture = simulate_comparison(stream, "log_loss", "mixture", **kw)
    exact = simulate_comparison(stream, "log_loss", engine_method("log_loss", "split"), **kw)
    print(f"\nmixture {mixture.any_decision:.4f}, exact {exact.any_decision:.4f}")
    assert mixture.any_decision > 0.1 and exact.any_decision <= ALPHA
