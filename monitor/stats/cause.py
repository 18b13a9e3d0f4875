"""Which slices explain a change of a metric: a rate/mix decomposition with intervals.

A metric that is a mean over units — accuracy over labeled predictions, recall over the
positives, MAE over rows, NDCG over queries — is, over a partition of the population into
slices s with ``n_s`` units (the metric's own sample count) and values ``r_s``,

    M = Σ_s w_s r_s,  w_s = n_s / Σ n.

Between a *before* period 0 (the previous window, or the control arm) and an *after*
period 1 the change splits exactly into one contribution per slice (the symmetric
shift-share decomposition of Kitagawa 1955, "Components of a difference between two
rates"; centred on the mean so a mix shift counts only when the slice differs from the
rest):

    ΔM = Σ_s c_s,   c_s = w̄_s (r1_s − r0_s)  +  (w1_s − w0_s)(r̄_s − M̄)
                         └─ rate term ──────┘    └─ mix term ─────────────┘

with bars the mean of the two periods (``Σ_s (w1_s − w0_s) = 0`` makes the centring free).
A slice absent from one period takes its other period's value (it contributes by mix only).
``c_s / ΔM`` is the share of the change the slice explains.

Uncertainty. The rate term's interval is ``w̄_s`` times the MOVER interval of ``r1 − r0``
(Zou & Donner 2008: recovered from each period's own interval; with Wilson intervals this
is Newcombe's 1998 hybrid score interval), the mix term's is ``(r̄_s − M̄)`` times
Newcombe's interval of ``w1_s − w0_s``. Each is taken at level ``1 − α/(2K)`` for K slices
(Bonferroni), and the contribution's interval is their sum: every slice's interval then
covers its true contribution simultaneously with probability ≥ 1 − α. A slice is
*explaining* when its interval excludes 0 on the side of the change, so with no real
change no slice is named explaining in more than a share α of cases.

When the slice values do not average back to the overall value (F1, AUC, MCC: not means
over units), the same formula ranks slices but ``exact`` is False and shares are of
``Σ c_s``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .intervals import wilson_interval

__all__ = ["Attribution", "SliceChange", "SliceValues", "attribute", "corrected_level"]


@dataclass(frozen=True, slots=True)
class SliceValues:
    """One slice's metric in the before and after periods, with intervals at the
    corrected level (:func:`corrected_level`); NaN value / n 0 where it has no data."""

    slice: str
    before: float
    before_lower: float
    before_upper: float
    n_before: int
    after: float
    after_lower: float
    after_upper: float
    n_after: int


@dataclass(frozen=True, slots=True)
class SliceChange:
    """A slice's contribution to the change (see the module docstring)."""

    slice: str
    before: float
    after: float
    after_lower: float
    after_upper: float
    n_before: int
    n_after: int
    rate_term: float
    mix_term: float
    contribution: float
    lower: float
    upper: float
    share: float
    explaining: bool


@dataclass(frozen=True, slots=True)
class Attribution:
    """The change of ``metric`` from ``before`` to ``after`` and the slices ranked by
    their contribution in its direction (the largest first)."""

    metric: str
    before: float
    after: float
    level: float  # family-wise confidence of the slices' intervals
    exact: bool  # the contributions add up to the change
    slices: tuple[SliceChange, ...]

    @property
    def change(self) -> float:
        return self.after - self.before

    @property
    def explaining(self) -> tuple[SliceChange, ...]:
        return tuple(s for s in self.slices if s.explaining)


def corrected_level(confidence: float, slices: int) -> float:
    """The per-interval level that keeps ``2 × slices`` intervals simultaneously at
    ``confidence`` (Bonferroni)."""
    return 1.0 - (1.0 - confidence) / (2 * max(1, slices))


