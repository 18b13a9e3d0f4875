"""Drift detector: configured once with the reference and the correction, then asked per window.

Shaped after alibi-detect's ``cd`` detectors (reference and correction fixed at
construction; ``predict`` returns p-values) with evidently's named tests, default
thresholds and typed results — but over mergeable count vectors, never raw data.

Decision rule. A feature *drifts* in a window when both

1. its test (binned KS for numeric features and the score, chi-square for categorical) has
   a multiple-testing-corrected p-value below ``alpha`` — the change is not noise; and
2. its effect size, corrected for sampling noise, reaches a threshold — the change is big
   enough to matter: numeric: quantile Wasserstein distance in normal-SD units
   (:func:`monitor.drift.tests.quantile_effect`) ``>= numeric_effect``; categorical:
   Jensen–Shannon distance beyond noise (:func:`~monitor.drift.tests.js_distance_debiased`)
   ``>= categorical_effect``.

Why an effect gate: a p-value measures evidence, not size. Production windows hold 10⁵-10⁷
events, and at 10⁶ events (against a 10⁶ reference) a KS test finds a 0.01-SD mean shift
with p ≈ 10⁻¹² (measured) — statistically real, operationally meaningless, and an alert that
fires forever trains people to ignore it. The effect gate makes the alert mean "moved by at
least this much", independently of traffic. The p-value gate keeps small windows, where
effect estimates are noisy, from alerting on noise.

Why the effect is corrected and measured on the reference's quantile scale: an
uncorrected distance is biased upward by sampling noise — at 1,000 events pure noise
passed the old gate in 26 % (normal), 97 % (Cauchy) and 100 % (200 categories) of
windows — and a Wasserstein distance in feature units is dominated by the outermost bins of
a heavy-tailed feature (a 0.01-SD shift of a Cauchy feature at 10⁶ events passed in 54 %).
Both effects subtract the distance noise alone produces at this window's and the
reference's sizes, and the numeric one weighs every reference quantile step equally.

Defaults and why:

- ``numeric_effect = 0.05`` normal-SD units. A location shift by ``δ`` SDs of a normal
  feature reads ``δ``, so the gate sits between the shift we promise to ignore (0.01 SD,
  at any traffic) and the one we promise to catch (0.1 SD at 10,000 events). Measured
  (tests/unit/test_drift_gate_simulation.py, tests/unit/test_drift_simulation.py): a 0.1-SD
  shift at 10,000 events is flagged in every window; a 0.01-scale Cauchy shift at 10⁶
  events in none; noise at 1,000 events passes the corrected gate in 0-0.5 % of windows.
- ``categorical_effect = 0.05`` (JS distance). For small changes the JS divergence is
  ``χ²-divergence / (8 ln 2)``, and by Cauchy–Schwarz any change of total variation ``t`` has
  ``χ²-divergence >= 4t²``, so to second order ``JS >= 0.85 t``: every 10-percentage-point
  change in the mix has ``JS >= 0.085`` and is caught; a 1-point change between common
  categories (``JS <≈ 0.02``) is not. A rare category growing severalfold can pass with a
  1-point change: that is a real change of the mix, and intended.
- ``min_samples = 1000`` live (non-missing) values. At 1,000 events the distance noise
  (≈ 1.1/√1000 ≈ 0.035 SD) is of the gate's size, so smaller windows cannot size an effect
  at the gate's resolution; Smirnov's asymptotic KS p-value is adequate long before. Each
  feature reports ``detectable_effect``, what its window can detect with 80 % probability.
  Smaller windows are reported with their effect sizes but not tested (and not
  counted in the correction).
- ``alpha = 0.05`` with Benjamini–Hochberg across the features of one window (the score
  counts as one more test): false discovery rate 5%, and a 5% chance of any false
  p-value rejection in a window where nothing changed (before the effect gate, which only
  removes alerts).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from monitor.drift.correction import Correction, adjust_p_values
from monitor.drift.reference import (
    CategoricalReference,
    NumericReference,
    ReferenceProfile,
)
from monitor.drift.summaries import MAX_UNSEEN_NAMES, n_cells, reference_cells
from monitor.drift.tests import (
    binned_ks,
    categorical_detectable,
    chi_square,
    js_distance,
    js_distance_debiased,
    missing_rate_test,
    numeric_detectable,
    psi,
    quantile_effect,
    wasserstein_binned,
)

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_CATEGORICAL_EFFECT",
    "DEFAULT_MIN_SAMPLES",
    "DEFAULT_NUMERIC_EFFECT",
    "DriftDetector",
    "DriftReport",
    "FeatureDrift",
    "LabelPriorDrift",
    "label_prior_drift",
]

DEFAULT_ALPHA = 0.05
DEFAULT_NUMERIC_EFFECT = 0.05
DEFAULT_CATEGORICAL_EFFECT = 0.05
DEFAULT_MIN_SAMPLES = 1000


@dataclass(frozen=True, slots=True)
class FeatureDrift:
    """One feature's drift result in one window.

    ``n`` counts the live non-missing values the test used. ``effect`` is the gated effect
    size (``wasserstein_sd`` for numeric features, ``js_distance`` for categorical ones) and
    ``effect_threshold`` its gate. Untested features (``tested`` False: fewer than
    ``min_samples`` values) have NaN ``p_value``/``p_adjusted`` and are never detected.
    ``missing_rate_p_value`` (two-proportion z-test against the reference) is reported
    but not part of ``detected``. ``effect`` is already corrected for sampling noise
    (``effect_null``, the distance pure noise would show at this window's and the
    reference's sizes, is subtracted); ``detectable_effect`` is the smallest effect, in the
    same unit, this window would flag with 80 % probability (the larger of the test's
    power limit and the gate). ``wasserstein``/``wasserstein_sd`` are NaN for categorical
    features; ``out_of_range`` (under- plus overflow) is 0 for them and ``unseen`` 0 for
    numeric ones.
    """

    feature: str
    kind: Literal["numeric", "categorical"]
    test: Literal["ks", "chi2"]
    statistic: float
    p_value: float
    p_adjusted: float
    effect: float
    effect_threshold: float
    psi: float
    wasserstein: float
    wasserstein_sd: float
    js_distance: float
    n: int
    n_missing: int
    missing_rate: float
    missing_rate_reference: float
    missing_rate_change: float
    missing_rate_p_value: float
    out_of_range: int
    unseen: int
    unseen_values: tuple[str, ...]
    tested: bool
    detected: bool
    reason: str
    effect_null: float = math.nan
    detectable_effect: float = math.nan

    @property
    def effect_ratio(self) -> float:
        """Effect in units of its threshold (comparable across kinds; NaN if unknown)."""
        if math.isnan(self.effect) or self.effect_threshold <= 0:
            return math.inf if self.effect > 0 else math.nan
        return self.effect / self.effect_threshold


def _rank_key(f: FeatureDrift) -> tuple[bool, float, str]:
    ratio = f.effect_ratio
    return (not f.detected, -ratio if not math.isnan(ratio) else math.inf, f.feature)


@dataclass(frozen=True, slots=True)
class DriftReport:
    """All features of one window, detected first, then by effect size over its threshold."""

    features: tuple[FeatureDrift, ...]
    any_detected: bool
    n_tested: int
    alpha: float
    correction: Correction

    def get(self, feature: str) -> FeatureDrift:
        for f in self.features:
            if f.feature == feature:
                return f
        raise KeyError(feature)

    @property
    def detected(self) -> tuple[str, ...]:
        return tuple(f.feature for f in self.features if f.detected)


@dataclass(frozen=True, slots=True)
class LabelPriorDrift:
    """Chi-square goodness of fit of live label counts to the reference label prior."""

    statistic: float
    p_value: float
    js_distance: float
    n: int
    observed_share: dict[str, float]
    unseen_labels: tuple[str, ...]
    detected: bool
    reason: str


def label_prior_drift(
    reference_prior: dict[str, float],
    live_counts: dict[str, int],
    alpha: float = DEFAULT_ALPHA,
    effect: float = DEFAULT_CATEGORICAL_EFFECT,
) -> LabelPriorDrift:
    """Has the class mix of the labels moved from the reference prior (label shift)?

    Goodness of fit rather than homogeneity: the prior is given as shares, its reference
    sample size unknown, so its own sampling error is ignored (fine for a large reference).
    A label with live events but zero prior share is impossible under H0: the statistic is
    infinite and p = 0. Detected when ``p < alpha`` and JS distance ``>= effect``, for the
    same reason as features.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if any(c < 0 for c in live_counts.values()):
        raise ValueError("live label counts must be non-negative")
    labels = list(reference_prior) + sorted(set(live_counts) - set(reference_prior))
    prior = np.array([reference_prior.get(k, 0.0) for k in labels], dtype=np.float64)
    if prior.sum() <= 0:
        raise ValueError("reference_prior must have positive total share")
    prior = prior / prior.sum()
    obs = np.array([live_counts.get(k, 0) for k in labels], dtype=np.float64)
    n = int(obs.sum())
    unseen = tuple(k for k, p, o in zip(labels, prior, obs, strict=True) if p == 0 and o > 0)
    share = {k: (float(o) / n if n else math.nan) for k, o in zip(labels, obs, strict=True)}
    if n == 0:
        return LabelPriorDrift(0.0, 1.0, math.nan, 0, share, (), False, "no live labels")
    if unseen:
        statistic, p_value = math.inf, 0.0
    else:
        keep = prior > 0
        if keep.sum() < 2:
            statistic, p_value = 0.0, 1.0
        else:
            from scipy import stats  # (imported when first needed: a second of start-up)

            res = stats.chisquare(obs[keep], f_exp=prior[keep] * n)
            statistic, p_value = float(res.statistic), float(res.pvalue)
    js = js_distance(prior, obs)
    detected = bool(p_value < alpha and js >= effect)
    verdict = "label prior drift" if detected else "label prior stable"
    extra = f", unseen labels {list(unseen)}" if unseen else ""
    reason = (
        f"{verdict}: chi2={statistic:.4g}, p={p_value:.3g} (alpha {alpha:g}), "
        f"JS distance {js:.3g} (threshold {effect:g}), n={n}{extra}"
    )
    return LabelPriorDrift(statistic, p_value, js, n, share, unseen, detected, reason)


@dataclass(frozen=True, slots=True)
class _Raw:
    """Per-feature numbers before the correction across features."""

    ref: NumericReference | CategoricalReference
    statistic: float
    p_value: float
    effect: float
    threshold: float
    psi: float
    wasserstein: float
    wasserstein_sd: float
    js: float
    n: int
    n_missing: int
    missing_change: float
    missing_p: float
    out_of_range: int
    unseen: int
    unseen_values: tuple[str, ...]
    null: float
    detectable: float


class DriftDetector:
    """Tests every reference feature (and the score) of a window against the reference.

    Configured once; :meth:`predict` is pure and cheap (O(features x bins)), so it can run at
    every evaluation. ``live`` maps feature names (``"__score__"`` for the score) to count
    vectors laid out by :mod:`monitor.drift.summaries`; features absent from ``live`` are
    reported with ``n = 0`` and not tested. See the module docstring for the defaults.
    """

    __slots__ = (
        "alpha",
        "categorical_effect",
        "correction",
        "min_samples",
        "numeric_effect",
        "reference",
    )

    def __init__(
        self,
        reference: ReferenceProfile,
        alpha: float = DEFAULT_ALPHA,
        correction: Correction = "bh",
        numeric_effect: float = DEFAULT_NUMERIC_EFFECT,
        categorical_effect: float = DEFAULT_CATEGORICAL_EFFECT,
        min_samples: int = DEFAULT_MIN_SAMPLES,
    ) -> None:
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {alpha}")
        if correction not in ("bh", "bonferroni"):
            raise ValueError(f"unknown correction {correction!r}: use 'bh' or 'bonferroni'")
        if not (numeric_effect >= 0 and categorical_effect >= 0):
            raise ValueError("effect thresholds must be non-negative")
        if min_samples < 1:
            raise ValueError(f"min_samples must be >= 1, got {min_samples}")
        self.reference = reference
        self.alpha = float(alpha)
        self.correction: Correction = correction
        self.numeric_effect = float(numeric_effect)
        self.categorical_effect = float(categorical_effect)
        self.min_samples = int(min_samples)

    def label_prior(
        self, live_counts: dict[str, int], alpha: float | None = None
    ) -> LabelPriorDrift:
        """:func:`label_prior_drift` against the reference's label prior (at ``alpha``, by
        default the detector's)."""
        if self.reference.label_prior is None:
            raise ValueError("the reference profile has no label prior")
        level = self.alpha if alpha is None else alpha
        return label_prior_drift(
            self.reference.label_prior, live_counts, level, self.categorical_effect
        )

    def _raw(
        self,
        ref: NumericReference | CategoricalReference,
        counts: np.ndarray,
        unseen_values: Sequence[str],
        alpha: float,
    ) -> _Raw:
        n_missing = int(counts[0])
        missing_ref = round(ref.missing_rate * ref.n)
        total = int(counts.sum())
        z = missing_rate_test(missing_ref, ref.n, n_missing, total)
        change = n_missing / total - ref.missing_rate if total else math.nan
        n_live, n_ref = total - n_missing, ref.n_present
        if isinstance(ref, NumericReference):
            statistic, p_value = binned_ks(ref, counts)
            w = wasserstein_binned(ref, counts)
            effect, null = quantile_effect(ref, counts)
            ref_cells = np.concatenate([[0], ref.counts, [0]])
            live_cells = counts[1:]
            detectable = max(numeric_detectable(n_live, n_ref, alpha), self.numeric_effect)
            return _Raw(
                ref, statistic, p_value, effect, self.numeric_effect,
                psi(ref_cells, live_cells), w.distance, w.distance_sd,
                js_distance(ref_cells, live_cells), n_live, n_missing,
                change, z.p_value, int(counts[1] + counts[-1]), 0, (), null, detectable,
            )  # fmt: skip
        statistic, p_value = chi_square(ref, counts)
        ref_cells = reference_cells(ref)
        live_cells = counts[1:]
        js = js_distance(ref_cells, live_cells)
        effect, null = js_distance_debiased(ref_cells, live_cells)
        unseen = int(counts[len(ref.categories) + 1])
        names = tuple(unseen_values)[:MAX_UNSEEN_NAMES] if unseen else ()
        k = int(np.count_nonzero(ref_cells + live_cells)) or len(ref.categories)
        detectable = max(categorical_detectable(k, n_live, n_ref, alpha), self.categorical_effect)
        return _Raw(
            ref, statistic, p_value, effect, self.categorical_effect, psi(ref_cells, live_cells),
            math.nan, math.nan, js, n_live, n_missing, change, z.p_value, 0,
            unseen, names, null, detectable,
        )  # fmt: skip

    def predict(
        self,
        live: Mapping[str, np.ndarray],
        unseen_values: Mapping[str, Sequence[str]] | None = None,
        alpha: float | None = None,
    ) -> DriftReport:
        """Test one window. ``unseen_values`` optionally names unseen categories per feature
        (e.g. :func:`monitor.drift.summaries.first_unseen` over the window's buckets).
        ``alpha``: this window's level instead of the detector's (the share of a daily
        false-alarm budget, :func:`monitor.drift.budget.window_alpha`)."""
        level = self.alpha if alpha is None else float(alpha)
        if not 0.0 < level < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {level}")
        names = self.reference.names
        unknown = sorted(set(live) - set(names))
        if unknown:
            raise ValueError(f"live counts for features not in the reference: {unknown}")
        raws: list[_Raw] = []
        for name in names:
            ref = self.reference.feature(name)
            counts = np.asarray(live.get(name, np.zeros(n_cells(ref), dtype=np.int64)))
            if counts.shape != (n_cells(ref),):
                raise ValueError(
                    f"{name}: live counts must have {n_cells(ref)} cells, got {counts.shape}"
                )
            raws.append(self._raw(ref, counts, (unseen_values or {}).get(name, ()), level))
        tested = np.array([r.n >= self.min_samples for r in raws], dtype=bool)
        p_adj = np.full(len(raws), math.nan)
        p_adj[tested] = adjust_p_values(
            np.array([r.p_value for r in raws])[tested], self.correction
        )
        results = [
            self._result(name, r, bool(t), float(pa), level)
            for name, r, t, pa in zip(names, raws, tested, p_adj, strict=True)
        ]
        results.sort(key=_rank_key)
        return DriftReport(
            features=tuple(results),
            any_detected=any(f.detected for f in results),
            n_tested=int(tested.sum()),
            alpha=level,
            correction=self.correction,
        )

    def _result(
        self, name: str, r: _Raw, tested: bool, p_adjusted: float, alpha: float
    ) -> FeatureDrift:
        numeric = isinstance(r.ref, NumericReference)
        test_name: Literal["ks", "chi2"] = "ks" if numeric else "chi2"
        effect_name = "quantile-Wasserstein" if numeric else "JS distance"
        unit = " SD" if numeric else ""
        significant = tested and p_adjusted < alpha
        large = r.effect >= r.threshold
        detected = bool(significant and large)
        effect_txt = (
            f"{effect_name} {r.effect:.3g}{unit} beyond noise {r.null:.3g} "
            f"(threshold {r.threshold:g}{unit})"
        )
        if not tested:
            reason = f"not tested: {r.n} live values < min_samples {self.min_samples}"
        elif detected:
            reason = f"drift: {test_name} p_adj={p_adjusted:.3g} < {alpha:g} and {effect_txt}"
        elif significant:
            reason = (
                f"significant but small: {test_name} p_adj={p_adjusted:.3g} < {alpha:g} "
                f"but {effect_txt}"
            )
        else:
            reason = f"no significant change: {test_name} p_adj={p_adjusted:.3g}; {effect_txt}"
        return FeatureDrift(
            feature=name,
            kind="numeric" if numeric else "categorical",
            test=test_name,
            statistic=r.statistic,
            p_value=r.p_value if tested else math.nan,
            p_adjusted=p_adjusted,
            effect=r.effect,
            effect_threshold=r.threshold,
            psi=r.psi,
            wasserstein=r.wasserstein,
            wasserstein_sd=r.wasserstein_sd,
            js_distance=r.js,
            n=r.n,
            n_missing=r.n_missing,
            missing_rate=r.n_missing / (r.n + r.n_missing) if r.n + r.n_missing else math.nan,
            missing_rate_reference=r.ref.missing_rate,
            missing_rate_change=r.missing_change,
            missing_rate_p_value=r.missing_p,
            out_of_range=r.out_of_range,
            unseen=r.unseen,
            unseen_values=r.unseen_values,
            tested=tested,
            detected=detected,
            reason=reason,
            effect_null=r.null,
            detectable_effect=r.detectable if r.n > 0 else math.nan,
        )
