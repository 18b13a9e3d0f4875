"""The evaluation pass: merge buckets into windows and compute metrics with intervals.

Pure function of copied arrays, so the app can copy under its lock (O(buckets)) and
compute outside it. Cost grows with buckets × groups, never with events.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from itertools import chain
from operator import itemgetter
from typing import Any, NamedTuple

import numpy as np
from scipy.sparse import csr_matrix

from ..collector import collector_paused
from ..metrics.catalog import (
    ESTIMATION,
    EXPECTED_CONFUSION,
    MULTICLASS,
    RANKING,
    REGRESSION,
    SCORES,
    BinaryCatalog,
    MulticlassCatalog,
    RankingCatalog,
    RegressionCatalog,
)
from ..metrics.protocol import Metric
from ..metrics.registry import confusion_views, own_families
from ..stats.binary import clt_mean
from ..stats.estimation import (
    LabelledBins,
    cbpe_multiclass,
    cbpe_split,
    cbpe_top_label,
    recalibrate,
)
from ..stats.intervals import wilson_interval_z, z_value
from ..stats.multiclass import MulticlassLayout
from ..stats.ranking import RankingLayout
from ..stats.regression import RegressionLayout
from ..stats.results import MetricValue
from ..stats.scores import (
    ReliabilityBin,
    ScoreLayout,
    ValueMatrix,
    ece_debiased_from_bins,
    gini_from_auc,
)
from .buckets import window_group_sums
from .models import SCORE_METRICS, ModelSpec, SliceSpec
from .result_cache import ResultCache, digest, row_digests
from .snapshot import Economics, FairnessGap, WindowResult
from .view import StoreView, base_rows

__all__ = ["evaluate_all", "score_results"]

_EMPTY: dict[str, np.ndarray] = {}

# a window's score metrics and its reliability diagram
SliceScores = tuple[list[MetricValue], tuple[ReliabilityBin, ...]]


def score_results(
    layout: ScoreLayout,
    vecs: np.ndarray,
    confidence: float,
    positive_share: np.ndarray | None = None,
) -> list[SliceScores | None]:
    """The score metrics and reliability diagram of each row of ``vecs`` (one code path
    for a version's fine histogram and a batch of segment slices' coarse ones); None for
    a row without scored rows (its predictions carried decisions only).
    ``positive_share``: each row's long-run prevalence (its class-count gates)."""
    v = np.atleast_2d(vecs)
    out: list[SliceScores | None] = [None] * v.shape[0]
    scored = np.flatnonzero(v[:, layout.n_column] > 0)
    if scored.shape[0]:
        rows = v[scored]
        share = None if positive_share is None else np.atleast_1d(positive_share)[scored]
        metrics = layout.metrics_many(rows, confidence, positive_share=share)
        reliability = layout.reliability_many(rows, confidence)
        for i, m, r in zip(scored.tolist(), metrics, reliability, strict=True):
            out[i] = (m, r)
    return out


def evaluate_all(
    view: StoreView,
    models: Sequence[ModelSpec],
    now_ms: int,
    confidence: float = 0.95,
    plugins: Sequence[Metric] = (),
    plugin_errors: Counter[str] | None = None,
    cache: ResultCache | None = None,
) -> tuple[tuple[WindowResult, ...], tuple[FairnessGap, ...]]:
    """Window results and the fairness gaps across each single-dimension slice.

    ``view.buckets`` holds the per-(group, bucket) counts (groups include slice segments);
    ``view.wide[m]`` model m's per-(version, bucket) score histograms and plugin
    statistics, which feed the score-based and plugin metrics of slice ``all``;
    ``view.sliced[m]`` its per-(group, bucket) multiclass and regression statistics
    (every slice).

    Plugin metrics are computed per window too; a plugin that raises is counted in
    ``plugin_errors`` and its metrics are left out of that result. ``cache`` (the
    engine's) lends this pass the binary catalogs and slice score metrics of the windows
    whose counts have not changed since the last pass (:mod:`.result_cache`)."""
    if cache is not None:
        cache.begin()
    try:
        with collector_paused(keep=True):  # ~10⁵ result tuples, no cycles, kept
            return _evaluate(view, models, now_ms, confidence, plugins, plugin_errors, cache)
    finally:
        if cache is not None:
            cache.end()