def _mover(a: float, al: float, au: float, b: float, bl: float, bu: float) -> tuple[float, float]:
    """Interval of a − b from each one's own interval (MOVER, Zou & Donner 2008)."""
    d = a - b
    return (
        d - math.sqrt((a - al) ** 2 + (bu - b) ** 2),
        d + math.sqrt((au - a) ** 2 + (b - bl) ** 2),
    )


def attribute(
    metric: str,
    overall_before: float,
    overall_after: float,
    values: Sequence[SliceValues],
    level: float,
    family_confidence: float,
) -> Attribution:
    """Rank the slices of one partition by their contribution to the change of ``metric``
    from ``overall_before`` to ``overall_after``; ``level``: the slices' interval level
    (``corrected_level(family_confidence, len(values))``)."""
    rows = [v for v in values if v.n_before > 0 or v.n_after > 0]
    n0 = sum(v.n_before for v in rows if not math.isnan(v.before))
    n1 = sum(v.n_after for v in rows if not math.isnan(v.after))
    nan = math.nan
    if not rows or n0 <= 0 or n1 <= 0:
        return Attribution(metric, overall_before, overall_after, family_confidence, False, ())
    m0, m1 = overall_before, overall_after
    mbar = (m0 + m1) / 2
    delta = m1 - m0
    changes: list[SliceChange] = []
    recon0 = recon1 = 0.0
    for v in rows:
        has0, has1 = (
            v.n_before > 0 and not math.isnan(v.before),
            v.n_after > 0 and not math.isnan(v.after),
        )
        w0 = v.n_before / n0 if has0 else 0.0
        w1 = v.n_after / n1 if has1 else 0.0
        r0 = v.before if has0 else v.after
        r1 = v.after if has1 else v.before
        recon0 += w0 * r0
        recon1 += w1 * r1
        wbar, rbar = (w0 + w1) / 2, (r0 + r1) / 2
        rate, mix = wbar * (r1 - r0), (w1 - w0) * (rbar - mbar)
        if has0 and has1:
            dl, du = _mover(
                v.after, v.after_lower, v.after_upper, v.before, v.before_lower, v.before_upper
            )
        else:
            dl = du = 0.0  # present in one period only: no rate change to test
        k0, k1 = (v.n_before if has0 else 0), (v.n_after if has1 else 0)
        lo1, hi1 = (float(x) for x in wilson_interval(k1, n1, level))
        lo0, hi0 = (float(x) for x in wilson_interval(k0, n0, level))
        ml, mu = _mover(w1, lo1, hi1, w0, lo0, hi0)
        lever = rbar - mbar
        mix_lo, mix_hi = sorted((lever * ml, lever * mu))
        lower, upper = wbar * dl + mix_lo, wbar * du + mix_hi
        changes.append(
            SliceChange(
                v.slice,
                v.before,
                v.after,
                v.after_lower,
                v.after_upper,
                v.n_before,
                v.n_after,
                rate,
                mix,
                rate + mix,
                lower,
                upper,
                nan,
                False,
            )
        )
    tol = 1e-9 * max(1.0, abs(m0), abs(m1))
    exact = abs(recon0 - m0) <= tol and abs(recon1 - m1) <= tol
    total = delta if exact else sum(c.contribution for c in changes)
    sign = 1.0 if total >= 0 else -1.0
    out = []
    for c in changes:
        share = c.contribution / total if total != 0 else nan
        named = total != 0 and (c.lower > 0 if sign > 0 else c.upper < 0)
        out.append(_with(c, share, named))
    out.sort(key=lambda c: (-sign * c.contribution, c.slice))
    return Attribution(metric, m0, m1, family_confidence, exact, tuple(out))


def _with(c: SliceChange, share: float, explaining: bool) -> SliceChange:
    return SliceChange(
        c.slice, c.before, c.after, c.after_lower, c.after_upper, c.n_before, c.n_after,
        c.rate_term, c.mix_term, c.contribution, c.lower, c.upper, share, explaining,
    )  # fmt: skip
