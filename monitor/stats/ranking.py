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

Batches. The engine scores every query a batch of records joins in one call
(:func:`batch_query_metrics`): queries of similar length form a padded matrix, a row per
query, and each step is a row-wise sort, a cumulative sum or a segment sum over the whole
matrix, so the cost is per item, not a Python loop per query.

Window layout (float64, ``width = 4 + 10·len(ks)``; all entries are sums over queries):
``[n, n_without_relevant, Σrr, Σrr²]`` then per k ``Σndcg, Σndcg², Σap, Σap², Σp, Σp², Σr,
Σr², Σhit, Σhit²``. Each metric is a per-query mean (queries are the independent units)
with a quasi-binomial score interval (:func:`monitor.stats.common.quasi_binomial_interval`,
Wilson's for hit@k): every per-query value lies in [0, 1], and a strong ranker's deficit
sits in a few queries, where the CLT interval covered 0.6 at 30 queries. Withheld below
:data:`MIN_QUERIES` queries; below
:data:`~monitor.stats.common.MIN_EXPECTED_EVENTS` expected "misses" (or hits) at the
long-run mean and dispersion the score interval gives way to the Clopper-Pearson interval
at the same effective counts (exact for hit@k).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .common import (
    MIN_EXPECTED_EVENTS,
    NAN,
    dispersion,
    quasi_binomial_interval,
    trials_reason,
)
from .common import as_index as _as_index
from .intervals import clopper_pearson_interval
from .results import MetricValue

__all__ = [
    "RankedList",
    "RankingLayout",
    "batch_query_metrics",
    "grades_for",
    "query_metrics",
    "ranking_metric_names",
]

_PER_K = ("ndcg_at", "map_at", "precision_at", "recall_at", "hit_rate_at")
_BASE = 4


@dataclass(frozen=True, slots=True)
class RankedList:
    """One query's ranked items and their scores (higher = ranked higher)."""

    items: tuple[str, ...]
    scores: np.ndarray


def grades_for(ranked: RankedList, relevance: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """(grade of each ranked item, grades of judged items the list did not rank)."""
    grades = np.array([relevance.get(i, 0.0) for i in ranked.items], dtype=np.float64)
    listed = set(ranked.items)
    unranked = np.array([g for i, g in relevance.items() if i not in listed], dtype=np.float64)
    return grades, unranked


def ranking_metric_names(ks: Sequence[int]) -> list[str]:
    """The names :meth:`RankingLayout.metrics` reports, in order."""
    return ["mrr"] + [f"{stem}_{k}" for k in ks for stem in _PER_K]


def query_metrics(
    scores: np.ndarray,
    grades: np.ndarray,
    ks: Sequence[int],
    unranked_grades: np.ndarray | None = None,
) -> np.ndarray:
    """One query's contribution row (the layout's width; ``[1, 1, 0, ...]`` without a
    relevant item): :func:`batch_query_metrics` of a batch of one.

    ``scores`` and ``grades`` are per ranked item (higher score = ranked higher; grade 0 =
    not relevant or unjudged); ``unranked_grades`` are the grades of labelled items the list
    did not contain (they raise the ideal DCG and R).
    """
    scores = np.asarray(scores, dtype=np.float64)
    extra = np.zeros(0) if unranked_grades is None else np.asarray(unranked_grades, np.float64)
    rows = batch_query_metrics(
        scores, np.asarray(grades, np.float64), np.array([scores.size]), extra,
        np.array([extra.size]), ks,
    )  # fmt: skip
    return rows[0]


def batch_query_metrics(
    scores: np.ndarray,
    grades: np.ndarray,
    lengths: np.ndarray,
    unranked_grades: np.ndarray,
    unranked_lengths: np.ndarray,
    ks: Sequence[int],
    *,
    all_judged: bool = False,
) -> np.ndarray:
    """The contribution rows of many queries at once (one row per query, the layout's
    width; a query without a relevant item gets ``[1, 1, 0, ...]``).

    The queries' ranked items are concatenated: ``scores`` and ``grades`` hold
    ``lengths[q]`` entries per query, ``unranked_grades`` holds ``unranked_lengths[q]``
    grades of labelled items query q's list did not contain — or, with ``all_judged``,
    every judged grade of query q, its ranked items' included: a list's items are
    distinct, so the ideal order and the count of relevant items are those of the judged
    grades alone, and the caller need not split a query's grades by membership in its
    list (a set operation per query). Queries of similar length
    (a power of two apart at most) are scored together as a padded matrix, a row per
    query: one row-wise sort, cumulative sums and segment sums over whole matrices, none
    a loop over queries."""
    lengths = np.asarray(lengths, np.int64)
    unranked_lengths = np.asarray(unranked_lengths, np.int64)
    nq = lengths.size
    out = np.zeros((nq, _BASE + 10 * len(ks)))
    if nq == 0:
        return out
    scores = np.asarray(scores, np.float64)
    grades = np.asarray(grades, np.float64)
    extra = np.asarray(unranked_grades, np.float64)
    start = np.cumsum(lengths) - lengths
    extra_start = np.cumsum(unranked_lengths) - unranked_lengths
    # a class per power of two of the length: padding wastes under half of any row
    width_class = np.ceil(np.log2(np.maximum(lengths, 1))).astype(np.int64)
    for c in np.unique(width_class).tolist():
        rows = np.flatnonzero(width_class == c)
        out[rows] = _padded_metrics(
            _pad(scores, start[rows], lengths[rows], -np.inf),
            _pad(grades, start[rows], lengths[rows], 0.0),
            lengths[rows],
            _pad(extra, extra_start[rows], unranked_lengths[rows], 0.0),
            ks,
            all_judged,
        )
    return out


def _pad(values: np.ndarray, start: np.ndarray, lengths: np.ndarray, fill: float) -> np.ndarray:
    """A row per segment ``values[start[i]:start[i] + lengths[i]]``, padded with ``fill``
    to the longest (at least one column)."""
    width = max(int(lengths.max(initial=0)), 1)
    n = lengths.size
    first = int(start[0]) if n else 0
    if (lengths == width).all() and (start == first + width * np.arange(n)).all():
        return values[first : first + n * width].reshape(n, width).copy()  # lists alike
    out = np.full((n, width), fill)
    col = np.arange(width)
    inside = col < lengths[:, None]
    out[inside] = values[(start[:, None] + col)[inside]]
    return out


def _padded_metrics(
    scores: np.ndarray, grades: np.ndarray, lengths: np.ndarray, extra: np.ndarray,
    ks: Sequence[int], all_judged: bool = False,
) -> np.ndarray:  # fmt: skip
    """``batch_query_metrics`` of queries given as padded rows (``scores`` padded with
    −inf, so padding sorts last; ``grades`` and the unranked grades ``extra`` with 0;
    ``all_judged``: ``extra`` holds every judged grade)."""
    nq, width = scores.shape
    # rank within each query by descending score; ties keep their order (a stable sort)
    order = np.argsort(-scores, axis=1, kind="stable")
    s = np.take_along_axis(scores, order, axis=1)
    gains = np.take_along_axis(grades, order, axis=1)
    col = np.arange(width)
    relevant = (gains > 0).astype(np.float64)
    # tie groups: a new group where the score changes (the padding is a group of its own)
    new = np.ones((nq, width), bool)
    new[:, 1:] = s[:, 1:] != s[:, :-1]
    group = np.cumsum(new, axis=1) - 1 + (width * np.arange(nq))[:, None]  # flat group id
    flat = group.ravel()
    size = np.bincount(flat, minlength=nq * width)[group].astype(np.float64)
    r = np.bincount(flat, weights=relevant.ravel(), minlength=nq * width)[group]
    gain_g = np.bincount(flat, weights=gains.ravel(), minlength=nq * width)[group] / size
    first = np.maximum.accumulate(np.where(new, col, 0), axis=1)  # each group's first slot
    q = r / size  # E[rel_i] at each sorted position
    top_k = min(max(ks), width)  # the positions any metric reads
    cum_rel = np.zeros((nq, top_k + 1))  # relevant items before each sorted position
    np.cumsum(relevant[:, :top_k], axis=1, out=cum_rel[:, 1:])
    judged = extra if all_judged else np.concatenate([gains, extra], axis=1)
    n_rel = (judged > 0).sum(axis=1).astype(np.float64)
    scored = n_rel > 0
    n_rel_safe = np.where(scored, n_rel, 1.0)
    # the ideal order: every judged grade of the query, descending
    ideal = -np.sort(-judged, axis=1)
    discount = 1.0 / np.log2(np.arange(max(ideal.shape[1], width)) + 2.0)
    # Σ_{j<=i} E[rel_i rel_j]: q_i·q_j for j in earlier groups (independent), the
    # without-replacement r(r − 1)/(g(g − 1)) for earlier slots of i's group, q_i for j = i
    g_k, r_k, q_k = size[:, :top_k], r[:, :top_k], q[:, :top_k]
    first_k, col_k = first[:, :top_k], col[:top_k]
    with np.errstate(divide="ignore", invalid="ignore"):
        within = np.where(g_k > 1, r_k * (r_k - 1) / (g_k * (g_k - 1)), 0.0)
    cum_q = np.zeros((nq, top_k + 1))
    np.cumsum(q_k, axis=1, out=cum_q[:, 1:])
    before = np.take_along_axis(cum_q, first_k, axis=1)  # Σ q_j over the earlier groups
    ap_terms = (q_k * before + (col_k - first_k) * within + q_k) / (col_k + 1.0)

    out = np.zeros((nq, _BASE + 10 * len(ks)))
    out[:, 0] = 1.0
    out[:, 1] = ~scored
    rr = _expected_reciprocal_rank(first, size, r)
    out[:, 2], out[:, 3] = rr, rr * rr
    dcg_terms = gain_g[:, :top_k] * discount[:top_k]
    for j, k in enumerate(ks):
        top = np.minimum(k, lengths)
        cut = min(k, width)
        idcg = ideal[:, :k] @ discount[: min(k, ideal.shape[1])]
        dcg = dcg_terms[:, :cut].sum(axis=1)
        ndcg = np.where(idcg > 0, dcg / np.where(idcg > 0, idcg, 1.0), 0.0)
        ap = ap_terms[:, :cut].sum(axis=1) / np.minimum(n_rel_safe, k)
        hits = q[:, :cut].sum(axis=1)
        precision, recall = hits / k, hits / n_rel_safe
        hit = _expected_hit(top, first, size, r, cum_rel)
        b = _BASE + 10 * j
        for i, v in enumerate((ndcg, ap, precision, recall, hit)):
            out[:, b + 2 * i] = v
            out[:, b + 2 * i + 1] = v * v
    out[~scored, 2:] = 0.0
    return out


def _expected_reciprocal_rank(first: np.ndarray, size: np.ndarray, rel: np.ndarray) -> np.ndarray:
    """E[1/rank of the first relevant item] per query: it lies in the query's first group
    holding one; with g items and r relevant there, it is at the group's j-th slot with
    probability C(g − j, r − 1)/C(g, r) (hypergeometric waiting time). Read from padded
    rows in rank order (``first``, ``size``, ``rel``: each position's group's first slot,
    size and relevant count)."""
    nq = first.shape[0]
    out = np.zeros(nq)
    holding = rel > 0
    at = holding.argmax(axis=1)  # the first position of a group holding one
    queries = np.flatnonzero(holding[np.arange(nq), at])
    if queries.size == 0:
        return out
    at = at[queries]
    g, r = size[queries, at], rel[queries, at]
    s = first[queries, at].astype(np.float64)
    slots = (g - r + 1).astype(np.int64)  # the first relevant item's possible slots
    owner = np.repeat(np.arange(queries.size), slots)
    jj = np.arange(owner.size) - np.repeat(np.cumsum(slots) - slots, slots) + 1.0
    from scipy.special import comb  # here: `monitor check-config` imports this module

    prob = comb(g[owner] - jj, r[owner] - 1) / comb(g[owner], r[owner])
    value = np.bincount(owner, weights=prob / (s[owner] + jj), minlength=queries.size)
    # every item of the group relevant: the first slot, exactly
    out[queries] = np.where(r == g, 1.0 / (s + 1.0), value)
    return out


def _expected_hit(
    top: np.ndarray,
    first: np.ndarray,
    size: np.ndarray,
    rel: np.ndarray,
    cum_rel: np.ndarray,
) -> np.ndarray:
    """P(at least one relevant item in the first ``top`` positions) per query under random
    tie orders: 1 if the groups wholly before the cut hold one, else the chance that the
    group cut by ``top`` puts one of its r relevant among its m slots inside,
    1 − C(g − r, m)/C(g, m) (1 or 0 when the group is wholly inside). Read at each
    query's last position inside (``first``, ``size``, ``rel``: that position's group's
    first slot, size and relevant count; ``cum_rel``: relevant items before a slot)."""
    from scipy.special import comb

    nq = top.shape[0]
    rows = np.arange(nq)
    last = np.maximum(top - 1, 0)
    start = first[rows, last]
    g, r = size[rows, last], rel[rows, last]
    m = top - start  # the cut group's slots inside the first top positions
    p = 1.0 - comb(g - r, m) / comb(g, m)
    p = np.where(cum_rel[rows, start] > 0, 1.0, p)
    return np.where(top > 0, p, 0.0)


MIN_QUERIES = 30
"""Queries a window needs before its ranking intervals are exported: a score interval of a
mean still leans on the normal approximation (measured: 0.94-0.97 from 30 queries with
the dispersion of the long-run window, docs/statistics.md)."""


def _per_query_mean(
    name: str,
    total: float,
    total_sq: float,
    n: float,
    total_lr: float,
    total_sq_lr: float,
    n_lr: float,
    confidence: float,
) -> MetricValue:
    """A per-query mean with its quasi-binomial interval, or the reason it is withheld.

    At fewer than :data:`~monitor.stats.common.MIN_EXPECTED_EVENTS` expected misses (or
    hits) among the n/φ effective trials, the interval is Clopper & Pearson's (1934) exact
    one at those effective counts: a ranker that misses (or hits) almost always still gets
    an interval, one-sided against the boundary (the rule of three, Hanley &
    Lippman-Hand 1983), where the score interval's coverage is set by a handful of counts.
    For hit@k (φ ≈ 1) it is the exact binomial interval."""
    n_int = round(n)
    if n_int <= 0:
        return MetricValue(name, NAN, NAN, NAN, 0, "quasi-binomial")
    mean = total / n
    note = trials_reason(n, MIN_QUERIES).replace("trials", "queries")
    phi = dispersion(total_lr, total_sq_lr, n_lr)
    mean_lr = total_lr / n_lr if n_lr > 0 else NAN
    if mean_lr in (0.0, 1.0) and n_lr >= 2:  # every query missed (or hit) so far
        phi = 1.0  # the largest dispersion a value in [0, 1] can have: conservative
    if not note and not (math.isfinite(phi) and phi > 0):
        note = "interval withheld: no spread between queries to size it yet"
    if note:
        return MetricValue(name, mean, NAN, NAN, n_int, "quasi-binomial", note)
    if n / phi * min(mean_lr, 1.0 - mean_lr) < MIN_EXPECTED_EVENTS:
        lo, hi = clopper_pearson_interval(mean * n / phi, n / phi, confidence)
        return MetricValue(name, mean, float(lo), float(hi), n_int, "clopper-pearson")
    lo, hi = quasi_binomial_interval(total, total_sq, n, confidence, phi)
    return MetricValue(name, mean, lo, hi, n_int, "quasi-binomial")


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
        vec += query_metrics(scores, grades, self.ks, unranked_grades)

    def metrics(
        self, vec: np.ndarray, confidence: float = 0.95, long_run: np.ndarray | None = None
    ) -> list[MetricValue]:
        """mrr, then per k: ndcg_at_k, map_at_k, precision_at_k, recall_at_k, hit_rate_at_k.

        ``long_run``: the same version's longest window (this layout): its mean and
        dispersion set each interval's width and gate (without it, the window's own)."""
        v = np.asarray(vec, dtype=np.float64)
        lr = v if long_run is None else np.asarray(long_run, dtype=np.float64)
        n, n_lr = float(v[0] - v[1]), float(lr[0] - lr[1])
        at = [("mrr", 2)] + [
            (f"{stem}_{k}", _BASE + 10 * j + 2 * i)
            for j, k in enumerate(self.ks)
            for i, stem in enumerate(_PER_K)
        ]
        return [
            _per_query_mean(name, v[c], v[c + 1], n, lr[c], lr[c + 1], n_lr, confidence)
            for name, c in at
        ]

    def ndcg_loss(self, rows: np.ndarray) -> np.ndarray:
        """1 − NDCG@k at the first cut-off of per-query rows (:func:`query_metrics`), NaN
        for a query without a relevant item: the per-query loss of ranking comparisons."""
        r = np.atleast_2d(rows)
        scored = (r[:, 0] > 0) & (r[:, 1] == 0)
        return np.where(scored, 1.0 - r[:, _BASE], np.nan)

    def excluded(self, vec: np.ndarray) -> dict[str, int]:
        """Queries left out of every metric because their label holds no relevant item."""
        return {"without_relevant": int(vec[1])}