def _evaluate(
    view: StoreView,
    models: Sequence[ModelSpec],
    now_ms: int,
    confidence: float,
    plugins: Sequence[Metric],
    plugin_errors: Counter[str] | None,
    cache: ResultCache | None,
) -> tuple[tuple[WindowResult, ...], tuple[FairnessGap, ...]]:
    results: list[WindowResult] = []
    gaps: list[FairnessGap] = []
    groups = view.groups
    width_ms = view.width_ms
    buckets = view.buckets
    n_groups = len(groups)
    if n_groups == 0:
        return (), ()
    group_model = np.array([g[0] for g in groups], np.int64)
    is_base = np.fromiter((not g[2] for g in groups), bool, n_groups)
    light = _LightSums(buckets, n_groups)
    base = {(g[0], g[1]): i for i, g in enumerate(groups) if not g[2]}
    pool = _ScorePool(cache)
    held: list[tuple[_Window, list[tuple[str, str, list[tuple[str, _Pending]]]]]] = []

    def finish_held() -> None:
        """Score the held windows' rows together, then finish them in order."""
        pool.run()
        asked: list[tuple[str, str, str, str, list[tuple[str, _Pending]]]] = []
        for win, pending_gaps in held:
            win.finish()
            for version, dimension, shown in pending_gaps:
                done = [(value, p) for value, p in shown if p.result is not None]
                asked.append((win.spec.name, version, win.label, dimension, done))
        gaps.extend(_fairness(asked, confidence))
        held.clear()

    for m, spec in enumerate(models):
        gids = np.flatnonzero(group_model == m)
        if gids.shape[0] == 0:
            continue
        if spec.task != "binary":
            finish_held()  # its results are appended as they are emitted: keep the order
        wide = view.wide.get(m, _EMPTY)
        families = [*own_families(spec.params, spec.metrics), *plugins]
        catalog = _Catalog(
            spec,
            wide.get(SCORES.key),
            [
                (f, wide[f.stat.key], f in plugins)
                for f in families
                if spec.task in f.tasks and f.stat.key in wide
            ],
            plugin_errors,
            wide.get(ESTIMATION.key),
            wide.get(EXPECTED_CONFUSION.key),
            cache,
        )
        empty = np.empty(0, np.int64)
        w_group, w_bucket = wide.get("group", empty), wide.get("bucket", empty)
        w_index = base_rows(group_model, is_base, m)[0] if view.wide_sums else None
        if catalog.est is not None:
            catalog.measure_calibration(view, now_ms, w_group, w_bucket, base, m, w_index)
        if catalog.mc_est is not None:
            catalog.measure_top_label_calibration(view, now_ms, m)
        tasks = view.sliced.get(m, _EMPTY)
        task_matrix = tasks.get(_SLICED_MATRIX[spec.task])
        if spec.task == "binary" and spec.slice_score_layout is None:
            task_matrix = None  # no score metric asked (a narrowed spec): nothing to sum
        versions: dict[str, list[int]] = {}
        for gid in gids.tolist():
            versions.setdefault(groups[gid][1], []).append(gid)
        local = np.full(n_groups, -1, np.intp)  # group -> row of the model's task sums
        local[gids] = np.arange(gids.shape[0])
        parts = _slice_parts(spec, groups, gids, versions, cache)  # the same for every window
        # the longest window's counts: the long-run rates every window's gates read
        longest = max(spec.windows, key=lambda w: w.size_ms + w.delay_ms)
        long_lo, long_hi = view.tiers.window(now_ms, longest.size_ms, longest.delay_ms)
        long_conf = light.of(long_lo, long_hi).confusion
        long_tasks = view.window_sums.get((m, long_lo, long_hi))
        if long_tasks is None and task_matrix is not None:
            long_tasks = window_group_sums(
                tasks["group"], tasks["bucket"], task_matrix, (long_lo, long_hi), local,
                gids.shape[0],
            )  # fmt: skip
        for w in spec.windows:
            lo, hi = view.tiers.window(now_ms, w.size_ms, w.delay_ms)
            sums = light.of(lo, hi)
            wide_sel = np.flatnonzero((w_bucket >= lo) & (w_bucket <= hi))
            fine = view.wide_sums.get((m, lo, hi))  # per-version fine score sums, if summed
            # the model's task statistics per group (a row per group of the model)
            task_sums = view.window_sums.get((m, lo, hi))
            if task_sums is None and task_matrix is not None:
                t_group, t_bucket = tasks["group"], tasks["bucket"]
                task_sums = window_group_sums(
                    t_group, t_bucket, task_matrix, (lo, hi), local, gids.shape[0]
                )

            win = _Window(
                spec,
                catalog,
                w.label,
                lo * width_ms,
                (hi + 1) * width_ms,
                sums,
                confidence,
                results,
                task_sums,
                cache,
                local,
                long_conf,
                long_tasks,
            )
            emit = win.emit
            none = np.empty(0, np.int64)
            lab_l = sums.labeled
            pending_gaps: list[tuple[str, str, list[tuple[str, _Pending]]]] = []
            for version, members in versions.items():
                base_gid = base.get((m, version), -1)
                r = emit(version, "all", members, wide_sel[w_group[wide_sel] == base_gid])
                if r is not None and fine is not None and w_index is not None and base_gid >= 0:
                    r.fine = fine[w_index[base_gid]]
                for sl, keyed, single in parts[version]:
                    shown: list[tuple[str, _Pending]] = []
                    if single is not None:  # one group a part: its counts gathered at once
                        # too few labeled samples to say anything: not emitted
                        kept = np.flatnonzero(~(sums.labeled_array[single] < sl.min_samples))
                        n_pred = sums.predicted_array[single[kept]].tolist()
                        n_lab = sums.labeled_array[single[kept]].tolist()
                        for i, p, q in zip(kept.tolist(), n_pred, n_lab, strict=True):
                            first, label, part = keyed[i]
                            r = emit(version, label, part, none, (p, q))
                            if r is not None:
                                shown.append((first, r))
                    else:
                        for first, label, part in keyed:
                            if _total(lab_l, part) < sl.min_samples:
                                continue  # too few labeled samples to say anything
                            r = emit(version, label, part, none)
                            if r is not None:
                                shown.append((first, r))
                    if spec.task == "binary" and len(sl.dimensions) == 1 and len(shown) >= 2:
                        pending_gaps.append((version, sl.dimensions[0], shown))
            win.flush(pool)
            held.append((win, pending_gaps))
            if pool.nbytes >= _POOL_BYTES:
                finish_held()
    finish_held()
    return tuple(results), tuple(gaps)


class _GroupCounts(NamedTuple):
    """Every group's light counts over one window's buckets."""

    predicted: list[float]
    labeled: list[float]
    confusion: np.ndarray  # (groups, 4) int64: TN, FP, FN, TP
    predicted_array: np.ndarray  # the same counts as arrays (gathered for many parts)
    labeled_array: np.ndarray


class _LightSums:
    """The light counts of every group over a window's buckets, summed once per distinct
    bucket range of the pass: the models of a fleet share their window sizes, and one
    pass over the light rows per size replaces one per model and size (each a scan of
    every row). Sums in row order, as a per-model pass would (equal bit for bit)."""

    def __init__(self, buckets: dict[str, np.ndarray], n_groups: int) -> None:
        self.buckets, self.n_groups = buckets, n_groups
        self._done: dict[tuple[int, int], _GroupCounts] = {}

    def of(self, lo: int, hi: int) -> _GroupCounts:
        done = self._done.get((lo, hi))
        if done is None:
            b = self.buckets
            sel = np.flatnonzero((b["bucket"] >= lo) & (b["bucket"] <= hi))
            g, n = b["group"][sel], self.n_groups
            cells = b["confusion"][sel]
            confusion = np.stack(
                [np.bincount(g, cells[:, j], minlength=n) for j in range(4)], axis=1
            )
            predicted = np.bincount(g, b["predicted"][sel], minlength=n)
            labeled = np.bincount(g, b["labeled"][sel], minlength=n)
            done = _GroupCounts(
                predicted.tolist(),
                labeled.tolist(),
                np.rint(confusion).astype(np.int64),
                predicted,
                labeled,
            )
            self._done[(lo, hi)] = done
        return done


_Parts = dict[str, list[tuple[SliceSpec, list[tuple[str, str, list[int]]], np.ndarray | None]]]


