"""Sample-ratio mismatch (SRM): is the traffic split what the experiment configured?

An A/B result is only as good as its randomisation. If a 50/50 experiment receives
55/45, something between assignment and logging drops or duplicates units in one arm
(bot filtering, crashes, redirects, a label join that favours one version), and the
comparison is biased in an unknown direction. Fabijan et al. (2019), "Diagnosing sample
ratio mismatch in online controlled experiments" (KDD), and Kohavi, Tang & Xu (2020),
*Trustworthy Online Controlled Experiments*, ch. 21, recommend checking it before trusting
any result, with Pearson's chi-square goodness-of-fit test and a small threshold
(p < 0.001) because the check runs on every experiment, continuously.

The check runs at every look, so a fixed-sample p-value compared with the threshold at
each look would mark a correct split ``invalid`` with probability growing with the number
of looks (1.8% over 400 looks, 3.2% over 4,000 at p < 0.001 — and the decision is sticky).
The p-value here is therefore *always valid*: the Dirichlet-multinomial mixture
likelihood ratio of Lindon & Malek (2022), "Anytime-valid inference for multinomial count
data" (NeurIPS)::

    BF_n = Γ(c) / Γ(c + n) · Π_i Γ(cπ_i + n_i) / Γ(cπ_i) / Π_i π_i^{n_i}

with prior Dirichlet(cπ) centred on the configured split. Under the configured split it
is a nonnegative martingale with mean 1, so by Ville's inequality
``P(∃n: BF_n ≥ 1/threshold) ≤ threshold`` however often it is read, and ``p = min(1,
1/BF)`` may be compared with the threshold at every look. ``c`` (``concentration``) places
the power: the test is most sensitive around ``n ≈ c · r`` events (``r ≈ 16`` at 0.001); any
value keeps it valid. The chi-square statistic is still reported for reading.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

__all__ = ["DEFAULT_CONCENTRATION", "SRMResult", "log_bayes_factor", "sample_ratio_mismatch"]

DEFAULT_CONCENTRATION = 10_000.0


def log_bayes_factor(
    counts: np.ndarray, share: np.ndarray, concentration: float = DEFAULT_CONCENTRATION
) -> np.ndarray:
    """Log Dirichlet-multinomial mixture likelihood ratio against ``share`` (last axis = arms).

    Vectorized over leading axes (runs × looks in simulations).
    """
    n_i = np.asarray(counts, dtype=np.float64)
    prior = concentration * np.asarray(share, dtype=np.float64)
    n = n_i.sum(axis=-1)
    log_marginal = (
        special.gammaln(concentration)
        - special.gammaln(concentration + n)
        + (special.gammaln(prior + n_i) - special.gammaln(prior)).sum(axis=-1)
    )
    return log_marginal - special.xlogy(n_i, np.asarray(share, dtype=np.float64)).sum(axis=-1)


@dataclass(frozen=True, slots=True)
class SRMResult:
    """Observed arm counts against the configured split: always-valid p, chi-square shown."""

    statistic: float
    p_value: float
    mismatch: bool
    observed: tuple[int, ...]
    expected_share: tuple[float, ...]
    threshold: float
    reason: str


def sample_ratio_mismatch(
    counts: Sequence[int] | np.ndarray,
    expected_split: Sequence[float] | np.ndarray,
    threshold: float = 0.001,
    concentration: float = DEFAULT_CONCENTRATION,
) -> SRMResult:
    """Test observed cumulative per-arm counts against an expected split (weights, any scale).

    ``mismatch = p_value < threshold`` with the always-valid mixture p-value (module
    docstring). With no events there is nothing to test (p = 1, no mismatch).
    """
    observed = np.asarray(counts, dtype=np.int64)
    weights = np.asarray(expected_split, dtype=np.float64)
    if observed.ndim != 1 or observed.shape != weights.shape or observed.size < 2:
        raise ValueError("counts and expected_split must be 1-D, same length, >= 2 arms")
    if (observed < 0).any():
        raise ValueError("counts must be non-negative")
    if not (np.isfinite(weights).all() and (weights > 0).all()):
        raise ValueError("expected_split weights must be positive and finite")
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must be in (0, 1), got {threshold}")
    share = weights / weights.sum()
    total = int(observed.sum())
    obs_share = observed / total if total > 0 else np.zeros_like(share)
    if not (concentration > 0 and math.isfinite(concentration)):
        raise ValueError(f"concentration must be positive, got {concentration}")
    if total == 0:
        statistic, p_value = 0.0, 1.0
    else:
        # Pearson's statistic, as scipy.stats.chisquare computes it (reported only)
        expected = share * total
        statistic = float(np.sum((observed - expected) ** 2 / expected))
        log_bf = float(log_bayes_factor(observed, share, concentration))
        p_value = math.exp(-log_bf) if log_bf > 0 else 1.0
    mismatch = bool(p_value < threshold)
    split = "/".join(f"{s:.1%}" for s in obs_share)
    want = "/".join(f"{s:.1%}" for s in share)
    verdict = "sample-ratio mismatch" if mismatch else "split consistent with configuration"
    reason = (
        f"{verdict}: observed {split} of {total} vs expected {want} "
        f"(chi2={statistic:.3g}, always-valid p={p_value:.3g}, threshold {threshold:g})"
    )
    return SRMResult(
        statistic=statistic,
        p_value=p_value if math.isfinite(p_value) else 0.0,
        mismatch=mismatch,
        observed=tuple(int(c) for c in observed),
        expected_share=tuple(float(s) for s in share),
        threshold=float(threshold),
        reason=reason,
    )
