"""Regression catalog over one fixed-size moment layout (sums that merge by addition).

Errors are e = ŷ − y (so ``mean_error`` > 0 means over-prediction). Layout (float64,
``width = 29 + 2·len(quantiles)``); every entry is a sum over rows:

====  ==========================================================================
 0    n
 1-4  Σe, Σe², Σe⁴, Σ|e|                    (bias, MSE and its CLT, MAE; Σ|e|² = Σe²)
 5-8  Σy, Σy², Σy³, Σy⁴                      (R² and its delta-method variance)
 9-10 Σe²·y, Σe²·y²                          (covariances for R²'s delta method)
11-14 n(y≠0), Σ|e|/|y|, Σ(|e|/|y|)², n(y=0)  (MAPE; zero targets excluded and counted)
15-18 n, Σs, Σs², n excluded                 (sMAPE s = 2|e|/(|y|+|ŷ|); both-zero rows excluded)
19-22 n, Σl, Σl², n excluded                 (MALE l = |log1p ŷ − log1p y|; needs y, ŷ > −1)
23-24 Σh, Σh²                                (Huber, δ fixed per layout)
25-28 n with interval, n covered, Σwidth, Σwidth²   (lower <= y <= upper)
29+2j Σρ_q, Σρ_q²                            (pinball loss for quantile q = quantiles[j])
====  ==========================================================================

Intervals: every mean loss gets a CLT (Wald) interval from its Σx and Σx²
(:func:`monitor.stats.common.clt_mean`); RMSE takes the square root of the MSE interval's
end points (the monotone transform of a valid interval, first-order equal to the delta
method's se(MSE)/(2·RMSE) but never negative); R² uses the delta method on the means of
(e², y, y²); coverage is Wilson.

Heavy tails. The intervals of MSE, RMSE and R² need a finite fourth moment of the error,
and MAPE's a finite variance of |e|/|y|. Production errors often have neither: with
Student-t(3) errors the MSE's CLT interval covers 64-77 % (its variance estimate Σe⁴ is
itself dominated by the largest error), and MAPE with Gamma(2) targets (1/y has infinite
variance near y = 0) 78-89 %. No statistic of the stored moments can tell a light tail
from a heavy one reliably: gating on the sample kurtosis exports precisely the windows
that missed the extreme errors, and those cover *worse* (measured: 37 % at n = 100).
So these four intervals are withheld (NaN, ``note`` says why) unless the layout is built
with ``light_tails=True`` — an operator's statement that errors are light-tailed (e.g.
bounded targets). SLOs with intervals should use ``mae`` (needs a finite variance only),
``huber`` or a pinball loss, whose intervals stay valid under t(3) errors (coverage in
docs/statistics.md). The point values are always reported. Moments are raw sums, so R² loses about
log10(ȳ²/Var y) digits to cancellation when targets sit far from zero relative to their
spread — acceptable for float64 at monitoring scales, documented rather than hidden.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .common import NAN, clt_mean, wald, withheld
from .common import as_index as _as_index
from .common import ratio as _ratio
from .results import MetricValue

__all__ = ["RegressionLayout", "mase", "naive_mae_scale", "pinball_name"]

_BASE = 29

MIN_LOSS_ROWS = 300
"""Rows before the CLT interval of a mean loss is exported. A loss is non-negative and
right-skewed, and at n = 100 its Wald interval covered 0.89-0.92 with Student-t(3) errors
(MAE, Huber, pinball, MALE) and 0.91-0.92 for sMAPE/MALE with normal errors; from 300
rows on 0.93-0.96 (docs/statistics.md). The mean error is symmetric and exempt."""

SMALL_N_NOTE = f"interval withheld: a mean loss needs >= {MIN_LOSS_ROWS} rows for its CLT interval"

HEAVY_TAIL = frozenset({"mse", "rmse", "r2", "mape"})
"""Metrics whose interval needs more moments than production errors reliably have."""

HEAVY_TAIL_NOTE = (
    "interval withheld: needs light-tailed errors (finite 4th moment); "
    "use mae, huber or pinball for interval SLOs"
)


def pinball_name(q: float) -> str:
    """``pinball_q0_9`` for q = 0.9 (same dot rule as ``f0_5``)."""
    return "pinball_q" + f"{q:g}".replace(".", "_")


def naive_mae_scale(y: np.ndarray, season: int = 1) -> float:
    """In-sample MAE of the seasonal naive forecast ŷ_t = y_{t−m}: mean_t |y_t − y_{t−m}|.

    The denominator of MASE (Hyndman & Koehler 2006, "Another look at measures of forecast
    accuracy"), computed once on the training target in time order (``monitor baseline``).
    NaN when the series has no more than ``season`` values; 0 for a constant series (then
    MASE is undefined, :func:`mase` returns NaN).
    """
    if season < 1:
        raise ValueError("mase season must be >= 1")
    v = np.asarray(y, dtype=np.float64)
    if v.size <= season:
        return NAN
    return float(np.mean(np.abs(v[season:] - v[:-season])))


def mase(mae: MetricValue, scale: float) -> MetricValue:
    """Mean absolute scaled error = MAE / scale, the interval MAE's divided by the scale.

    The scale is a constant fixed before the window (training data or configuration), so
    dividing the end points of MAE's CLT interval by it keeps its coverage exactly. Scale-free
    and defined when targets touch zero, unlike MAPE; < 1 means better than the in-sample
    naive forecast. MAE's interval notes (small windows) carry over.
    """
    if not (math.isfinite(scale) and scale > 0):
        return MetricValue("mase", NAN, NAN, NAN, mae.n, mae.method, "mase scale is not > 0")
    return MetricValue(
        "mase", mae.value / scale, mae.lower / scale, mae.upper / scale, mae.n, mae.method, mae.note
    )


@dataclass(frozen=True, slots=True)
class RegressionLayout:
    """Moment layout; ``huber_delta`` and ``quantiles`` are fixed per layout.

    ``light_tails`` exports the MSE/RMSE/R²/MAPE intervals (see the module docstring)."""

    huber_delta: float = 1.0
    quantiles: tuple[float, ...] = (0.1, 0.5, 0.9)
    light_tails: bool = False

    def __post_init__(self) -> None:
        if self.huber_delta <= 0 or any(not 0.0 < q < 1.0 for q in self.quantiles):
            raise ValueError("huber_delta must be > 0 and quantiles in (0, 1)")

    @property
    def width(self) -> int:
        return _BASE + 2 * len(self.quantiles)

    def empty(self) -> np.ndarray:
        return np.zeros(self.width, dtype=np.float64)

    def contributions(
        self,
        y_true: np.ndarray,
        y_pred: np.ndarray,
        lower: np.ndarray | None = None,
        upper: np.ndarray | None = None,
    ) -> np.ndarray:
        """Per-row contributions, shape (m, width); a window is the column sum."""
        y = np.asarray(y_true, dtype=np.float64)
        f = np.asarray(y_pred, dtype=np.float64)
        m = y.size
        out = np.zeros((m, self.width))
        e = f - y
        ae = np.abs(e)
        e2 = e * e
        out[:, 0] = 1.0
        out[:, 1], out[:, 2], out[:, 3], out[:, 4] = e, e2, e2 * e2, ae
        y2 = y * y
        out[:, 5], out[:, 6], out[:, 7], out[:, 8] = y, y2, y2 * y, y2 * y2
        out[:, 9], out[:, 10] = e2 * y, e2 * y2
        with np.errstate(divide="ignore", invalid="ignore"):
            nz = y != 0
            ape = np.where(nz, ae / np.abs(np.where(nz, y, 1.0)), 0.0)
            out[:, 11], out[:, 12], out[:, 13], out[:, 14] = nz, ape, ape * ape, ~nz
            den = np.abs(y) + np.abs(f)
            ok = den > 0
            sm = np.where(ok, 2.0 * ae / np.where(ok, den, 1.0), 0.0)
            out[:, 15], out[:, 16], out[:, 17], out[:, 18] = ok, sm, sm * sm, ~ok
            dom = (y > -1.0) & (f > -1.0)
            male = np.where(
                dom, np.abs(np.log1p(np.where(dom, f, 0.0)) - np.log1p(np.where(dom, y, 0.0))), 0.0
            )
            out[:, 19], out[:, 20], out[:, 21], out[:, 22] = dom, male, male * male, ~dom
        d = self.huber_delta
        h = np.where(ae <= d, 0.5 * e2, d * (ae - 0.5 * d))
        out[:, 23], out[:, 24] = h, h * h
        if lower is not None and upper is not None:
            lo = np.asarray(lower, dtype=np.float64)
            hi = np.asarray(upper, dtype=np.float64)
            has = np.isfinite(lo) & np.isfinite(hi)
            width = np.where(has, hi - lo, 0.0)
            out[:, 25] = has
            out[:, 26] = has & (lo <= y) & (y <= hi)
            out[:, 27], out[:, 28] = width, width * width
        diff = y - f
        for j, q in enumerate(self.quantiles):
            rho = np.where(diff >= 0, q * diff, (q - 1.0) * diff)
            out[:, _BASE + 2 * j], out[:, _BASE + 2 * j + 1] = rho, rho * rho
        return out

    def add_rows(
        self,
        matrix: np.ndarray,
        rows: np.ndarray | int,
        y_true: np.ndarray,
        y_pred: np.ndarray,
        lower: np.ndarray | None = None,
        upper: np.ndarray | None = None,
    ) -> None:
        """Add each joined row into ``matrix[rows[i]]`` (``np.add.at``)."""
        c = self.contributions(y_true, y_pred, lower, upper)
        np.add.at(matrix, _as_index(rows, c.shape[0]), c)

    def add(
        self,
        vec: np.ndarray,
        y_true: np.ndarray,
        y_pred: np.ndarray,
        lower: np.ndarray | None = None,
        upper: np.ndarray | None = None,
    ) -> None:
        vec += self.contributions(y_true, y_pred, lower, upper).sum(axis=0)

    def metrics(self, vec: np.ndarray, confidence: float = 0.95) -> list[MetricValue]:
        """mae, mse, rmse, r2, mean_error, mape, smape, male, huber, pinball_q*,
        interval_coverage, interval_width."""
        v = [float(x) for x in vec]
        n = v[0]
        pos = (0.0, math.inf)
        mse = clt_mean("mse", v[2], v[3], n, confidence, pos)
        out = [
            clt_mean("mae", v[4], v[2], n, confidence, pos),
            mse,
            _rmse(mse),
            _r2(v, confidence),
            clt_mean("mean_error", v[1], v[2], n, confidence),
            clt_mean("mape", v[12], v[13], v[11], confidence, pos),
            clt_mean("smape", v[16], v[17], v[15], confidence, (0.0, 2.0)),
            clt_mean("male", v[20], v[21], v[19], confidence, pos),
            clt_mean("huber", v[23], v[24], n, confidence, pos),
        ]
        for j, q in enumerate(self.quantiles):
            k = _BASE + 2 * j
            out.append(clt_mean(pinball_name(q), v[k], v[k + 1], n, confidence, pos))
        out.append(_ratio("interval_coverage", v[26], v[25], confidence))
        out.append(clt_mean("interval_width", v[27], v[28], v[25], confidence))
        # every mean loss and what is derived from one (RMSE's roots, R²'s delta method),
        # whatever layout built it; mean_error is a mean of a symmetric error (no skew)
        out = [
            withheld(m, SMALL_N_NOTE)
            if m.method != "wilson" and m.name != "mean_error" and 0 < m.n < MIN_LOSS_ROWS
            else m
            for m in out
        ]
        if self.light_tails:
            return out
        return [
            withheld(m, HEAVY_TAIL_NOTE) if m.name in HEAVY_TAIL and m.defined else m for m in out
        ]

    def excluded(self, vec: np.ndarray) -> dict[str, int]:
        """Rows left out of mape (y = 0), smape (y = ŷ = 0) and male (y or ŷ <= −1)."""
        return {"mape": int(vec[14]), "smape": int(vec[18]), "male": int(vec[22])}


def _rmse(mse: MetricValue) -> MetricValue:
    """√MSE with the square roots of the MSE interval's end points."""

    def root(x: float) -> float:
        return math.sqrt(x) if math.isfinite(x) and x >= 0 else NAN

    return MetricValue("rmse", root(mse.value), root(mse.lower), root(mse.upper), mse.n, "clt-sqrt")


def _r2(v: list[float], confidence: float) -> MetricValue:
    """R² = 1 − mean(e²)/var(y) (sklearn's ``r2_score``) with a delta-method interval.

    With a = E e², b = E y, c = E y², V = c − b²: ∇R² = (−1/V, −2ab/V², a/V²) and the
    per-row covariance of (e², y, y²) comes from the stored third/fourth-order sums.
    NaN when the targets are constant (sklearn would return 0 or 1 by convention).
    """
    n = v[0]
    n_int = round(n)
    if n < 2:
        return MetricValue("r2", NAN, NAN, NAN, n_int, "delta")
    a, b, c = v[2] / n, v[5] / n, v[6] / n
    var_y = (v[6] - v[5] * v[5] / n) / n
    if var_y <= 0:
        return MetricValue("r2", NAN, NAN, NAN, n_int, "delta")
    value = 1.0 - a / var_y
    ey3, ey4, e4 = v[7] / n, v[8] / n, v[3] / n
    e2y, e2y2 = v[9] / n, v[10] / n
    cov = np.array(
        [
            [e4 - a * a, e2y - a * b, e2y2 - a * c],
            [e2y - a * b, c - b * b, ey3 - b * c],
            [e2y2 - a * c, ey3 - b * c, ey4 - c * c],
        ]
    )
    g = np.array([-1.0 / var_y, -2.0 * a * b / var_y**2, a / var_y**2])
    var = float(g @ cov @ g) / n
    return wald("r2", value, math.sqrt(max(var, 0.0)), n_int, confidence, "delta", (-math.inf, 1.0))
