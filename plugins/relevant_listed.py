"""Ranking: the mean number of relevant items (grade > 0) a ranked list holds per labelled
query — how much a user can find in what was shown, whatever its order.

A mean of counts has no bounded-proportion interval, so its interval comes from the
streaming Poisson bootstrap (``monitor.metrics.bootstrap``): the statistic keeps
[queries, relevant items] and 100 Poisson-weighted replicates of it, all summed by
addition like every statistic of the monitor.
"""

from __future__ import annotations

import numpy as np

from monitor.metrics.bootstrap import PoissonBootstrap
from monitor.plugins import Direction, Metric, MetricValue, RankingRows


def _mean(v: np.ndarray) -> float:
    return float(v[1] / v[0]) if v[0] > 0 else float("nan")


class RelevantListed(Metric):
    name = "relevant_listed"
    tasks = frozenset({"ranking"})
    help = "Mean number of relevant items in a query's ranked list (Poisson bootstrap interval)"
    unit = "items"
    direction = Direction.HIGHER

    def __init__(self, replicates: int = 100) -> None:
        super().__init__(replicates=replicates)
        self.boot = PoissonBootstrap(2, replicates)

    def width(self) -> int:
        return self.boot.total_width

    def update(self, matrix: np.ndarray, rows: np.ndarray, batch: RankingRows) -> None:
        relevant = np.add.reduceat(
            (batch.gains > 0).astype(np.float64), batch.offsets[:-1], axis=0
        ) if batch.gains.size else np.zeros(batch.queries)  # fmt: skip
        empty = np.diff(batch.offsets) == 0  # reduceat repeats a neighbour for empty lists
        relevant = np.where(empty, 0.0, relevant)
        parts = np.stack([np.ones(batch.queries), relevant], axis=1)
        self.boot.update(matrix, rows, parts)

    def metrics(self, vec: np.ndarray, confidence: float) -> list[MetricValue]:
        return [self.boot.interval(self.name, vec, _mean, int(vec[0]), confidence)]
