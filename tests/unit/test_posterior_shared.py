"""Posterior draws shared across windows by cell count: each window's sample is still its
own seeded Jeffreys posterior, independent of the batch."""

from __future__ import annotations

import numpy as np
from scipy import stats

from monitor.stats.binary import _posterior_cells, confusion_posterior


def test_batch_draws_equal_each_window_alone() -> None:
    rng = np.random.default_rng(8)
    counts = rng.integers(0, 40, (30, 4)).astype(np.float64)
    counts[1] = counts[0]  # equal windows draw equal samples
    many = np.stack(_posterior_cells(counts), axis=2)  # (rows, draws, 4)
    for row, got in zip(counts, many, strict=True):
        np.testing.assert_array_equal(got, confusion_posterior(row))
    np.testing.assert_array_equal(many[0], many[1])


def test_cells_with_equal_counts_are_independent_and_dirichlet() -> None:
    """Equal counts in two cells of one window must not share variates: the marginal of
    each cell is Beta(a_i, a0 - a_i) and the cells are not copies of each other."""
    draws = confusion_posterior(np.array([20.0, 20.0, 20.0, 20.0]), draws=4000)
    assert not np.allclose(draws[:, 0], draws[:, 1])
    a = 20.5
    for cell in range(4):
        p = stats.kstest(draws[:, cell], stats.beta(a, 3 * a).cdf).pvalue
        assert p > 1e-3
    # Dirichlet covariance of two cells: -a_i a_j / (a0^2 (a0 + 1))
    cov = np.cov(draws[:, 0], draws[:, 1])[0, 1]
    a0 = 4 * a
    assert abs(cov - (-a * a / (a0 * a0 * (a0 + 1)))) < 3e-4
