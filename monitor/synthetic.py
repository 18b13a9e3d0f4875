"""Synthetic binary-classifier traffic with realistic label delays (demo, tests, bench).

A seeded generator (``numpy.random.default_rng``), no global state. Scores come from a
logistic model whose quality can be degraded (``noise``) and whose inputs can drift
(``shift``), so a story — steady model, then drift, then a worse canary — is a handful
of calls with different arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "Traffic",
    "binary_traffic",
    "calibrated_score",
    "label_delays_ms",
    "model_score",
    "scored_population",
]


def scored_population(
    rng: np.random.Generator,
    n: int,
    prevalence: float,
    separation: float,
    shift: float,
    *,
    calibrated: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Truth ``y``, input ``x`` and model score for ``n`` cases.

    The latent score is ``separation * (y - 1/2) + x`` with ``x ~ N(shift, 1)``: larger
    separation means a better model; a shift of x is input drift that also moves scores.
    ``calibrated`` scores with :func:`calibrated_score` instead of :func:`model_score`.
    """
    y = (rng.random(n) < prevalence).astype(np.int64)
    x = rng.normal(0.0, 1.0, n) + shift
    if calibrated:
        return y, x, calibrated_score(y, x, separation, prevalence)
    return y, x, model_score(y, x, separation)


def model_score(y: np.ndarray, x: np.ndarray, separation: float) -> np.ndarray:
    """A model's P(positive) for truth ``y`` and input ``x`` (see ``scored_population``).
    A ranking score, not a calibrated probability (its ECE is about 0.1 at separation 3)."""
    return 1.0 / (1.0 + np.exp(-(separation * (y - 0.5) + x - 1.0)))


def calibrated_score(
    y: np.ndarray, x: np.ndarray, separation: float, prevalence: float
) -> np.ndarray:
    """The Bayes posterior P(y = 1 | z) of the latent ``z = separation (y - 1/2) + x``
    while ``x ~ N(0, 1)``: two unit-variance normals ``separation`` apart have the
    log-likelihood ratio ``separation · z`` (linear discriminant), so the posterior
    log-odds is ``logit(prevalence) + separation · z``. Calibrated on undrifted input; a
    shift of ``x`` moves ``z`` and so overstates every score — drift breaks calibration,
    as it does for a real model."""
    z = separation * (y - 0.5) + x
    return 1.0 / (1.0 + np.exp(-(np.log(prevalence / (1 - prevalence)) + separation * z)))


def label_delays_ms(rng: np.random.Generator, n: int, mean_s: float) -> np.ndarray:
    """Log-normal label delays (sigma 0.8) with the given mean, in milliseconds."""
    sigma = 0.8
    mu = np.log(max(mean_s, 1e-3)) - sigma**2 / 2
    return (rng.lognormal(mu, sigma, n) * 1000).astype(np.int64)


@dataclass(frozen=True, slots=True)
class Traffic:
    predictions: list[dict[str, object]]
    labels: list[dict[str, object]]  # in label-arrival order (by label ts)


def binary_traffic(
    n: int,
    *,
    seed: int,
    start_ms: int,
    rate_per_s: float = 100.0,
    model: str = "fraud",
    version: str = "v1",
    prevalence: float = 0.2,
    separation: float = 2.5,
    shift: float = 0.0,
    label_fraction: float = 0.9,
    delay_mean_s: float = 30.0,
    id_prefix: str = "p",
    countries: tuple[str, ...] = ("US", "DE", "BR", "IN"),
) -> Traffic:
    """``n`` predictions spread over time at ``rate_per_s`` and their (delayed) labels.

    ``separation`` is the distance between the class-conditional means of the latent
    score (larger = better model); ``shift`` moves the input feature for everyone (drift).
    Label delays are log-normal with mean ``delay_mean_s``; a ``1 - label_fraction``
    share of predictions never gets a label.
    """
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1000.0 / rate_per_s, n)
    ts = start_ms + np.cumsum(gaps).astype(np.int64)
    y, x, score = scored_population(rng, n, prevalence, separation, shift)
    amount = np.round(np.exp(rng.normal(3.0, 1.0, n) + shift), 2)
    country = rng.choice(np.array(countries), n)
    delay = label_delays_ms(rng, n, delay_mean_s)
    labeled = rng.random(n) < label_fraction
    preds: list[dict[str, object]] = []
    for i in range(n):
        c = str(country[i])
        preds.append(
            {
                "id": f"{id_prefix}{i:08d}",
                "ts": int(ts[i]),
                "model": model,
                "version": version,
                "score": round(float(score[i]), 6),
                "features": {"amount": float(amount[i]), "x": round(float(x[i]), 4), "country": c},
                "segments": {"country": c},
            }
        )
    idx = np.flatnonzero(labeled)
    label_ts = ts[idx] + delay[idx]
    order = idx[np.argsort(label_ts, kind="stable")]
    labels = [
        {"id": f"{id_prefix}{i:08d}", "ts": int(ts[i] + delay[i]), "label": int(y[i])}
        for i in order.tolist()
    ]
    return Traffic(preds, labels)