def _slice_parts(
    spec: ModelSpec,
    groups: Sequence[tuple[int, str, tuple[str, ...]]],
    gids: np.ndarray,
    versions: dict[str, list[int]],
    cache: ResultCache | None = None,
) -> _Parts:
    """Per version, per configured slice: its parts in label order, each (first dimension
    value, slice label, the groups it merges), and the parts' groups as an array when
    each part is one group (else None). The same from pass to pass while the model's
    groups stay: kept in ``cache`` (a fleet's parts cost a few percent of a tick)."""
    kept = None
    if cache is not None:
        kept = ("slice parts", repr(spec), tuple(groups[g] for g in gids.tolist()))
        done = cache.get(kept)
        if done is not None:
            return done  # type: ignore[no-any-return]
    dims = spec.slice_dimensions
    out: _Parts = {}
    for version, members in versions.items():
        per_slice = []
        for sl in spec.slices:
            idx = [dims.index(d) for d in sl.dimensions]
            merged: dict[tuple[str, ...], list[int]] = {}
            for gid in members:
                segment = groups[gid][2]
                if not segment:
                    continue  # the version's base group carries no segment
                merged.setdefault(tuple(segment[i] for i in idx), []).append(gid)
            keyed = [
                (
                    key[0],
                    ",".join(f"{d}={v}" for d, v in zip(sl.dimensions, key, strict=True)),
                    part,
                )
                for key, part in sorted(merged.items())
            ]
            single = None
            if all(len(part) == 1 for _, _, part in keyed):
                single = np.array([part[0] for _, _, part in keyed], np.intp)
            per_slice.append((sl, keyed, single))
        out[version] = per_slice
    if kept is not None and cache is not None:
        cache.put(kept, out)
    return out


def _total(values: list[float], members: list[int]) -> float:
    """Sum of ``values`` over ``members`` (usually one group), in their order."""
    if len(members) == 1:
        return values[members[0]]
    return sum(itemgetter(*members)(values)) if members else 0.0


class _Pending:
    """A window result whose binary catalog is computed with its model window's others
    (:meth:`BinaryLayout.metrics_many`); ``result`` is set by :meth:`_Window.flush`."""

    __slots__ = (
        "fine",
        "members",
        "n_lab",
        "n_pred",
        "rates",
        "result",
        "slice_label",
        "version",
        "wide_rows",
    )

    def __init__(
        self,
        version: str,
        slice_label: str,
        members: list[int],
        wide_rows: np.ndarray,
        n_pred: int,
        n_lab: int,
    ) -> None:
        self.version, self.slice_label = version, slice_label
        self.members, self.wide_rows = members, wide_rows
        self.n_pred, self.n_lab = n_pred, n_lab
        self.result: WindowResult | None = None
        self.rates: tuple[float, float] = (math.nan, math.nan)  # ECE, ROC-AUC (fairness)
        self.fine: np.ndarray | None = None  # slice "all": the version's fine score sums


class _Window:
    """One model window's per-group sums; ``emit`` merges a set of groups into a result."""

    def __init__(
        self,
        spec: ModelSpec,
        catalog: _Catalog,
        label: str,
        start_ms: int,
        end_ms: int,
        sums: _GroupCounts,
        confidence: float,
        out: list[WindowResult],
        task_sums: np.ndarray | None = None,
        cache: ResultCache | None = None,
        local: np.ndarray | None = None,
        long_conf: np.ndarray | None = None,
        long_tasks: np.ndarray | None = None,
    ) -> None:
        self.cache = cache
        self.local = local  # group -> row of task_sums
        # the model's longest window per group: light counts and task sums (long-run rates)
        self.long_conf = long_conf if long_conf is not None else sums.confusion
        self.long_tasks = long_tasks
        self.spec, self.catalog, self.label = spec, catalog, label
        self.task_sums = task_sums
        self.start_ms, self.end_ms = start_ms, end_ms
        self.conf = sums.confusion
        self.pred_l, self.lab_l = sums.predicted, sums.labeled
        self.confidence, self.out = confidence, out
        self.pending: list[_Pending] = []
        self._held: Any = None  # what flush computed, for finish

    def emit(
        self,
        version: str,
        slice_label: str,
        members: list[int],
        wide_rows: np.ndarray,
        totals: tuple[float, float] | None = None,
    ) -> _Pending | None:
        """Queue a binary result for :meth:`flush`, or append a multiclass/regression one.
        ``totals``: the members' predicted and labeled counts, if the caller has them."""
        if totals is None:
            totals = (_total(self.pred_l, members), _total(self.lab_l, members))
        n_pred, n_lab = int(totals[0]), int(totals[1])
        if n_pred == 0 and n_lab == 0:
            return None
        pending = _Pending(version, slice_label, members, wide_rows, n_pred, n_lab)
        if self.spec.task == "binary":
            self.pending.append(pending)
            return pending
        extra = self._task_extra(members)
        if slice_label == "all" and self.catalog.families and wide_rows.shape[0]:
            extra["metrics"] += tuple(self.catalog.family_metrics(wide_rows, self.confidence))
        if slice_label == "all" and self.catalog.mc_est is not None:
            extra["metrics"] += self.catalog.top_label_estimates(
                version, wide_rows, self.confidence
            )
        self._finish(pending, extra)
        return pending

    def flush(self, pool: _ScorePool) -> None:
        """Hand the queued binary results' confusion rows and score rows to ``pool``;
        :meth:`finish` completes them once it has run."""
        if not self.pending:
            return
        members = [p.members for p in self.pending]
        confs = _member_sums(self.conf, members)
        longs = _member_sums(self.long_conf, members).astype(np.float64)
        catalog = self.catalog
        # the binary catalogs of the model's windows are computed together too (a call
        # per window paid a few hundred small numpy operations for a few dozen rows)
        binary = pool.add(
            np.hstack([confs.astype(np.float64), longs]),  # the gates read the long run
            ("binary", catalog.token, self.confidence),
            lambda rows: catalog.confusion_metrics(rows[:, :4], self.confidence, rows[:, 4:]),
        )
        with np.errstate(divide="ignore", invalid="ignore"):
            share = (longs[:, 2] + longs[:, 3]) / longs.sum(axis=1)  # long-run prevalence
        # slice "all" reads the version's fine histograms; a segment slice the sum of its
        # segments' coarser ones: both scored by the pool, with other windows' rows
        n = len(self.pending)
        coarse: list[np.ndarray | None] = [None] * n
        layout = self.catalog.slice_layout
        slices: list[Any] | None = None
        at: list[int] = []
        if self.task_sums is not None and layout is not None:
            at = [i for i, p in enumerate(self.pending) if p.slice_label != "all"]
            if at:
                assert self.local is not None
                local = self.local
                block = _member_rows(self.task_sums, [self.pending[i].members for i in at], local)
                slices = pool.add(
                    _Rows(*block, share[at]),
                    ("slice", layout.bins, layout.logit_range, self.confidence),
                    lambda rows: score_results(layout, rows[:, :-1], self.confidence, rows[:, -1]),
                )
                for j, i in enumerate(at):
                    coarse[i] = block[0][block[1][j]]  # a view: no copy of the window's rows
        fine = {
            i: v for i, p in enumerate(self.pending) if (v := catalog.fine_vector(p)) is not None
        }
        fines = None
        if fine:
            fl = catalog.score_layout
            vecs = np.stack(list(fine.values()))
            fines = pool.add(
                _Rows(vecs, np.arange(vecs.shape[0]), share[list(fine)]),
                ("scores", fl.bins, fl.logit_range, self.confidence),
                lambda rows: score_results(fl, rows[:, :-1], self.confidence, rows[:, -1]),
            )
        self._held = (confs, binary, coarse, at, slices, fine, fines)

    def finish(self) -> None:
        """The queued results, once the pool :meth:`flush` fed has run."""
        if not self.pending:
            return
        confs, (binary, binary_keys), coarse, at, slices, fine, fines = self._held
        n = len(self.pending)
        scored: list[SliceScores | None] = [None] * n
        slice_keys: list[Any] = [None] * n
        if slices is not None:
            batch, keys = slices
            for j, i in enumerate(at):
                scored[i], slice_keys[i] = batch[j], keys[j]
        if fines is not None:
            for i, got in zip(fine, fines[0], strict=True):
                scored[i] = got
        catalog = self.catalog
        cache = self.cache
        for k, (p, c, values) in enumerate(zip(self.pending, confs.tolist(), binary, strict=True)):
            # a segment slice's catalog is a pure function of its counts: reused whole
            key = shown = None
            done = None
            if cache is not None and p.slice_label != "all":
                key = (catalog.token, binary_keys[k], slice_keys[k])
                # and so is its whole result, given the window's bounds and its labels
                shown = (key, self.label, self.start_ms, self.end_ms, p.version,
                         p.slice_label, p.n_pred, p.n_lab)  # fmt: skip
                same = cache.get(shown)
                if same is not None:
                    p.result, p.rates = same
                    self.out.append(same[0])
                    continue
                done = cache.get(key)
            if done is None:
                metrics, reliability, economics = catalog.compute(
                    confs[k], values, p.wide_rows, self.confidence, coarse[k], scored[k],
                    fine.get(k),
                )  # fmt: skip
                shift = math.nan
                if p.slice_label == "all" and catalog.est is not None:
                    estimated, shift = catalog.estimates(p.version, p.wide_rows, self.confidence)
                    metrics += estimated
                done = (metrics, reliability, economics, _score_rates(metrics), shift)
                if key is not None:
                    cache.put(key, done)  # type: ignore[union-attr]
            p.rates = done[3]
            extra = {
                "metrics": done[0],
                "confusion": (int(c[0]), int(c[1]), int(c[2]), int(c[3])),
                "reliability": done[1],
                "economics": done[2],
                "estimate_shift": done[4],
            }
            self._finish(p, extra)
            if shown is not None:
                cache.put(shown, (p.result, p.rates))  # type: ignore[union-attr]
        self.pending = []
        self._held = None

    def _finish(self, p: _Pending, extra: dict[str, Any]) -> None:
        p.result = WindowResult(
            model=self.spec.name,
            version=p.version,
            window=self.label,
            slice=p.slice_label,
            start_ms=self.start_ms,
            end_ms=self.end_ms,
            predictions=p.n_pred,
            labeled=p.n_lab,
            metrics=extra.pop("metrics"),
            **extra,
        )
        self.out.append(p.result)

    def _task_extra(self, members: list[int]) -> dict[str, Any]:
        """Multiclass / regression: the merged task statistics of the members."""
        vec = (
            self.task_sums[self.local[members]].sum(axis=0)
            if self.task_sums is not None and self.local is not None
            else self.catalog.task_empty()
        )
        long_vec = (
            self.long_tasks[self.local[members]].sum(axis=0)
            if self.long_tasks is not None and self.local is not None
            else None
        )
        metrics, confusion, excluded = self.catalog.compute_task(vec, self.confidence, long_vec)
        return {
            "metrics": metrics,
            "class_confusion": confusion,
            "classes": tuple(self.spec.classes) if confusion else (),
            "excluded": excluded,
        }


