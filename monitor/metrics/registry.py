"""The registry, generated from the metric families' declarations.

Configuration (each task's catalog, the opt-in names, the comparison losses), the engine
(which statistics to keep: score histograms only when a score metric is wanted), the
exporter's help texts (the :class:`Series` table of a configured fleet: no name is ever
parsed back) and the metric table of docs/metrics.md all read these functions, so a
built-in metric is one class in :data:`BUILTIN` (and a plugin one discovered class).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from .catalog import (
    CONFUSION,
    BinaryCatalog,
    MulticlassCatalog,
    RankingCatalog,
    RegressionCatalog,
    ScoreCatalog,
)
from .npv import NegativePredictiveValue
from .protocol import TASKS, Definition, Metric, ModelParams, Series
from .top_k import TopKAccuracy

__all__ = [
    "BUILTIN",
    "ESTIMATED",
    "LOSSES",
    "Loss",
    "confusion_views",
    "definition",
    "docs_table",
    "exported_names",
    "opt_in_metrics",
    "own_families",
    "score_metrics",
    "series_of",
    "series_table",
    "task_losses",
    "task_metrics",
]

# every built-in family, in catalog order within each task
BUILTIN: tuple[type[Metric], ...] = (
    BinaryCatalog,
    ScoreCatalog,
    NegativePredictiveValue,
    MulticlassCatalog,
    TopKAccuracy,
    RegressionCatalog,
    RankingCatalog,
)


@dataclass(frozen=True, slots=True)
class Loss:
    """A per-prediction loss a version comparison may use (docs/comparisons.md)."""

    name: str
    tasks: frozenset[str]
    help: str


# Kept as cumulative moments (n, sum, sum of squares) per comparison arm, the sufficient
# statistics of the sequential tests (monitor.experiments). Append only: stored engine
# state indexes its loss rows by position (plugin losses follow, saved by name).
LOSSES_DECLARED: tuple[Loss, ...] = (
    Loss("error_rate", frozenset({"binary", "multiclass"}), "1 if the decision was wrong"),
    Loss("log_loss", frozenset({"binary", "multiclass"}),
         "-log of the probability given to the true class"),
    Loss("squared_error", frozenset({"binary", "multiclass", "regression"}),
         "(p - y)^2 of the score (multiclass: the Brier sum over classes); regression: "
         "(prediction - target)^2"),
    Loss("absolute_error", frozenset({"binary", "regression"}),
         "|p - y| of the score; regression: |prediction - target|"),
    Loss("ndcg_loss", frozenset({"ranking"}), "1 - NDCG@k of a query, k the first cut-off"),
    Loss("estimated_error_rate", frozenset({"binary", "multiclass"}),
         "label-free: P(decision wrong) from the score at prediction time (CBPE)"),
)  # fmt: skip
LOSSES: tuple[str, ...] = tuple(loss.name for loss in LOSSES_DECLARED)

# exported beside the catalog, not configurable by name: label-free estimates (CBPE)
ESTIMATED: tuple[Series, ...] = tuple(
    Series(name, name, text)
    for name, text in (
        ("estimated_accuracy", "Label-free estimate (CBPE, from the scores of all "
         "predictions) of accuracy: expected share of correct decisions if scores are "
         "calibrated"),
        ("estimated_precision", "Label-free estimate (CBPE) of precision: expected TP / "
         "predicted positives if scores are calibrated"),
        ("estimated_recall", "Label-free estimate (CBPE) of recall: expected TP / expected "
         "positives if scores are calibrated"),
        ("estimated_f1", "Label-free estimate (CBPE) of F1 from the expected confusion "
         "matrix"),
        ("estimated_roc_auc", "Label-free estimate (CBPE) of ROC AUC, each score counted as "
         "a positive with its own probability (delta-method interval)"),
        ("estimated_precision_macro", "Label-free estimate (CBPE) of macro precision from "
         "the expected confusion matrix of the class probabilities"),
        ("estimated_recall_macro", "Label-free estimate (CBPE) of macro recall from the "
         "expected confusion matrix of the class probabilities"),
        ("estimated_f1_macro", "Label-free estimate (CBPE) of macro F1 from the expected "
         "confusion matrix of the class probabilities"),
        ("estimate_reliable", "1 when the estimated_* metrics can be trusted: labels enough "
         "to recalibrate them, the raw scores' debiased ECE at most estimation.max_ece and the "
         "calibration at most half of each interval's variance; else 0 (intervals withheld)"),
    )
)  # fmt: skip

# the order configuration errors list a task's catalog in (earlier releases' order,
# new metrics appended)
_ORDER: dict[str, tuple[str, ...]] = {"multiclass": MulticlassCatalog.ORDER}


def _by_task() -> dict[str, dict[str, Definition]]:
    out: dict[str, dict[str, Definition]] = {t: {} for t in TASKS}
    for family in BUILTIN:
        for d in family.declared():
            for task in d.tasks:
                out[task].setdefault(d.name, d)
    for task, order in _ORDER.items():
        known = out[task]
        out[task] = {n: known[n] for n in order} | known
    return out


_DEFINITIONS = _by_task()


def definition(task: str, name: str) -> Definition | None:
    return _DEFINITIONS.get(task, {}).get(name)


def task_metrics(task: str) -> tuple[str, ...]:
    """Every metric name a model of ``task`` may ask for, in catalog order."""
    return tuple(_DEFINITIONS.get(task, {}))


def opt_in_metrics() -> frozenset[str]:
    return frozenset(n for defs in _DEFINITIONS.values() for n, d in defs.items() if d.opt_in)


def score_metrics() -> frozenset[str]:
    """Binary metrics computed from score histograms (the rest need confusion counts)."""
    return frozenset(n for n, d in _DEFINITIONS["binary"].items() if d.needs_scores)


def task_losses(task: str) -> tuple[str, ...]:
    return tuple(loss.name for loss in LOSSES_DECLARED if task in loss.tasks)


def series_of(
    params: ModelParams, metrics: Iterable[str], plugins: Sequence[Metric] = ()
) -> tuple[Series, ...]:
    """Every value a model with ``params`` and configured ``metrics`` exports, with the
    plugins' (that serve its task) and the label-free estimates."""
    out: list[Series] = []
    for name in metrics:
        d = definition(params.task, name)
        if d is not None:
            out.extend(d.series(params))
    for plugin in plugins:
        if params.task in plugin.tasks:
            out.extend(plugin.series(params))
    if params.task in ("binary", "multiclass"):
        out.extend(ESTIMATED)
    return tuple(out)


