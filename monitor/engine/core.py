"""The engine: joins predictions with labels and accumulates event-time statistics.

One writer owns all mutable state: the join buffer, the buckets, the
counters and the watermarks. The source offsets the state covers belong to the source
side (``monitor.ingest.pipeline``), which writes them into the same checkpoint.
Callers serialize access (the app holds one lock); every method here is synchronous,
vectorized over a batch, and free of I/O and clocks — time comes in as arguments.

The join itself (buffer, duplicates, conflicts, TTLs, caps) is ``join.JoinBuffer``; the
engine hands the rows it joins to its accumulators (``accumulator.py``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np

from ..metrics.catalog import (
    ESTIMATION,
    EXPECTED_CONFUSION,
    MULTICLASS,
    RANKING,
    REGRESSION,
    SCORES,
)
from ..metrics.protocol import Metric
from ..metrics.registry import LOSSES, own_families
from ..stats.multiclass import MulticlassLayout
from ..stats.ranking import RankingLayout
from ..stats.regression import RegressionLayout
from ..stats.scores import ScoreLayout
from .accumulator import Accumulator, LabeledRows, NewPredictions, PredictionAccumulator
from .assemble import Assembler
from .buckets import (
    BucketStore,
    CopyPlan,
    MatrixSpec,
    SumPlan,
    copy_in_rounds,
    finish_copies,
    finish_sums_deferred,
    settle_copies,
    settle_sums,
    window_group_sums,
)
from .clock import EventWatermark, retention_now
from .comparison_stats import (
    ArmSums,
    Losses,
    PairedSums,
    ShadowPairs,
    SplitArms,
    loss_column,
    loss_names,
)
from .comparisons import ComparisonResult, ComparisonTracker
from .delay import DELAY_BOUNDS_S, LabelDelay
from .drift import DriftTracker
from .drift_cells import DriftCells, UnseenValues
from .estimation_counts import EstimationCounts
from .family_stats import FamilyStats
from .groups import GroupRegistry
from .join import NO_TS as _NO_TS
from .join import NUMERIC, RANKED, JoinBuffer, Joined, JoinReject
from .light_counts import LightCounts
from .models import ComparisonSpec, DriftSpec, ModelSpec
from .ranking import RankingState
from .records import LabelBatch, PredictionBatch, factorize
from .result_cache import ResultCache
from .snapshot import OpsState, Snapshot, WindowResult
from .table import KeyedTable
from .task_stats import ScoreHistograms, TaskStats
from .view import StoreView, base_group_index, base_rows
from .windows import Tiers, tier_reach

_T = TypeVar("_T")

__all__ = ["DELAY_BOUNDS_S", "LOSSES", "Engine", "JoinReject"]


_TASKS = {"binary": 0, "multiclass": 1, "regression": 2, "ranking": 3}


# lock holds a snapshot spends summing one per-segment store (~16 MB each): the rest, if
# the writer outruns them, is summed in the final hold
_MAX_SUM_CHUNKS = 10_000


class Engine:
    def __init__(
        self,
        models: Sequence[ModelSpec],
        bucket_width_ms: int,
        label_ttl_ms: int,
        orphan_label_ttl_ms: int,
        max_pending: int,
        max_orphan_labels: int,
        comparisons: Sequence[ComparisonSpec] = (),
        drift: Sequence[DriftSpec] = (),
        plugins: Any = None,
        retained_spans_ms: Sequence[int] = (),
        event_clock: EventWatermark | None = None,
        label_clock: EventWatermark | None = None,
    ) -> None:
        """``retained_spans_ms``: periods (ms, ending now) whose buckets must be kept
        beyond the windows' reach — a scheduled report's or reference rotation's.
        ``event_clock``/``label_clock``: the robust watermarks of the prediction and label
        streams (default: ``EventWatermark()``'s quantile and sample count)."""
        if not models:
            raise ValueError("at least one model is required")
        self.models = tuple(models)
        self.drift = DriftTracker(drift, self.models)
        self.comparisons = tuple(comparisons)
        self.shadow = tuple(c for c in self.comparisons if c.mode == "shadow")
        self.split = tuple(c for c in self.comparisons if c.mode == "split")
        # fine score histograms + calibration sums per (model, version, bucket), binary models
        self.score_layouts = {
            i: ScoreLayout(bins=m.score_bins)
            for i, m in enumerate(self.models)
            if m.task == "binary"
        }
        # coarser score histograms per (segment, bucket): score metrics for every slice
        self.slice_score_layouts = {
            i: layout
            for i, m in enumerate(self.models)
            if (layout := m.slice_score_layout) is not None
        }
        # prediction-time score histograms, split by decision, for label-free estimates
        self.est_layouts = {
            i: layout
            for i, m in enumerate(self.models)
            if (layout := m.estimation_layout) is not None
        }
        # multiclass: top-label confidence bins (count, Σ confidence) of every prediction
        self.mc_est_bins = {
            i: m.estimation_bins
            for i, m in enumerate(self.models)
            if m.task == "multiclass" and m.estimation_bins > 0
        }
        self._task = np.array([_TASKS[m.task] for m in self.models], np.int8)
        self._all_binary = bool((self._task == 0).all())
        # multiclass and regression statistics per (group, bucket): slices get every metric
        self.mc_layouts = {
            i: MulticlassLayout(len(m.classes), tuple(m.classes), m.calibration_bins)
            for i, m in enumerate(self.models)
            if m.task == "multiclass"
        }
        self.rg_layouts = {
            i: RegressionLayout(m.huber_delta, tuple(m.quantiles))
            for i, m in enumerate(self.models)
            if m.task == "regression"
        }
        # ranking: per-query sums per (group, bucket); lists and relevance maps wait aside
        self.rank_layouts = {
            i: RankingLayout(m.ks) for i, m in enumerate(self.models) if m.task == "ranking"
        }
        self.ranking = RankingState()
        # metric plugins: one statistic matrix per plugin and model; errors isolate them
        self.plugins = tuple(plugins.plugins) if plugins is not None else ()
        # the losses comparisons count: the built-in ones, then the plugin losses they use
        self.loss_names = loss_names(self.comparisons)
        # evaluation state (sticky comparison decisions, drift references, reused results)
        self.assembler = Assembler(self.models, self.comparisons, self.drift, self.plugins)
        self.series = self.assembler.series  # what every metric name is exported as
        # per model, the metric families with a statistic of their own: the built-ins it
        # asks for (top-k accuracy) and the plugins serving its task
        self.families: dict[int, tuple[Metric, ...]] = {
            i: (*own_families(m.params, m.metrics), *(p for p in self.plugins if m.task in p.tasks))
            for i, m in enumerate(self.models)
        }
        # Light per-(group, bucket) counts of every model (groups include slice segments);
        # per model, the wide per-(version, bucket) statistics — fine score histograms,
        # drift cells, plugins — which would multiply memory by the number of slices if
        # kept per segment, and the per-(group, bucket) task statistics. A model's rows
        # hold only its own matrices, so memory grows linearly with the number of models.
        self.buckets = BucketStore(bucket_width_ms)
        self.wide = {
            m: BucketStore(bucket_width_ms, self._wide_matrices(m)) for m in range(len(self.models))
        }
        self.sliced = {
            m: BucketStore(bucket_width_ms, self._sliced_matrices(m))
            for m in range(len(self.models))
            if self._sliced_matrices(m)
        }
        # time tiers (docs/semantics.md): base, hour, 12-hour and day rows, each reaching
        # as far back as the windows that must start in it (windows.tier_reach)
        # (a live "previous" drift reference reaches its span further back)
        windows = [(w.size_ms, w.delay_ms) for m in self.models for w in m.windows]
        self._retained_spans = tuple(retained_spans_ms)
        windows += [(span, 0) for span in self._retained_spans]
        previous = self.drift.horizon_ms()
        self._reach = tier_reach(windows + [(s + previous, d) for s, d in windows if previous])
        self.tiers = Tiers.for_width(bucket_width_ms)
        # multiclass probabilities (one column per class of the widest model) and regression
        # interval bounds / numeric labels exist only when such models are configured
        self._kmax = max([len(m.classes) for m in self.models if m.task == "multiclass"] + [0])
        self._regression = bool(self.rg_layouts)
        # label values: regression targets, ranking labels' relevance digests
        self._numeric_labels = bool(self.rg_layouts or self.rank_layouts)
        extra: dict[str, type] = {f"p{k}": np.float64 for k in range(self._kmax)}
        if self._regression:
            extra.update(lower=np.float64, upper=np.float64)
        if self.rank_layouts:  # 1 - NDCG@k of a joined query, the ndcg_loss of comparisons
            extra["rank_loss"] = np.float64
        # plugin losses comparisons use, written when a row joins (family_stats.py)
        self._loss_columns = {n: loss_column(n) for n in self.loss_names[len(LOSSES) :]}
        extra.update({col: np.float64 for col in self._loss_columns.values()})
        self.join = JoinBuffer(
            extra,
            label_ttl_ms,
            orphan_label_ttl_ms,
            max_pending,
            max_orphan_labels,
            numeric_labels=self._numeric_labels,
        )
        # (model, version, segment) groups and the version lifecycle
        self.registry = GroupRegistry(self.models)
        # canonical label text -> code; per model: code -> 1 positive / 0 negative / -1
        self.label_codes: list[str] = []
        self._label_index: dict[str, int] = {}
        # label texts that are a class of some classifier (the only ones interned)
        self._vocabulary: set[str] = set()
        for m in self.models:
            if m.task == "binary":
                self._vocabulary |= {*m.classes, "0", "1"}
            elif m.task == "multiclass":
                self._vocabulary |= set(m.classes)
        self._label_class = [np.empty(0, np.int8) for _ in self.models]
        self.records: Counter[tuple[str, str]] = Counter()
        self.invalid: Counter[tuple[str, str]] = Counter()
        self.join_events: Counter[str] = Counter()
        self.pred_watermark_ms = _NO_TS
        self.label_watermark_ms = _NO_TS
        # robust watermark, retention edge (clock.py); the label stream's progress (TTLs)
        self.event_clock = event_clock if event_clock is not None else EventWatermark()
        self.label_clock = label_clock if label_clock is not None else EventWatermark()
        # seconds the last snapshot held the caller's lock, per section: retention, the
        # longest other hold (a window-sum chunk, a copy round, settling the rows the copy
        # or the sums owe), the final section, the comparison looks
        self.lock_holds_s: tuple[float, ...] = ()
        self._base_index: dict[int, tuple[int, np.ndarray, int]] = {}  # _sum_index's, cached
        # what joined rows are counted into, in order (task statistics write the ranking
        # loss the comparisons read)
        self.delay = LabelDelay([m.name for m in self.models])
        self.scores = ScoreHistograms(
            self.score_layouts, self.slice_score_layouts, self.wide, self.sliced
        )
        self.task_stats = TaskStats(
            self.join, self.sliced, self.mc_layouts, self.rg_layouts, self.rank_layouts,
            self.ranking,
        )  # fmt: skip
        self.task_stats.keep_ranking_rows = any(self.families[m] for m in self.rank_layouts)
        self.plugin_stats = FamilyStats(
            self.families,
            self.plugins,
            self.wide,
            [m.task for m in self.models],
            [len(m.classes) for m in self.models],
            self.join,
            lambda m, sel: self.task_stats.ranking_rows[m],
            [name for name, _ in plugins.errors] if plugins is not None else (),
            self._loss_columns,
        )
        losses = Losses(self.join, self._task, self.mc_layouts, self.loss_names)
        self.arms = SplitArms(self.split, self.registry.version_groups, losses)
        self.pairs = ShadowPairs(
            self.shadow, self.registry.version_groups, losses, lambda g: self.registry.model[g]
        )
        self.estimation = EstimationCounts(self.est_layouts, self.mc_est_bins, self.wide)
        self.drift_cells = DriftCells(
            self.drift, self.wide, [m.name for m in self.models], lambda g: self.registry.base[g]
        )
        self.light = LightCounts(self.buckets, self._task == 0)
        self.prediction_accumulators: tuple[PredictionAccumulator, ...] = (
            self.light, self.drift_cells, self.estimation, self.arms,
        )  # fmt: skip
        self.accumulators: tuple[Accumulator, ...] = (
            self.light, self.delay, self.scores, self.task_stats, self.plugin_stats,
            self.arms, self.pairs,
        )  # fmt: skip
        # each saves its own part of the checkpoint, once
        self._saved: tuple[Accumulator | PredictionAccumulator, ...] = tuple(
            dict.fromkeys((*self.accumulators, *self.prediction_accumulators))
        )

    @property
    def preds(self) -> KeyedTable:
        """The join buffer's predictions (waiting, or joined until their TTL)."""
        return self.join.preds

    @property
    def orphans(self) -> KeyedTable:
        """The join buffer's labels waiting for their prediction."""
        return self.join.orphans

    @property
    def pending(self) -> int:
        """Predictions waiting for their label."""
        return self.join.pending

    @property
    def groups(self) -> list[tuple[int, str, tuple[str, ...]]]:
        """Group code -> (model index, version, segment) (``groups.GroupRegistry``)."""
        return self.registry.groups

    def sums(self) -> tuple[ArmSums, PairedSums, UnseenValues]:
        """Copies of the sums accumulators keep outside the bucket stores (split arms,
        shadow pairs, unseen drift values): with ``view`` and ``ops``, what the partition
        merge adds up (``scale/merge.py``)."""
        return self.arms.sums.copy(), self.pairs.sums.copy(), self.drift_cells.unseen.copy()

    @property
    def plugin_errors(self) -> Counter[str]:
        return self.plugin_stats.errors

    @property
    def active_plugins(self) -> tuple[Any, ...]:
        """Plugins still trusted (one that raised in ``update`` is switched off)."""
        return self.plugin_stats.active

    def _wide_matrices(self, m: int) -> dict[str, MatrixSpec]:
        out: dict[str, MatrixSpec] = {}
        d = self.drift.by_model.get(m)
        if d is not None:
            out[d.matrix] = d.width
        if m in self.est_layouts:  # [count, Σp] x [decided negative, decided positive]
            out[ESTIMATION.name] = (4 * self.est_layouts[m].bins, np.float64)
        if m in self.mc_est_bins:  # [count, Σ confidence of the decided class]
            out[ESTIMATION.name] = (2 * self.mc_est_bins[m], np.float64)
            k = len(self.models[m].classes)  # Σ p_j per decided class i, cell K·i + j
            out[EXPECTED_CONFUSION.name] = (k * k, np.float64)
        if m in self.score_layouts:
            layout = self.score_layouts[m]
            out[SCORES.name] = (layout.width, np.float64, layout.legacy_widths)
        for family in self.families[m]:
            out[family.stat.name] = (family.width(), np.float64)
        return out

    def _sliced_matrices(self, m: int) -> dict[str, MatrixSpec]:
        if m in self.slice_score_layouts:
            layout = self.slice_score_layouts[m]
            return {SCORES.name: (layout.width, np.float64, layout.legacy_widths)}
        if m in self.mc_layouts:
            return {MULTICLASS.name: (self.mc_layouts[m].width, np.float64)}
        if m in self.rg_layouts:
            return {REGRESSION.name: (self.rg_layouts[m].width, np.float64)}
        if m in self.rank_layouts:
            return {RANKING.name: (self.rank_layouts[m].width, np.float64)}
        return {}

    def _stores(self) -> list[BucketStore]:
        return [self.buckets, *self.wide.values(), *self.sliced.values()]

    def roll_up(self, now_ms: int, hours_only: bool = False) -> int:
        """Move the tiers to ``now`` and merge rows older than their tier's start into
        hour and day rows; returns rows merged away. ``hours_only``: base rows into hour
        rows, nothing coarser (replay: its report's history keeps hourly points)."""
        tiers = self.tiers.advanced(now_ms, *self._reach)
        self.tiers = replace(self.tiers, hour_from=tiers.hour_from) if hours_only else tiers
        return sum(st.roll_up(self.tiers) for st in self._stores())

    def view(
        self,
        copy: bool = True,
        copies: dict[int, dict[str, np.ndarray]] | None = None,
        window_sums: dict[tuple[int, int, int], np.ndarray] | None = None,
        wide_sums: dict[tuple[int, int, int], np.ndarray] | None = None,
    ) -> StoreView:
        """The stores evaluation reads; ``copy=False`` shares the arrays (replay, tests:
        valid until the next mutation); ``copies``: finished copies by ``id(store)``;
        ``window_sums``: the sliced stores as per-window group sums instead of rows
        (:meth:`snapshot`)."""

        def take(store: BucketStore) -> dict[str, np.ndarray]:
            if copies is not None:
                return copies[id(store)]
            return store.state() if copy else store.view()

        return StoreView(
            width_ms=self.buckets.width_ms,
            tiers=self.tiers,
            groups=tuple(self.groups),
            buckets=take(self.buckets),
            wide={m: take(st) for m, st in self.wide.items() if len(st)},
            sliced={}
            if window_sums is not None
            else {m: take(st) for m, st in self.sliced.items() if len(st)},
            window_sums=window_sums or {},
            wide_sums=wide_sums or {},
        )

    def summed_view(
        self, lock: AbstractContextManager[Any], models: Sequence[ModelSpec], now_ms: int
    ) -> StoreView:
        """What evaluating ``models``' windows at ``now_ms`` reads, taken beside the
        writer as :meth:`snapshot` takes it: the light and wide rows copied, the sliced
        stores and the fine score histograms as the windows' group sums (scheduled
        reports: a copy of every store, :meth:`copied_view`, added 0.8 GB to the 10-model
        fleet's 1.2 GB at each report). The evaluation's running sums are left as they are."""
        with lock:
            held = time.perf_counter()
            plans, sums = self._begin_take(models, now_ms, running=False)
            holds = [time.perf_counter() - held]
        return self._take(lock, plans, sums, models, now_ms, holds, lambda: None)[0]

    def _begin_take(
        self, models: Sequence[ModelSpec], now_ms: int, running: bool = True
    ) -> tuple[
        list[tuple[BucketStore, CopyPlan]],
        list[tuple[int, BucketStore, SumPlan, list[tuple[int, int]]]],
    ]:
        """The copy plans and window sums :meth:`_take` completes (call under the lock)."""
        copied = [
            (self.buckets, ()),
            *((st, self._wide_summed(m)) for m, st in self.wide.items()),
        ]
        plans = [(st, st.begin_copy(skip)) for st, skip in copied]
        return plans, self._begin_window_sums(models, now_ms, running)

    def _take(
        self,
        guard: AbstractContextManager[Any],
        plans: list[tuple[BucketStore, CopyPlan]],
        sums: list[tuple[int, BucketStore, SumPlan, list[tuple[int, int]]]],
        models: Sequence[ModelSpec],
        now_ms: int,
        holds: list[float],
        under_final: Callable[[], _T],
    ) -> tuple[StoreView, _T, float]:
        """The view :meth:`_begin_take` planned: the bulk copied and the window sums
        taken a chunk per short hold of ``guard``, ingestion going on; the rows written
        since re-copied in rounds; then one final hold (``under_final`` runs in it too),
        the rows it left owed settled afterwards. Returns the view, ``under_final``'s
        value and the final hold's seconds; each hold's seconds go to ``holds``."""
        try:
            for _, plan in plans:  # the bulk copy, while ingestion goes on
                plan.copy()
            for _, store, sum_plan, _ in sums:  # running window sums advanced, unlocked
                store.advance_sums(sum_plan)
            for m, store, sum_plan, _ in sums:  # window sums a chunk per lock hold
                more, rounds = True, 0
                while more and rounds < _MAX_SUM_CHUNKS:  # the writer may keep adding rows
                    with guard:  # copies a chunk of rows ...
                        held = time.perf_counter()
                        more = store.sum_chunk(sum_plan, *self._sum_index(m, store))
                        holds.append(time.perf_counter() - held)
                    store.add_chunk(sum_plan)  # ... summed with the lock released
                    rounds += 1
            copy_in_rounds(plans, guard, holds)
        except BaseException:
            for _, store, sum_plan, _ in sums:
                store.abandon_sums(sum_plan)
            raise
        try:
            with guard:
                held = time.perf_counter()
                copies = finish_copies(plans)  # rows past a budget left owed: settled below
                window_sums, wide_sums = (
                    self._finish_window_sums(sums, models, now_ms) if sums else (None, None)
                )
                view = self.view(
                    copy=False,
                    copies=copies if plans else None,
                    window_sums=window_sums,
                    wide_sums=wide_sums,
                )
                extra = under_final()
                final = time.perf_counter() - held
            settle_copies(plans, guard, holds)  # rows the final section left owed
            settle_sums([(store, plan) for _, store, plan, _ in sums], guard, holds)
        except BaseException:
            with guard:
                for st, plan in plans:
                    st.drop_copy(plan)
                for _, store, sum_plan, _ in sums:
                    store.drop_sums(sum_plan)
            raise
        return view, extra, final

    def copied_view(
        self, lock: AbstractContextManager[Any], wide_of: int | None = None
    ) -> StoreView:
        """A copy of every store as of one moment, taken beside the writer as
        :meth:`snapshot` takes its copy: the bulk copied and refreshed in rounds with
        ``lock`` released, finished under a short hold (a full copy under the lock
        stalled ingestion for as long as it took). ``wide_of``: only model ``wide_of``'s
        per-version store, without its fine score histograms — the drift cells a
        reference rotation reads, not a copy of the whole state."""
        return self._copied(lock, wide_of, lambda: None)[0]

    def copied_with(
        self, lock: AbstractContextManager[Any], under_final: Callable[[], _T]
    ) -> tuple[StoreView, _T]:
        """:meth:`copied_view` of every store, and what ``under_final`` reads in the
        copy's final hold: both as of the same moment (a partition's statistics: the
        stores with the counters and sums kept beside them)."""
        return self._copied(lock, None, under_final)

    def _copied(
        self,
        lock: AbstractContextManager[Any],
        wide_of: int | None,
        under_final: Callable[[], _T],
    ) -> tuple[StoreView, _T]:
        if wide_of is None:
            stores = [(st, ()) for st in self._stores()]
        else:
            own = self.wide.get(wide_of)
            stores = [] if own is None else [(own, self._wide_summed(wide_of))]
        with lock:
            plans = [(st, st.begin_copy(skip)) for st, skip in stores]
        try:
            for _, plan in plans:
                plan.copy()
            copy_in_rounds(plans, lock)
            with lock:
                copies = finish_copies(plans)
                if wide_of is None:
                    view = self.view(copy=False, copies=copies)
                else:
                    view = StoreView(
                        width_ms=self.buckets.width_ms,
                        tiers=self.tiers,
                        groups=tuple(self.groups),
                        buckets={},
                        wide={wide_of: copies[id(own)]} if own is not None else {},
                        sliced={},
                    )
                extra = under_final()
            settle_copies(plans, lock)
        except BaseException:
            with lock:
                for st, plan in plans:
                    st.drop_copy(plan)
            raise
        return view, extra

    def _window_bounds(
        self, models: Sequence[ModelSpec], m: int, now_ms: int
    ) -> list[tuple[int, int]]:
        """The bucket ranges of model m's windows at ``now_ms`` (as evaluation places them)."""
        spec = models[m] if m < len(models) else self.models[m]
        return sorted({self.tiers.window(now_ms, w.size_ms, w.delay_ms) for w in spec.windows})

    def _begin_window_sums(
        self, models: Sequence[ModelSpec], now_ms: int, running: bool = True
    ) -> list[tuple[int, BucketStore, SumPlan, list[tuple[int, int]]]]:
        """Window sums of each sliced store and of each wide store's fine score
        histograms, to be computed a chunk per lock hold (or advanced from the last
        pass's: running sums; ``running=False``: neither taken from nor kept for the
        evaluation's next pass)."""
        out = []
        summed = [(m, st, next(iter(self._sliced_matrices(m)))) for m, st in self.sliced.items()]
        summed += [(m, st, SCORES.name) for m, st in self.wide.items() if m in self.score_layouts]
        for m, store, name in summed:
            bounds = self._window_bounds(models, m, now_ms)
            index, size = self._sum_index(m, store)
            plan = store.begin_sums(name, bounds, index, size, running)
            out.append((m, store, plan, bounds))
        return out

    def _sum_index(self, m: int, store: BucketStore) -> tuple[np.ndarray, int]:
        """The rows of a store's window sums: a wide store's per version of model m,
        a sliced store's per group of it."""
        if store is self.wide.get(m):
            known = self._base_index.get(m)
            n = len(self.groups)
            if known is None or known[0] != n:  # appended only (load clears)
                reg = self.registry  # its arrays, when in step: no pass over the groups
                rows = (
                    base_rows(reg.model, reg.base == np.arange(n), m)
                    if reg.model.shape[0] == n
                    else base_group_index(self.groups, m)
                )
                known = self._base_index[m] = (n, *rows)
            return known[1], known[2]
        return self._model_index_of_groups(m)

    def _wide_summed(self, m: int) -> tuple[str, ...]:
        """Wide columns read as window sums, not copied (the fine score histograms)."""
        return (SCORES.key,) if m in self.score_layouts else ()

    def _model_index_of_groups(self, m: int) -> tuple[np.ndarray, int]:
        """(group -> row among model m's groups, -1 for other models' groups; how many):
        window sums hold a row per group of the model only."""
        gids = np.flatnonzero(self.registry.model == m)
        index = np.full(len(self.groups), -1, np.intp)
        index[gids] = np.arange(gids.shape[0])
        return index, int(gids.shape[0])

    def _finish_window_sums(
        self,
        sums: list[tuple[int, BucketStore, SumPlan, list[tuple[int, int]]]],
        models: Sequence[ModelSpec],
        now_ms: int,
    ) -> tuple[dict[tuple[int, int, int], np.ndarray], dict[tuple[int, int, int], np.ndarray]]:
        """(sliced window sums, wide fine-score window sums)."""
        out: dict[tuple[int, int, int], np.ndarray] = {}
        wide: dict[tuple[int, int, int], np.ndarray] = {}
        for m, store, plan, bounds in sums:
            index, size = self._sum_index(m, store)
            done = finish_sums_deferred(store, plan, index, size)  # may leave rows owed
            if self._window_bounds(models, m, now_ms) != bounds:  # the tiers moved meanwhile
                bounds = self._window_bounds(models, m, now_ms)
                col = store.matrix(plan.matrix[2:])
                done = [
                    window_group_sums(store.group, store.bucket, col, b, index, size)
                    for b in bounds
                ]
            into = wide if store is self.wide.get(m) else out
            into.update({(m, lo, hi): x for (lo, hi), x in zip(bounds, done, strict=True)})
        return out, wide

    def store_bytes(self) -> dict[str, int]:
        """Allocated bytes per store kind (sizing, benchmarks)."""
        return {
            "buckets": self.buckets.nbytes(),
            "wide": sum(st.nbytes() for st in self.wide.values()),
            "sliced": sum(st.nbytes() for st in self.sliced.values()),
            "join": self.join.nbytes(),
        }

    # -- interning -------------------------------------------------------------------
    def _label_code(self, labels: Sequence[str]) -> np.ndarray:
        """Code per label text; texts that are no classifier's class get ``NUMERIC``
        (regression targets: their value travels in the float column)."""
        if not self._vocabulary:
            return np.full(len(labels), NUMERIC, np.int32)
        codes, uniq = factorize(labels)
        index = self._label_index
        vocabulary = self._vocabulary
        ucodes = np.empty(len(uniq), np.int32)
        for i, text in enumerate(uniq):
            code = index.get(text)
            if code is None:
                if text not in vocabulary:
                    ucodes[i] = NUMERIC
                    continue
                code = len(self.label_codes)
                self.label_codes.append(text)
                index[text] = code
            ucodes[i] = code
        return ucodes[codes]

    def _classes_of(self, codes: np.ndarray, values: np.ndarray, model: np.ndarray) -> np.ndarray:
        """The label each row stores for its model: 1/0 (binary), the class index
        (multiclass), 0 for a numeric target (regression); -1 when it does not fit."""
        n_codes = len(self.label_codes)
        out = np.full(codes.shape[0], -1, np.int8)
        for m in np.unique(model).tolist():
            if m < 0:
                continue
            sel = model == m
            spec = self.models[m]
            if spec.task == "regression":
                out[sel] = np.where(np.isnan(values[sel]) | (codes[sel] == RANKED), -1, 0)
                continue
            if spec.task == "ranking":
                out[sel] = np.where(codes[sel] == RANKED, 0, -1)
                continue
            table = self._label_class[m]
            if table.shape[0] < n_codes:
                extra = [spec.label_class(t) for t in self.label_codes[table.shape[0] :]]
                table = np.concatenate([table, np.asarray(extra, np.int8)])
                self._label_class[m] = table
            c = codes[sel]
            known = c >= 0
            res = np.full(c.shape[0], -1, np.int8)
            res[known] = table[c[known]]
            out[sel] = res
        return out

    # -- ingestion -------------------------------------------------------------------
    def apply_predictions(self, batch: PredictionBatch) -> list[JoinReject]:
        """Add a batch of valid predictions; join those whose label is already known.

        Identity is (id, model, version): two versions scoring the same id (shadow mode)
        are two predictions that share the label; the same id from the same version
        again is a duplicate (whatever its segments). Returns the predictions rejected
        because their model already has ``max_versions`` live versions (counted here).
        """
        n = len(batch)
        if n == 0:
            return []
        reg = self.registry
        group = reg.codes(batch.model, batch.version, batch.segments)
        rejects: list[JoinReject] = []
        valid = np.flatnonzero(group >= 0)
        if valid.shape[0] < n:
            rejects = reg.reject(batch.model, batch.version, np.flatnonzero(group < 0), batch.ts_ms)
            self.count_invalid("predictions", "version_limit", len(rejects))
        # identity is (id, model, version): a resend with other segments is a duplicate,
        # in the same batch as across batches
        mv = reg.mv
        held = self.join.unseen(batch.keys[valid], mv[group[valid]], mv)
        new = valid[held.positions]
        dup = valid.shape[0] - new.shape[0]
        self.records["predictions", "accepted"] += int(new.shape[0])
        if dup:
            self.records["predictions", "duplicate"] += dup
            self.join_events["duplicate_prediction"] += dup
        if new.shape[0] == 0:
            return rejects
        keys, ts, g = batch.keys[new], batch.ts_ms[new], group[new]
        own = self.join.insert_predictions(
            keys,
            {
                "ts": ts,
                "group": g,
                "score": batch.score[new],
                "decision": batch.decision[new],
                **self._task_columns(batch, new),
            },
            held.order,
        )
        if batch.ranked is not None:
            self.ranking.add_lists(keys, g, [batch.ranked[i] for i in new.tolist()])
        reg.seen(g, ts)
        arrived = NewPredictions(batch, new, g, reg.base[g], batch.model[new], ts)
        for counter in self.prediction_accumulators:
            counter.add_predictions(arrived)
        self.pred_watermark_ms = max(self.pred_watermark_ms, int(ts.max()))
        late = self.event_clock.observe(ts)
        if late:  # behind every retained bucket: in no window (docs/semantics.md)
            self.join_events["too_late"] += late
        joined, unknown = self.join.join_new(keys, own, held, self._classify)
        if unknown:  # the label's bytes went by long ago: nothing to dead-letter
            self.join_events["unknown_class_label"] += unknown
        if joined is not None:
            self._accumulate(joined)
        self.join.settle()  # the joined rows are read: the table may compact now
        self._expire_and_evict()
        self._collect_ranking()
        return rejects

    def _task_columns(self, batch: PredictionBatch, new: np.ndarray) -> dict[str, np.ndarray]:
        """Multiclass probability and regression interval columns of new predictions."""
        k = new.shape[0]
        out: dict[str, np.ndarray] = {}
        if self._kmax:
            proba = batch.proba
            for j in range(self._kmax):
                out[f"p{j}"] = (
                    proba[new, j]
                    if proba is not None and proba.shape[1] > j
                    else np.full(k, np.nan)
                )
        if self._regression:
            for name in ("lower", "upper"):
                col = getattr(batch, name)
                out[name] = col[new] if col is not None else np.full(k, np.nan)
        if self.rank_layouts:
            out["rank_loss"] = np.full(k, np.nan)
        for col in self._loss_columns.values():
            out[col] = np.full(k, np.nan)
        return out

    def _classify(self, codes: np.ndarray, values: np.ndarray, group: np.ndarray) -> np.ndarray:
        return self._classes_of(codes, values, self.registry.model[group])

    def _accumulate(self, joined: Joined) -> None:
        """Count rows that just joined: the per-version outcomes in the registry (they
        grow with it), everything else in the accumulators."""
        if not len(joined):
            return
        reg, group = self.registry, joined.group
        model = reg.model[group]
        wrong = joined.y_true != joined.decision
        if not self._all_binary:  # regression, ranking: no errors
            wrong &= self._task[model] < 2
        reg.count_outcomes(group, wrong)
        self.join_events["joined"] += len(joined)
        rows = LabeledRows(joined, model, reg.base[group])
        for acc in self.accumulators:
            acc.add(rows)

    def apply_labels(self, batch: LabelBatch) -> list[JoinReject]:
        """Add a batch of valid labels; returns conflicting/unknown-class rejections.

        Repeats of an id within one batch are applied in rounds (every id's first
        occurrence, then every second occurrence, ...), each round vectorized, so the
        result equals applying the labels one by one in arrival order.
        """
        n = len(batch)
        if n == 0:
            return []
        codes = self._label_code(batch.label)
        values = batch.value if batch.value is not None else np.full(n, np.nan)
        if batch.relevance is not None and self.rank_layouts:
            ranked = self.ranking.add_relevance(batch.keys, values, batch.relevance)
            codes[ranked] = RANKED
        self.label_watermark_ms = max(self.label_watermark_ms, int(batch.ts_ms.max()))
        self.label_clock.observe(batch.ts_ms)
        rejects: list[JoinReject] = []
        dups = 0
        for idx in self.join.rounds(batch.keys):
            before = len(rejects)
            joined, d = self.join.add_labels(
                batch.keys, batch.ts_ms, codes, values, idx, self._classify, rejects
            )
            dups += d
            unknown = sum(1 for _, reason, _ in rejects[before:] if reason == "unknown_class")
            if unknown:
                self.join_events["unknown_class_label"] += unknown
                self.count_invalid("labels", "unknown_class", unknown)
            if joined is not None:
                self._accumulate(joined)
        conflicts = sum(1 for _, reason, _ in rejects if reason == "conflicting_label")
        if conflicts:
            self.join_events["conflicting_label"] += conflicts
            self.invalid["labels", "conflicting_label"] += conflicts
            self.records["labels", "invalid"] += conflicts
        if dups:
            self.join_events["duplicate_label"] += dups
            self.records["labels", "duplicate"] += dups
        # unknown-class rejects were counted as invalid above
        self.records["labels", "accepted"] += n - len(rejects) - dups
        self._expire_and_evict()
        self._collect_ranking()
        rejects.sort()
        return rejects

    # -- bounds ----------------------------------------------------------------------
    def _expire_and_evict(self) -> None:
        # Each side waits on the other stream's robust progress, not its maximum: one
        # far-future record must not expire everything that waits (below 100 recent
        # records the quantile says little: the maximum rules)
        label_mark = pred_mark = None
        if self.label_watermark_ms != _NO_TS:
            label_mark = _robust_mark(self.label_watermark_ms, self.label_clock)
        if self.pred_watermark_ms != _NO_TS:
            pred_mark = _robust_mark(self.pred_watermark_ms, self.event_clock)
        self.join_events.update(self.join.expire(label_mark, pred_mark))

    def _collect_ranking(self, force: bool = False) -> None:
        """Release ranking lists and relevance maps whose id left the join buffer, once
        they outnumber the buffer's rows (amortized O(1) per record)."""
        live = len(self.preds) + len(self.orphans)
        if not len(self.ranking) or (not force and len(self.ranking) <= 2 * live + 1024):
            return

        self.ranking.collect(self.join.has_prediction, self.join.has_label)

    def count_invalid(self, kind: str, reason: str, k: int = 1) -> None:
        """Decode-time rejections are counted here so one writer owns every counter."""
        self.invalid[kind, reason] += k
        self.records[kind, "invalid"] += k

    def look_comparisons(
        self,
        results: Sequence[WindowResult],
        now_ms: int,
        not_ready: Sequence[str] = (),
        confidence: float = 0.95,
    ) -> tuple[ComparisonResult, ...]:
        """One look of every configured comparison at this engine's arm and pair sums
        (mutates the assembler's sticky decision state)."""
        return self.assembler.look(results, now_ms, self._comparison_sums(), not_ready, confidence)

    def _comparison_sums(self) -> tuple[ArmSums, PairedSums]:
        return self.arms.sums, self.pairs.sums

    @property
    def tracker(self) -> ComparisonTracker:
        """Each comparison's sticky decision state (the assembler's)."""
        return self.assembler.tracker

    @property
    def result_cache(self) -> ResultCache:
        """The results the last evaluation may lend the next (the assembler's)."""
        return self.assembler.result_cache

    def retain(self, now_ms: int) -> int:
        """Freeze completed live drift references, retire idle versions, then drop buckets
        no window (or live "previous" reference) can reach any more; returns rows dropped."""
        self.freeze_live_references()
        self.registry.retire_idle(now_ms)
        self._collect_ranking(force=True)
        self.roll_up(now_ms)
        horizon = max(w.size_ms + w.delay_ms for m in self.models for w in m.windows)
        horizon += self.drift.horizon_ms()
        horizon = max(horizon, *self._retained_spans, 0)
        oldest = (now_ms - horizon) // self.buckets.width_ms - 1
        self.event_clock.retained_from_ms = oldest * self.buckets.width_ms
        return sum(st.drop_before(oldest) for st in self._stores())

    def retention_now(self, now_ms: int) -> int:
        """Where retention may run at wall time ``now_ms``: the earlier of it and the event
        watermark, advanced by this call (``clock.retention_now``)."""
        return retention_now(now_ms, self.event_clock.advance())

    def freeze_live_references(self) -> None:
        """A "first:<span>" reference is the sum of the model's buckets over its first span,
        kept once the prediction watermark has passed it (buckets may then be dropped)."""
        width = self.buckets.width_ms
        for m, start, end in self.drift.freeze_due(self.pred_watermark_ms):
            d = self.drift.by_model[m]
            view = self.wide[m].view()
            rows = (view["bucket"] >= start // width) & (view["bucket"] < -(-end // width))
            self.drift.frozen[m] = view[f"m.{d.matrix}"][rows].sum(axis=0, dtype=np.int64)

    # -- snapshots ---------------------------------------------------------------------
    def ops(self) -> OpsState:
        """A copy of the operational counters (cheap; call under the app lock)."""
        return OpsState(
            records=tuple((k, o, c) for (k, o), c in sorted(self.records.items())),
            invalid=tuple((k, r, c) for (k, r), c in sorted(self.invalid.items())),
            join_events=tuple(sorted(self.join_events.items())),
            pending_predictions=self.pending,
            orphan_labels=len(self.orphans),
            label_delay=self.delay.histograms(),
            prediction_watermark_ms=self.pred_watermark_ms,
            label_watermark_ms=self.label_watermark_ms,
            plugin_errors=tuple(sorted(self.plugin_errors.items())),
            versions_rejected=tuple(sorted(self.registry.rejected.items())),
            versions_blocked=tuple(self.registry.blocked()),
            drift_untracked=tuple(self.drift.untracked_features().items()),
            outcomes=tuple(
                (
                    self.models[m].name,
                    v,
                    lab,
                    err if self.models[m].is_classifier else None,
                )
                for m, v, lab, err in self.registry.outcome_counts()
            ),
        )

    def snapshot(
        self,
        now_ms: int,
        at_ms: int | None = None,
        confidence: float = 0.95,
        lock: AbstractContextManager[Any] | None = None,
        models: Sequence[ModelSpec] | None = None,
        not_ready: Sequence[str] = (),
        look_at_ms: int | None = None,
        retain: bool = True,
        retain_at_ms: int | None = None,
        input_ended: bool = False,
    ) -> Snapshot:
        """The immutable snapshot at ``now_ms`` — the one path for the daemon and replay.

        Under ``lock`` (the daemon's; none in replay): retention (or, with
        ``retain=False``, only freezing and roll-up, as replay keeps everything). Outside
        it: the bulk copy of the stores, ingestion going on (:meth:`BucketStore.begin_copy`),
        the window sums, a chunk of rows copied per short hold and summed outside, and
        the rows written meanwhile copied again in rounds (``copy_in_rounds``). Under
        it again: the rows written since re-copied (past a budget, left owed: the writer
        copies an owed row before writing it, and ``settle_copies`` copies the rest in
        short holds), the window sums' finish (the rows they still need left owed the
        same way, ``settle_sums``), and the counters. Outside:
        every window, slice, fairness gap and drift test. Under it once more: one look of
        each comparison (sticky state) and the plugin error counts; ``lock_holds_s``
        keeps how long each section held the lock. ``models`` may add windows (replay's
        ``all``); retention runs at ``retain_at_ms`` (default ``now_ms``: the daemon passes
        the earlier of the clock and the event watermark, engine/clock.py).
        ``input_ended`` (replay's last snapshot): no more events will come, so the bucket
        holding ``now_ms`` is complete — drift tests the windows it closes."""
        guard = lock if lock is not None else nullcontext()
        with guard:  # each hold timed from the lock's acquisition: waiting for it is not holding
            held = time.perf_counter()
            if retain:
                self.retain(now_ms if retain_at_ms is None else retain_at_ms)
            else:
                self.freeze_live_references()
                self.roll_up(now_ms)
            plans, sums = (
                self._begin_take(models or self.models, now_ms) if lock is not None else ([], [])
            )
            holds = [time.perf_counter() - held]
        view, (ops, unseen, plugins), final = self._take(
            guard, plans, sums, models or self.models, now_ms, holds,
            lambda: (self.ops(), self.drift_cells.unseen.copy(), self.active_plugins),
        )  # fmt: skip
        snap = self.assembler.evaluate(
            view, ops, unseen, self._comparison_sums, now_ms, at_ms=at_ms, confidence=confidence,
            models=models, plugins=plugins, not_ready=not_ready, look_at_ms=look_at_ms,
            lock=lock, plugin_errors=self.plugin_stats.errors, input_ended=input_ended,
        )  # fmt: skip
        self.lock_holds_s = (
            holds[0], max(holds[1:], default=0.0), final, self.assembler.look_hold_s
        )  # fmt: skip
        return snap

    # -- checkpoint parts (engine/state_codec.py encodes and restores them) ----------------
    @property
    def keeps_ranking(self) -> bool:
        """Whether ranking lists wait in the state (ranking models only)."""
        return bool(self.rank_layouts)

    def counters_state(self) -> dict[str, Any]:
        """The engine's own scalars: label codes, counters, watermarks, clocks, tiers."""
        return {
            "label_codes": list(self.label_codes),
            "records": [[k, o, c] for (k, o), c in sorted(self.records.items())],
            "invalid": [[k, r, c] for (k, r), c in sorted(self.invalid.items())],
            "join_events": dict(sorted(self.join_events.items())),
            "pred_watermark_ms": self.pred_watermark_ms,
            "tiers": self.tiers.bounds(),
            "label_watermark_ms": self.label_watermark_ms,
            "event_clock": self.event_clock.state(),
            "label_clock": self.label_clock.state(),
        }

    def load_counters(self, meta: Mapping[str, Any]) -> None:
        """Restore :meth:`counters_state` (after the groups), dropping what was derived."""
        self._base_index = {}
        self.label_codes = list(meta["label_codes"])
        self._label_index = {t: i for i, t in enumerate(self.label_codes)}
        self._label_class = [np.empty(0, np.int8) for _ in self.models]
        self.records = Counter({(k, o): c for k, o, c in meta["records"]})
        self.invalid = Counter({(k, r): c for k, r, c in meta["invalid"]})
        self.join_events = Counter(meta["join_events"])
        self.pred_watermark_ms = int(meta["pred_watermark_ms"])
        self.label_watermark_ms = int(meta["label_watermark_ms"])
        self.event_clock.load(meta.get("event_clock"))
        self.label_clock.load(meta.get("label_clock"))  # absent before: rebuilt from labels
        if "tiers" in meta and self.tiers.per_hour:
            self.tiers = self.tiers.with_bounds(meta["tiers"])
        for store in self._stores():
            store.tiers = self.tiers

    def saved_parts(self) -> tuple[Accumulator | PredictionAccumulator, ...]:
        """The accumulators that save a part of their own, each once."""
        return self._saved

    def named_stores(self) -> dict[str, BucketStore]:
        """Every bucket store by its checkpoint name (per model by the model's name)."""
        out = {"buckets": self.buckets}
        for kind, stores in (("wide", self.wide), ("sliced", self.sliced)):
            out.update({f"{kind}/{self.models[m].name}": st for m, st in stores.items()})
        return out

    def stale_references(self) -> set[str]:
        """Models whose configured drift reference changed since their counts were saved."""
        return set(self.drift_cells.stale)


def _robust_mark(maximum: int, clock: EventWatermark) -> int:
    """How far a stream has got for TTLs: its robust quantile (``EventWatermark.current``
    over at least 100 recent records), never beyond its maximum; the maximum alone while
    fewer records were seen."""
    robust = clock.current(min_samples=100)
    return maximum if robust == _NO_TS else min(maximum, robust)