def _score_rates(metrics: Sequence[MetricValue]) -> tuple[float, float]:
    """(debiased ECE, ROC-AUC) among ``metrics``, NaN where not exported: the fairness
    gaps' inputs (the plug-in ECE is biased upward, the more the smaller the slice)."""
    ece = auc = math.nan
    for mv in metrics:
        if mv.name == "ece_debiased":
            ece = mv.value
        elif mv.name == "roc_auc":
            auc = mv.value
    return ece, auc


def _fairness(
    asked: Sequence[tuple[str, str, str, str, list[tuple[str, _Pending]]]],
    confidence: float,
) -> list[FairnessGap]:
    """The gaps of each (model, version, window, dimension, its exported values in label
    order): demographic parity (predicted-positive-rate gap), equal opportunity (recall
    gap) and equalized odds (max of the TPR and FPR gaps) across a dimension's exported
    values (Hardt, Price & Srebro 2016); the ECE gap (calibration within groups: each
    group's scores should mean the same probability, Kleinberg, Mullainathan & Raghavan
    2017; on the debiased ECE) and the ROC-AUC gap (ranking quality per group), when
    those metrics are exported.

    The gap is the largest minus the smallest estimate, which noise alone makes positive
    (with no true difference across 20 slices of 100-20,000 rows the equal-opportunity
    gap averaged 0.22). So the rate gaps carry a simultaneous interval: each value's
    Wilson interval at level 1 − α/k (Bonferroni over the k values; 2k for equalized
    odds) — with probability at least 1 − α all cover, and then the true gap
    max θ − min θ lies in [max(0, max L − min U), max U − min L]. A lower end of 0 says
    the data show no difference at all. The ECE and AUC gaps have no interval.

    Every dimension of the pass at once: its values are one segment of flat arrays, the
    extremes segment reductions (a fleet asks for hundreds of dimensions a tick, each a
    few dozen numpy calls when computed alone). Ties go to the first value in label
    order at the low end, the last at the high."""
    asked = [a for a in asked if len(a[4]) >= 2]  # a gap needs two values (segments not empty)
    if not asked:
        return []
    sizes = np.fromiter((len(a[4]) for a in asked), np.intp, len(asked))
    starts = np.cumsum(sizes) - sizes
    values = [value for a in asked for value, _ in a[4]]
    shown = [p for a in asked for _, p in a[4]]
    conf = np.array([p.result.confusion for p in shown], np.float64)  # type: ignore[union-attr]
    conf = conf.reshape(-1, 4)
    tn, fp, fn, tp = conf[:, 0], conf[:, 1], conf[:, 2], conf[:, 3]
    scores = np.array([p.rates for p in shown], np.float64).reshape(-1, 2)  # ECE, AUC
    counts = {"ppr": (tp + fp, tn + fp + fn + tp), "tpr": (tp, tp + fn), "fpr": (fp, tn + fp)}
    with np.errstate(divide="ignore", invalid="ignore"):
        rates = {key: (k / trials, trials > 0) for key, (k, trials) in counts.items()}
    rates["ece"] = (scores[:, 0], np.isfinite(scores[:, 0]))
    rates["auc"] = (scores[:, 1], np.isfinite(scores[:, 1]))
    known = {key: np.add.reduceat(ok, starts) for key, (_, ok) in rates.items()}
    both = known["tpr"] + known["fpr"]
    asked_gaps = (  # (metric, rate, Bonferroni tests per dimension: None for no interval)
        ("demographic_parity", "ppr", known["ppr"]),
        ("equal_opportunity", "tpr", known["tpr"]),
        ("ece_gap", "ece", None),
        ("auc_gap", "auc", None),
        ("tpr", "tpr", both),
        ("fpr", "fpr", both),
    )
    index = np.arange(conf.shape[0])
    z_of: dict[int, float] = {}
    columns = []
    for _, key, tests in asked_gaps:
        r, ok = rates[key]
        low = np.minimum.reduceat(np.where(ok, r, np.inf), starts)
        high = np.maximum.reduceat(np.where(ok, r, -np.inf), starts)
        at_low = ok & (r == np.repeat(low, sizes))
        at_high = ok & (r == np.repeat(high, sizes))
        first = np.minimum.reduceat(np.where(at_low, index, index.shape[0]), starts)
        last = np.maximum.reduceat(np.where(at_high, index, -1), starts)
        lower = upper = np.full(len(asked), math.nan)
        if tests is not None:  # each value's Wilson interval at its gap's level
            z = [
                z_of.setdefault(t, z_value(1.0 - (1.0 - confidence) / t)) if t >= 2 else math.nan
                for t in tests.tolist()
            ]
            lo, hi = wilson_interval_z(*counts[key], np.repeat(z, sizes))
            lo_max = np.maximum.reduceat(np.where(ok, lo, -np.inf), starts)
            hi_min = np.minimum.reduceat(np.where(ok, hi, np.inf), starts)
            hi_max = np.maximum.reduceat(np.where(ok, hi, -np.inf), starts)
            lo_min = np.minimum.reduceat(np.where(ok, lo, np.inf), starts)
            lower, upper = np.maximum(0.0, lo_max - hi_min), hi_max - lo_min
        columns.append(
            (known[key].tolist(), low.tolist(), high.tolist(), first.tolist(), last.tolist(),
             lower.tolist(), upper.tolist())
        )  # fmt: skip
    out: list[FairnessGap] = []
    for d, (model, version, window, dimension, _) in enumerate(asked):
        found: list[FairnessGap | None] = []
        for (metric, _, _), (n_known, low, high, first, last, lower, upper) in zip(
            asked_gaps, columns, strict=True
        ):
            if n_known[d] < 2:
                found.append(None)
                continue
            found.append(
                FairnessGap(model, version, window, dimension, metric, high[d] - low[d],
                            values[first[d]], values[last[d]], lower[d], upper[d])
            )  # fmt: skip
        tpr, fpr = found[4], found[5]
        if tpr is not None and fpr is not None:
            worst = tpr if tpr.gap >= fpr.gap else fpr
            found[4] = FairnessGap(
                model, version, window, dimension, "equalized_odds", worst.gap, worst.lowest,
                worst.highest, max(tpr.lower, fpr.lower), max(tpr.upper, fpr.upper),
            )  # fmt: skip
        else:
            found[4] = None
        out.extend(g for g in found[:5] if g is not None)
    return out


