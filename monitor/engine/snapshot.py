"""Immutable evaluation results: what exporters, the API and reports read.

A small closed set of frozen dataclasses, never nested dicts, so every reader sees the
same typed shapes; computation never renders, so Prometheus names and JSON layouts live
in the adapters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..drift.detector import DriftReport, LabelPriorDrift
from ..experiments.mcnemar import McNemarResult
from ..experiments.srm import SRMResult
from ..metrics.protocol import Series
from ..stats.completeness import MIN_OWN_DELAYS, PROVISIONAL_BELOW
from ..stats.results import MetricValue
from ..stats.scores import ReliabilityBin

__all__ = [
    "ComparisonResult",
    "DelayHistogram",
    "DriftResult",
    "Economics",
    "FairnessGap",
    "LabelDelays",
    "OpsState",
    "Snapshot",
    "WindowCompleteness",
    "WindowDifference",
    "WindowResult",
]


@dataclass(frozen=True, slots=True)
class FairnessGap:
    """Largest minus smallest rate across the exported values of one slice dimension,
    with a simultaneous interval of the true gap (NaN for the ECE and AUC gaps)."""

    model: str
    version: str
    window: str
    dimension: str
    # demographic_parity | equal_opportunity | equalized_odds | ece_gap | auc_gap
    metric: str
    gap: float
    lowest: str  # the value with the smallest rate
    highest: str  # the value with the largest rate
    lower: float = float("nan")
    upper: float = float("nan")


@dataclass(frozen=True, slots=True)
class Economics:
    """Threshold economics from the configured value of each outcome (per prediction)."""

    deployed: MetricValue  # expected value at the deployed decisions (exact counts)
    best_threshold: float  # the EV-maximizing score threshold (a histogram bin edge)
    best: MetricValue  # expected value there (interval optimistic: chosen on the data)


@dataclass(frozen=True, slots=True)
class WindowResult:
    model: str
    version: str
    window: str
    slice: str
    start_ms: int
    end_ms: int
    predictions: int
    labeled: int
    metrics: tuple[MetricValue, ...]
    confusion: tuple[int, int, int, int] = (0, 0, 0, 0)  # TN, FP, FN, TP
    reliability: tuple[ReliabilityBin, ...] = ()
    economics: Economics | None = None
    # multiclass: the K×K confusion matrix, row-major (true class, predicted class)
    class_confusion: tuple[int, ...] = ()
    classes: tuple[str, ...] = ()
    # regression: rows left out of a metric, e.g. ("mape", zero targets)
    excluded: tuple[tuple[str, int], ...] = ()
    # binary CBPE: estimated accuracy from the raw scores minus the recalibrated one — how
    # far the scores' own calibration is off for this window's predictions (an
    # estimated_error_rate comparison reads it; NaN without a recalibration)
    estimate_shift: float = float("nan")

    @property
    def coverage(self) -> float:
        """Labeled / predicted in the window (NaN with no predictions)."""
        return self.labeled / self.predictions if self.predictions else float("nan")


@dataclass(frozen=True, slots=True)
class WindowCompleteness:
    """How complete a window's labels are expected to be (``stats/completeness.py``):
    the expected share of its eventual labels already in, and the label coverage it is
    expected to end with."""

    model: str
    version: str
    window: str
    completeness: float
    expected_coverage: float

    @property
    def provisional(self) -> bool:
        """Labels are still expected to arrive (or no label delay is known yet)."""
        return not self.completeness >= PROVISIONAL_BELOW


@dataclass(frozen=True, slots=True)
class DelayHistogram:
    """Cumulative-ready histogram of label delay (label ts - prediction ts), seconds."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]  # per bucket, len(bounds) + 1 (last is +Inf)
    total: float

    @property
    def count(self) -> int:
        return sum(self.counts)


@dataclass(frozen=True, slots=True)
class LabelDelays:
    """The label delay of each model (``engine/delay.py``), and the fleet prior an
    older checkpoint's single histogram became (None without one)."""

    by_model: tuple[tuple[str, DelayHistogram], ...] = ()
    prior: DelayHistogram | None = None

    def of(self, model: str) -> DelayHistogram | None:
        """The delay distribution the completeness of ``model``'s windows reads: its own,
        or the prior while it has fewer than ``MIN_OWN_DELAYS`` delays of its own (None:
        nothing observed)."""
        own = next((h for name, h in self.by_model if name == model), None)
        if self.prior is not None and (own is None or own.count < MIN_OWN_DELAYS):
            return self.prior
        return own


@dataclass(frozen=True, slots=True)
class OpsState:
    records: tuple[tuple[str, str, int], ...]  # (kind, outcome, count)
    invalid: tuple[tuple[str, str, int], ...]  # (kind, reason, count)
    join_events: tuple[tuple[str, int], ...]  # (event, count)
    pending_predictions: int
    orphan_labels: int
    label_delay: LabelDelays
    prediction_watermark_ms: int
    label_watermark_ms: int
    plugin_errors: tuple[tuple[str, int], ...] = ()
    # (model, version, labeled, errors) cumulative; errors only for classifiers
    outcomes: tuple[tuple[str, str, int, int | None], ...] = ()
    versions_rejected: tuple[tuple[str, int], ...] = ()  # (model, predictions) over max_versions
    # (model, version, rejected predictions) of rejected versions that look real (groups.py)
    versions_blocked: tuple[tuple[str, str, int], ...] = ()
    drift_untracked: tuple[tuple[str, int], ...] = ()  # (model, feature values) over the cap


@dataclass(frozen=True, slots=True)
class WindowDifference:
    """Fixed-horizon error-rate difference in one window (dashboards only)."""

    window: str
    error_control: float
    error_treatment: float
    difference: float
    lower: float
    upper: float
    p_value: float
    n_control: int
    n_treatment: int
    method: str


@dataclass(frozen=True, slots=True)
class ComparisonResult:
    name: str
    model: str
    control: str
    treatment: str
    loss: str
    mode: str
    decision: str
    superior: bool
    reason: str
    p_value: float
    cs_lower: float
    cs_upper: float
    effect: float
    n_control: int
    n_treatment: int
    predictions_control: int
    predictions_treatment: int
    since_ms: int | None
    at_ms: int
    alpha: float
    margin: float
    srm: SRMResult | None = None
    mcnemar: McNemarResult | None = None
    windows: tuple[WindowDifference, ...] = ()
    method: str = ""  # the sequential test behind the decision (docs/comparisons.md)


@dataclass(frozen=True, slots=True)
class DriftResult:
    model: str
    version: str
    window: str
    start_ms: int
    end_ms: int
    report: DriftReport
    label_prior: LabelPriorDrift | None = None
    # the reference tested against: (start_ms, end_ms) of the live traffic it was taken
    # from (a rotated reference, a "first:" window), None for a training-data profile
    reference_period: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    at_ms: int
    results: tuple[WindowResult, ...] = ()
    ops: OpsState | None = None
    errors: tuple[str, ...] = field(default=())
    comparisons: tuple[ComparisonResult, ...] = ()
    drift: tuple[DriftResult, ...] = ()
    fairness: tuple[FairnessGap, ...] = ()
    # slice "all" of each (model, version, window): how complete its labels are
    completeness: tuple[WindowCompleteness, ...] = ()
    placed_ms: int | None = None  # the time windows were placed at (None: ``at_ms``)
    # what each metric name in ``results`` is exported as (family, labels, help): built
    # from the metric families' declarations, so the exporter never parses a name
    series: Mapping[str, Series] = field(default_factory=dict)
