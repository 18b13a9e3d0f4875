"""Per-slice ROC-AUC and PR-AUC against scikit-learn on a rare-event score stream.

    .venv/bin/python bench/slice_scores.py [--slices 100] [--rows 20000] [--seed 0]

A segment slice's score metrics come from its coarse histogram (``slice_score_bins`` bins
uniform in logit over ±8, the layout the engine keeps per segment and bucket). This
simulates 100 slices of a 1 %-prevalence stream whose scores are calibrated Beta(0.5, 50)
draws (label ~ Bernoulli(score)), computes every slice's metrics through the engine's
batched path (``ScoreLayout.metrics_many``) and prints, per bin count, the error against
scikit-learn on the raw scores (mean, largest, the number of slices beyond 0.002) and
the bytes one (segment, bucket) histogram row holds. The CI-sized check is
tests/unit/test_slice_scores.py.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score

from monitor.engine.models import SLICE_LOGIT_RANGE
from monitor.stats.scores import ScoreLayout

BETA = (0.5, 50.0)  # calibrated scores with mean 0.0099: the prevalence
TOLERANCE = 0.002


@dataclass(frozen=True, slots=True)
class SliceErrors:
    """Errors (histogram metric − scikit-learn on the raw scores) over the slices."""

    bins: int
    row_bytes: int  # one (segment, bucket) histogram row
    pr_mean: float
    pr_worst: float  # the largest |error|
    pr_beyond: int  # slices whose |error| exceeds TOLERANCE
    roc_mean: float
    roc_worst: float
    roc_beyond: int


def stream(slices: int, rows: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(slice index, label, score) of ``slices`` × ``rows`` calibrated Beta scores."""
    rng = np.random.default_rng(seed)
    score = rng.beta(*BETA, slices * rows)
    y = (rng.random(score.size) < score).astype(np.int8)
    return np.repeat(np.arange(slices), rows), y, score


def slice_errors(bins: int, slices: int = 100, rows: int = 20_000, seed: int = 0) -> SliceErrors:
    """Per-slice PR-AUC and ROC-AUC errors of the ``bins``-bin slice layout."""
    layout = ScoreLayout(bins=bins, logit_range=SLICE_LOGIT_RANGE)
    index, y, score = stream(slices, rows, seed)
    hist = np.zeros((slices, layout.width))
    layout.add_rows(hist, index, y, score)
    got = [{m.name: m.value for m in ms} for ms in layout.metrics_many(hist)]
    pr, roc = np.empty(slices), np.empty(slices)
    for k in range(slices):
        yy, ss = y[index == k], score[index == k]
        pr[k] = got[k]["pr_auc"] - average_precision_score(yy, ss)
        roc[k] = got[k]["roc_auc"] - roc_auc_score(yy, ss)
    return SliceErrors(
        bins, layout.width * 8,
        float(pr.mean()), float(np.abs(pr).max()), int((np.abs(pr) > TOLERANCE).sum()),
        float(roc.mean()), float(np.abs(roc).max()), int((np.abs(roc) > TOLERANCE).sum()),
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slices", type=int, default=100)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    print(
        f"{args.slices} slices × {args.rows:,} rows, calibrated Beta{BETA} scores "
        f"(prevalence ≈ 1 %), seed {args.seed}\n"
    )
    print(
        "| slice_score_bins | bytes per (segment, bucket) | PR-AUC mean error | largest "
        f"| slices beyond {TOLERANCE} | ROC-AUC mean error | largest | slices beyond |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for bins in (64, 128, 256, 512, 1024):
        e = slice_errors(bins, args.slices, args.rows, args.seed)
        print(
            f"| {bins} | {e.row_bytes:,} | {e.pr_mean:+.4f} | {e.pr_worst:.4f} | "
            f"{e.pr_beyond} | {e.roc_mean:+.5f} | {e.roc_worst:.4f} | {e.roc_beyond} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
