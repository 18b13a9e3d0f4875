"""Candidate per-slice PR-AUC estimators against scikit-learn, on bench/slice_scores.py's stream.

    .venv/bin/python bench/slice_pr_sketches.py [--slices 100] [--rows 20000] [--bins 128]

What could bring a segment slice's PR-AUC within 0.002 of ``average_precision_score``
on the raw scores (the candidates, and the engine's estimator last), for the
1 %-prevalence calibrated Beta(0.5, 50) stream of bench/slice_scores.py. Each reads the
engine's slice histogram (``ScoreLayout(bins, SLICE_LOGIT_RANGE)``, filled by its
``add_rows``):

* ``binned`` — a bin read as one group of tied scores (scikit-learn's tie rule), so its
  positives all enter at the precision of the bin's end (the engine's AP before its
  within-bin sums, and still for a window reaching into a checkpoint written before);
* ``top-K + binned`` — the K highest-scored rows of the slice kept exactly (a mergeable
  sketch: merge = concatenate, keep the top K), the rest binned;
* ``interleaved`` — within a bin, the i-th of p positives is preceded on average by
  i·n/(p + 1) of the bin's n negatives (a random order of the bin's rows); the positive
  enters at that expected precision. Additive, but it departs from scikit-learn's rule
  where scores are genuinely tied;
* ``top-K + interleaved`` — both;
* ``within-bin binormal`` — the engine's AP (``ScoreLayout.metrics_many``): the order
  inside a bin read from its Σp of the positives and Σp² (an equal-variance binormal
  model of the bin; the tie rule where a bin's scores are tied within each class).

Prints, per estimator, the mean and largest error and the slices beyond 0.002, and the
extra bytes per (slice, bucket) it needs beside the bins (a top-K sketch: a score and a
label per row; the within-bin sums: two doubles per bin and a count).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from sklearn.metrics import average_precision_score

sys.path.insert(0, str(Path(__file__).resolve().parent))

from slice_scores import BETA, TOLERANCE, stream

from monitor.engine.models import SLICE_LOGIT_RANGE
from monitor.stats.scores import ScoreLayout, average_precision_many


def _interleaved_ap(neg: np.ndarray, pos: np.ndarray, top: np.ndarray) -> float:
    """AP with the exact ``top`` labels (highest first) ranked ahead of the bins, each bin
    read as a random order of its rows (expected negatives before each positive)."""
    neg, pos = neg[::-1], pos[::-1]  # highest scores first
    tp0 = np.cumsum(top)
    fp0 = np.cumsum(1 - top)
    exact = float(np.sum(tp0[top > 0] / (tp0 + fp0)[top > 0]))
    t, f = (tp0[-1], fp0[-1]) if top.size else (0.0, 0.0)
    before_p = t + np.concatenate([[0.0], np.cumsum(pos)[:-1]])
    before_n = f + np.concatenate([[0.0], np.cumsum(neg)[:-1]])
    total = exact
    for j in np.flatnonzero(pos > 0):
        i = np.arange(1.0, pos[j] + 1.0)
        total += float(
            np.sum(
                (before_p[j] + i) / (before_p[j] + before_n[j] + i * (1 + neg[j] / (pos[j] + 1)))
            )
        )
    return total / (t + pos.sum())


def _binned_ap(neg: np.ndarray, pos: np.ndarray, top: np.ndarray) -> float:
    """scikit-learn's tie rule per bin, after the exact ``top`` rows."""
    neg_all = np.concatenate([neg, 1.0 - top[::-1]])  # ascending: the top rows come last
    pos_all = np.concatenate([pos, top[::-1]])
    return float(average_precision_many(neg_all, pos_all)[0])


def errors(bins: int, top_k: int, interleave: bool, slices: int, rows: int, seed: int):
    layout = ScoreLayout(bins=bins, logit_range=SLICE_LOGIT_RANGE)
    index, y, score = stream(slices, rows, seed)
    err = np.empty(slices)
    for k in range(slices):
        yy, ss = y[index == k].astype(np.float64), score[index == k]
        order = np.argsort(-ss, kind="stable")
        top, rest = order[:top_k], order[top_k:]
        vec = layout.empty()
        layout.add(vec, yy[rest], ss[rest])
        neg, pos = vec[:bins], vec[bins : 2 * bins]
        ap = (_interleaved_ap if interleave else _binned_ap)(neg, pos, yy[top])
        err[k] = ap - average_precision_score(yy, ss)
    return float(err.mean()), float(np.abs(err).max()), int((np.abs(err) > TOLERANCE).sum())


def engine_errors(bins: int, slices: int, rows: int, seed: int):
    """The engine's own per-slice AP, through the batched metric path."""
    layout = ScoreLayout(bins=bins, logit_range=SLICE_LOGIT_RANGE)
    index, y, score = stream(slices, rows, seed)
    hist = np.zeros((slices, layout.width))
    layout.add_rows(hist, index, y, score)
    got = [next(m.value for m in ms if m.name == "pr_auc") for ms in layout.metrics_many(hist)]
    err = np.array(
        [got[k] - average_precision_score(y[index == k], score[index == k]) for k in range(slices)]
    )
    return float(err.mean()), float(np.abs(err).max()), int((np.abs(err) > TOLERANCE).sum())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slices", type=int, default=100)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--bins", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    print(
        f"{args.slices} slices × {args.rows:,} rows, calibrated Beta{BETA} scores, "
        f"{args.bins} bins, seed {args.seed}\n"
    )
    print(f"| estimator | K | extra bytes | PR-AUC mean error | largest | beyond {TOLERANCE} |")
    print("|---|---|---|---|---|---|")
    for interleave in (False, True):
        for k in (0, 8, 32, 128):
            mean, worst, beyond = errors(
                args.bins, k, interleave, args.slices, args.rows, args.seed
            )
            name = ("top-K + " if k else "") + ("interleaved" if interleave else "binned")
            print(f"| {name} | {k} | {16 * k} | {mean:+.4f} | {worst:.4f} | {beyond} |")
    mean, worst, beyond = engine_errors(args.bins, args.slices, args.rows, args.seed)
    extra = 16 * args.bins + 8  # Σp of the positives and Σp² per bin, their row count
    print(f"| within-bin binormal | 0 | {extra} | {mean:+.4f} | {worst:.4f} | {beyond} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
