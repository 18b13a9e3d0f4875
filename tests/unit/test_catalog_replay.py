"""KS, Gini and cumulative gain/lift of a binary model through `monitor replay`, overall and
per slice, against SciPy/scikit-learn and the layout functions on the same rows."""

from __future__ import annotations

import time

import numpy as np
import orjson
import pytest
from scipy.stats import ks_2samp

from monitor.config import settings_from_mapping
from monitor.engine.models import SLICE_LOGIT_RANGE, ModelSpec
from monitor.replay import replay
from monitor.stats.scores import ScoreLayout


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    tmp = tmp_path_factory.mktemp("catalog")
    rng = np.random.default_rng(23)
    start = int(time.time() * 1000) - 3_600_000
    preds, labels = [], []
    truth: dict[str, list[tuple[float, int]]] = {"all": [], "EU": [], "US": []}
    for i in range(4_000):
        region = "EU" if i % 3 else "US"
        y = int(rng.random() < 0.25)
        p = float(1 / (1 + np.exp(-(rng.normal() + 1.6 * y - 1.2))))
        preds.append({"id": f"q{i}", "ts": start + i * 50, "model": "risk", "version": "v1",
                      "score": p, "segments": {"region": region}})  # fmt: skip
        labels.append({"id": f"q{i}", "ts": start + i * 50 + 900, "label": y})
        truth["all"].append((p, y))
        truth[region].append((p, y))
    pf, lf = tmp / "p.jsonl", tmp / "l.jsonl"
    pf.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in preds))
    lf.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in labels))
    settings = settings_from_mapping(
        {
            "state": {"dir": str(tmp / "state")},
            "models": [
                {
                    "name": "risk",
                    "gain_fractions": [0.1, 0.3],
                    "metrics": ["roc_auc", "ks_statistic", "gini", "gain"],
                    "slices": [{"dimensions": ["region"], "min_samples": 10}],
                }
            ],
        }
    )
    return replay(settings, pf, lf, progress=None), truth


def _metrics(report: dict, slice_: str) -> dict:
    (res,) = [
        r
        for r in report["results"]
        if r["model"] == "risk" and r["window"] == "all" and r["slice"] == slice_
    ]
    return res["metrics"]


@pytest.mark.parametrize("slice_", ["all", "region=EU", "region=US"])
def test_ks_gini_and_gain_through_replay(run: tuple[dict, dict], slice_: str) -> None:
    report, truth = run
    m = _metrics(report, slice_)
    rows = truth[slice_.split("=")[-1]]
    p = np.array([r[0] for r in rows])
    y = np.array([r[1] for r in rows], dtype=float)
    # slice "all" reads the fine histogram, a segment slice its coarse one (logit ±8)
    coarse = ScoreLayout(bins=ModelSpec("risk").slice_score_bins, logit_range=SLICE_LOGIT_RANGE)
    layout = ScoreLayout() if slice_ == "all" else coarse
    vec = layout.empty()
    layout.add(vec, y, p)
    exact = ks_2samp(p[y == 1], p[y == 0]).statistic
    ks = m["ks_statistic"]["value"]
    assert ks == pytest.approx(layout.ks_statistic(vec).value, abs=1e-12)
    assert ks <= exact + 1e-12 and exact <= ks + layout.ks_bound(vec) + 1e-12
    assert m["gini"]["value"] == pytest.approx(2 * m["roc_auc"]["value"] - 1, abs=1e-12)
    assert m["gini"]["ci_lower"] == pytest.approx(2 * m["roc_auc"]["ci_lower"] - 1, abs=1e-12)
    order = np.argsort(-p)
    for f, pct in ((0.1, "10"), (0.3, "30")):
        top = order[: round(f * p.size)]
        expected = y[top].sum() / y.sum()
        gain = m[f"gain_at_{pct}"]["value"]
        # one bin straddles the cut; a coarse slice bin can hold a few dozen rows
        assert gain == pytest.approx(expected, abs=(3 if slice_ == "all" else 25) / y.sum())
        assert m[f"lift_at_{pct}"]["value"] == pytest.approx(gain / f, rel=1e-12)
    assert "gain_at_20" not in m  # only the configured fractions