class _Catalog:
    """One model's metric catalog over merged window statistics."""

    def __init__(
        self,
        spec: ModelSpec,
        scores: np.ndarray | None,
        families: Sequence[tuple[Metric, np.ndarray, bool]] = (),
        plugin_errors: Counter[str] | None = None,
        est: np.ndarray | None = None,
        mc_cm: np.ndarray | None = None,
        cache: ResultCache | None = None,
    ) -> None:
        self.spec = spec
        self.cache = cache
        self.families = families  # (family, its wide matrix, is a plugin: isolated)
        self.plugin_errors = plugin_errors if plugin_errors is not None else Counter()
        self.scores = scores
        self.est = est if spec.estimation_layout is not None else None
        # multiclass CBPE: top-label confidence bins of every prediction (count, Σc)
        self.mc_est = est if spec.task == "multiclass" and spec.estimation_bins > 0 else None
        # and Σ p_j per decided class i of every prediction: the expected confusion matrix
        self.mc_cm = mc_cm if self.mc_est is not None else None
        self.ece: dict[str, float] = {}  # version -> debiased ECE over the longest window
        # version -> its labelled rows per estimation bin (CBPE's recalibration)
        self.labelled: dict[str, LabelledBins] = {}
        self.score_layout = ScoreLayout(bins=spec.score_bins)
        self.slice_layout = spec.slice_score_layout
        wanted = spec.exported
        self.wanted = wanted
        # the binary confusion catalog and the other families reading those counts
        self.binary = BinaryCatalog(spec.fbeta, names=wanted)
        self.confusion_views = confusion_views(spec.params, spec.metrics)
        self.token = digest(repr(spec))  # what a cached catalog depends on besides counts
        self.needs_scores = bool(wanted & SCORE_METRICS) or spec.costs is not None
        self.credit = bool(wanted & {"ks_statistic", "gini", "gain"})
        self.task_layout: MulticlassLayout | RegressionLayout | RankingLayout | None = None
        self.task_family: MulticlassCatalog | RegressionCatalog | RankingCatalog | None = None
        if spec.task == "multiclass":
            self.task_layout = MulticlassLayout(
                len(spec.classes), tuple(spec.classes), spec.calibration_bins
            )
            self.task_family = MulticlassCatalog(self.task_layout, wanted)
        elif spec.task == "regression":
            self.task_layout = RegressionLayout(spec.huber_delta, tuple(spec.quantiles))
            self.task_family = RegressionCatalog(self.task_layout, wanted, spec.mase_scale)
        elif spec.task == "ranking":
            self.task_layout = RankingLayout(spec.ks)
            self.task_family = RankingCatalog(self.task_layout, wanted)

    def measure_calibration(
        self,
        view: StoreView,
        now_ms: int,
        w_group: np.ndarray,
        w_bucket: np.ndarray,
        base: dict[tuple[int, str], int],
        m: int,
        w_index: np.ndarray | None = None,
    ) -> None:
        """Debiased ECE of each version's labelled rows over the model's longest window,
        and those rows per estimation bin: the calibration CBPE's estimates rest on and
        recalibrate with (older labels vouch for newer windows)."""
        self.ece = {}
        self.labelled = {}
        longest = max(self.spec.windows, key=lambda w: w.size_ms + w.delay_ms)
        lo, hi = view.tiers.window(now_ms, longest.size_ms, longest.delay_ms)
        sums = view.wide_sums.get((m, lo, hi))
        if self.scores is None and (sums is None or w_index is None):
            return
        sel = np.flatnonzero((w_bucket >= lo) & (w_bucket <= hi))
        layout = self.score_layout
        for (model, version), gid in base.items():
            if model != m:
                continue
            if sums is not None and w_index is not None:
                vec = sums[w_index[gid]]
            else:
                rows = sel[w_group[sel] == gid]
                if rows.shape[0] == 0 or self.scores is None:
                    continue
                vec = _sum_rows(self.scores, rows)
            count, sp, sy = layout.calibration(vec)
            if count.sum() > 0:
                self.ece[version] = ece_debiased_from_bins(count, sp, sy).value
                self.labelled[version] = self._labelled_bins(vec)

    def _labelled_bins(self, vec: np.ndarray) -> LabelledBins:
        """The fine score histogram's labelled rows regrouped into the estimation bins:
        each fine bin goes whole to the estimation bin of its mean score (a fine bin is
        a quarter of an estimation bin's logit width, so only the few straddling an edge
        move at all)."""
        est = self.spec.estimation_layout
        assert est is not None
        neg, pos, sp = self.score_layout.histograms(vec)
        count = neg + pos
        used = np.flatnonzero(count > 0)
        to = est.bin_of(sp[used] / count[used])
        return LabelledBins(
            np.bincount(to, weights=count[used], minlength=est.bins),
            np.bincount(to, weights=sp[used], minlength=est.bins),
            np.bincount(to, weights=pos[used], minlength=est.bins),
        )

    def measure_top_label_calibration(self, view: StoreView, now_ms: int, m: int) -> None:
        """Debiased top-label ECE of each version's labelled rows over the model's longest
        window (all segments): what multiclass CBPE rests on."""
        self.ece = {}
        tasks = view.sliced.get(m, _EMPTY)
        layout = self.task_layout
        if MULTICLASS.key not in tasks or not isinstance(layout, MulticlassLayout):
            return
        longest = max(self.spec.windows, key=lambda w: w.size_ms + w.delay_ms)
        lo, hi = view.tiers.window(now_ms, longest.size_ms, longest.delay_ms)
        bucket, group = tasks["bucket"], tasks["group"]
        sel = np.flatnonzero((bucket >= lo) & (bucket <= hi))
        version_of = np.array([g[1] for g in view.groups], dtype=object)
        for version in sorted(set(version_of[group[sel]].tolist())):
            rows = sel[version_of[group[sel]] == version]
            vec = _sum_rows(tasks[MULTICLASS.key], rows)
            ece = next(
                mv for mv in layout.metrics(vec, per_class=False) if mv.name == "ece_debiased"
            )
            if math.isfinite(ece.value):
                self.ece[version] = ece.value

    def top_label_estimates(
        self, version: str, rows: np.ndarray, confidence: float
    ) -> tuple[MetricValue, ...]:
        """Multiclass CBPE: estimated accuracy = mean confidence of the decided class, and
        macro precision/recall/F1 of the expected confusion matrix, over every prediction in
        the window's wide ``rows``, flagged as :meth:`estimates`."""
        if self.mc_est is None or rows.shape[0] == 0:
            return ()
        vec = _sum_rows(self.mc_est, rows)
        b = vec.shape[0] // 2
        if vec[:b].sum() <= 0:
            return ()
        ece = self.ece.get(version)
        est = cbpe_top_label(vec[:b], vec[b:], confidence, ece, self.spec.max_ece)
        macro: tuple[MetricValue, ...] = ()
        if self.mc_cm is not None:
            cm = _sum_rows(self.mc_cm, rows)
            k = math.isqrt(cm.shape[0])
            macro = cbpe_multiclass(cm.reshape(k, k), confidence, ece, self.spec.max_ece)
        flag = MetricValue(
            "estimate_reliable", float(est.reliable), math.nan, math.nan, est.rows, "none",
            est.reason,
        )  # fmt: skip
        return (*est.metrics, *macro, flag)

    def estimates(
        self, version: str, rows: np.ndarray, confidence: float
    ) -> tuple[tuple[MetricValue, ...], float]:
        """CBPE estimates of every scored prediction in the window's wide ``rows``, with
        ``estimate_reliable`` (1/0) — flagged, with the reason in each note, when the
        version's measured calibration is worse than ``max_ece``, not measured or too
        uncertain — and the estimated accuracy of the raw scores minus the recalibrated
        one (NaN without a recalibration)."""
        if self.est is None or rows.shape[0] == 0:
            return (), math.nan
        vec = _sum_rows(self.est, rows)
        b = vec.shape[0] // 4
        if vec[:b].sum() + vec[2 * b : 3 * b].sum() <= 0:
            return (), math.nan
        cells = (vec[2 * b : 3 * b], vec[3 * b :], vec[:b], vec[b : 2 * b])
        labelled = self.labelled.get(version, _NO_LABELS)
        est = cbpe_split(*cells, confidence, self.ece.get(version), self.spec.max_ece, labelled)
        shift = math.nan
        if recalibrate(labelled) is not None:
            raw = cbpe_split(*cells, confidence, 0.0).by_name()["estimated_accuracy"].value
            shift = raw - est.by_name()["estimated_accuracy"].value
        flag = MetricValue(
            "estimate_reliable", float(est.reliable), math.nan, math.nan, est.rows, "none",
            est.reason,
        )  # fmt: skip
        return (*est.metrics, flag), shift

    def task_empty(self) -> np.ndarray:
        assert self.task_layout is not None
        return self.task_layout.empty()

    def compute_task(
        self, vec: np.ndarray, confidence: float, long_run: np.ndarray | None = None
    ) -> tuple[tuple[MetricValue, ...], tuple[int, ...], tuple[tuple[str, int], ...]]:
        """Metrics of a multiclass, regression or ranking window, the flattened K×K
        confusion matrix (multiclass) and rows excluded from a metric (regression; ranking:
        queries without a relevant item). ``long_run``: the same groups' statistic over
        the model's longest window (ranking reads its dispersion)."""
        family, layout = self.task_family, self.task_layout
        assert family is not None and layout is not None
        if isinstance(family, RankingCatalog) and long_run is not None:
            metrics = tuple(family.compute(vec[np.newaxis, :], confidence, long_run)[0])
        else:
            metrics = tuple(family.compute(vec[np.newaxis, :], confidence)[0])
        if isinstance(layout, MulticlassLayout):
            return metrics, tuple(int(x) for x in layout.confusion(vec).ravel()), ()
        assert isinstance(layout, RegressionLayout | RankingLayout)
        return metrics, (), tuple(sorted(layout.excluded(vec).items()))

    def compute(
        self,
        conf: np.ndarray,
        binary: list[MetricValue],
        rows: np.ndarray,
        confidence: float,
        coarse: np.ndarray | None = None,
        scored: SliceScores | None = None,
        fine: np.ndarray | None = None,
    ) -> tuple[tuple[MetricValue, ...], tuple[ReliabilityBin, ...], Economics | None]:
        """The binary catalog ``binary`` of merged confusion counts ``conf`` (computed in a
        batch by the caller), plus the score-based metrics of the version's fine histogram
        ``fine`` (slice "all", :meth:`fine_vector`) or the summed coarse vector ``coarse``
        (segment slices) — ``scored``, computed in a batch by the caller — and the metric
        families' values over the version's wide ``rows``."""
        values = list(binary)
        reliability: tuple[ReliabilityBin, ...] = ()
        economics = None
        vec = None
        layout = self.score_layout
        if coarse is not None and self.slice_layout is not None:
            vec, layout = coarse, self.slice_layout
        elif self.needs_scores and fine is not None:
            vec = fine
        if vec is not None and vec[layout.n_column] <= 0:  # no scored rows (decisions only)
            vec = None
        if vec is not None:
            assert scored is not None  # computed in a batch by the caller
            values_scores, reliability = scored
            values += values_scores
            if self.credit:  # opt-in (config OPT_IN_METRICS)
                auc = next(mv for mv in values if mv.name == "roc_auc")
                values += [layout.ks_statistic(vec), gini_from_auc(auc)]
                values += layout.gains(vec, self.spec.gain_fractions, confidence)
        metrics = tuple(mv for mv in values if mv.name in self.wanted)
        if self.families and rows.shape[0]:
            metrics += tuple(self.family_metrics(rows, confidence))
        if self.spec.costs is not None:
            economics = self._economics(conf, vec, layout, confidence)
        return metrics, reliability, economics

    def fine_vector(self, p: _Pending) -> np.ndarray | None:
        """Slice "all"'s fine score histogram of a pending result, if its score metrics
        are wanted and it holds scored rows (what :meth:`compute` reads)."""
        if p.slice_label != "all" or not self.needs_scores:
            return None
        vec = p.fine
        if vec is None and self.scores is not None and p.wide_rows.shape[0]:
            vec = _sum_rows(self.scores, p.wide_rows)
        if vec is None or vec[self.score_layout.n_column] <= 0:
            return None
        return vec

    def confusion_metrics(
        self, rows: np.ndarray, confidence: float, long_run: np.ndarray | None = None
    ) -> list[list[MetricValue]]:
        """The binary catalog and every other view of the confusion counts (``npv``) of
        a batch of (n, 4) confusion rows; ``long_run``: the same groups' counts over the
        model's longest window (the interval gates read its rates)."""
        out = self.binary.compute(rows, confidence, long_run)
        for view in self.confusion_views:
            for values, more in zip(out, view.compute(rows, confidence), strict=True):
                values.extend(more)
        return out

    def family_metrics(self, rows: np.ndarray, confidence: float) -> list[MetricValue]:
        """Metrics of the families with their own statistic (slice ``all``: the version's
        wide ``rows``); a plugin that raises is counted and left out."""
        out: list[MetricValue] = []
        for family, matrix, isolated in self.families:
            if not isolated:
                out.extend(family.metrics(_sum_rows(matrix, rows), confidence))
                continue
            try:
                values = family.metrics(_sum_rows(matrix, rows), confidence)
                out.extend(
                    MetricValue(
                        v.name, float(v.value), float(v.lower), float(v.upper), int(v.n), v.method
                    )
                    for v in values
                )
            except Exception:
                self.plugin_errors[family.name] += 1  # isolated: nothing else is affected
        return out

    def _economics(
        self, conf: np.ndarray, vec: np.ndarray | None, layout: ScoreLayout, confidence: float
    ) -> Economics | None:
        assert self.spec.costs is not None
        v_tp, v_fp, v_fn, v_tn = self.spec.costs
        per_cell = np.array([v_tn, v_fp, v_fn, v_tp])  # confusion cell order TN, FP, FN, TP
        counts = conf.astype(np.float64)
        n = float(counts.sum())
        if n <= 0:
            return None
        deployed = clt_mean(
            "expected_value",
            float(counts @ per_cell),
            float(counts @ per_cell**2),
            n,
            confidence,
        )
        if vec is None:
            return Economics(deployed, float("nan"), MetricValue("expected_value", *_NAN3, 0))
        best = layout.best_threshold(vec, ValueMatrix(v_tp, v_fp, v_fn, v_tn), confidence)
        return Economics(deployed, best.threshold, best.value)


