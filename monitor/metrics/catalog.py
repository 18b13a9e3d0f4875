"""The built-in catalogs: one family per statistic, each declaring its metrics.

Every family reads one statistic that one writer owns — the light confusion counts, the
score histograms, the multiclass, regression or ranking sums — and computes its values
in batches through the formulas of ``monitor.stats`` (which this module calls, never
copies). The configuration's catalogs, the Prometheus help texts and the metric table of
docs/metrics.md are generated from these declarations (:mod:`.registry`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import ClassVar

import numpy as np

from ..stats.binary import BinaryLayout, fbeta_name
from ..stats.multiclass import MulticlassLayout
from ..stats.ranking import RankingLayout
from ..stats.regression import RegressionLayout, mase, pinball_name
from ..stats.results import MetricValue
from ..stats.scores import gain_name
from .protocol import Definition, Direction, Metric, ModelParams, Series, Stat

__all__ = [
    "CONFUSION",
    "MULTICLASS",
    "RANKING",
    "REGRESSION",
    "SCORES",
    "BinaryCatalog",
    "MulticlassCatalog",
    "RankingCatalog",
    "RegressionCatalog",
    "ScoreCatalog",
]

# the built-in statistics' handles (their names are the stores' and checkpoints' columns)
CONFUSION = Stat("confusion", "light")  # TN, FP, FN, TP per (group, bucket): LightCounts
SCORES = Stat("scores")  # binary score histograms: fine per version, coarse per segment
ESTIMATION = Stat("est")  # prediction-time histograms of every prediction (CBPE)
EXPECTED_CONFUSION = Stat("mc_cm")  # multiclass CBPE: Σ p_j per decided class i
MULTICLASS = Stat("mc", "slice")
REGRESSION = Stat("rg", "slice")
RANKING = Stat("rk", "slice")

_B = frozenset({"binary"})
_M = frozenset({"multiclass"})
_BM = frozenset({"binary", "multiclass"})
_R = frozenset({"regression"})
_K = frozenset({"ranking"})
_H, _L, _N = Direction.HIGHER, Direction.LOWER, Direction.NEITHER


def _d(name: str, tasks: frozenset[str], help: str, unit: str = "ratio",
       direction: Direction = _H, **kw: bool | str) -> Definition:  # fmt: skip
    return Definition(name, tasks, help, unit, direction, **kw)  # type: ignore[arg-type]


class _Fbeta(Definition):
    def series(self, params: ModelParams) -> tuple[Series, ...]:
        return tuple(
            Series(n, n, f"F-beta score with beta = {b:g} (recall weighs beta times precision)")
            for b in params.fbeta
            for n in (fbeta_name(b),)
        )


class _Gain(Definition):
    def series(self, params: ModelParams) -> tuple[Series, ...]:
        out = []
        for f in params.gain_fractions:
            pct = f"{100 * f:g}"
            g, lift = gain_name(f, "gain"), gain_name(f, "lift")
            out.append(Series(g, g, f"Share of positives among the top {pct}% scores"))
            out.append(Series(lift, lift, f"Cumulative gain at the top {pct}% scores / {pct}%"))
        return tuple(out)


class _Pinball(Definition):
    def series(self, params: ModelParams) -> tuple[Series, ...]:
        return tuple(
            Series(n, n, f"Mean pinball (quantile) loss at quantile {q:g}")
            for q in params.quantiles
            for n in (pinball_name(q),)
        )


class _PerClass(Definition):
    def series(self, params: ModelParams) -> tuple[Series, ...]:
        return tuple(
            Series(f"{stem}[{c}]", f"class_{stem}",
                   f"Per-class (one vs rest) {stem} of a multiclass model", (("class", c),))
            for c in params.classes
            for stem in ("precision", "recall", "f1")
        )  # fmt: skip


class BinaryCatalog(Metric):
    """The binary confusion catalog: every rate of the four confusion counts, Wilson
    intervals, MCC and kappa by the Jeffreys posterior (``stats.binary``)."""

    name = "binary_confusion"
    tasks = _B
    reads = CONFUSION
    definitions = (
        _d("accuracy", _BM, "Share of labeled predictions that were correct", loss="error_rate"),
        _d("error_rate", _BM, "Share of labeled predictions that were wrong", direction=_L,
           loss="error_rate"),
        _d("precision", _B, "TP / (TP + FP): share of predicted positives that are positive"),
        _d("recall", _B, "TP / (TP + FN): share of actual positives that were predicted "
           "positive"),
        _d("specificity", _B, "TN / (TN + FP): share of actual negatives predicted negative"),
        _d("fpr", _B, "FP / (FP + TN): false positive rate", direction=_L),
        _d("fnr", _B, "FN / (FN + TP): false negative rate", direction=_L),
        _d("f1", _B, "Harmonic mean of precision and recall"),
        _Fbeta("fbeta", _B, "F-beta score, one per configured beta (f2, f0_5, ...)"),
        _d("balanced_accuracy", _B, "Mean of recall and specificity"),
        _d("hmean_class_accuracy", _B, "Harmonic mean of recall and specificity"),
        _d("mcc", _BM, "Matthews correlation coefficient", "correlation"),
        _d("cohen_kappa", _BM, "Cohen's kappa: agreement beyond chance", "agreement"),
        _d("prevalence", _B, "Share of labeled predictions that are positive in truth",
           direction=_N),
        _d("predicted_positive_rate", _B, "Share of labeled predictions predicted positive",
           direction=_N),
    )  # fmt: skip

    def __init__(self, betas: Sequence[float] = (), names: Collection[str] | None = None) -> None:
        super().__init__()
        self.layout = BinaryLayout(betas=tuple(betas))
        self.names = names

    def compute(
        self, stats: np.ndarray, confidence: float, long_run: np.ndarray | None = None
    ) -> list[list[MetricValue]]:
        """``long_run``: the same rows' counts over the model's longest window — the
        interval gates read its rates (``BinaryLayout.metrics_many``)."""
        return self.layout.metrics_many(stats, confidence, names=self.names, long_run=long_run)


class ScoreCatalog(Metric):
    """Binary score metrics from additive score histograms (``stats.scores``): slice
    ``all`` reads the version's fine histogram, a segment slice its coarser one."""

    name = "binary_scores"
    tasks = _B
    reads = SCORES
    definitions = (
        _d("roc_auc", _B, "Area under the ROC curve (score histograms; DeLong interval)",
           needs_scores=True),
        _d("pr_auc", _B, "Average precision (area under the precision-recall curve)",
           needs_scores=True),
        _d("pr_auc_debiased", _B, "Average precision with mid-rank precisions (less "
           "small-sample bias)", needs_scores=True),
        _d("log_loss", _BM, "Mean log loss of the scores", "nats", _L, needs_scores=True,
           loss="log_loss"),
        _d("brier", _BM, "Mean squared error of the scores (Brier score)", "score", _L,
           needs_scores=True, loss="squared_error"),
        _d("ece", _BM, "Expected calibration error, 10 equal-width bins (plug-in, biased "
           "upward)", direction=_L, needs_scores=True),
        _d("ece_debiased", _BM, "ECE minus the expected ECE of a calibrated model (about 0 "
           "if calibrated)", direction=_L, needs_scores=True),
        _d("calibration_p_value", _BM, "Calibration test p-value (Hosmer-Lemeshow "
           "chi-square over bins)", "p-value", _N, needs_scores=True),
        _d("ece_equal_mass", _B, "Expected calibration error, 10 equal-mass bins",
           direction=_L, needs_scores=True),
        _d("mce", _B, "Maximum calibration error over the equal-width bins", direction=_L,
           needs_scores=True),
        # credit scoring: 8 more series per slice and window, opt-in
        _d("ks_statistic", _B, "Kolmogorov-Smirnov distance between positive and negative "
           "scores", needs_scores=True, opt_in=True),
        _d("gini", _B, "Gini coefficient (accuracy ratio) = 2 AUC - 1", "correlation",
           needs_scores=True, opt_in=True),
        _Gain("gain", _B, "Cumulative gain and lift per gain fraction (gain_at_10, "
              "lift_at_10, ...)", needs_scores=True, opt_in=True),
    )  # fmt: skip


