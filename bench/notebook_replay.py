"""The baseline of bench (r): what a notebook does with replay's files, as its own process.

``python bench/notebook_replay.py PREDICTIONS LABELS REFERENCE.npz`` loads the JSONL
files (orjson per line), joins labels to predictions by id (pandas), computes
scikit-learn's accuracy, precision, recall, F1, ROC-AUC, log loss and Brier score overall
and accuracy and recall per country, and SciPy's two-sample KS test per feature against
the raw reference sample (one array per feature in the npz); it prints them as JSON.
Run as a process of its own so that its start-up (pandas, SciPy, scikit-learn imports)
counts, as ``monitor replay``'s does.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import orjson


def sklearn_replay(pf: Path, lf: Path, reference: dict[str, np.ndarray]) -> dict[str, float]:
    import pandas as pd
    from scipy.stats import ks_2samp
    from sklearn.metrics import (
        accuracy_score,
        brier_score_loss,
        f1_score,
        log_loss,
        precision_score,
        recall_score,
        roc_auc_score,
    )

    names = list(reference)
    with open(pf, "rb") as fh:
        preds = [orjson.loads(line) for line in fh]
    with open(lf, "rb") as fh:
        labels = [orjson.loads(line) for line in fh]
    p = pd.DataFrame(
        {
            "id": [r["id"] for r in preds],
            "score": np.array([r["score"] for r in preds]),
            "country": [r["segments"]["country"] for r in preds],
        }
    )
    features = np.array([[r["features"][f] for f in names] for r in preds])
    lab = pd.DataFrame({"id": [r["id"] for r in labels], "label": [r["label"] for r in labels]})
    joined = p.drop_duplicates("id").merge(lab.drop_duplicates("id"), on="id")
    y, s = joined["label"].to_numpy(), joined["score"].to_numpy()
    d = (s >= 0.5).astype(int)
    out = {
        "accuracy": accuracy_score(y, d),
        "precision": precision_score(y, d),
        "recall": recall_score(y, d),
        "f1": f1_score(y, d),
        "roc_auc": roc_auc_score(y, s),
        "log_loss": log_loss(y, s),
        "brier": brier_score_loss(y, s),
    }
    for c, part in joined.groupby("country"):
        yc, dc = part["label"].to_numpy(), (part["score"].to_numpy() >= 0.5).astype(int)
        out[f"accuracy/{c}"] = accuracy_score(yc, dc)
        out[f"recall/{c}"] = recall_score(yc, dc)
    for j, f in enumerate(names):
        out[f"ks/{f}"] = ks_2samp(reference[f], features[:, j]).pvalue
    return {k: float(v) for k, v in out.items()}


if __name__ == "__main__":
    with np.load(sys.argv[3]) as ref:
        sample = {name: ref[name] for name in ref.files}
    sys.stdout.buffer.write(
        orjson.dumps(sklearn_replay(Path(sys.argv[1]), Path(sys.argv[2]), sample))
    )
