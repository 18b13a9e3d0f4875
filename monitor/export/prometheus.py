"""Prometheus exposition: a custom Collector over the latest published snapshot.

Modelled on prometheus/client_python's custom-collector pattern: ``collect()`` builds
fresh metric families from prepared, immutable data, so a scrape is cheap and never
triggers evaluation. The registry is created by the app and passed in — no global
default registry, so tests get a fresh one and importing this module changes nothing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from ..engine.snapshot import FairnessGap, WindowResult
from ..metrics.protocol import Series
from .published import Published
from .series_budget import CountSink, SeriesBudget, Withheld, within_budget
from .sinks import Family, FamilySink, QualityPage, Sink

__all__ = ["QUALITY_LABELS", "MonitorCollector"]

QUALITY_LABELS = ("model", "version", "window", "slice")
_FAIRNESS_BASE = ("model", "version", "window")  # then dimension, metric


class _Listed(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


class _MetricFamilies:
    """The families of one metric name: its value, and its interval bounds (created when
    the first bounded value comes, as the families' order on the page follows creation)."""

    __slots__ = ("doc", "extra", "extra_names", "fam", "family", "lower", "name", "upper", "value")

    def __init__(self, fam: Callable[..., Family], metric: str, series: Series | None) -> None:
        # how the name is exported comes from its family's declaration (a per-class
        # multiclass value: mlmon_class_precision{class="cat"}); a name no family declared
        # (a plugin value outside its declared series) is exported under its own name
        if series is None:
            series = Series(metric, metric, f"{metric}: a plugin metric without declared help")
        self.fam, self.name = fam, (metric,)
        self.lower: Family | None = None
        self.upper: Family | None = None
        self.extra: tuple[str, ...] = tuple(v for _, v in series.labels)
        self.extra_names: tuple[str, ...] = tuple(k for k, _ in series.labels)
        self.family = f"mlmon_{series.family}"
        self.value = fam(self.family, series.help, self.extra_names)

    def bounds(self) -> None:
        if self.lower is None:
            f, extra = self.family, self.extra_names
            self.lower = self.fam(f"{f}_ci_lower", f"Lower confidence bound of {f}", extra)
            self.upper = self.fam(f"{f}_ci_upper", f"Upper confidence bound of {f}", extra)


class MonitorCollector(Collector):
    def __init__(
        self,
        published: Callable[[], Published],
        clock: Callable[[], float] = time.time,
        max_series: int | None = None,
    ):
        self._published = published
        self._clock = clock
        self.max_series = max_series  # [http] max_series (export/series_budget.py)
        self._budget: tuple[object, object, SeriesBudget] | None = None

    def describe(self) -> list[Metric]:
        return []  # families depend on configuration; registered unchecked

    def collect(self) -> Iterator[Metric]:
        pub = self._published()
        yield from self.snapshot_families(pub)
        yield from self.operation_families(pub)

    def snapshot_families(self, pub: Published) -> Iterator[Metric]:
        """What changes once per evaluation (the big part of the page: it grows with
        models, versions, windows, slices and features)."""
        yield from self._quality(pub)
        yield from self._comparisons(pub)
        yield from self.drift_families(pub)
        yield from self._slo_states(pub)
        yield from self._completeness(pub)
        yield from self._stamp(pub)

    @staticmethod
    def _completeness(pub: Published) -> Iterator[Metric]:
        """Whether each window's labels are expected to be complete (stats/completeness.py)."""
        if pub.snapshot is None or not pub.snapshot.completeness:
            return
        labels = ("model", "version", "window")
        provisional = GaugeMetricFamily(
            "mlmon_window_provisional",
            "1 while the window's labels are still expected to arrive (expected label "
            "completeness below 0.95, or no label delay observed yet), else 0",
            labels=labels,
        )
        done = GaugeMetricFamily(
            "mlmon_label_completeness",
            "Expected share of the window's eventual labels already in (label-delay "
            "histogram); SLOs with min_label_completeness do not breach below it",
            labels=labels,
        )
        expected = GaugeMetricFamily(
            "mlmon_expected_label_coverage",
            "Label coverage the window is expected to end with: observed coverage / the "
            "expected share of its labels already in (from the label-delay histogram)",
            labels=labels,
        )
        for c in pub.snapshot.completeness:
            key = [c.model, c.version, c.window]
            provisional.add_metric(key, 1.0 if c.provisional else 0.0)
            if not math.isnan(c.completeness):
                done.add_metric(key, c.completeness)
            if not math.isnan(c.expected_coverage):
                expected.add_metric(key, c.expected_coverage)
        yield from (provisional, done, expected)

    @staticmethod
    def _stamp(pub: Published) -> Iterator[Metric]:
        """Here, not per scrape: one page's stamp and its windows come from one snapshot."""
        if pub.snapshot is not None:
            yield GaugeMetricFamily(
                "mlmon_last_evaluation_timestamp_seconds",
                "When the latest snapshot was evaluated (Unix time)",
                value=pub.snapshot.at_ms / 1000.0,
            )

    def operation_families(self, pub: Published) -> Iterator[Metric]:
        """What changes between evaluations (a few dozen series)."""
        yield from self._operations(pub)
        yield from self._alert_delivery(pub)

    def snapshot_text(self, pub: Published, page: QualityPage | None = None) -> bytes:
        """:meth:`snapshot_families` as the text exposition ``generate_latest`` writes,
        the quality part (nearly all of a fleet's page) written directly (.sinks); with
        ``page``, a window result unchanged since ``page`` last rendered is not written
        again (the evaluation reuses the result objects of windows whose counts stayed)."""
        return (page or QualityPage()).render(pub, self) + self.rest_text(pub)

    def rest_text(self, pub: Published) -> bytes:
        """The snapshot part after the quality families: comparisons, drift, SLO states
        and the evaluation stamp (small: rendered through prometheus-client)."""
        rest = CollectorRegistry(auto_describe=False)
        rest.register(_Listed(self._rest(pub)))
        return generate_latest(rest)

    def _rest(self, pub: Published) -> list[Metric]:
        """The snapshot families beside the quality ones (never withheld)."""
        return [*self._comparisons(pub), *self.drift_families(pub), *self._slo_states(pub),
                *self._completeness(pub), *self._stamp(pub)]  # fmt: skip

    def budget(self, pub: Published) -> SeriesBudget:
        """Which window results /metrics writes within ``max_series`` — the one place
        the bound applies (both renderings ask it); computed once per snapshot."""
        snap = pub.snapshot
        if self.max_series is None or snap is None:
            return SeriesBudget(None, Withheld(self.max_series))
        cached = self._budget
        if cached is not None and cached[0] is snap and cached[1] is pub.slos:
            return cached[2]
        counter = CountSink()
        self.write_quality(pub, counter, None)
        quality = sum(n for key, n in counter.counts.items() if len(key) == 4)
        fixed = sum(len(f.samples) for f in self._rest(pub)) + sum(
            n
            for key, n in counter.counts.items()
            if len(key) != 4  # fairness gaps
        )
        if quality + fixed <= self.max_series:
            budget = SeriesBudget(None, Withheld(self.max_series, quality + fixed))
        else:
            budget = within_budget(snap.results, counter.counts, fixed, self.max_series)
        self._budget = (snap, pub.slos, budget)
        return budget

    def _quality(self, pub: Published) -> Iterator[Metric]:
        sink = FamilySink()
        self.write_quality(pub, sink, self.budget(pub).keep)
        return sink.families()

    def exported_results(self, pub: Published) -> list[WindowResult]:
        """The window results /metrics writes: those ``budget`` keeps."""
        snap = pub.snapshot
        if snap is None:
            return []
        keep = self.budget(pub).keep
        if keep is None:
            return list(snap.results)
        return [r for r in snap.results if (r.model, r.version, r.window, r.slice) in keep]

    def write_quality(
        self, pub: Published, out: Sink, keep: frozenset[tuple[str, ...]] | None
    ) -> None:
        """The quality families of every window result (of those in ``keep``, when the
        series budget withholds some), then the fairness gaps."""
        snap = pub.snapshot
        if snap is None:
            return
        write = self.result_writer(out, snap.series)
        for r in snap.results:
            if keep is None or (r.model, r.version, r.window, r.slice) in keep:
                write(r)
        self.write_fairness(snap.fairness, out)

    def result_writer(
        self, out: Sink, series: Mapping[str, Series]
    ) -> Callable[[WindowResult], None]:
        """A function writing one window result's series into ``out``; the families
        every result has are created first (their place on the page), the others as a
        result first writes to them. ``series``: the snapshot's metric series (help)."""
        fam = out.family
        samples = fam("mlmon_window_samples", "Labeled predictions in the window")
        preds = fam("mlmon_window_predictions", "Predictions in the window (labeled or not)")
        coverage = fam("mlmon_label_coverage", "Labeled / predicted in the window")
        metric_n = fam(
            "mlmon_metric_samples", "Sample count behind each metric's estimate", ("metric",)
        )
        rel_samples, rel_mean, rel_observed = (
            fam(f"mlmon_reliability_{name}", doc, ("bin",))
            for name, doc in (
                ("samples", "Reliability diagram: scored predictions per score bin"),
                ("mean_predicted", "Reliability diagram: mean predicted probability per bin"),
                ("observed", "Reliability diagram: observed positive frequency per bin"),
            )
        )
        by_name: dict[str, _MetricFamilies] = {}  # one lookup per sample
        bin_label: dict[float, tuple[str]] = {}
        isnan = math.isnan

        def write(r: WindowResult) -> None:
            key = out.key((r.model, r.version, r.window, r.slice))
            for b in r.reliability:
                at = bin_label.get(b.upper)
                if at is None:
                    at = bin_label[b.upper] = (f"{b.upper:g}",)
                rel_samples.add(key, b.count, at)
                if b.count:
                    rel_mean.add(key, b.mean_predicted, at)
                    rel_observed.add(key, b.observed, at)
            e = r.economics
            if e is not None:
                if not isnan(e.deployed.value):
                    fam(
                        "mlmon_expected_value",
                        "Expected value per prediction at the deployed "
                        "threshold (configured costs)",
                    ).add(key, e.deployed.value)
                    fam("mlmon_expected_value_ci_lower", "Lower bound of mlmon_expected_value").add(
                        key, e.deployed.lower
                    )
                    fam("mlmon_expected_value_ci_upper", "Upper bound of mlmon_expected_value").add(
                        key, e.deployed.upper
                    )
                if not isnan(e.best.value):
                    fam(
                        "mlmon_expected_value_best",
                        "Expected value per prediction at the EV-maximizing threshold",
                    ).add(key, e.best.value)
                    fam(
                        "mlmon_best_threshold",
                        "Score threshold that maximizes expected value in the window",
                    ).add(key, e.best_threshold)
            samples.add(key, r.labeled)
            preds.add(key, r.predictions)
            if r.predictions:
                coverage.add(key, r.coverage)
            for m in r.metrics:
                if isnan(m.value):
                    continue  # undefined (e.g. precision with no predicted positives)
                known = by_name.get(m.name)
                if known is None:
                    known = by_name[m.name] = _MetricFamilies(fam, m.name, series.get(m.name))
                extra = known.extra
                known.value.add(key, m.value, extra)
                if not (isnan(m.lower) or isnan(m.upper)):  # withheld: m.note says why
                    known.bounds()
                    known.lower.add(key, m.lower, extra)  # type: ignore[union-attr]
                    known.upper.add(key, m.upper, extra)  # type: ignore[union-attr]
                metric_n.add(key, m.n, known.name)
            if r.class_confusion and r.slice == "all":
                cm = fam(
                    "mlmon_confusion_matrix",
                    "Multiclass confusion counts in the window (slice all only)",
                    ("true_class", "predicted_class"),
                )
                k = len(r.classes)
                for i, count in enumerate(r.class_confusion):
                    cm.add(key, count, (r.classes[i // k], r.classes[i % k]))
            for metric, rows in r.excluded:
                fam(
                    "mlmon_excluded_rows",
                    "Labeled rows a regression metric leaves out (mape: zero targets; "
                    "smape: both zero; male: values <= -1), or ranking queries without a "
                    "relevant item (without_relevant)",
                    ("metric",),
                ).add(key, rows, (metric,))

        return write

    @staticmethod
    def write_fairness(fairness: Sequence[FairnessGap], out: Sink) -> None:
        if fairness:
            gap = out.family(
                "mlmon_fairness_gap",
                "Largest minus smallest rate across a slice dimension's values: "
                "demographic_parity (predicted positive rate), equal_opportunity (recall), "
                "equalized_odds (max of the TPR and FPR gaps), ece_gap, auc_gap",
                ("dimension", "metric"),
                base=_FAIRNESS_BASE,
            )
            # the interval families only when some gap has one (a family is listed by its
            # first sample, as prometheus-client lists it by creation)
            with_bounds = any(math.isfinite(f.lower) for f in fairness)
            bounds = {
                side: out.family(
                    f"mlmon_fairness_gap_ci_{side}",
                    f"{side.capitalize()} end of the fairness gap's simultaneous interval "
                    "(each value's Wilson interval at 1 - alpha/k)",
                    ("dimension", "metric"),
                    base=_FAIRNESS_BASE,
                )
                for side in ("lower", "upper")
                if with_bounds
            }
            for f in fairness:
                key = out.key((f.model, f.version, f.window), _FAIRNESS_BASE)
                gap.add(key, f.gap, (f.dimension, f.metric))
                if math.isfinite(f.lower):
                    bounds["lower"].add(key, f.lower, (f.dimension, f.metric))
                    bounds["upper"].add(key, f.upper, (f.dimension, f.metric))

    def drift_families(self, pub: Published) -> Iterator[Metric]:
        snap = pub.snapshot
        if snap is None or not snap.drift:
            return
        labels = ("model", "version", "feature", "test", "window")
        fams = {
            name: GaugeMetricFamily(f"mlmon_drift_{name}", doc, labels=labels)
            for name, doc in (
                (
                    "statistic",
                    "Drift test statistic (KS D for numeric, chi-square for categorical)",
                ),
                ("p_value", "Drift test p-value (uncorrected)"),
                ("p_value_adjusted", "Drift p-value after multiple-testing correction"),
                ("detected", "1 when the corrected p-value is below alpha and the effect passes"),
                (
                    "effect",
                    "Gated effect size beyond sampling noise (quantile Wasserstein in "
                    "normal-SD units, or JS distance)",
                ),
                (
                    "detectable_effect",
                    "Smallest effect this window detects with 80% probability (same unit)",
                ),
                ("psi", "Population stability index"),
                ("wasserstein", "Wasserstein-1 distance (numeric, feature units)"),
                ("js_distance", "Jensen-Shannon distance, base 2 (categorical)"),
                ("samples", "Live values tested"),
                ("missing_rate", "Share of missing values in the window"),
                ("out_of_range", "Values outside the reference range in the window"),
                ("unseen", "Values of categories the reference never saw, in the window"),
            )
        }
        prior = GaugeMetricFamily(
            "mlmon_drift_label_prior_p_value",
            "Label-prior drift p-value (chi-square goodness of fit)",
            labels=("model", "version", "window"),
        )
        for d in snap.drift:
            for f in d.report.features:
                key = [d.model, d.version, f.feature, f.test, d.window]
                values = {
                    "statistic": f.statistic,
                    "p_value": f.p_value,
                    "p_value_adjusted": f.p_adjusted,
                    "detected": float(f.detected),
                    "effect": f.effect,
                    "detectable_effect": f.detectable_effect,
                    "psi": f.psi,
                    "wasserstein": f.wasserstein,
                    "js_distance": f.js_distance,
                    "samples": f.n,
                    "missing_rate": f.missing_rate,
                    "out_of_range": f.out_of_range,
                    "unseen": f.unseen,
                }
                for name, value in values.items():
                    if not math.isnan(value):
                        fams[name].add_metric(key, value)
            if d.label_prior is not None and not math.isnan(d.label_prior.p_value):
                prior.add_metric([d.model, d.version, d.window], d.label_prior.p_value)
        yield from fams.values()
        yield prior

    def _comparisons(self, pub: Published) -> Iterator[Metric]:
        snap = pub.snapshot
        if snap is None or not snap.comparisons:
            return
        decision = GaugeMetricFamily(
            "mlmon_comparison_decision",
            "1 for the comparison's current decision (continue/promote/rollback/invalid)",
            labels=("comparison", "decision"),
        )
        effect = GaugeMetricFamily(
            "mlmon_comparison_effect",
            "Mean loss of treatment minus control (positive: treatment worse)",
            labels=("comparison",),
        )
        p_value = GaugeMetricFamily(
            "mlmon_comparison_p_value",
            "Always-valid p-value (mixture SPRT)",
            labels=("comparison",),
        )
        lower = GaugeMetricFamily(
            "mlmon_comparison_ci_lower",
            "Confidence-sequence lower bound of the effect",
            labels=("comparison",),
        )
        upper = GaugeMetricFamily(
            "mlmon_comparison_ci_upper",
            "Confidence-sequence upper bound of the effect",
            labels=("comparison",),
        )
        samples = GaugeMetricFamily(
            "mlmon_comparison_samples",
            "Labeled samples (pairs in shadow mode) per arm",
            labels=("comparison", "arm"),
        )
        srm = GaugeMetricFamily(
            "mlmon_comparison_srm_p_value",
            "Sample-ratio-mismatch chi-square p-value of the arms' prediction counts",
            labels=("comparison",),
        )
        since = GaugeMetricFamily(
            "mlmon_comparison_decision_since_timestamp_seconds",
            "When the current terminal decision was first reached (Unix time)",
            labels=("comparison",),
        )
        window_diff = GaugeMetricFamily(
            "mlmon_comparison_window_error_difference",
            "Fixed-horizon error-rate difference (treatment - control) in a window; "
            "NOT for continuous decisions",
            labels=("comparison", "window", "bound"),
        )
        for c in snap.comparisons:
            for d in ("continue", "promote", "rollback", "invalid"):
                decision.add_metric([c.name, d], 1.0 if c.decision == d else 0.0)
            if not math.isnan(c.effect):
                effect.add_metric([c.name], c.effect)
            p_value.add_metric([c.name], c.p_value)
            if math.isfinite(c.cs_lower):
                lower.add_metric([c.name], c.cs_lower)
            if math.isfinite(c.cs_upper):
                upper.add_metric([c.name], c.cs_upper)
            samples.add_metric([c.name, "control"], c.n_control)
            samples.add_metric([c.name, "treatment"], c.n_treatment)
            if c.srm is not None:
                srm.add_metric([c.name], c.srm.p_value)
            if c.since_ms is not None and c.decision != "continue":
                since.add_metric([c.name], c.since_ms / 1000.0)
            for w in c.windows:
                window_diff.add_metric([c.name, w.window, "point"], w.difference)
                window_diff.add_metric([c.name, w.window, "lower"], w.lower)
                window_diff.add_metric([c.name, w.window, "upper"], w.upper)
        yield from (decision, effect, p_value, lower, upper, samples, srm, since, window_diff)

    def _operations(self, pub: Published) -> Iterator[Metric]:
        status = pub.status
        topics = dict(status.topics)
        now = self._clock()
        ops = pub.ops
        if ops is not None:
            records = CounterMetricFamily(
                "mlmon_records", "Records read, by outcome", labels=("topic", "outcome")
            )
            for kind, outcome, count in ops.records:
                records.add_metric([topics.get(kind, kind), outcome], count)
            yield records
            invalid = CounterMetricFamily(
                "mlmon_invalid_records", "Rejected records, by reason", labels=("topic", "reason")
            )
            for kind, reason, count in ops.invalid:
                invalid.add_metric([topics.get(kind, kind), reason], count)
            yield invalid
            rejected = CounterMetricFamily(
                "mlmon_versions_rejected",
                "Predictions rejected because their model already had max_versions live versions",
                labels=("model",),
            )
            for model, count in ops.versions_rejected:
                rejected.add_metric([model], count)
            yield rejected
            blocked = GaugeMetricFamily(
                "mlmon_version_blocked",
                "Predictions of a version rejected by max_versions in the last hour, for versions "
                "that look real (at least 100): a new version is not being monitored",
                labels=("model", "version"),
            )
            for model, version, count in ops.versions_blocked:
                blocked.add_metric([model, version], count)
            yield blocked
            untracked = CounterMetricFamily(
                "mlmon_drift_untracked_features",
                "Feature values a live drift reference left out (names over drift.max_features)",
                labels=("model",),
            )
            for model, count in ops.drift_untracked:
                untracked.add_metric([model], count)
            yield untracked
            labeled = CounterMetricFamily(
                "mlmon_labeled_predictions",
                "Predictions joined with their label, per model version (cumulative)",
                labels=("model", "version"),
            )
            errors = CounterMetricFamily(
                "mlmon_prediction_errors",
                "Labeled predictions whose decision was wrong, per model version (cumulative; "
                "classifiers): the bad events of error-budget burn rates",
                labels=("model", "version"),
            )
            for model, version, n_labeled, n_errors in ops.outcomes:
                labeled.add_metric([model, version], n_labeled)
                if n_errors is not None:
                    errors.add_metric([model, version], n_errors)
            yield labeled
            yield errors
            join = CounterMetricFamily(
                "mlmon_join_events",
                "Join outcomes: joined, duplicates, conflicts, expiries, evictions",
                labels=("event",),
            )
            for event, count in ops.join_events:
                join.add_metric([event], count)
            yield join
            plugin_errors = CounterMetricFamily(
                "mlmon_plugin_errors",
                "Metric plugin failures (load, update or metrics); the plugin's metrics are not "
                "exported",
                labels=("plugin",),
            )
            for name, count in ops.plugin_errors:
                plugin_errors.add_metric([name], count)
            yield plugin_errors
            yield GaugeMetricFamily(
                "mlmon_pending_predictions",
                "Predictions waiting for their label",
                value=ops.pending_predictions,
            )
            yield GaugeMetricFamily(
                "mlmon_orphan_labels",
                "Labels waiting for their prediction",
                value=ops.orphan_labels,
            )
            delay = HistogramMetricFamily(
                "mlmon_label_delay_seconds",
                "Label time minus prediction time for joined predictions, per model",
                labels=("model",),
            )
            for name, h in ops.label_delay.by_model:
                cumulative, running = [], 0
                for bound, count in zip((*h.bounds, math.inf), h.counts, strict=True):
                    running += count
                    le = "+Inf" if math.isinf(bound) else f"{bound:g}"
                    cumulative.append((le, running))
                delay.add_metric([name], cumulative, h.total)
            yield delay
        lag = GaugeMetricFamily(
            "mlmon_consumer_lag",
            "Messages behind the end of each assigned partition",
            labels=("topic", "partition"),
        )
        for topic, partition, value in status.consumer_lag:
            lag.add_metric([topic, str(partition)], value)
        yield lag
        if status.last_checkpoint_at is not None:
            yield GaugeMetricFamily(
                "mlmon_checkpoint_age_seconds",
                "Seconds since the last successful checkpoint",
                value=max(0.0, now - status.last_checkpoint_at),
            )
        yield CounterMetricFamily(
            "mlmon_checkpoint_failures",
            "Checkpoint writes that failed (the previous checkpoint is kept)",
            value=status.checkpoint_failures,
        )
        faults = CounterMetricFamily(
            "mlmon_fault_events",
            "Handled faults: clock jumps, offset resets, checkpoint identity resets, "
            "spooled dead letters (docs/operations.md)",
            labels=("event",),
        )
        for event, count in status.fault_events:
            faults.add_metric([event], count)
        yield faults
        runs = CounterMetricFamily(
            "mlmon_schedule_runs",
            "Scheduled runs ([[schedules]]) by schedule and outcome: ok, failed, missed "
            "(later than misfire_grace), skipped (not the exporter-lease holder), rejected "
            "(a new drift reference that did not validate)",
            labels=("job", "outcome"),
        )
        for job, outcome, count in status.schedule_runs:
            runs.add_metric([job, outcome], count)
        yield runs
        yield GaugeMetricFamily(
            "mlmon_dead_letter_spooled",
            "Rejected records on disk waiting for the dead-letter topic",
            value=status.dead_letter_spooled,
        )
        if status.group_members is not None:
            yield GaugeMetricFamily(
                "mlmon_group_members",
                "Members of the consumer group (more than 1 in a single-instance deployment "
                "means another consumer shares the group)",
                value=status.group_members,
            )
        yield GaugeMetricFamily(
            "mlmon_consuming",
            "1 while partitions are assigned and the source is healthy",
            value=1.0 if status.consuming else 0.0,
        )

    def _slo_states(self, pub: Published) -> Iterator[Metric]:
        """SLO states (docs/alerting.md)."""
        if pub.slos:
            breached = GaugeMetricFamily(
                "mlmon_slo_breached",
                "1 while the SLO instance is firing (breach held for its `for`), else 0",
                labels=("slo", "version"),
            )
            state = GaugeMetricFamily(
                "mlmon_slo_state",
                "1 for the SLO instance's current state (inactive/pending/firing/resolved)",
                labels=("slo", "version", "state"),
            )
            objective = GaugeMetricFamily(
                "mlmon_slo_objective", "The SLO's objective", labels=("slo",)
            )
            seen: set[str] = set()
            for st in pub.slos:
                breached.add_metric([st.name, st.version], 1.0 if st.state == "firing" else 0.0)
                for name in ("inactive", "pending", "firing", "resolved"):
                    state.add_metric([st.name, st.version, name], float(st.state == name))
                if st.name not in seen:
                    seen.add(st.name)
                    objective.add_metric([st.name], st.objective)
            yield from (breached, state, objective)

    def _alert_delivery(self, pub: Published) -> Iterator[Metric]:
        stats = pub.alerts
        if stats is None:
            return
        fams = {
            key: CounterMetricFamily(f"mlmon_alerts_{key}", doc, labels=("receiver",))
            for key, doc in (
                ("sent", "Alerts delivered to the receiver (re-sends count again)"),
                ("failed", "Alerts in delivery attempts that failed (each retry counts)"),
                ("dropped", "Alerts dropped because the receiver's queue was full"),
            )
        }
        queue = GaugeMetricFamily(
            "mlmon_alert_queue_size", "Alerts waiting for delivery", labels=("receiver",)
        )
        for r in stats.receivers:
            fams["sent"].add_metric([r.receiver], r.sent)
            fams["failed"].add_metric([r.receiver], r.failed)
            fams["dropped"].add_metric([r.receiver], r.dropped)
            queue.add_metric([r.receiver], r.queued)
        yield from fams.values()
        yield queue