_POOL_BYTES = 32 << 20
"""Score rows held for one pool run, in bytes: windows wait for it with their rows (a
slice row of 128 bins is 5 kB, a fine one of 2,048 bins 80 kB), so a large fleet runs it
every few windows and the rows held stay bounded."""

_CHUNK_BYTES = 2 << 20
"""Rows per score-metric call, in bytes (~380 slice rows, ~25 fine ones): the calls'
fixed cost (a few hundred small numpy operations, loops over calibration bins) spread
over many rows, while each call's (rows × bins) temporaries stay small (measured on a
fleet tick: 64-256 slice rows and 16-64 fine rows a call were best, one call per model
window of ~60 and 3 rows 1.5-3 times slower)."""


class _ScorePool:
    """The score rows of many model windows, computed together.

    Why: one call per model window scored a fleet's ~60 changed slice rows and 3 fine
    rows at a time, and a call's fixed cost dominated — pooled across windows and models
    (each row's metrics are a pure function of the row, whatever the batch), a fleet
    tick's score metrics took half the time (docs/benchmarks.md). The binary confusion
    catalogs of a model's windows are pooled the same way (their context names the
    model's catalog)."""

    def __init__(self, cache: ResultCache | None) -> None:
        self.cache = cache
        self.nbytes = 0
        self._parts: dict[tuple[Any, ...], list[tuple[np.ndarray, list[Any]]]] = {}
        self._compute: dict[tuple[Any, ...], Callable[[np.ndarray], list[Any]]] = {}

    def add(
        self,
        rows: np.ndarray | _Rows,
        context: tuple[Any, ...],
        compute: Callable[[np.ndarray], list[Any]],
    ) -> list[Any]:
        """A list that :meth:`run` fills with (each row's result, each row's cache key)
        — :func:`_cached_rows` of ``rows``; rows of one ``context`` share ``compute``."""
        slot: list[Any] = []
        self._parts.setdefault(context, []).append((rows, slot))
        self._compute.setdefault(context, compute)
        self.nbytes += rows.nbytes
        return slot

    def run(self) -> None:
        for context, parts in self._parts.items():
            blocks = [rows for rows, _ in parts]  # keyed in place; only the new rows copied
            out, keys = _cached_rows(self.cache, blocks, context, self._compute[context])
            at = 0
            for rows, slot in parts:
                n = len(rows)
                slot.extend((out[at : at + n], keys[at : at + n]))
                at += n
        self._parts, self._compute, self.nbytes = {}, {}, 0


