"""The metric protocol shared by built-in metrics and plugins, for every task.

A metric *family* is one class. It declares

- what it exports: its :class:`Definition` s (configurable name, help, unit, direction,
  tasks) and, for a model's parameters, the :class:`Series` each one is exported as
  (``fbeta`` → ``f2``, ``f0_5``; ``top_k_accuracy`` → ``top_2_accuracy``, ...);
- its sufficient statistic: a typed :class:`Stat` handle and a fixed width. The
  statistic of a window is the sum of its buckets' vectors (mergeable summaries, Agarwal
  et al. 2012), so partitions, buckets and restarts combine by ``+``. A family with
  ``width() == 0`` writes nothing and reads a statistic another writer owns (the
  confusion counts, say): one writer per statistic, views over it;
- ``update(matrix, rows, batch)``: add a vectorized batch of joined rows of its task
  (``BinaryRows``, ``MulticlassRows``, ``RegressionRows``, ``RankingRows``) into
  ``matrix[rows[i]]``;
- ``compute(stats, confidence)``: values with intervals from a (rows × width) stack of
  summed statistics, one list per row — a scalar is a 1-row batch, so slice ``all`` and
  every segment slice go through the same code;
- optionally ``loss(batch)``: a per-prediction loss, which makes it usable as a version
  comparison's ``loss`` under the family's ``name`` (the sequential tests need only
  per-prediction losses), with ``loss_bound`` when the loss is bounded.

Pure: numpy and the stats package, no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..stats.results import MetricValue

__all__ = [
    "TASKS",
    "BinaryRows",
    "Definition",
    "Direction",
    "Metric",
    "ModelParams",
    "MulticlassRows",
    "RankingRows",
    "RegressionRows",
    "Series",
    "Stat",
]

TASKS: tuple[str, ...] = ("binary", "multiclass", "regression", "ranking")


class Direction(enum.Enum):
    """Which way is better: what an SLO's objective and a dashboard's colours assume."""

    HIGHER = "higher"
    LOWER = "lower"
    NEITHER = "neither"  # a rate of the data (prevalence), a bias, a p-value


@dataclass(frozen=True, slots=True)
class Stat:
    """A typed handle of a sufficient statistic kept in a model's bucket stores.

    ``name`` is the column's name in the stores and checkpoints (it never changes: saved
    states are read by it); ``scope`` says which store holds it: ``version`` — a row per
    (version, bucket), feeding slice ``all``; ``slice`` — a row per (segment, bucket),
    feeding every slice; ``light`` — the light counts every model has."""

    name: str
    scope: str = "version"

    @property
    def key(self) -> str:
        """The column's key in a store's arrays (and so in the checkpoint)."""
        return f"m.{self.name}"


@dataclass(frozen=True, slots=True)
class ModelParams:
    """What a family's exported names and statistics depend on, from the model's config."""

    task: str = "binary"
    classes: tuple[str, ...] = ()
    fbeta: tuple[float, ...] = ()
    quantiles: tuple[float, ...] = ()
    gain_fractions: tuple[float, ...] = ()
    ks: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Series:
    """One exported value: ``mlmon_<family>{<labels>}`` and its help text. ``name`` is
    the name the value carries in results, the JSON API and SLOs."""

    name: str
    family: str
    help: str
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Definition:
    """A metric a model's ``metrics`` may list: its name, help, unit and direction.

    ``needs_scores``: binary, computed from score histograms (kept only when asked for);
    ``opt_in``: left out of the default catalog; ``per_k``: exported once per ranking
    cut-off (``ndcg_at_10``); ``loss``: the per-prediction loss a comparison may use
    under the same name (empty: none)."""

    name: str
    tasks: frozenset[str]
    help: str
    unit: str = "ratio"
    direction: Direction = Direction.HIGHER
    needs_scores: bool = False
    opt_in: bool = False
    per_k: bool = False
    loss: str = ""

    def series(self, params: ModelParams) -> tuple[Series, ...]:
        """The exported values of this definition for a model's parameters (default:
        one under its own name; ``per_k``: one per cut-off)."""
        if self.per_k and params.ks:
            return tuple(
                Series(f"{self.name}_at_{k}", f"{self.name}_at_{k}", self.help.format(k=k))
                for k in params.ks
            )
        return (Series(self.name, self.name, self.help.replace("{k}", "k")),)


@dataclass(frozen=True, slots=True)
class BinaryRows:
    """Joined rows of one binary model."""

    y_true: np.ndarray  # int8: 1 positive, 0 negative
    y_pred: np.ndarray  # int8: the deployed decision, 1 positive
    score: np.ndarray  # float64: P(positive), NaN where the record carried no score


@dataclass(frozen=True, slots=True)
class MulticlassRows:
    """Joined rows of one multiclass model (class indices in the configured order)."""

    y_true: np.ndarray  # intp: the labelled class
    y_pred: np.ndarray  # intp: the decided class
    proba: np.ndarray  # (rows, K) float64: class probabilities, NaN rows where absent


@dataclass(frozen=True, slots=True)
class RegressionRows:
    """Joined rows of one regression model."""

    y_true: np.ndarray  # float64: the target
    y_pred: np.ndarray  # float64: the prediction
    lower: np.ndarray  # float64: predicted interval bounds, NaN where absent
    upper: np.ndarray


@dataclass(frozen=True, slots=True)
class RankingRows:
    """Joined queries of one ranking model: query ``i``'s items are
    ``gains[offsets[i]:offsets[i + 1]]`` in ranked order (their relevance grades, 0 for
    an unjudged item), and ``unjudged_relevant[i]`` counts relevant judged items its list
    left out (they still count as relevant, as for recall)."""

    gains: np.ndarray  # float64, every query's grades in ranked order, concatenated
    offsets: np.ndarray  # int64, len(queries) + 1
    unranked_relevant: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def queries(self) -> int:
        return int(self.offsets.shape[0] - 1)


Batch = BinaryRows | MulticlassRows | RegressionRows | RankingRows


class Metric:
    """Base class of metric families, built-in and plugin alike.

    Subclasses set ``name`` (unique, ``[a-z][a-z0-9_]*``), ``tasks`` and either
    ``definitions`` or the one-metric shorthand ``help``/``unit``/``direction``; they
    implement ``width``/``update`` (their own statistic) and ``compute`` (or the
    one-vector ``metrics``). Options from ``[plugins.options.<name>]`` (plugins) arrive
    as keyword arguments."""

    name: ClassVar[str] = ""
    tasks: ClassVar[frozenset[str]] = frozenset({"binary"})
    help: ClassVar[str] = ""
    unit: ClassVar[str] = "ratio"
    direction: ClassVar[Direction] = Direction.HIGHER
    definitions: ClassVar[tuple[Definition, ...]] = ()
    # the statistic it reads when it owns none (width 0): e.g. the confusion counts
    reads: ClassVar[Stat | None] = None
    # the largest value ``loss`` can take, if bounded: lets a comparison on it use the
    # exact bounded-loss sequence (``sequence = "exact"``)
    loss_bound: ClassVar[float | None] = None

    def __init__(self, **options: Any) -> None:
        self.options = options

    @classmethod
    def for_model(cls, params: ModelParams) -> Metric:
        """A built-in family for one model (what its statistic depends on)."""
        return cls()

    # -- what it exports -----------------------------------------------------------
    @classmethod
    def declared(cls) -> tuple[Definition, ...]:
        """Its definitions (the one-metric shorthand makes one of ``name``, ``help``)."""
        if cls.definitions:
            return cls.definitions
        if not cls.name:
            return ()
        loss = cls.name if cls.loss is not Metric.loss else ""
        return (
            Definition(cls.name, frozenset(cls.tasks), cls.help or cls.name, cls.unit,
                       cls.direction, loss=loss),
        )  # fmt: skip

    def series(self, params: ModelParams) -> tuple[Series, ...]:
        """Every value it exports for a model with ``params``."""
        return tuple(s for d in self.declared() if params.task in d.tasks for s in d.series(params))

    # -- its statistic -------------------------------------------------------------
    @property
    def stat(self) -> Stat:
        """The handle of its own statistic (plugins' columns keep their historic name)."""
        return Stat(f"p_{self.name}")

    def width(self) -> int:
        """Length of its sufficient-statistic vector (fixed); 0: it reads ``reads``."""
        return 0

    def update(self, matrix: np.ndarray, rows: np.ndarray, batch: Any) -> None:
        """Add ``batch``'s event ``i`` into ``matrix[rows[i]]`` (``np.add.at``: several
        events may share a row)."""

    # -- its values ----------------------------------------------------------------
    def compute(self, stats: np.ndarray, confidence: float) -> list[list[MetricValue]]:
        """Values of each row of a (rows × width) stack of summed statistics."""
        if type(self).metrics is Metric.metrics:
            raise NotImplementedError(
                f"{type(self).__name__} implements neither compute nor metrics"
            )
        return [list(self.metrics(row, confidence)) for row in stats]

    def metrics(self, vec: np.ndarray, confidence: float) -> list[MetricValue]:
        """Values of one summed statistic vector (a 1-row ``compute``)."""
        if type(self).compute is Metric.compute:
            raise NotImplementedError(
                f"{type(self).__name__} implements neither compute nor metrics"
            )
        return self.compute(vec[np.newaxis, :], confidence)[0]

    # -- as a comparison loss ------------------------------------------------------
    def loss(self, batch: Any) -> np.ndarray:
        """Per-prediction loss of each row of ``batch`` (NaN where undefined); a family
        that overrides this can be a version comparison's ``loss``."""
        raise NotImplementedError

    @classmethod
    def has_loss(cls) -> bool:
        return cls.loss is not Metric.loss


def task_batch_fields(task: str) -> tuple[str, ...]:
    """The fields of a task's batch (docs)."""
    cls: Mapping[str, type] = {
        "binary": BinaryRows,
        "multiclass": MulticlassRows,
        "regression": RegressionRows,
        "ranking": RankingRows,
    }
    return tuple(cls[task].__dataclass_fields__)


def ensure_sequence(values: Sequence[MetricValue]) -> list[MetricValue]:
    """A plugin's values as plain ``MetricValue`` s (numbers converted, checked)."""
    return [
        MetricValue(v.name, float(v.value), float(v.lower), float(v.upper), int(v.n), v.method,
                    getattr(v, "note", ""))
        for v in values
    ]  # fmt: skip
