"""Ranking / recommendation metrics per query, and their fixed-size additive window layout.

A ranked list (one query, one request) is scored against the relevance grades of its label:
NDCG@k (Järvelin & Kekäläinen 2002, linear gain and ``1/log2(rank + 1)`` discount, exactly
scikit-learn's ``ndcg_score``), AP@k, reciprocal rank, precision@k, recall@k and hit@k
(Manning, Raghavan & Schütze 2008, ch. 8). An item is *relevant* for the binary metrics when
its grade is > 0; unjudged items have grade 0; relevant items the list did not rank still
count in the ideal DCG and in R (the recall denominator).

Ties. Items with equal scores form a tie group and every metric is its *expected value over
the random orders of each group* — for NDCG precisely what ``ndcg_score(ignore_ties=False)``
computes (each position gets its group's mean gain, McSherry & Najork 2008, "Computing
information retrieval performance measures efficiently in the presence of tied scores").
The binary metrics follow from E[rel_i] = r_g/g (position i in group g of size g holding r_g
relevant items) and, for AP, E[rel_i·rel_j] = r_g(r_g − 1)/(g(g − 1)) within a group.

Normalisation: AP@k divides by min(R, k); precision@k by k (a list shorter than k is
penalised); reciprocal rank covers the whole list (0 when no relevant item is ranked).
Queries whose label holds no relevant item leave every metric undefined (sklearn would score
NDCG 0, TREC drops them); they are counted apart (:meth:`RankingLayout.excluded`).

Window layout (float64, ``width = 4 + 10·len(ks)``; all entries are sums over queries):
``[n, n_without_relevant, Σrr, Σrr²]`` then per k ``Σndcg, Σndcg², Σap, Σap², Σp, Σp², Σr,
Σr², Σhit, Σhit²``. Each metric is a per-query mean with a CLT interval
(:func:`monitor.stats.common.clt_mean`): queries are the independent units.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import comb

from .common import as_index as _as_index
from .common import clt_mean
from .results import MetricValue

__all__ = [
    "RankedList",
    "RankingLayout",
    "grades_for",
    "query_metrics",
    "ranking_metric_help",
    "ranking_metric_names",
]

_PER_K = ("ndcg_at", "map_at", "precision_at", "recall_at", "hit_rate_at")
_BASE = 4


@dataclass(frozen=True, slots=True)
class RankedList:
    """One query's ranked items and their scores (higher = ranked higher)."""

    items: tuple[str, ...]
    scores: np.ndarray


_HELP = {
    "mrr": "Mean reciprocal rank of the first relevant item (per query, whole list)",
    "ndcg_at": "Mean NDCG@{k} per query (linear gain, log2 discount; ties averaged)",
    "map_at": "Mean average precision@{k} per query (divided by min(relevant, {k}))",
    "precision_at": "Mean share of relevant items among the top {k} per query",
    "recall_at": "Mean share of a query's relevant items ranked in its top {k}",
    "hit_rate_at": "Share of queries with a relevant item in the top {k}",
}


def ranking_metric_help(name: str) -> str | None:
    """The help text of a ranking metric name (``ndcg_at_10``), None for other names."""
    if name == "mrr":
        return _HELP["mrr"]
    stem, _, k = name.rpartition("_")
    text = _HELP.get(stem)
    return text.format(k=k) if text is not None and k.isdigit() else None


