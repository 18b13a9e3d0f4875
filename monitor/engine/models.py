"""What the engine and the decoder need to know of a configured model (plain data)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..metrics.protocol import ModelParams
from ..metrics.registry import exported_names, score_metrics
from ..stats.scores import ScoreLayout

__all__ = [
    "ComparisonSpec",
    "DriftSpec",
    "ModelSpec",
    "SliceSpec",
    "WindowSpec",
]

# Binary metrics computed from score histograms (the rest need only the confusion counts).
SCORE_METRICS = score_metrics()
# Per-slice histograms span logits ±8 (scores 0.0003..0.9997): the slice's bins are
# spent where scores are, and the rare scores beyond fall into the two end bins.
SLICE_LOGIT_RANGE = 8.0


@dataclass(frozen=True, slots=True)
class WindowSpec:
    """A window of ``size_ms`` ending ``delay_ms`` before now (docs/semantics.md)."""

    label: str
    size_ms: int
    delay_ms: int = 0


@dataclass(frozen=True, slots=True)
class SliceSpec:
    dimensions: tuple[str, ...]
    top_k: int = 20
    min_samples: int = 100


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    task: str = "binary"  # "binary" | "multiclass" | "regression" | "ranking"
    classes: tuple[str, ...] = ("0", "1")
    positive_class: str = "1"
    threshold: float = 0.5
    windows: tuple[WindowSpec, ...] = (WindowSpec("1h", 3_600_000),)
    metrics: tuple[str, ...] = ("accuracy", "precision", "recall", "f1")
    fbeta: tuple[float, ...] = (2.0, 0.5)
    score_bins: int = 2048
    slice_score_bins: int = 128  # per-slice histograms (logit range ±8), slices only
    max_versions: int = 20  # live versions at once; predictions of more are rejected
    version_idle_ttl_ms: int = 7 * 86_400_000  # no traffic this long: the version retires
    calibration_bins: int = 10  # multiclass top-label calibration
    huber_delta: float = 1.0  # regression
    quantiles: tuple[float, ...] = (0.1, 0.5, 0.9)  # regression pinball losses
    mase_scale: float | None = None  # regression: MASE = MAE / scale (None: no MASE)
    gain_fractions: tuple[float, ...] = (0.1, 0.2, 0.5)  # binary cumulative gain / lift
    costs: tuple[float, float, float, float] | None = None  # value of (tp, fp, fn, tn)
    id_path: str = "id"
    ts_path: str = "ts"
    model_path: str = "model"
    version_path: str = "version"
    score_path: str = "score"
    prediction_path: str = "prediction"
    scores_path: str = "scores"  # multiclass probabilities {class: p}
    lower_path: str = "lower"  # regression interval
    upper_path: str = "upper"
    features_path: str = "features"
    wants_features: bool = False  # decode the features object (drift is configured)
    segments_path: str = "segments"
    slices: tuple[SliceSpec, ...] = ()  # segment slices (empty: slice "all" only)
    estimation_bins: int = 0  # binary CBPE: score bins of all predictions (0: off)
    max_ece: float = 0.05  # CBPE flagged unreliable above this debiased ECE
    ks: tuple[int, ...] = ()  # ranking: cut-offs of the @k metrics (the first: ndcg_loss)
    max_items: int = 1000  # ranking: longest ranked list / relevance map accepted
    items_path: str = "items"  # ranking: the ranked list of a prediction

    @property
    def params(self) -> ModelParams:
        """What its metric families' names and statistics depend on."""
        return ModelParams(
            self.task, self.classes, self.fbeta, self.quantiles, self.gain_fractions, self.ks
        )

    @property
    def exported(self) -> frozenset[str]:
        """The names its configured built-in metrics are exported under."""
        return exported_names(self.params, self.metrics)

    @property
    def slice_dimensions(self) -> tuple[str, ...]:
        """Every dimension any slice uses, in first-use order (the segment key's order)."""
        return tuple(dict.fromkeys(d for s in self.slices for d in s.dimensions))

    @property
    def slice_score_layout(self) -> ScoreLayout | None:
        """The coarser score histogram kept per (segment, bucket) so every exported slice
        of a binary model gets ROC/PR-AUC, log loss, Brier and calibration; None when the
        model has no slices or asks for no score metric."""
        wanted = self.exported
        if self.task != "binary" or not self.slices:
            return None
        if not (wanted & SCORE_METRICS) and self.costs is None:
            return None
        return ScoreLayout(bins=self.slice_score_bins, logit_range=SLICE_LOGIT_RANGE)

    @property
    def estimation_layout(self) -> ScoreLayout | None:
        """Bins of the prediction-time score histograms CBPE reads (None: no estimation)."""
        if self.task != "binary" or self.estimation_bins <= 0:
            return None
        return ScoreLayout(bins=self.estimation_bins, logit_range=SLICE_LOGIT_RANGE)

    @property
    def horizon_ms(self) -> int:
        """How far back the model's windows reach."""
        return max([w.size_ms + w.delay_ms for w in self.windows] + [0])

    @property
    def is_classifier(self) -> bool:
        return self.task in ("binary", "multiclass")

    def class_index(self, canonical: str) -> int:
        """Class index of a canonical label value, or -1 when it is not a class.

        Binary tasks also accept 1/0 (and so true/false, which decoding canonicalises
        to 1/0) for positive/negative, whatever the class names are.
        """
        if canonical in self.classes:
            return self.classes.index(canonical)
        if self.task == "binary":
            pos = self.classes.index(self.positive_class)
            if canonical == "1":
                return pos
            if canonical == "0":
                return 1 - pos
        return -1

    def is_positive(self, canonical: str) -> int:
        """1 positive, 0 negative, -1 not a class of this binary model."""
        idx = self.class_index(canonical)
        return -1 if idx < 0 else int(self.classes[idx] == self.positive_class)

    def label_class(self, canonical: str) -> int:
        """What the engine stores as this model's label: 1/0 for binary, the class index
        for multiclass, -1 when the label is no class (regression labels are numbers)."""
        if self.task == "binary":
            return self.is_positive(canonical)
        if self.task == "multiclass":
            return self.class_index(canonical)
        return -1


