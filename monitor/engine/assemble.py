"""The snapshot assembler: evaluates counted statistics into an immutable ``Snapshot``.

Counting and evaluating keep different state. What an engine counts (join buffer,
bucket stores, counters) is per event and per partition; what evaluation keeps — each
comparison's sticky sequential decision (``comparisons.ComparisonTracker``), the drift
references the tests compare against (``drift.DriftTracker``), the results reused while
their counts are unchanged (``result_cache.ResultCache``) — belongs to whoever
publishes the snapshot. An :class:`Assembler` holds the latter and reads the former only
as values: a ``StoreView``, the operational counters and the comparisons' sums. So one
engine and its assembler make the single-instance daemon, and in partitioned mode one
assembler evaluates the statistics merged from every partition's engine.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import Any

from ..metrics.registry import LOSSES, Series, series_table
from .comparison_stats import ArmSums, PairedSums, loss_names
from .comparisons import ComparisonResult, ComparisonTracker
from .completeness import window_completeness
from .drift import DriftTracker
from .drift_cells import UnseenValues
from .evaluate import evaluate_all
from .models import ComparisonSpec, ModelSpec
from .result_cache import ResultCache
from .snapshot import OpsState, Snapshot, WindowResult
from .view import StoreView

__all__ = ["Assembler"]


class Assembler:
    """Evaluation state of one published view, and the evaluation itself."""

    def __init__(
        self,
        models: Sequence[ModelSpec],
        comparisons: Sequence[ComparisonSpec],
        drift: DriftTracker,
        plugins: Sequence[Any],
    ) -> None:
        """``drift``: the references the drift tests read (shared with the engine that
        counts a live reference's bootstrap, or the configured ones alone);
        ``plugins``: the configured metric plugins (a comparison's plugin loss must be
        one of them)."""
        self.models = tuple(models)
        self.drift = drift
        self.plugins = tuple(plugins)
        # what every metric name is exported as (the exporter's help and labels)
        self.series: Mapping[str, Series] = series_table(
            [(m.params, m.metrics) for m in self.models], self.plugins
        )
        names = loss_names(comparisons)
        loss_plugins = {p.name: p for p in self.plugins if p.has_loss()}
        missing = [n for n in names[len(LOSSES) :] if n not in loss_plugins]
        if missing:
            raise ValueError(f"comparison losses {missing} are no loaded plugin's loss")
        self.tracker = ComparisonTracker(
            comparisons,
            self.models,
            {n: loss_plugins[n].loss_bound for n in names[len(LOSSES) :]},
        )
        # window results of the last evaluation, reused while their counts do not change
        self.result_cache = ResultCache()
        self.look_hold_s = 0.0  # seconds the last comparison look held the caller's lock

    def look(
        self,
        results: Sequence[WindowResult],
        now_ms: int,
        sums: tuple[ArmSums, PairedSums],
        not_ready: Sequence[str] = (),
        confidence: float = 0.95,
    ) -> tuple[ComparisonResult, ...]:
        """One look of every configured comparison at the arm and pair ``sums``
        (mutates the sticky decision state)."""
        arms, pairs = sums
        return self.tracker.look(arms, pairs, results, now_ms, not_ready, confidence)

    def evaluate(
        self,
        view: StoreView,
        ops: OpsState,
        unseen: UnseenValues,
        sums: Callable[[], tuple[ArmSums, PairedSums]],
        now_ms: int,
        *,
        at_ms: int | None = None,
        confidence: float = 0.95,
        models: Sequence[ModelSpec] | None = None,
        plugins: Sequence[Any] | None = None,
        not_ready: Sequence[str] = (),
        look_at_ms: int | None = None,
        lock: AbstractContextManager[Any] | None = None,
        plugin_errors: Counter[str] | None = None,
        input_ended: bool = False,
    ) -> Snapshot:
        """Every window, slice, fairness gap, comparison look and drift test of ``view``
        (a ``StoreView``), outside ``lock`` but for the look (sticky decision state, at
        the arm and pair sums ``sums()`` reads under ``lock``) and the update of
        ``plugin_errors`` (the counting side's, shared with its
        accumulators). ``plugins``: the ones still trusted (default: all configured);
        ``models`` may add windows (replay's ``all``)."""
        guard = lock if lock is not None else nullcontext()
        errors: Counter[str] = Counter()
        results, fairness = evaluate_all(
            view,
            models or self.models,
            now_ms,
            confidence,
            self.plugins if plugins is None else plugins,
            errors,
            self.result_cache,
        )
        with guard:
            held = time.perf_counter()
            comparisons = self.look(
                results, now_ms if look_at_ms is None else look_at_ms, sums(), not_ready, confidence
            )
            if plugin_errors is not None:
                plugin_errors.update(errors)
            self.look_hold_s = time.perf_counter() - held
        if errors:  # this evaluation's plugin errors beside those counted before
            counted = Counter(dict(ops.plugin_errors)) + errors
            ops = replace(ops, plugin_errors=tuple(sorted(counted.items())))
        drift = self.drift.evaluate(
            view, now_ms, models, unseen=unseen.by_feature, input_ended=input_ended
        )
        return Snapshot(
            at_ms=now_ms if at_ms is None else at_ms,
            results=results,
            ops=ops,
            comparisons=comparisons,
            drift=drift,
            fairness=fairness,
            completeness=window_completeness(results, ops.label_delay, now_ms),
            placed_ms=now_ms,
            series=self.series,
        )