def series_table(
    models: Iterable[tuple[ModelParams, Iterable[str]]], plugins: Sequence[Metric] = ()
) -> dict[str, Series]:
    """Name -> exported series of a fleet (each model's parameters and metrics)."""
    out: dict[str, Series] = {}
    for params, metrics in models:
        for s in series_of(params, metrics, plugins):
            out.setdefault(s.name, s)
    return out


def _asked(family: type[Metric], params: ModelParams, metrics: Iterable[str]) -> bool:
    return params.task in family.tasks and any(d.name in metrics for d in family.declared())


def own_families(params: ModelParams, metrics: Iterable[str]) -> tuple[Metric, ...]:
    """The built-in families with a statistic of their own that a model asks for
    (kept per (version, bucket) beside the plugins' statistics)."""
    metrics = frozenset(metrics)
    return tuple(
        cls.for_model(params)
        for cls in BUILTIN
        if cls.reads is None and _asked(cls, params, metrics)
    )


def confusion_views(params: ModelParams, metrics: Iterable[str]) -> tuple[Metric, ...]:
    """The built-in families besides the binary catalog that read the confusion counts
    and that a model asks for (computed with the catalog, for every slice)."""
    metrics = frozenset(metrics)
    return tuple(
        cls.for_model(params)
        for cls in BUILTIN
        if cls.reads == CONFUSION and cls is not BinaryCatalog and _asked(cls, params, metrics)
    )


def exported_names(params: ModelParams, metrics: Iterable[str]) -> frozenset[str]:
    """The names configured built-in ``metrics`` are exported under (``fbeta`` stands
    for ``f2``, ``f0_5``, ...; a per-k ranking metric for one name per cut-off), with
    the configured names themselves (what evaluation asks "is it wanted?" by).
    Kept per configuration: every evaluation asks it of every model (150 calls building
    the same sets were 0.065 s of a profiled 50-model tick)."""
    return _exported_names(params, tuple(metrics))


@lru_cache(maxsize=1024)
def _exported_names(params: ModelParams, metrics: tuple[str, ...]) -> frozenset[str]:
    names = {s.name for s in series_of(params, metrics) if s not in ESTIMATED}
    per_k = {m for m in metrics if (d := definition(params.task, m)) is not None and d.per_k}
    return frozenset(names | (set(metrics) - (per_k if params.ks else set())))


def docs_table() -> str:
    """The metric table of docs/metrics.md (a test checks the page holds exactly this)."""
    rows = ["| metric | tasks | unit | better | help |", "|---|---|---|---|---|"]
    seen: set[tuple[str, str]] = set()
    for task in TASKS:
        for name, d in _DEFINITIONS[task].items():
            if (name, d.help) in seen:
                continue
            seen.add((name, d.help))
            tasks = ", ".join(t for t in TASKS if _DEFINITIONS[t].get(name) is d)
            flags = [f for f, on in (("opt-in", d.opt_in), ("per k", d.per_k)) if on]
            text = d.help.replace("{k}", "k").replace("|", "\\|")
            if flags:
                text += f" ({', '.join(flags)})"
            rows.append(f"| `{name}` | {tasks} | {d.unit} | {d.direction.value} | {text} |")
    rows += ["", "| comparison loss | tasks | per prediction |", "|---|---|---|"]
    rows += [
        f"| `{loss.name}` | {', '.join(t for t in TASKS if t in loss.tasks)} | "
        f"{loss.help.replace('|', chr(92) + '|')} |"
        for loss in LOSSES_DECLARED
    ]
    return "\n".join(rows) + "\n"