@dataclass(frozen=True, slots=True)
class ComparisonSpec:
    """A configured version comparison (see monitor.experiments)."""

    name: str
    model_index: int
    control: str
    treatment: str
    loss: str = "error_rate"
    mode: str = "split"  # "split" (A/B, canary) or "shadow" (both score every id)
    alpha: float = 0.05
    margin: float = 0.0
    min_samples: int = 1000
    min_events: float = 10.0  # burn-in in events (errors, discordant pairs, rare-class rows)
    horizon: int = 10_000  # samples per arm where the test is tuned to be most sensitive
    traffic_split: tuple[float, float] = (0.5, 0.5)
    srm_threshold: float = 0.001
    stale_after_ms: int = 900_000
    sequence: str = "auto"  # "auto" | "exact" | "mixture" (engine/comparisons.py)


@dataclass(frozen=True, slots=True)
class DriftSpec:
    """Drift monitoring of one model against a reference profile (monitor.drift)."""

    model_index: int
    profile: Any  # monitor.drift.reference.ReferenceProfile; None for a live reference
    fingerprint: str  # changes when the reference does: old histograms no longer apply
    features: tuple[str, ...] = ()  # tested features; empty: all in the profile
    windows: tuple[str, ...] = ()  # window labels; empty: all of the model's
    alpha: float = 0.05
    false_alarm_budget: float = 0.05  # per day, spent over the day's windows (drift/budget.py)
    correction: str = "bh"
    numeric_effect: float | None = None
    categorical_effect: float | None = None
    min_samples: int | None = None
    unseen_examples: int = field(default=5)
    live: str | None = None  # "first" or "previous": the reference is past live traffic
    live_span_ms: int = 0
    bootstrap: int = 10_000  # predictions that fix a live reference's bins and categories
    max_features: int = 100  # a live reference tracks at most this many feature names
