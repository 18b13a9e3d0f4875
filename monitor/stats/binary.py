"""The full binary threshold-metric catalog over one fixed-size layout: four confusion counts.

Why a layout and not an object: the engine stores one dense numpy row per (group, bucket)
and forms a window by *summing rows*, so every accumulator in this room is a fixed-width
float64 vector whose merge is elementwise addition (counts stay exact up to 2**53). Each
layout class is stateless apart from its parameters and offers

* ``width`` and ``empty()`` — the vector shape;
* ``add(vec, ...)`` — add a batch into one row in place;
* ``add_rows(matrix, rows, ...)`` — add a batch whose rows go to different matrix rows
  (``np.add.at``, so repeated row indices accumulate), the engine's bulk path;
* ``metrics(vec, confidence=0.95, **params) -> list[MetricValue]`` — a pure view.

The ``Layout`` protocol lives here; the helpers every layout shares are in
:mod:`monitor.stats.common`. Intervals: Wilson for proportions (Clopper-Pearson's exact
interval where too few outcomes of the rarer kind are expected), a Jeffreys-Dirichlet
posterior (:func:`confusion_posterior`) for F-beta, MCC, kappa and the class-accuracy means.

Cell order: index ``2 * y_true + y_pred``, i.e. ``[TN, FP, FN, TP]``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from itertools import repeat
from typing import Any, Protocol

import numpy as np

from .common import (
    MIN_CLASS_COUNT,
    MIN_EXPECTED_EVENTS,
    MIN_TRIALS,
    NAN,
    class_count_reason,
    clt_mean,
    expected_events,
    homogeneous_delta_se,
    trials_reason,
    wald,
)
from .common import as_index as _as_index
from .intervals import clopper_pearson_interval, wilson_interval
from .results import MetricValue

__all__ = [
    "BinaryLayout",
    "Layout",
    "clt_mean",
    "fbeta_name",
    "homogeneous_delta_se",
    "wald",
]

_TN, _FP, _FN, _TP = 0, 1, 2, 3
_PREVALENCE = 7  # index of "prevalence" in _RATIO_NAMES


class Layout(Protocol):
    """What the engine needs from every statistic layout."""

    @property
    def width(self) -> int: ...

    def empty(self) -> np.ndarray: ...

    def metrics(self, vec: np.ndarray, confidence: float = 0.95) -> list[MetricValue]: ...


def fbeta_name(beta: float) -> str:
    """``f2`` for β = 2, ``f0_5`` for β = 0.5 (a dot is not welcome in metric names)."""
    return "f" + f"{beta:g}".replace(".", "_")


# --------------------------------------------------------------------------- binary layout


@dataclass(frozen=True, slots=True)
class BinaryLayout:
    """Binary confusion counts ``[TN, FP, FN, TP]`` (cell ``2·y_true + y_pred``).

    ``betas`` lists the extra F-beta scores reported besides F1 (β > 1 weighs recall
    more, β < 1 weighs precision more — van Rijsbergen 1979).
    """

    betas: tuple[float, ...] = (2.0, 0.5)

    @property
    def width(self) -> int:
        return 4

    def empty(self) -> np.ndarray:
        return np.zeros(4, dtype=np.float64)

    def add_rows(
        self,
        matrix: np.ndarray,
        rows: np.ndarray | int,
        y_true: np.ndarray,
        y_pred: np.ndarray,
        weight: np.ndarray | None = None,
    ) -> None:
        """Add each joined row (0/1 label, 0/1 decision) into ``matrix[rows[i]]``."""
        cells = 2 * np.asarray(y_true, dtype=np.intp) + np.asarray(y_pred, dtype=np.intp)
        w = np.ones(cells.shape, dtype=np.float64) if weight is None else np.asarray(weight)
        np.add.at(matrix, (_as_index(rows, cells.size), cells), w)

    def add(
        self,
        vec: np.ndarray,
        y_true: np.ndarray,
        y_pred: np.ndarray,
        weight: np.ndarray | None = None,
    ) -> None:
        """Add a batch into one row vector in place."""
        self.add_rows(vec[np.newaxis, :], 0, y_true, y_pred, weight)

    def metrics(
        self,
        vec: np.ndarray,
        confidence: float = 0.95,
        betas: Sequence[float] | None = None,
        long_run: np.ndarray | None = None,
    ) -> list[MetricValue]:
        """The whole catalog of one window; see :meth:`metrics_many`."""
        return self.metrics_many(
            np.asarray(vec, dtype=np.float64)[np.newaxis, :4], confidence, betas,
            long_run=long_run,
        )[0]  # fmt: skip

    def metrics_many(
        self,
        conf: np.ndarray,
        confidence: float = 0.95,
        betas: Sequence[float] | None = None,
        names: Collection[str] | None = None,
        long_run: np.ndarray | None = None,
    ) -> list[list[MetricValue]]:
        """The catalog of many windows at once: ``conf`` is (n, 4) counts, one row each.

        Why: an evaluation tick computes ~10⁴ windows, and one Wilson interval or a 2×2
        MCC costs as much in NumPy call overhead as in arithmetic. The Wilson intervals and
        the MCC/kappa point values are computed as arrays over all rows; the posterior
        sample of a row is drawn from the row's own seeded generator
        (:func:`confusion_posterior`), so every row's result is identical to its own
        single-window call (tested) whatever else is in the batch. ``names``: only these
        metrics (the exported ones; the posterior of an unexported metric is the costly
        part of a tick and is not drawn), in catalog order.

        ``long_run``: (n, 4) or (4,) counts of the same version's longest window. The
        interval gates then read its rates, not the window's own counts — expected
        positives and negatives (this window's rows at the long-run prevalence) for the
        class-count gate, and expected outcomes of the rarer kind for each ratio: below
        :data:`~monitor.stats.common.MIN_EXPECTED_EVENTS` the ratio's interval is the
        exact Clopper-Pearson interval instead of Wilson's (method ``clopper-pearson``) —
        so no window's interval is chosen for what its own counts happen to be. Without
        it the gates read the window's own class counts (Wilson throughout)."""
        c = np.asarray(conf, dtype=np.float64).reshape(-1, 4)
        tn, fp, fn, tp = c[:, 0], c[:, 1], c[:, 2], c[:, 3]
        n = tn + fp + fn + tp
        pos, neg = tp + fn, tn + fp
        k, d = _ratio_counts(c)
        lo, hi = wilson_interval(k, d, confidence)
        # withheld: below MIN_TRIALS trials; prevalence also below MIN_CLASS_COUNT of a class
        short = (d > 0) & (d < MIN_TRIALS)
        rare = np.zeros_like(short)
        if long_run is None:
            pos_g, neg_g = pos, neg
        else:
            lr = np.broadcast_to(np.asarray(long_run, dtype=np.float64), c.shape)
            k_lr, d_lr = _ratio_counts(lr)
            with np.errstate(divide="ignore", invalid="ignore"):
                expected = expected_events(d, np.where(d_lr > 0, k_lr / d_lr, NAN))
                share = (lr[:, 2] + lr[:, 3]) / lr.sum(axis=1)
            rare = (d > 0) & ~short & (expected < MIN_EXPECTED_EVENTS)
            if rare.any():  # Wilson under-covers there: the exact interval instead
                lo[rare], hi[rare] = clopper_pearson_interval(k[rare], d[rare], confidence)
            known = np.isfinite(share)  # no long-run labels yet: the window's own counts
            pos_g = np.where(known, n * share, pos)
            neg_g = np.where(known, n * (1.0 - share), neg)
        class_short = (n > 0) & (np.minimum(pos_g, neg_g) < MIN_CLASS_COUNT)
        gate = short.copy()
        gate[:, _PREVALENCE] |= class_short
        lo, hi = np.where(gate, NAN, lo), np.where(gate, NAN, hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            value = np.where(d > 0, k / d, NAN)
        mcc_v, kappa_v = _mcc_value(tn, fp, fn, tp), _kappa_value(tn, fp, fn, tp)
        all_betas = [1.0, *(b for b in (self.betas if betas is None else betas) if b != 1.0)]
        ratios = [j for j, name in enumerate(_RATIO_NAMES) if names is None or name in names]
        posterior = [
            x
            for x in (*(fbeta_name(b) for b in all_betas), *_CLASS_NAMES)
            if names is None or x in names
        ]
        by_expectation = long_run is not None
        reasons = [
            class_count_reason(p, q, expected=by_expectation and math.isfinite(s))
            for p, q, s in zip(
                pos_g.tolist(),
                neg_g.tolist(),
                (share if long_run is not None else n).tolist(),
                strict=True,
            )
        ]
        drawn = [i for i, r in enumerate(reasons) if n[i] > 0 and not r] if posterior else []
        bounds = _posterior_bounds(c[drawn], all_betas, confidence, posterior) if drawn else {}
        exact = rare & ~gate  # an interval withheld keeps the default label
        ratio_rows = _ratio_rows(ratios, value, lo, hi, d, exact, gate, reasons)
        if not posterior:
            return [list(row) for row in ratio_rows]
        point = {fbeta_name(b): _fbeta_value(tp, fp, fn, b) for b in all_betas}
        point["balanced_accuracy"] = _balanced_value(tp, fp, fn, tn)
        point["hmean_class_accuracy"] = _hmean_value(tp, fp, fn, tn)
        point["mcc"], point["cohen_kappa"] = mcc_v, kappa_v
        n_all = np.rint(tn + fp + fn + tp).astype(np.int64).tolist()
        n_fbeta = np.rint(tp + fp + fn).astype(np.int64).tolist()
        at = np.asarray(drawn, np.intp)
        columns = [
            _posterior_column(
                name,
                point[name],
                bounds.get(name),
                at,
                n_all if name in _CLASS_NAMES else n_fbeta,
                reasons,
            )
            for name in posterior
        ]
        return [[*r, *q] for r, q in zip(ratio_rows, zip(*columns, strict=True), strict=True)]


def _posterior_column(
    name: str,
    value: np.ndarray,
    bounds: tuple[list[float], list[float]] | None,
    drawn: np.ndarray,
    n: list[int],
    reasons: list[str],
) -> Iterator[MetricValue]:
    """:func:`_posterior_result` of every row of one posterior metric, built over all
    rows by ``map`` (in C): ``bounds``, the drawn rows' (``drawn``) equal-tailed bounds.
    A row not drawn had no data or a reason to withhold its interval."""
    rows = value.shape[0]
    lo, hi = np.full(rows, NAN), np.full(rows, NAN)
    if bounds is not None and drawn.shape[0]:
        lo[drawn], hi[drawn] = bounds
    finite = np.isfinite(value)
    # min(lo, value) and max(hi, value) as Python's min and max pick (the first on a tie)
    lows = np.where(finite & (value < lo), value, lo).tolist()
    highs = np.where(finite & (value > hi), value, hi).tolist()
    notes = [""] * rows
    undrawn = np.ones(rows, bool)
    undrawn[drawn] = False
    for i in np.flatnonzero(finite & undrawn).tolist():
        notes[i] = reasons[i] or "no data"
    for i in np.flatnonzero(~finite).tolist():
        lows[i] = highs[i] = NAN
    fields = (value.tolist(), lows, highs, n, ["jeffreys"] * rows, notes)
    return map(_new_value, zip(repeat(name, rows), *fields, strict=False))


def _ratio_rows(
    ratios: list[int],
    value: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    trials: np.ndarray,
    exact: np.ndarray,
    gate: np.ndarray,
    reasons: list[str],
) -> Iterator[tuple[MetricValue, ...]]:
    """Each row's ratio metrics (``ratios``: indices into ``_RATIO_NAMES``) from (rows, 9)
    arrays: built a ratio at a time over all rows by ``map`` (in C), the per-row work left
    to the few rows with an exact interval or one withheld (``exact``, ``gate``) — a tick
    builds ~10⁴ rows of them."""
    n = value.shape[0]
    gated = np.flatnonzero(gate.any(axis=1)).tolist()
    columns = []
    for j in ratios:
        counts = np.rint(trials[:, j]).astype(np.int64).tolist()
        methods = ["wilson"] * n
        for i in np.flatnonzero(exact[:, j]).tolist():
            methods[i] = "clopper-pearson"
        notes = [""] * n
        for i in gated:
            notes[i] = _ratio_note(j, counts[i], reasons[i])
        fields = (value[:, j].tolist(), lo[:, j].tolist(), hi[:, j].tolist(), counts, methods)
        columns.append(
            map(_new_value, zip(repeat(_RATIO_NAMES[j], n), *fields, notes, strict=True))
        )
    return zip(*columns, strict=True) if columns else repeat((), n)


_new_value = partial(tuple.__new__, MetricValue)  # a MetricValue from its 7 fields, in C


def _ratio_counts(c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(successes, trials) of each ratio in ``_RATIO_NAMES`` order, for rows of counts."""
    tn, fp, fn, tp = c[:, 0], c[:, 1], c[:, 2], c[:, 3]
    n, pos, neg, ppos = tn + fp + fn + tp, tp + fn, tn + fp, tp + fp
    k = np.stack([tp + tn, fp + fn, tp, tp, tn, fp, fn, pos, ppos], axis=1)
    d = np.stack([n, n, ppos, pos, neg, neg, pos, n, n], axis=1)
    return k, d


_CLASS_NAMES = ("balanced_accuracy", "hmean_class_accuracy", "mcc", "cohen_kappa")
"""The posterior metrics after the F-beta scores, in catalog order."""


def _posterior_bounds(
    counts: np.ndarray,
    betas: Sequence[float],
    confidence: float,
    names: Collection[str] | None = None,
) -> dict[str, tuple[list[float], list[float]]]:
    """Equal-tailed posterior bounds of every posterior metric (or of ``names``), for rows
    of counts.

    Each row's draws are its :func:`confusion_posterior` (seeded by its own counts, so a
    row's interval never depends on the batch; :func:`_posterior_cells` draws each
    distinct cell count once); the metric samples and their order statistics are then
    computed for a chunk of rows at once — the same arithmetic as the one-window path, on
    one contiguous (rows, draws) array per cell.

    So a row's bounds are a pure function of its four counts (and the metrics and level
    asked): they are computed once per distinct row and kept (:data:`BOUNDS_KEPT`) — a
    fleet's slice windows share small counts within a tick and from one tick to the next
    (of the ~410 rows a fleet tick after 1,000 events draws, ~260 are new, measured)."""
    wanted = {fbeta_name(b): b for b in betas}
    wanted |= dict.fromkeys(_CLASS_NAMES, 0.0)
    if names is not None:
        wanted = {k: v for k, v in wanted.items() if k in names}
    kept = _BOUNDS.setdefault((tuple(wanted.items()), confidence), {})
    keys = list(map(tuple, counts.tolist()))
    found: dict[tuple[float, ...], tuple[float, ...]] = {}
    todo: list[int] = []  # the first row of each distinct count vector not kept
    for i, key in enumerate(keys):
        if key not in found:
            got = kept.get(key)
            if got is None:
                todo.append(i)
                found[key] = ()
            else:
                found[key] = got
    if todo:
        rows = counts[todo]
        fresh: list[list[float]] = [[] for _ in range(2 * len(wanted))]  # lo, hi by metric
        for at in range(0, rows.shape[0], _ROWS_PER_CHUNK):  # (rows, draws) arrays stay small
            cells = _posterior_cells(rows[at : at + _ROWS_PER_CHUNK])
            for n, (name, beta) in enumerate(wanted.items()):
                sample = _SAMPLERS[name](cells) if name in _SAMPLERS else _fbeta_of(cells, beta)
                lo, hi = _equal_tailed_rows(sample, confidence)
                fresh[2 * n] += lo
                fresh[2 * n + 1] += hi
        if len(kept) + len(todo) > BOUNDS_KEPT:
            kept.clear()  # bounded: the next ticks fill it again with what recurs
        for j, bounds in enumerate(zip(*fresh, strict=True)):
            found[keys[todo[j]]] = kept[keys[todo[j]]] = bounds
    per_row = [found[key] for key in keys]
    return {
        name: ([b[2 * n] for b in per_row], [b[2 * n + 1] for b in per_row])
        for n, name in enumerate(wanted)
    }


BOUNDS_KEPT = 10_000
"""Distinct count rows whose posterior bounds are kept between evaluations (a few hundred
bytes each: a few megabytes)."""

_BOUNDS: dict[tuple[Any, ...], dict[tuple[float, ...], tuple[float, ...]]] = {}
"""Kept posterior bounds, by (metrics asked, confidence), then by the row's counts."""


_ROWS_PER_CHUNK = 256


def _equal_tailed_rows(samples: np.ndarray, confidence: float) -> tuple[list[float], list[float]]:
    """:func:`_equal_tailed` of each row of a (rows, draws) matrix: one sort for the rows
    whose draws are all finite, the one-row path for the others.

    Why a sort and not ``np.partition(samples, (k_lo, k_hi))``: numpy selects a single
    order statistic with its vectorized path but two at once with its generic one, four
    times slower than sorting the rows (1.1 against 4.5 ms for 256 rows of 1,000 draws);
    an order statistic is one value whichever way it is found."""
    alpha = 1.0 - confidence
    size = samples.shape[1]
    k_lo = math.floor(alpha / 2.0 * (size - 1))
    k_hi = math.ceil((1.0 - alpha / 2.0) * (size - 1))
    ordered = np.sort(samples, axis=1)
    lo, hi = ordered[:, k_lo].tolist(), ordered[:, k_hi].tolist()
    for r in np.flatnonzero(~np.isfinite(samples).all(axis=1)).tolist():
        lo[r], hi[r] = _equal_tailed(samples[r], confidence)
    return lo, hi


def _ratio_note(j: int, trials: int, class_reason: str) -> str:
    """Why ratio ``j``'s Wilson interval is withheld ("" if it is not).

    Prevalence also needs :data:`MIN_CLASS_COUNT` of each class: the count of the rarer
    class is the binomial count itself, and with one to three expected events (1 %, n = 100)
    Wilson covers exactly when the count is <= 2, 92 % of windows, while any interval that
    also covers a count of 3 covers 98 % — no interval reaches [0.93, 0.97] there."""
    return trials_reason(trials) or (class_reason if j == _PREVALENCE and trials > 0 else "")


_RATIO_NAMES = (
    "accuracy",
    "error_rate",
    "precision",
    "recall",
    "specificity",
    "fpr",
    "fnr",
    "prevalence",
    "predicted_positive_rate",
)


# --------------------------------------------------------------------------- posterior

POSTERIOR_DRAWS = 1000
"""Monte-Carlo draws per window: the 2.5 % quantile's own error is then ≈ 0.5 percentage
points of probability (sqrt(0.025 · 0.975 / 1000)), inside the coverage tolerance; the
coverage tests hold at this size (tests/unit/test_stats_interval_simulation.py). Why not
more: the draws, the metric samples and their order statistics are most of a fleet's
evaluation tick (bench/profile_tick.py), and 2,000 draws cost twice as much for an
error of 0.35 points."""

POSTERIOR_SEED = 20261123
"""Fixed seed: the same counts always give the same interval (replay equals the daemon)."""


def confusion_posterior(counts: np.ndarray, draws: int = POSTERIOR_DRAWS) -> np.ndarray:
    """(draws, 4) cell proportions ``[TN, FP, FN, TP]`` from the Jeffreys posterior.

    The counts are multinomial; with the Jeffreys prior Dirichlet(½, ½, ½, ½) the posterior
    of the cell proportions is Dirichlet(N + ½), drawn as normalized Gamma variates. Any
    metric of the proportions then has a posterior sample, and its equal-tailed quantiles
    are the interval. Why not the delta method: F1 and MCC are ratios whose sampling
    distribution is skewed and bounded when one class has few events — the delta interval
    covered 51 % at 1 % prevalence and n = 300 in simulation, and had zero width whenever
    TP = 0. Jeffreys-prior intervals keep near-nominal frequentist coverage for binomial
    and multinomial functionals (Brown, Cai & DasGupta 2001); measured coverage is in
    docs/statistics.md (``python bench/coverage.py``).
    """
    alpha = (np.asarray(counts, dtype=np.float64) + 0.5).tolist()
    g = np.stack([_cell_gammas(cell, a, draws) for cell, a in enumerate(alpha)], axis=1)
    return g / g.sum(axis=1, keepdims=True)


GAMMA_STREAMS_KEPT = 1024
"""Gamma streams kept between evaluations (8 kB each at 1,000 draws: 8 MB at most)."""


@lru_cache(maxsize=GAMMA_STREAMS_KEPT)
def _cell_gammas(cell: int, alpha: float, draws: int = POSTERIOR_DRAWS) -> np.ndarray:
    """Gamma(alpha) variates of one cell, seeded by (cell, alpha) alone (read-only: the
    recently used streams are kept, :data:`GAMMA_STREAMS_KEPT`).

    Why per cell: the four cells of a Dirichlet draw are independent Gammas, so the
    windows of one evaluation that share a cell's count (a fleet's slices share small
    counts all the time) share its variates — one Gamma stream per distinct (cell, count)
    instead of per window, each window still an exact posterior sample (the cells of one
    window come from distinct seeds, so they stay independent). And from one evaluation
    to the next most counts recur (85-90 % of a fleet tick's streams, measured), so a
    stream is drawn once and kept."""
    bits = int(np.float64(alpha).view(np.uint64))
    out = np.random.default_rng((POSTERIOR_SEED, cell, bits)).standard_gamma(alpha, draws)
    out.flags.writeable = False
    return out


def _posterior_cells(counts: np.ndarray, draws: int = POSTERIOR_DRAWS) -> _Cells:
    """:func:`confusion_posterior` of each row of (rows, 4) counts, as four contiguous
    (rows, draws) cell proportions ``(TN, FP, FN, TP)``; each distinct (cell, count) drawn
    once. The same arithmetic as :func:`confusion_posterior` (the normalizing sum adds
    the cells in the same order), so every row equals its own call bit for bit."""
    alpha = np.asarray(counts, dtype=np.float64) + 0.5
    g = []
    for cell in range(4):
        values, inverse = np.unique(alpha[:, cell], return_inverse=True)
        streams = np.stack([_cell_gammas(cell, a, draws) for a in values.tolist()])
        g.append(streams[inverse.reshape(-1)])
    total = g[0] + g[1]
    total += g[2]
    total += g[3]
    for x in g:
        x /= total
    return g[0], g[1], g[2], g[3]


def _posterior_value(
    name: str,
    value: float,
    samples: np.ndarray | None,
    n: int,
    confidence: float,
    reason: str,
) -> MetricValue:
    """Point value (the plug-in, sklearn's) with the posterior's equal-tailed interval.

    The interval is widened to contain the point value if needed (the plug-in of a ratio
    can sit at a bound, e.g. F1 = 0 with TP = 0, where every posterior draw is > 0)."""
    bounds = _equal_tailed(samples, confidence) if samples is not None else None
    return _posterior_result(name, value, bounds, n, reason)


def _posterior_result(
    name: str, value: float, bounds: tuple[float, float] | None, n: int, reason: str
) -> MetricValue:
    if not math.isfinite(value):
        return _new_value((name, value, NAN, NAN, n, "jeffreys", ""))
    if reason or bounds is None:
        return _new_value((name, value, NAN, NAN, n, "jeffreys", reason or "no data"))
    lo, hi = bounds
    return _new_value((name, value, min(lo, value), max(hi, value), n, "jeffreys", ""))


def _equal_tailed(samples: np.ndarray, confidence: float) -> tuple[float, float]:
    """The α/2 and 1 − α/2 order statistics (``np.partition``: O(draws), no full sort)."""
    s = samples[np.isfinite(samples)]
    if s.size == 0:
        return NAN, NAN
    alpha = 1.0 - confidence
    k_lo = math.floor(alpha / 2.0 * (s.size - 1))
    k_hi = math.ceil((1.0 - alpha / 2.0) * (s.size - 1))
    part = np.partition(s, (k_lo, k_hi))
    return float(part[k_lo]), float(part[k_hi])


_Cells = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _cells(draws: np.ndarray | _Cells) -> _Cells:
    """(TN, FP, FN, TP) of a (..., 4) sample, or the four cell arrays themselves."""
    if isinstance(draws, tuple):
        return draws
    return draws[..., _TN], draws[..., _FP], draws[..., _FN], draws[..., _TP]


def fbeta(
    tp: float,
    fp: float,
    fn: float,
    beta: float,
    confidence: float = 0.95,
    tn: float | None = None,
    draws: np.ndarray | None = None,
) -> MetricValue:
    """F-beta = (1+β²)TP / ((1+β²)TP + β²FN + FP) with a Jeffreys-posterior interval.

    TN does not enter F, so the posterior is over (TP, FP, FN) (a Dirichlet's aggregation
    property makes this the marginal of the four-cell posterior). The interval is withheld
    below :data:`~monitor.stats.common.MIN_CLASS_COUNT` positives (and negatives, when
    ``tn`` is given). n = TP+FP+FN. ``draws``: a posterior sample already drawn for these
    counts (:meth:`BinaryLayout.metrics` shares one across its metrics).
    """
    n = round(tp + fp + fn)
    name = fbeta_name(beta)
    value = float(_fbeta_value(tp, fp, fn, beta))
    negatives = math.inf if tn is None else tn + fp
    reason = class_count_reason(tp + fn, negatives)
    samples = None
    if math.isfinite(value) and not reason:
        if draws is None:
            draws = confusion_posterior(np.array([0.0 if tn is None else tn, fp, fn, tp]))
        samples = _fbeta_of(draws, beta)
    return _posterior_value(name, value, samples, n, confidence, reason)


_Counts = float | np.ndarray


def _fbeta_value(tp: _Counts, fp: _Counts, fn: _Counts, beta: float) -> np.ndarray:
    """F-beta's plug-in value, elementwise (NaN with no TP, FP or FN): one definition for
    a single metric and for a catalog's rows."""
    tp, fp, fn = (np.asarray(x, np.float64) for x in (tp, fp, fn))
    b2 = beta * beta
    d = (1 + b2) * tp + b2 * fn + fp
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(d > 0, (1 + b2) * tp / d, NAN)


def _fbeta_of(draws: np.ndarray | _Cells, beta: float) -> np.ndarray:
    _, fp, fn, tp = _cells(draws)
    b2 = beta * beta
    return (1 + b2) * tp / ((1 + b2) * tp + b2 * fn + fp)


def balanced_accuracy(
    tp: float,
    fp: float,
    fn: float,
    tn: float,
    confidence: float = 0.95,
    draws: np.ndarray | None = None,
    reason: str = "",
) -> MetricValue:
    """(TPR + TNR)/2 (sklearn's ``balanced_accuracy_score``), Jeffreys-posterior interval.

    TPR and TNR are Beta(TP+½, FN+½) and Beta(TN+½, FP+½) under the posterior — the
    Jeffreys binomial intervals, combined by sampling instead of a Wald sum.
    """
    n = round(tp + fp + fn + tn)
    value = float(_balanced_value(tp, fp, fn, tn))
    samples = _balanced_of(draws) if draws is not None else None
    return _posterior_value("balanced_accuracy", value, samples, n, confidence, reason)


def _class_rates(tp: _Counts, fp: _Counts, fn: _Counts, tn: _Counts) -> tuple[Any, Any]:
    """(TPR, TNR), elementwise; NaN where a class has no rows."""
    tp, fp, fn, tn = (np.asarray(x, np.float64) for x in (tp, fp, fn, tn))
    pos, neg = tp + fn, tn + fp
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(pos > 0, tp / pos, NAN), np.where(neg > 0, tn / neg, NAN)


def _balanced_value(tp: _Counts, fp: _Counts, fn: _Counts, tn: _Counts) -> np.ndarray:
    """Balanced accuracy's plug-in value, elementwise (NaN without both classes)."""
    tpr, tnr = _class_rates(tp, fp, fn, tn)
    return (tpr + tnr) / 2


def _balanced_of(draws: np.ndarray | _Cells) -> np.ndarray:
    tn_, fp_, fn_, tp_ = _cells(draws)
    return (tp_ / (tp_ + fn_) + tn_ / (tn_ + fp_)) / 2


def hmean_class_accuracy(
    tp: float,
    fp: float,
    fn: float,
    tn: float,
    confidence: float = 0.95,
    draws: np.ndarray | None = None,
    reason: str = "",
) -> MetricValue:
    """Harmonic mean of TPR and TNR, 2·TPR·TNR/(TPR+TNR); Jeffreys-posterior interval.

    The harmonic mean punishes a collapse of either class accuracy harder than balanced
    accuracy does.
    """
    n = round(tp + fp + fn + tn)
    value = float(_hmean_value(tp, fp, fn, tn))
    samples = _hmean_of(draws) if draws is not None else None
    return _posterior_value("hmean_class_accuracy", value, samples, n, confidence, reason)


def _hmean_value(tp: _Counts, fp: _Counts, fn: _Counts, tn: _Counts) -> np.ndarray:
    """The class accuracies' harmonic mean, elementwise (NaN without both classes, 0
    when both are 0)."""
    tpr, tnr = _class_rates(tp, fp, fn, tn)
    with np.errstate(divide="ignore", invalid="ignore"):
        hmean = np.where(tpr + tnr > 0, 2 * tpr * tnr / (tpr + tnr), 0.0)
    return np.where(np.isnan(tpr) | np.isnan(tnr), NAN, hmean)


def _hmean_of(draws: np.ndarray | _Cells) -> np.ndarray:
    tn_, fp_, fn_, tp_ = _cells(draws)
    tpr_s, tnr_s = tp_ / (tp_ + fn_), tn_ / (tn_ + fp_)
    return 2 * tpr_s * tnr_s / (tpr_s + tnr_s)


def _mcc_value(tn: np.ndarray, fp: np.ndarray, fn: np.ndarray, tp: np.ndarray) -> np.ndarray:
    """sklearn's ``matthews_corrcoef`` of 2×2 counts, elementwise: 0 when a margin is empty,
    NaN when there is no data (the K = 2 case of :func:`.agreement.mcc_with_se`)."""
    den = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = (tp * tn - fp * fn) / np.sqrt(den)
    empty = np.where(tn + fp + fn + tp > 0, 0.0, NAN)
    return np.where(den > 0, value, empty)


def _kappa_value(tn: np.ndarray, fp: np.ndarray, fn: np.ndarray, tp: np.ndarray) -> np.ndarray:
    """sklearn's ``cohen_kappa_score`` of 2×2 counts, elementwise: 1 − observed/expected
    disagreement; NaN when one class is absent from both truth and decisions (sklearn's
    0/0) or there is no data (the K = 2 case of :func:`.agreement.kappa_with_se`)."""
    n = tn + fp + fn + tp
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = ((tn + fp) * (fp + tp) + (fn + tp) * (tn + fn)) / n
        value = 1.0 - (fp + fn) / expected
    return np.where((n > 0) & (expected > 0), value, NAN)


def _mcc_result(
    value: float, n: int, confidence: float, draws: np.ndarray | None, reason: str
) -> MetricValue:
    samples = _mcc_of(draws) if draws is not None else None
    return _posterior_value("mcc", value, samples, n, confidence, reason)


def _mcc_of(draws: np.ndarray | _Cells) -> np.ndarray:
    tn_, fp_, fn_, tp_ = _cells(draws)
    den = np.sqrt((tp_ + fp_) * (tp_ + fn_) * (tn_ + fp_) * (tn_ + fn_))
    return (tp_ * tn_ - fp_ * fn_) / den


def _kappa_result(
    value: float, n: int, confidence: float, draws: np.ndarray | None, reason: str
) -> MetricValue:
    samples = _kappa_of(draws) if draws is not None else None
    return _posterior_value("cohen_kappa", value, samples, n, confidence, reason)


def _kappa_of(draws: np.ndarray | _Cells) -> np.ndarray:
    tn_, fp_, fn_, tp_ = _cells(draws)
    po = tp_ + tn_
    pe = (tp_ + fp_) * (tp_ + fn_) + (tn_ + fn_) * (tn_ + fp_)
    return (po - pe) / (1 - pe)


def mcc(
    tp: float,
    fp: float,
    fn: float,
    tn: float,
    confidence: float = 0.95,
    draws: np.ndarray | None = None,
    reason: str = "",
) -> MetricValue:
    """Matthews correlation coefficient; Jeffreys-posterior interval.

    Same value as sklearn's ``matthews_corrcoef`` (0 when a margin is empty); the
    posterior sample is (TP·TN − FP·FN)/sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) of each
    Dirichlet draw.
    """
    value = float(_mcc_value(*(np.float64(x) for x in (tn, fp, fn, tp))))
    return _mcc_result(value, round(tp + fp + fn + tn), confidence, draws, reason)


def cohen_kappa(
    tp: float,
    fp: float,
    fn: float,
    tn: float,
    confidence: float = 0.95,
    draws: np.ndarray | None = None,
    reason: str = "",
) -> MetricValue:
    """Cohen's kappa (model vs truth), sklearn's value; Jeffreys-posterior interval.

    κ = (p_o − p_e)/(1 − p_e) of each draw, p_o = TP + TN and
    p_e = (TP+FP)(TP+FN) + (TN+FN)(TN+FP) in proportions (Cohen 1960).
    :func:`monitor.stats.agreement.kappa_with_se` keeps the Fleiss–Cohen–Everitt SE for
    the multiclass layout.
    """
    value = float(_kappa_value(*(np.float64(x) for x in (tn, fp, fn, tp))))
    return _kappa_result(value, round(tp + fp + fn + tn), confidence, draws, reason)


_SAMPLERS = {
    "balanced_accuracy": _balanced_of,
    "hmean_class_accuracy": _hmean_of,
    "mcc": _mcc_of,
    "cohen_kappa": _kappa_of,
}
"""Posterior sample of each class-accuracy / agreement metric from the cell draws."""
