"""The exact (Clopper-Pearson) interval at extreme counts: SciPy oracle, coverage, paging.

Where fewer than two outcomes of the rarer kind are expected at the long-run rate, Wilson's
interval under-covers; the ratio then gets the exact interval, which must cover at least
the nominal level and, for a model that is always wrong, sit wholly below any sensible
objective so that an interval SLO pages.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from scipy import stats

from monitor.alerting.slo import SloSpec
from monitor.stats.binary import BinaryLayout
from monitor.stats.common import MIN_EXPECTED_EVENTS
from monitor.stats.intervals import (
    clopper_pearson_interval,
    wilson_interval,
    wilson_interval_z,
    z_value,
)
from monitor.stats.ranking import RankingLayout


@pytest.mark.parametrize(("k", "n"), [(0, 1), (0, 500), (1, 30), (3, 10), (29, 30), (500, 500)])
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_clopper_pearson_equals_scipys_exact_interval(k: int, n: int, confidence: float) -> None:
    lo, hi = clopper_pearson_interval(k, n, confidence)
    ref = stats.binomtest(k, n).proportion_ci(confidence, method="exact")
    assert float(lo) == pytest.approx(ref.low, abs=1e-9)
    assert float(hi) == pytest.approx(ref.high, abs=1e-9)


def test_clopper_pearson_arrays_fractional_counts_and_the_rule_of_three() -> None:
    k = np.array([0.0, 2.5, 7.0, 0.0])
    n = np.array([40.0, 7.3, 7.0, 0.0])
    lo, hi = clopper_pearson_interval(k, n, 0.95)
    beta = stats.beta
    assert lo[0] == 0.0 and hi[0] == pytest.approx(1 - 0.025 ** (1 / 40), rel=1e-12)
    assert lo[1] == pytest.approx(beta.ppf(0.025, 2.5, 7.3 - 2.5 + 1), rel=1e-9)
    assert hi[1] == pytest.approx(beta.ppf(0.975, 3.5, 7.3 - 2.5), rel=1e-9)
    assert lo[2] == pytest.approx(0.025 ** (1 / 7), rel=1e-12) and hi[2] == 1.0
    assert math.isnan(lo[3]) and math.isnan(hi[3])
    # the two-sided 95 % bound with no success is the rule of three at α/2: ≈ 3.69/n
    _, upper = clopper_pearson_interval(0, 1000, 0.95)
    assert 3.0 / 1000 < float(upper) < 3.7 / 1000


def _accuracy_windows(rng: np.random.Generator, p: float, n: int, windows: int) -> np.ndarray:
    """(windows, 4) confusion counts whose accuracy is Binomial(n, p)/n (all negatives)."""
    correct = rng.binomial(n, p, windows).astype(np.float64)
    return np.stack([correct, n - correct, np.zeros(windows), np.zeros(windows)], axis=1)


@pytest.mark.slow
@pytest.mark.parametrize("p", [0.001, 0.005, 0.995, 0.999])
@pytest.mark.parametrize("n", [30, 300, 1000])
def test_accuracy_intervals_cover_at_extreme_rates(p: float, n: int) -> None:
    """Monte-Carlo coverage of accuracy's interval through the engine's batch path, with
    the long-run rate at the truth: at least 0.93 in every cell (exact cells reach the
    nominal 0.95 by construction; the tolerance is 3 binomial s.e. of 4,000 windows), and
    each cell gets the interval the expected count calls for."""
    started = time.monotonic()
    windows = 4000
    rng = np.random.default_rng(20261127 + n)
    long_run = np.array([p, 1.0 - p, 0.0, 0.0]) * 1e7
    rows = BinaryLayout().metrics_many(
        _accuracy_windows(rng, p, n, windows), long_run=long_run, names={"accuracy"}
    )
    acc = [row[0] for row in rows]
    assert all(m.name == "accuracy" and math.isfinite(m.lower) for m in acc)
    covered = np.mean([m.lower <= p <= m.upper for m in acc])
    exact = n * min(p, 1 - p) < MIN_EXPECTED_EVENTS
    assert {m.method for m in acc} == {"clopper-pearson" if exact else "wilson"}
    tol = 3 * math.sqrt(0.95 * 0.05 / windows)
    print(f"p={p} n={n} exact={exact}: coverage {covered:.4f}")
    assert covered >= (0.95 if exact else 0.93) - tol
    assert time.monotonic() - started < 60  # bounded: about a second alone


def test_an_always_wrong_model_gets_an_interval_that_pages() -> None:
    """500 rows, none right, and a long run just as bad: accuracy's interval is [0, 0.0074]
    (it used to be withheld: no correct outcome expected), so an interval SLO at 0.9
    breaches; the error rate's mirrors it at 1."""
    lay = BinaryLayout()
    long_run = np.array([0.0, 40_000.0, 10_000.0, 0.0])
    m = {x.name: x for x in lay.metrics(np.array([0.0, 400.0, 100.0, 0.0]), long_run=long_run)}
    acc = m["accuracy"]
    assert acc.value == 0.0 and acc.method == "clopper-pearson" and acc.note == ""
    assert acc.lower == 0.0 and acc.upper < 0.9
    assert acc.upper == pytest.approx(1 - 0.025 ** (1 / 500), rel=1e-9)
    assert m["error_rate"].lower == pytest.approx(1 - acc.upper) and m["error_rate"].upper == 1
    slo = SloSpec("acc", "fraud", "accuracy", "1h", 0.9, "above", min_samples=100)
    assert slo.confidence == "interval"
    assert slo.breached(acc.value, acc.lower, acc.upper)
    # a nearly-always-wrong model too: 1 right in 500, 0.2 right expected
    m = {x.name: x for x in lay.metrics(np.array([1.0, 399.0, 100.0, 0.0]), long_run=long_run)}
    assert m["accuracy"].method == "clopper-pearson" and m["accuracy"].upper < 0.02
    assert slo.breached(m["accuracy"].value, m["accuracy"].lower, m["accuracy"].upper)


def test_a_ranker_that_always_misses_gets_an_exact_interval() -> None:
    """hit@10 of a ranker that never hits (long run as well): [0, 1 − 0.025^(1/n)], not
    withheld for want of spread between queries."""
    lay = RankingLayout((10,))
    queries, lr_queries = 200, 10_000
    vec, long_run = lay.empty(), lay.empty()
    vec[0], long_run[0] = queries, lr_queries  # every per-query sum stays 0: all misses
    m = {x.name: x for x in lay.metrics(vec, long_run=long_run)}
    hit = m["hit_rate_at_10"]
    assert hit.value == 0.0 and hit.method == "clopper-pearson"
    assert hit.lower == 0.0 and hit.upper == pytest.approx(1 - 0.025 ** (1 / queries))


def test_wilson_at_several_levels_in_one_call_equals_each_level() -> None:
    """The fairness gaps' Bonferroni levels differ by gap: one call with a quantile per
    proportion equals a call per level, bit for bit."""
    rng = np.random.default_rng(3)
    trials = rng.integers(0, 50, 30).astype(np.float64)
    k = np.floor(trials * rng.random(30))
    levels = np.repeat([0.95, 0.99, 0.9975], 10)
    z = np.array([z_value(x) for x in levels])
    lo, hi = wilson_interval_z(k, trials, z)
    for level in (0.95, 0.99, 0.9975):
        at = levels == level
        want_lo, want_hi = wilson_interval(k[at], trials[at], level)
        np.testing.assert_array_equal(lo[at], want_lo)
        np.testing.assert_array_equal(hi[at], want_hi)
    assert np.isnan(lo[trials == 0]).all()