class MulticlassCatalog(Metric):
    """The multiclass catalog of one K×K confusion matrix and probability sums
    (``stats.multiclass``), every slice."""

    name = "multiclass"
    tasks = _M
    reads = MULTICLASS
    definitions = (
        _d("precision_macro", _M, "Unweighted mean of per-class precision (classes present)"),
        _d("precision_micro", _M, "Micro-averaged precision (equals accuracy for "
           "single-label)"),
        _d("precision_weighted", _M, "Per-class precision weighted by true support"),
        _d("recall_macro", _M, "Unweighted mean of per-class recall (classes present)"),
        _d("recall_micro", _M, "Micro-averaged recall (equals accuracy for single-label)"),
        _d("recall_weighted", _M, "Per-class recall weighted by true support"),
        _d("f1_macro", _M, "Unweighted mean of per-class F1 (classes present)"),
        _d("f1_micro", _M, "Micro-averaged F1 (equals accuracy for single-label)"),
        _d("f1_weighted", _M, "Per-class F1 weighted by true support"),
        _PerClass("per_class", _M, "Precision, recall and F1 of every class (the class "
                  "label)"),
        _d("cohen_kappa_linear", _M, "Cohen's kappa with linear disagreement weights "
           "(ordinal classes)", "agreement"),
        _d("cohen_kappa_quadratic", _M, "Cohen's kappa with quadratic disagreement weights",
           "agreement"),
    )  # fmt: skip
    # catalog order of the multiclass metrics (shared definitions come from their owners)
    ORDER: ClassVar[tuple[str, ...]] = (
        "accuracy", "error_rate", "precision_macro", "precision_micro", "precision_weighted",
        "recall_macro", "recall_micro", "recall_weighted", "f1_macro", "f1_micro",
        "f1_weighted", "per_class", "cohen_kappa", "cohen_kappa_linear",
        "cohen_kappa_quadratic", "mcc", "log_loss", "brier", "ece", "ece_debiased",
        "calibration_p_value",
    )  # fmt: skip

    def __init__(self, layout: MulticlassLayout, names: Collection[str]) -> None:
        super().__init__()
        self.layout, self.names = layout, names

    def compute(self, stats: np.ndarray, confidence: float) -> list[list[MetricValue]]:
        per_class = "per_class" in self.names
        out = []
        for vec in stats:
            values = self.layout.metrics(vec, confidence, per_class=per_class)
            acc = values[0]
            values.append(
                MetricValue("error_rate", 1 - acc.value, 1 - acc.upper, 1 - acc.lower, acc.n,
                            acc.method)
            )  # fmt: skip
            out.append(
                [mv for mv in values if mv.name in self.names or (per_class and "[" in mv.name)]
            )
        return out


