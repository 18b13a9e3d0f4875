"""Cost of the catalog additions, as ratios against a baseline measured in the same run.

Run ``python bench/catalog.py [--windows 200] [--queries 5000]``:

* CBPE (``monitor.stats.estimation.cbpe``, five estimates incl. the 400-draw AUC
  bootstrap) per window vs the realized score metrics (``ScoreLayout.metrics``) of the
  same window;
* ranking per-query metrics (``query_metrics``, 20 items, k = 5, 10, with ties) vs
  scikit-learn's ``ndcg_score`` on the same query (one k);
* a full-size CBPE coverage run (calibrated windows, as the slow test but larger).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from sklearn.metrics import ndcg_score

from monitor.stats.estimation import cbpe
from monitor.stats.ranking import query_metrics
from monitor.stats.scores import ScoreLayout


def _per_call(fn, reps: int) -> float:
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - start) / reps


def bench_cbpe(windows: int, rng: np.random.Generator) -> None:
    layout = ScoreLayout()
    thr = int(layout.bin_of(np.array([0.5]))[0])
    vecs, bins = [], []
    for _ in range(windows):
        p = 1.0 / (1.0 + np.exp(-rng.normal(-0.5, 2.0, 5_000)))
        y = (rng.random(p.size) < p).astype(float)
        vec = layout.empty()
        layout.add(vec, y, p)
        neg, pos, sp = layout.histograms(vec)
        vecs.append(vec)
        bins.append((neg + pos, sp))
    it = iter(range(10**9))
    base = _per_call(lambda: layout.metrics(vecs[next(it) % windows]), windows)
    it = iter(range(10**9))
    est = _per_call(lambda: cbpe(*bins[next(it) % windows], thr, ece=0.0), windows)
    print(
        f"cbpe per window: {est * 1e3:.2f} ms; realized score metrics {base * 1e3:.2f} ms; "
        f"ratio {est / base:.2f}"
    )


def bench_ranking(queries: int, rng: np.random.Generator) -> None:
    cases = [
        (np.round(rng.random(20), 1), rng.integers(0, 4, 20) * (rng.random(20) < 0.3))
        for _ in range(queries)
    ]
    cases = [(s, g) for s, g in cases if g.sum() > 0]
    it = iter(range(10**9))

    def ours() -> None:
        s, g = cases[next(it) % len(cases)]
        query_metrics(s, g, (5, 10))

    t_ours = _per_call(ours, len(cases))
    it = iter(range(10**9))

    def sk() -> None:
        s, g = cases[next(it) % len(cases)]
        ndcg_score([g], [s], k=10)

    t_sk = _per_call(sk, len(cases))
    print(
        f"ranking per query (all metrics, 2 ks): {t_ours * 1e6:.0f} us; sklearn ndcg_score "
        f"(one metric, one k) {t_sk * 1e6:.0f} us; ratio {t_ours / t_sk:.2f}"
    )


def coverage(windows: int, rng: np.random.Generator) -> None:
    layout = ScoreLayout()
    thr = int(layout.bin_of(np.array([0.5]))[0])
    hits = np.zeros(2)
    for _ in range(windows):
        p = 1.0 / (1.0 + np.exp(-rng.normal(-0.5, 2.0, 1_000)))
        y = (rng.random(p.size) < p).astype(float)
        vec = layout.empty()
        layout.add(vec, y, p)
        neg, pos, sp = layout.histograms(vec)
        est = cbpe(neg + pos, sp, thr, ece=0.0).by_name()
        acc = float(np.mean((p >= 0.5) == (y > 0.5)))
        auc = layout.roc_auc(vec).value
        a, r = est["estimated_accuracy"], est["estimated_roc_auc"]
        hits += [a.lower <= acc <= a.upper, r.lower <= auc <= r.upper]
    print(
        f"cbpe coverage over {windows} windows of 1,000: accuracy {hits[0] / windows:.3f}, "
        f"roc_auc {hits[1] / windows:.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", type=int, default=200)
    parser.add_argument("--queries", type=int, default=5_000)
    parser.add_argument("--coverage-windows", type=int, default=2_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    bench_cbpe(args.windows, rng)
    bench_ranking(args.queries, rng)
    coverage(args.coverage_windows, rng)


if __name__ == "__main__":
    main()