class _Rows:
    """Rows ``matrix[index]``, each with ``tail``'s value appended as a last column, not
    copied out: a model window's slice rows are most of its window sums (tens of
    megabytes a tick for a fleet), and only the rows not cached are ever gathered."""

    __slots__ = ("index", "matrix", "tail")

    def __init__(self, matrix: np.ndarray, index: np.ndarray, tail: np.ndarray) -> None:
        self.matrix, self.index, self.tail = matrix, index, tail

    def __len__(self) -> int:
        return int(self.index.shape[0])

    @property
    def nbytes(self) -> int:
        """What the rows take once gathered."""
        return len(self) * (self.matrix.shape[1] + 1) * self.matrix.itemsize

    def take(self, picked: np.ndarray) -> np.ndarray:
        """Rows ``picked`` gathered, with their tail column."""
        return np.hstack([self.matrix[self.index[picked]], self.tail[picked, np.newaxis]])


def _member_rows(
    matrix: np.ndarray, members: Sequence[list[int]], row_of: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(a matrix, the row of each of ``members`` in it): ``matrix`` itself when each
    member is one group (a segment slice of one dimension), else :func:`_member_sums`."""
    if all(len(m) == 1 for m in members):
        return matrix, row_of[np.fromiter((m[0] for m in members), np.intp, len(members))]
    return _member_sums(matrix, members, row_of), np.arange(len(members))


def _cached_rows(
    cache: ResultCache | None,
    rows: np.ndarray | _Rows | list[np.ndarray | _Rows],
    context: tuple[Any, ...],
    compute: Callable[[np.ndarray], list[Any]],
) -> tuple[list[Any], list[Any]]:
    """``compute(rows)`` (in chunks of :data:`_CHUNK_BYTES`), reusing the result of every
    row whose bytes (and ``context``: what else the result depends on) an earlier or this
    pass already computed; and each row's cache key (None without a cache). ``rows``:
    one array or blocks of rows, in order (a pool's: only the rows computed are copied
    together, not the tens of megabytes of the rows reused)."""
    blocks = rows if isinstance(rows, list) else [rows]
    if cache is None:
        stacked = _take_rows(blocks, list(range(sum(map(len, blocks)))))
        return _chunked(compute, stacked), [None] * stacked.shape[0]
    keys: list[Any] = []
    for block in blocks:
        if isinstance(block, _Rows):
            keys += row_digests(block.matrix, context, block.index, block.tail)
        elif block.shape[1] <= 8:  # a few counts: the bytes themselves are a cheaper key
            keys += [(row, context) for row in map(bytes, block)]
        else:
            keys += row_digests(block, context)
    out = [cache.get(k) for k in keys]
    todo: dict[Any, list[int]] = {}
    for i, value in enumerate(out):
        if value is None:
            todo.setdefault(keys[i], []).append(i)
    if todo:
        fresh = _chunked(compute, _take_rows(blocks, [at[0] for at in todo.values()]))
        for (key, at), value in zip(todo.items(), fresh, strict=True):
            cache.put(key, value)
            for i in at:
                out[i] = value
    return out, keys


def _take_rows(blocks: Sequence[np.ndarray | _Rows], picked: list[int]) -> np.ndarray:
    """Rows ``picked`` (ascending indices into the blocks' rows, in order) as one array."""
    idx = np.asarray(picked, np.intp)
    ends = np.cumsum([len(b) for b in blocks])
    owner = np.searchsorted(ends, idx, side="right")
    pieces = []
    for b in np.unique(owner).tolist():
        block = blocks[b]
        at = idx[owner == b] - (ends[b] - len(block))
        pieces.append(block.take(at) if isinstance(block, _Rows) else block[at])
    if not pieces:
        return np.empty((0, 0))
    return np.concatenate(pieces) if len(pieces) > 1 else pieces[0]


def _chunked(compute: Callable[[np.ndarray], list[Any]], rows: np.ndarray) -> list[Any]:
    """``compute(rows)`` a :data:`_CHUNK_BYTES` slice at a time."""
    step = max(1, _CHUNK_BYTES // max(1, rows[:1].nbytes))
    if rows.shape[0] <= step:
        return compute(rows)
    return [x for at in range(0, rows.shape[0], step) for x in compute(rows[at : at + step])]


def _member_sums(
    matrix: np.ndarray, members: Sequence[list[int]], row_of: np.ndarray | None = None
) -> np.ndarray:
    """(len(members), width): row i is the sum of ``matrix``'s rows ``members[i]`` (a
    segment slice of one dimension is one group, so usually a plain gather); ``row_of``
    maps a member to its row of ``matrix`` (default: the member is the row)."""
    sizes = np.fromiter(map(len, members), np.intp, len(members))
    flat = np.fromiter(chain.from_iterable(members), np.intp, int(sizes.sum()))
    rows = flat if row_of is None else row_of[flat]
    if (sizes == 1).all():
        return matrix[rows]
    return np.add.reduceat(matrix[rows], np.cumsum(sizes) - sizes, axis=0)


def _sum_rows(matrix: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Sum of some rows of a wide matrix without copying them and without reading the
    others (a sparse 0/1 selector times the matrix; a dense weight vector would stream
    the whole store, fancy indexing would copy the rows first)."""
    selector = csr_matrix(
        (np.ones(rows.shape[0]), (np.zeros(rows.shape[0], np.intp), rows)),
        shape=(1, matrix.shape[0]),
    )
    return np.asarray(selector @ matrix).reshape(matrix.shape[1])


# the per-(group, bucket) matrix of each task in the model's sliced store
_SLICED_MATRIX = {
    "binary": SCORES.key,
    "multiclass": MULTICLASS.key,
    "regression": REGRESSION.key,
    "ranking": RANKING.key,
}


_NAN3 = (float("nan"),) * 3
_NO_LABELS = LabelledBins(np.zeros(1), np.zeros(1), np.zeros(1))  # nothing to recalibrate
