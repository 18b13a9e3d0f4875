"""Cost of the catalog additions, as ratios against a baseline measured in the same run.

Run ``python bench/catalog.py [--windows 200] [--queries 5000]``:

* CBPE (``monitor.stats.estimation.cbpe``, five estimates incl. the 400-draw AUC
  bootstrap) per window vs the realized score metrics (``ScoreLayout.metrics``) of the
  same window;
* ranking per-query metrics (``query_metrics``, 20 items, k = 5, 10, with ties) vs
  scikit-learn's ``ndcg_score`` on the same query (one k), and the same queries in
  batches of 1,000 (``batch_query_metrics``, the engine's path) vs one at a time;
* a full-size CBPE coverage run (calibrated windows, as the slow test but larger);
* ranking through the pipeline (decode, join, per-query sums, evaluation) per query of 20
  items vs a binary prediction through the same pipeline.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from sklearn.metrics import ndcg_score

from monitor.config import settings_from_mapping
from monitor.ingest.deadletter import FileDeadLetter
from monitor.ingest.pipeline import RawRecord
from monitor.stats.estimation import cbpe
from monitor.stats.ranking import batch_query_metrics, query_metrics
from monitor.stats.scores import ScoreLayout
from monitor.wiring import build_engine, build_pipeline


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
    # the engine's path: every joined query of a batch of 1,000 in one call
    batches = [cases[j : j + 1000] for j in range(0, len(cases), 1000)]
    flat = [
        (np.concatenate([s for s, _ in b]), np.concatenate([g for _, g in b]).astype(float),
         np.array([s.size for s, _ in b]), np.zeros(0), np.zeros(len(b), np.int64))
        for b in batches
    ]  # fmt: skip
    start = time.perf_counter()
    for scores, grades, lengths, extra, extra_lengths in flat:
        batch_query_metrics(scores, grades, lengths, extra, extra_lengths, (5, 10))
    t_batch = (time.perf_counter() - start) / len(cases)
    print(
        f"ranking per query in batches of 1,000: {t_batch * 1e6:.1f} us; one query at a "
        f"time {t_ours * 1e6:.0f} us; ratio {t_batch / t_ours:.3f}"
    )


def _pipeline_seconds(model: dict[str, Any], records: list[tuple[str, list[bytes]]]) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        settings = settings_from_mapping(
            {"state": {"dir": tmp}, "models": [{**model, "windows": [{"size": "1d"}]}]}
        )
        engine = build_engine(settings)
        pipe = build_pipeline(settings, engine, FileDeadLetter(Path(tmp) / "dead.jsonl"))
        start = time.perf_counter()
        for kind, batch in records:
            pipe.process(kind, [RawRecord(v, kind, 0, i) for i, v in enumerate(batch)])
        engine.snapshot(int(time.time() * 1000))
        return time.perf_counter() - start


def bench_ranking_pipeline(queries: int, rng: np.random.Generator) -> None:
    now = int(time.time() * 1000) - 3_600_000
    rank_p, rank_l, bin_p, bin_l = [], [], [], []
    for i in range(queries):
        scores = np.round(rng.random(20), 2)
        items = [{"item": f"d{j}", "score": float(s)} for j, s in enumerate(scores)]
        rank_p.append({"id": f"q{i}", "ts": now + i, "model": "search", "version": "v1",
                       "items": items})  # fmt: skip
        rel = {f"d{j}": int(rng.integers(1, 4)) for j in rng.choice(20, 3, replace=False)}
        rank_l.append({"id": f"q{i}", "ts": now + i + 1000, "relevance": rel})
        bin_p.append({"id": f"q{i}", "ts": now + i, "model": "fraud", "version": "v1",
                      "score": float(scores[0])})  # fmt: skip
        bin_l.append({"id": f"q{i}", "ts": now + i + 1000, "label": int(rng.random() < 0.3)})

    def batches(preds: list, labels: list) -> list[tuple[str, list[bytes]]]:
        out = []
        for j in range(0, queries, 1000):
            out.append(("predictions", [orjson.dumps(r) for r in preds[j : j + 1000]]))
            out.append(("labels", [orjson.dumps(r) for r in labels[j : j + 1000]]))
        return out

    t_rank = _pipeline_seconds(
        {"name": "search", "task": "ranking", "k": [5, 10]}, batches(rank_p, rank_l)
    )
    t_bin = _pipeline_seconds({"name": "fraud"}, batches(bin_p, bin_l))
    print(
        f"ranking through the pipeline (20 items, k = 5, 10): {t_rank / queries * 1e6:.0f} us "
        f"per query; binary prediction {t_bin / queries * 1e6:.1f} us; ratio {t_rank / t_bin:.1f}"
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
    bench_ranking_pipeline(args.queries, rng)
    coverage(args.coverage_windows, rng)


if __name__ == "__main__":
    main()
