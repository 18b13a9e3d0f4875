"""The one list of quality metrics: name, tasks, help text, whether it needs scores.

Configuration validation (which names a model may ask for, the default catalog),
evaluation (which statistics to keep: score histograms only when a score metric is
wanted) and the Prometheus help texts all read this table, so a metric is added in one
place. A new task (e.g. ranking) registers its own entries with :func:`register`; a name
shared by several tasks has one help text. The comparison losses (``LOSSES``) live here
too: configuration validates ``comparisons.loss`` against them and the engine keeps one
row of loss moments per name, in this order.

Plain data, no imports from the rest of the monitor (config, engine and export use it).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "LOSSES",
    "MetricInfo",
    "help_text",
    "metric_info",
    "opt_in_metrics",
    "register",
    "score_metrics",
    "task_metrics",
]

# Per-prediction losses kept as cumulative moments (n, sum, sum of squares) per group,
# the sufficient statistics of version comparisons (monitor.experiments). Append only:
# stored engine state indexes its loss rows by position.
LOSSES: tuple[str, ...] = (
    "error_rate",
    "log_loss",
    "squared_error",
    "absolute_error",
    "ndcg_loss",
    # at prediction time, no label: P(decision wrong) if the scores are calibrated (CBPE)
    "estimated_error_rate",
)


@dataclass(frozen=True, slots=True)
class MetricInfo:
    """A configurable metric. ``needs_scores``: computed from score histograms (binary),
    kept only when asked for; ``opt_in``: exported only when listed in ``metrics``."""

    name: str
    tasks: frozenset[str]
    help: str
    needs_scores: bool = False
    opt_in: bool = False


_METRICS: dict[str, MetricInfo] = {}
_ORDER: dict[str, list[str]] = {}  # task -> names in registration order (the catalog)


def register(info: MetricInfo) -> None:
    """Add a metric (or the tasks of one already known, keeping its help text)."""
    known = _METRICS.get(info.name)
    if known is not None:
        info = MetricInfo(
            info.name, known.tasks | info.tasks, known.help, known.needs_scores, known.opt_in
        )
    _METRICS[info.name] = info
    for task in sorted(info.tasks):
        names = _ORDER.setdefault(task, [])
        if info.name not in names:
            names.append(info.name)


def task_metrics(task: str) -> tuple[str, ...]:
    """Every metric name a model of ``task`` may ask for, in catalog order."""
    return tuple(_ORDER.get(task, ()))


def metric_info(name: str) -> MetricInfo | None:
    return _METRICS.get(name)


def help_text(name: str) -> str:
    """The Prometheus help text of a metric: a registered one's, an exported-only
    name's (CBPE estimates), a parametrised name's (F-beta ``f0_5``, pinball loss
    ``pinball_q0_9``, gain and lift ``gain_at_10``); else the name itself."""
    info = _METRICS.get(name)
    if info is not None:
        return info.help
    if name in _EXPORTED_HELP:
        return _EXPORTED_HELP[name]
    if name[:1] == "f" and name[1:2].isdigit():  # stats.binary.fbeta_name: f2, f0_5
        beta = name[1:].replace("_", ".")
        return f"F-beta score with beta = {beta} (recall weighs beta times precision)"
    if name.startswith("pinball_q"):  # stats.regression.pinball_name
        return "Mean pinball (quantile) loss at quantile " + name[9:].replace("_", ".")
    if name.startswith("gain_at_"):  # stats.scores.gain_name
        return f"Share of positives among the top {name[8:].replace('_', '.')}% scores"
    if name.startswith("lift_at_"):
        pct = name[8:].replace("_", ".")
        return f"Cumulative gain at the top {pct}% scores / {pct}%"
    return name


def score_metrics() -> frozenset[str]:
    return frozenset(n for n, i in _METRICS.items() if i.needs_scores)


def opt_in_metrics() -> frozenset[str]:
    return frozenset(n for n, i in _METRICS.items() if i.opt_in)


# name -> (help, needs scores, opt-in)
_BUILTIN: dict[str, tuple[str, bool, bool]] = {
    "accuracy": ("Share of labeled predictions that were correct", False, False),
    "error_rate": ("Share of labeled predictions that were wrong", False, False),
    "precision": ("TP / (TP + FP): share of predicted positives that are positive", False, False),
    "recall": ("TP / (TP + FN): share of actual positives that were predicted positive", False,
               False),
    "specificity": ("TN / (TN + FP): share of actual negatives predicted negative", False, False),
    "fpr": ("FP / (FP + TN): false positive rate", False, False),
    "fnr": ("FN / (FN + TP): false negative rate", False, False),
    "f1": ("Harmonic mean of precision and recall", False, False),
    "fbeta": ("F-beta score, one per configured beta (f2, f0_5, ...)", False, False),
    "balanced_accuracy": ("Mean of recall and specificity", False, False),
    "hmean_class_accuracy": ("Harmonic mean of recall and specificity", False, False),
    "mcc": ("Matthews correlation coefficient", False, False),
    "cohen_kappa": ("Cohen's kappa: agreement beyond chance", False, False),
    "prevalence": ("Share of labeled predictions that are positive in truth", False, False),
    "predicted_positive_rate": ("Share of labeled predictions predicted positive", False, False),
    "roc_auc": ("Area under the ROC curve (score histograms; DeLong interval)", True, False),
    "pr_auc": ("Average precision (area under the precision-recall curve)", True, False),
    "pr_auc_debiased": ("Average precision with mid-rank precisions (less small-sample bias)",
                        True, False),
    "log_loss": ("Mean log loss of the scores", True, False),
    "brier": ("Mean squared error of the scores (Brier score)", True, False),
    "ece": ("Expected calibration error, 10 equal-width bins (plug-in, biased upward)", True,
            False),
    "ece_debiased": ("ECE minus the expected ECE of a calibrated model (about 0 if calibrated)",
                     True, False),
    "calibration_p_value": ("Calibration test p-value (Hosmer-Lemeshow chi-square over bins)",
                            True, False),
    "ece_equal_mass": ("Expected calibration error, 10 equal-mass bins", True, False),
    "mce": ("Maximum calibration error over the equal-width bins", True, False),
    # credit scoring: 8 more series per slice and window, which a fleet with many slices
    # should not pay for by default
    "ks_statistic": ("Kolmogorov-Smirnov distance between positive and negative scores", True,
                     True),
    "gini": ("Gini coefficient (accuracy ratio) = 2 AUC - 1", True, True),
    "gain": ("Cumulative gain and lift per gain fraction (gain_at_10, lift_at_10, ...)", True,
             True),
    "precision_macro": ("Unweighted mean of per-class precision (classes present)", False, False),
    "precision_micro": ("Micro-averaged precision (equals accuracy for single-label)", False,
                        False),
    "precision_weighted": ("Per-class precision weighted by true support", False, False),
    "recall_macro": ("Unweighted mean of per-class recall (classes present)", False, False),
    "recall_micro": ("Micro-averaged recall (equals accuracy for single-label)", False, False),
    "recall_weighted": ("Per-class recall weighted by true support", False, False),
    "f1_macro": ("Unweighted mean of per-class F1 (classes present)", False, False),
    "f1_micro": ("Micro-averaged F1 (equals accuracy for single-label)", False, False),
    "f1_weighted": ("Per-class F1 weighted by true support", False, False),
    "per_class": ("Precision, recall and F1 of every class (the class label)", False, False),
    "cohen_kappa_linear": ("Cohen's kappa with linear disagreement weights (ordinal classes)",
                           False, False),
    "cohen_kappa_quadratic": ("Cohen's kappa with quadratic disagreement weights", False, False),
    "mae": ("Mean absolute error", False, False),
    "mse": ("Mean squared error", False, False),
    "rmse": ("Root mean squared error", False, False),
    "r2": ("Coefficient of determination R^2", False, False),
    "mean_error": ("Mean of prediction minus target (bias; > 0 over-predicts)", False, False),
    "mape": ("Mean absolute percentage error (zero targets excluded, see mlmon_excluded_rows)",
             False, False),
    "smape": ("Symmetric mean absolute percentage error, 2|e|/(|y|+|yhat|)", False, False),
    "male": ("Mean absolute log error |log1p(yhat) - log1p(y)|", False, False),
    "huber": ("Mean Huber loss (configured delta)", False, False),
    "pinball": ("Mean pinball (quantile) loss, one per configured quantile", False, False),
    "interval_coverage": ("Share of targets inside the predicted [lower, upper] interval", False,
                          False),
    "interval_width": ("Mean width of the predicted interval", False, False),
    "mase": ("Mean absolute scaled error: MAE / in-sample seasonal naive MAE", False, False),
    # ranking: exported per cut-off k (ndcg_at_10, ...; stats/ranking.py words those)
    "ndcg": ("Normalized discounted cumulative gain at each configured k", False, False),
    "map": ("Mean average precision at each configured k", False, False),
    "mrr": ("Mean reciprocal rank of the first relevant item (per query, whole list)", False,
            False),
    "hit_rate": ("Share of queries with a relevant item in the top k", False, False),
}  # fmt: skip

# exported but not configurable by name: the label-free estimates (stats/estimation.py,
# CBPE, NannyML's confidence-based performance estimation) and their reliability flag
_EXPORTED_HELP: dict[str, str] = {
    "estimated_accuracy": "Label-free estimate (CBPE, from the scores of all predictions) of "
                          "accuracy: expected share of correct decisions if scores are calibrated",
    "estimated_precision": "Label-free estimate (CBPE) of precision: expected TP / predicted "
                           "positives if scores are calibrated",
    "estimated_recall": "Label-free estimate (CBPE) of recall: expected TP / expected positives "
                        "if scores are calibrated",
    "estimated_f1": "Label-free estimate (CBPE) of F1 from the expected confusion matrix",
    "estimated_roc_auc": "Label-free estimate (CBPE) of ROC AUC, each score counted as a "
                         "positive with its own probability (delta-method interval)",
    "estimated_precision_macro": "Label-free estimate (CBPE) of macro precision from the "
                                 "expected confusion matrix of the class probabilities",
    "estimated_recall_macro": "Label-free estimate (CBPE) of macro recall from the expected "
                              "confusion matrix of the class probabilities",
    "estimated_f1_macro": "Label-free estimate (CBPE) of macro F1 from the expected confusion "
                          "matrix of the class probabilities",
    "estimate_reliable": "1 when the version's debiased ECE over its longest window is at most "
                         "estimation.max_ece (the estimated_* metrics can be trusted), else 0",
}  # fmt: skip

# each task's catalog, in the order configuration errors list it
_CATALOGS: dict[str, tuple[str, ...]] = {
    "binary": (
        "accuracy", "error_rate", "precision", "recall", "specificity", "fpr", "fnr", "f1",
        "fbeta", "balanced_accuracy", "hmean_class_accuracy", "mcc", "cohen_kappa",
        "prevalence", "predicted_positive_rate", "roc_auc", "pr_auc", "pr_auc_debiased",
        "log_loss", "brier", "ece", "ece_debiased", "calibration_p_value", "ece_equal_mass",
        "mce", "ks_statistic", "gini", "gain",
    ),
    "multiclass": (
        "accuracy", "error_rate", "precision_macro", "precision_micro", "precision_weighted",
        "recall_macro", "recall_micro", "recall_weighted", "f1_macro", "f1_micro",
        "f1_weighted", "per_class", "cohen_kappa", "cohen_kappa_linear",
        "cohen_kappa_quadratic", "mcc", "log_loss", "brier", "ece", "ece_debiased",
        "calibration_p_value",
    ),
    "regression": (
        "mae", "mse", "rmse", "r2", "mean_error", "mape", "smape", "male", "huber", "pinball",
        "interval_coverage", "interval_width", "mase",
    ),
    "ranking": ("ndcg", "map", "mrr", "precision", "recall", "hit_rate"),
}  # fmt: skip

for _task, _names in _CATALOGS.items():
    for _name in _names:
        _help, _scores, _opt_in = _BUILTIN[_name]
        # needs_scores marks the binary score-histogram metrics only (multiclass keeps its
        # probability statistics whatever is asked)
        register(MetricInfo(_name, frozenset({_task}), _help, _scores and _task == "binary",
                            _opt_in))  # fmt: skip
