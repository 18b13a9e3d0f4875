"""Random ranking traffic (ties, graded relevance, clicks, bare ordered lists, queries
without a relevant item) and its metrics by independent formulas: scikit-learn's
``ndcg_score`` for NDCG, and for MAP, MRR, precision/recall/hit rate@k the plain textbook
formulas averaged over every order of the tied items (brute force)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
from scipy.stats import beta
from sklearn.metrics import ndcg_score

KS = (3, 5)


def traffic(
    n: int, start_ms: int, seed: int = 7, versions: tuple[str, ...] = ("v1",)
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(predictions, labels, truth): truth holds per query the region, version, item
    scores (ranked order) and grades of the ranked items."""
    rng = np.random.default_rng(seed)
    preds, labels, truth = [], [], []
    for i in range(n):
        region = ("EU", "US", "APAC")[i % 3]
        version = versions[i % len(versions)]
        length = int(rng.integers(1, 8))
        items = [f"d{j}" for j in rng.choice(40, size=length, replace=False)]
        ts = start_ms + i * 100
        if i % 7 == 6:  # already ranked, no scores
            entries: list[Any] = list(items)
            scores = list(range(length, 0, -1))
        else:  # coarse scores: many ties
            scores = [float(s) for s in rng.integers(0, 4, size=length) / 4]
            entries = [{"item": it, "score": sc} for it, sc in zip(items, scores, strict=True)]
        rec = {"id": f"q{i}", "ts": ts, "model": "search", "version": version,
               "items": entries, "segments": {"region": region}}  # fmt: skip
        preds.append(rec)
        if i % 5 == 4:
            clicked = [it for it in items if rng.random() < 0.3]
            grades = [1.0 if it in clicked else 0.0 for it in items]
            labels.append({"id": f"q{i}", "ts": ts + 500, "clicked": clicked})
        else:
            grades = [float(g) for g in rng.choice([0, 0, 1, 2, 3], size=length)]
            pairs = zip(items, grades, strict=True)
            rel = {it: g for it, g in pairs if g > 0 or rng.random() < 0.5}
            labels.append({"id": f"q{i}", "ts": ts + 500, "relevance": rel})
        truth.append({"region": region, "version": version, "scores": scores, "grades": grades})
    return preds, labels, truth


def _orders(scores: list[float]) -> Iterator[list[int]]:
    """Every ranking of the positions consistent with the scores (ties in any order)."""
    groups: dict[float, list[int]] = {}
    for i, s in enumerate(scores):
        groups.setdefault(s, []).append(i)
    blocks = [groups[s] for s in sorted(groups, reverse=True)]
    for perms in itertools.product(*(itertools.permutations(b) for b in blocks)):
        yield [i for block in perms for i in block]


def expected(scores: list[float], grades: list[float], k: int) -> dict[str, float] | None:
    """Every metric of one query (None: no relevant item), by the textbook formulas."""
    total_rel = sum(g > 0 for g in grades)
    if total_rel == 0:
        return None
    acc = {"mrr": 0.0, "map": 0.0, "precision": 0.0, "recall": 0.0, "hit_rate": 0.0}
    orders = list(_orders(scores))
    for order in orders:
        rel = [grades[i] > 0 for i in order]
        first = next((r for r, x in enumerate(rel, 1) if x), None)
        acc["mrr"] += 1.0 / first if first else 0.0
        top = rel[:k]
        hits = sum(top)
        ap = sum(sum(rel[: i + 1]) / (i + 1) for i, x in enumerate(top) if x)
        acc["map"] += ap / min(total_rel, k)
        acc["precision"] += hits / k
        acc["recall"] += hits / total_rel
        acc["hit_rate"] += float(hits > 0)
    out = {name: v / len(orders) for name, v in acc.items()}
    if len(scores) > 1:
        out["ndcg"] = float(ndcg_score([grades], [scores], k=k))
    else:  # scikit-learn refuses one-item lists; NDCG is then 1 or 0 by definition
        out["ndcg"] = 1.0 if grades[0] > 0 else 0.0
    return out


def oracle(truth: list[dict[str, Any]], k: int) -> dict[str, list[float]]:
    """Per-metric lists of per-query values (queries with a relevant item)."""
    out: dict[str, list[float]] = {}
    for q in truth:
        e = expected(q["scores"], q["grades"], k)
        if e is None:
            continue
        for name, v in e.items():
            out.setdefault(name, []).append(v)
    return out


def name_of(stem: str, k: int) -> str:
    return "mrr" if stem == "mrr" else f"{stem}_at_{k}"


def assert_matches(
    metrics: dict[str, Any], truth: list[dict[str, Any]], tol: float, n: bool = True
) -> None:
    """Every ranking metric of a report (value, and with ``n`` its sample count and
    interval: Wilson's at m = n/φ effective trials, φ = s²/(x̄(1 − x̄)) (1 when every query
    missed or hit), Clopper-Pearson's at m below 2 expected misses (or hits), withheld
    below 30 queries) against the oracle."""
    for k in KS:
        values = oracle(truth, k)
        for stem, per_query in values.items():
            got = metrics[name_of(stem, k)]
            x = np.asarray(per_query)
            assert math.isclose(got["value"], float(x.mean()), abs_tol=tol), (stem, k)
            if not n:
                continue
            assert got["n"] == x.shape[0]
            mean, z = float(x.mean()), 1.959963984540054
            # every query missed (or hit): the largest dispersion, 1
            phi = float(x.var(ddof=1)) / (mean * (1 - mean)) if 0 < mean < 1 else 1.0
            if phi <= 0 or x.shape[0] < 30:
                assert got["ci_lower"] is None and got["ci_upper"] is None, (stem, k)
                continue
            m = x.shape[0] / phi  # effective trials
            if m * min(mean, 1 - mean) < 2:  # Clopper-Pearson's exact interval at m trials
                hits = mean * m
                lo = float(beta.ppf(0.025, hits, m - hits + 1)) if hits > 0 else 0.0
                hi = float(beta.ppf(0.975, hits + 1, m - hits)) if hits < m else 1.0
                assert math.isclose(got["ci_lower"], lo, abs_tol=1e-9), (stem, k)
                assert math.isclose(got["ci_upper"], hi, abs_tol=1e-9), (stem, k)
                continue
            centre = (mean + z * z / (2 * m)) / (1 + z * z / m)
            half = z * math.sqrt(mean * (1 - mean) / m + z * z / (4 * m * m)) / (1 + z * z / m)
            assert math.isclose(got["ci_lower"], centre - half, abs_tol=1e-9), (stem, k)
            assert math.isclose(got["ci_upper"], centre + half, abs_tol=1e-9), (stem, k)