def grades_for(ranked: RankedList, relevance: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """(grade of each ranked item, grades of judged items the list did not rank)."""
    grades = np.array([relevance.get(i, 0.0) for i in ranked.items], dtype=np.float64)
    listed = set(ranked.items)
    unranked = np.array([g for i, g in relevance.items() if i not in listed], dtype=np.float64)
    return grades, unranked


def ranking_metric_names(ks: Sequence[int]) -> list[str]:
    """The names :meth:`RankingLayout.metrics` reports, in order."""
    return ["mrr"] + [f"{stem}_{k}" for k in ks for stem in _PER_K]


def _groups(scores: np.ndarray, relevant: np.ndarray, gains: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per position (sorted by descending score): group size, group relevant count, mean gain,
    and the group's first position; plus the group id of each position."""
    order = np.argsort(-scores, kind="stable")
    s = scores[order]
    if s.size < 2 or bool((s[1:] != s[:-1]).all()):  # no ties: every item its own group
        pos = np.arange(s.size)
        return np.ones(s.size, np.int64), relevant[order].astype(np.float64), gains[order], pos, pos
    _, start, inv, size = np.unique(-s, return_index=True, return_inverse=True, return_counts=True)
    rel_g = np.bincount(inv, weights=relevant[order].astype(np.float64), minlength=size.size)
    gain_g = np.bincount(inv, weights=gains[order], minlength=size.size) / size
    return size[inv], rel_g[inv], gain_g[inv], start[inv], inv


def query_metrics(
    scores: np.ndarray,
    grades: np.ndarray,
    ks: Sequence[int],
    unranked_grades: np.ndarray | None = None,
) -> np.ndarray | None:
    """One query's contribution row (the layout's width), or None without a relevant item.

    ``scores`` and ``grades`` are per ranked item (higher score = ranked higher; grade 0 =
    not relevant or unjudged); ``unranked_grades`` are the grades of labelled items the list
    did not contain (they raise the ideal DCG and R).
    """
    scores = np.asarray(scores, dtype=np.float64)
    gains = np.asarray(grades, dtype=np.float64)
    extra = np.zeros(0) if unranked_grades is None else np.asarray(unranked_grades, np.float64)
    relevant = gains > 0
    n_rel = int(relevant.sum()) + int((extra > 0).sum())
    row = np.zeros(_BASE + 10 * len(ks))
    row[0] = 1.0
    if n_rel == 0:
        row[1] = 1.0
        return row
    length = scores.size
    size, rel_g, gain_g, start, _ = _groups(scores, relevant, gains)
    q = rel_g / size  # E[rel_i] at each sorted position
    pos = np.arange(length)
    discount = 1.0 / np.log2(pos + 2.0)
    ideal = np.sort(np.concatenate([gains, extra]))[::-1]
    ideal_discount = 1.0 / np.log2(np.arange(ideal.size) + 2.0)
    rr = _expected_reciprocal_rank(size, rel_g, start)
    row[2], row[3] = rr, rr * rr
    # Σ_{j<=i} E[rel_i rel_j]: q_i·q_j for j in earlier groups (independent), the
    # without-replacement r(r − 1)/(g(g − 1)) for earlier slots of i's group, q_i for j = i
    with np.errstate(divide="ignore", invalid="ignore"):
        within = np.where(size > 1, rel_g * (rel_g - 1) / (size * (size - 1)), 0.0)
    before = np.concatenate([[0.0], np.cumsum(q)])[start]  # Σ q_j over earlier groups
    ap_terms = (q * before + (pos - start) * within + q) / (pos + 1.0)
    for j, k in enumerate(ks):
        top = min(k, length)
        idcg = float(ideal[:k] @ ideal_discount[: min(k, ideal.size)])
        dcg = float(gain_g[:top] @ discount[:top])
        ndcg = dcg / idcg if idcg > 0 else 0.0
        ap = float(ap_terms[:top].sum()) / min(n_rel, k)
        hits = float(q[:top].sum())
        precision, recall = hits / k, hits / n_rel
        hit = _expected_hit(size, rel_g, start, top)
        b = _BASE + 10 * j
        row[b : b + 10] = (
            ndcg,
            ndcg * ndcg,
            ap,
            ap * ap,
            precision,
            precision**2,
            recall,
            recall**2,
            hit,
            hit * hit,
        )
    return row


def _expected_reciprocal_rank(size: np.ndarray, rel_g: np.ndarray, start: np.ndarray) -> float:
    """E[1/rank of the first relevant item]: it lies in the first group holding one; with g
    items and r relevant there, it is at the group's j-th slot with probability
    C(g − j, r − 1)/C(g, r) (hypergeometric waiting time)."""
    hit = np.flatnonzero(rel_g > 0)
    if hit.size == 0:
        return 0.0
    i = int(hit[0])
    g, r, s = int(size[i]), int(rel_g[i]), int(start[i])
    if r == g:  # every item of the group is relevant: the first slot
        return 1.0 / (s + 1)
    j = np.arange(1, g - r + 2)
    prob = comb(g - j, r - 1) / comb(g, r)
    return float(prob @ (1.0 / (s + j)))


def _expected_hit(size: np.ndarray, rel_g: np.ndarray, start: np.ndarray, top: int) -> float:
    """P(at least one relevant item in the first ``top`` positions) under random tie orders."""
    inside = start < top
    if not inside.any():
        return 0.0
    if np.any(rel_g[inside & (start + size <= top)] > 0):
        return 1.0
    cut = np.flatnonzero(inside & (start + size > top))
    if cut.size == 0:
        return 0.0
    i = int(cut[0])
    g, r, m = int(size[i]), int(rel_g[i]), top - int(start[i])
    return float(1.0 - comb(g - r, m) / comb(g, m))


@dataclass(frozen=True, slots=True)
class RankingLayout:
    """Per-query sums for ranking metrics at the cut-offs ``ks``; see the module docstring."""

    ks: tuple[int, ...] = (5, 10)

    def __post_init__(self) -> None:
        if not self.ks or any(k < 1 for k in self.ks) or len(set(self.ks)) != len(self.ks):
            raise ValueError("ranking ks must be distinct integers >= 1")

    @property
    def width(self) -> int:
        return _BASE + 10 * len(self.ks)

    def empty(self) -> np.ndarray:
        return np.zeros(self.width, dtype=np.float64)

    def add_rows(
        self, matrix: np.ndarray, rows: np.ndarray | int, contributions: np.ndarray
    ) -> None:
        """Add per-query rows from :func:`query_metrics` into ``matrix[rows[i]]``."""
        c = np.atleast_2d(np.asarray(contributions, dtype=np.float64))
        np.add.at(matrix, _as_index(rows, c.shape[0]), c)

    def add_query(
        self,
        vec: np.ndarray,
        scores: np.ndarray,
        grades: np.ndarray,
        unranked_grades: np.ndarray | None = None,
    ) -> None:
        row = query_metrics(scores, grades, self.ks, unranked_grades)
        if row is not None:
            vec += row

    def metrics(self, vec: np.ndarray, confidence: float = 0.95) -> list[MetricValue]:
        """mrr, then per k: ndcg_at_k, map_at_k, precision_at_k, recall_at_k, hit_rate_at_k."""
        v = np.asarray(vec, dtype=np.float64)
        n = float(v[0] - v[1])
        unit = (0.0, 1.0)
        out = [clt_mean("mrr", float(v[2]), float(v[3]), n, confidence, unit)]
        for j, k in enumerate(self.ks):
            b = _BASE + 10 * j
            for i, stem in enumerate(_PER_K):
                total, total_sq = float(v[b + 2 * i]), float(v[b + 2 * i + 1])
                out.append(clt_mean(f"{stem}_{k}", total, total_sq, n, confidence, unit))
        return out

    def ndcg_loss(self, rows: np.ndarray) -> np.ndarray:
        """1 − NDCG@k at the first cut-off of per-query rows (:func:`query_metrics`), NaN
        for a query without a relevant item: the per-query loss of ranking comparisons."""
        r = np.atleast_2d(rows)
        scored = (r[:, 0] > 0) & (r[:, 1] == 0)
        return np.where(scored, 1.0 - r[:, _BASE], np.nan)

    def excluded(self, vec: np.ndarray) -> dict[str, int]:
        """Queries left out of every metric because their label holds no relevant item."""
        return {"without_relevant": int(vec[1])}