class RegressionCatalog(Metric):
    """The regression catalog of error moments and interval counts (``stats.regression``)."""

    name = "regression"
    tasks = _R
    reads = REGRESSION
    definitions = (
        _d("mae", _R, "Mean absolute error", "target units", _L, loss="absolute_error"),
        _d("mse", _R, "Mean squared error", "target units squared", _L, loss="squared_error"),
        _d("rmse", _R, "Root mean squared error", "target units", _L),
        _d("r2", _R, "Coefficient of determination R^2", "ratio"),
        _d("mean_error", _R, "Mean of prediction minus target (bias; > 0 over-predicts)",
           "target units", _N),
        _d("mape", _R, "Mean absolute percentage error (zero targets excluded, see "
           "mlmon_excluded_rows)", direction=_L),
        _d("smape", _R, "Symmetric mean absolute percentage error, 2|e|/(|y|+|yhat|)",
           direction=_L),
        _d("male", _R, "Mean absolute log error |log1p(yhat) - log1p(y)|", "log units", _L),
        _d("huber", _R, "Mean Huber loss (configured delta)", "target units", _L),
        _Pinball("pinball", _R, "Mean pinball (quantile) loss, one per configured quantile",
                 "target units", _L),
        _d("interval_coverage", _R, "Share of targets inside the predicted [lower, upper] "
           "interval", direction=_N),
        _d("interval_width", _R, "Mean width of the predicted interval", "target units", _L),
        _d("mase", _R, "Mean absolute scaled error: MAE / in-sample seasonal naive MAE",
           "ratio", _L),
    )  # fmt: skip

    def __init__(self, layout: RegressionLayout, names: Collection[str],
                 mase_scale: float | None = None) -> None:  # fmt: skip
        super().__init__()
        self.layout, self.names, self.mase_scale = layout, names, mase_scale

    def compute(self, stats: np.ndarray, confidence: float) -> list[list[MetricValue]]:
        out = []
        for vec in stats:
            values = self.layout.metrics(vec, confidence)
            if self.mase_scale is not None:
                values.append(mase(values[0], self.mase_scale))  # values[0] is MAE
            out.append([mv for mv in values if mv.name in self.names])
        return out


class RankingCatalog(Metric):
    """Per-query ranking means over a window's labelled queries (``stats.ranking``)."""

    name = "ranking"
    tasks = _K
    reads = RANKING
    definitions = (
        _d("ndcg", _K, "Mean NDCG@{k} per query (linear gain, log2 discount; ties averaged)",
           per_k=True, loss="ndcg_loss"),
        _d("map", _K, "Mean average precision@{k} per query (divided by min(relevant, {k}))",
           per_k=True),
        _d("mrr", _K, "Mean reciprocal rank of the first relevant item (per query, whole "
           "list)"),
        _d("precision", _K, "Mean share of relevant items among the top {k} per query",
           per_k=True),
        _d("recall", _K, "Mean share of a query's relevant items ranked in its top {k}",
           per_k=True),
        _d("hit_rate", _K, "Share of queries with a relevant item in the top {k}", per_k=True),
    )  # fmt: skip
    ORDER: ClassVar[tuple[str, ...]] = ("ndcg", "map", "mrr", "precision", "recall", "hit_rate")

    def __init__(self, layout: RankingLayout, names: Collection[str]) -> None:
        super().__init__()
        self.layout, self.names = layout, names

    def compute(
        self, stats: np.ndarray, confidence: float, long_run: np.ndarray | None = None
    ) -> list[list[MetricValue]]:
        """``long_run``: one vector of this layout over the model's longest window (its
        mean and dispersion size the intervals, ``RankingLayout.metrics``)."""
        return [
            [mv for mv in self.layout.metrics(vec, confidence, long_run) if mv.name in self.names]
            for vec in stats
        ]

    def excluded(self, vec: np.ndarray) -> tuple[tuple[str, int], ...]:
        return tuple(sorted(self.layout.excluded(vec).items()))
