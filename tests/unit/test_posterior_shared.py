"""Posterior draws shared across windows by cell count: each window's sample is still its
own seeded Jeffreys posterior, independent of the batch; and its bounds, kept by its
counts, are those it would draw again."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from monitor.stats import binary
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


def test_kept_bounds_equal_bounds_drawn_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A row's posterior bounds are kept by its counts: a second batch holding rows seen
    before draws only the new ones, and every bound equals the one drawn from scratch
    (kept store emptied), whatever the batch."""
    rng = np.random.default_rng(11)
    first = rng.integers(0, 60, (40, 4)).astype(np.float64)
    first[3] = first[0]  # a repeat inside one batch is drawn once
    second = np.vstack([first[::3], rng.integers(60, 90, (5, 4)).astype(np.float64)])
    betas = (1.0, 2.0, 0.5)
    monkeypatch.setattr(binary, "_BOUNDS", {})
    drawn: list[int] = []
    real = binary._posterior_cells

    def counting(counts: np.ndarray) -> object:
        drawn.append(counts.shape[0])
        return real(counts)

    monkeypatch.setattr(binary, "_posterior_cells", counting)
    got_first = binary._posterior_bounds(first, betas, 0.95)
    got_second = binary._posterior_bounds(second, betas, 0.95)
    assert drawn == [39, 5]  # 40 rows, one repeat; then only the 5 unseen
    for rows, got in ((first, got_first), (second, got_second)):
        for i, row in enumerate(rows):
            monkeypatch.setattr(binary, "_BOUNDS", {})
            alone = binary._posterior_bounds(row[np.newaxis, :], betas, 0.95)
            for name, (lo, hi) in alone.items():
                assert (got[name][0][i], got[name][1][i]) == (lo[0], hi[0]), (name, i)


def test_kept_bounds_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(binary, "_BOUNDS", {})
    monkeypatch.setattr(binary, "BOUNDS_KEPT", 50)
    rng = np.random.default_rng(12)
    for _ in range(4):
        binary._posterior_bounds(rng.integers(0, 10**6, (30, 4)).astype(np.float64), (1.0,), 0.9)
        assert all(len(kept) <= 50 for kept in binary._BOUNDS.values())
