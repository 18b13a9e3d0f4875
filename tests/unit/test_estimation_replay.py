"""Label-free estimates (CBPE) through `monitor replay` while most labels have not arrived:
the estimate equals the formula on every prediction's score, sits near the accuracy the
labels later show, and a miscalibrated model is flagged."""

from __future__ import annotations

import time

import numpy as np
import orjson
import pytest

from monitor.config import settings_from_mapping
from monitor.engine import state_codec
from monitor.replay import replay
from monitor.stats.estimation import LabelledBins, cbpe_split
from monitor.stats.scores import ScoreLayout
from tests.unit.replay_reports import overall_metrics

N, LABELED = 6_000, 2_000


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    tmp = tmp_path_factory.mktemp("cbpe")
    rng = np.random.default_rng(29)
    start = int(time.time() * 1000) - 3_600_000
    preds, labels = [], []
    truth: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for model, power in (("calibrated", 1.0), ("overconfident", 3.0)):
        p = 1 / (1 + np.exp(-rng.normal(-0.4, 2.0, N)))
        y = (rng.random(N) < p**power).astype(int)
        truth[model] = (p, y)
        for i in range(N):
            rid = f"{model}-{i}"
            preds.append({"id": rid, "ts": start + i * 400, "model": model, "version": "v1",
                          "score": float(p[i])})  # fmt: skip
            if i < LABELED:  # the rest are still waiting for their labels
                labels.append({"id": rid, "ts": start + i * 400 + 900, "label": int(y[i])})
    pf, lf = tmp / "p.jsonl", tmp / "l.jsonl"
    pf.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in preds))
    lf.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in labels))
    # two windows beside replay's "all": the last 2 minutes (300 predictions) rest on the
    # 2,000 labels, the whole file's 6,000 predictions on the same 2,000
    models = [
        {"name": name, "estimation": {"max_ece": 0.03, "bins": 256},
         "windows": [{"size": "1h"}, {"size": "2m"}]}
        for name in ("calibrated", "overconfident")
    ]  # fmt: skip
    settings = settings_from_mapping({"state": {"dir": str(tmp / "state")}, "models": models})
    return replay(settings, pf, lf, progress=None), truth


def _metrics(report: dict, model: str) -> dict:
    return overall_metrics(report, model, N, LABELED)


def test_estimates_cover_every_prediction_before_its_label(run: tuple[dict, dict]) -> None:
    report, truth = run
    m = _metrics(report, "calibrated")
    p, y = truth["calibrated"]
    layout = ScoreLayout(bins=256, logit_range=8.0)
    b = layout.bin_of(p)
    pos = p >= 0.5
    count_pos = np.bincount(b[pos], minlength=256).astype(float)
    sp_pos = np.bincount(b[pos], weights=p[pos], minlength=256)
    count_neg = np.bincount(b[~pos], minlength=256).astype(float)
    sp_neg = np.bincount(b[~pos], weights=p[~pos], minlength=256)
    lb = b[:LABELED]  # the labelled rows, per estimation bin (the engine regroups its fine
    labelled = LabelledBins(  # histogram's bins by their mean: a few move one bin)
        np.bincount(lb, minlength=256).astype(float),
        np.bincount(lb, weights=p[:LABELED], minlength=256),
        np.bincount(lb, weights=y[:LABELED].astype(float), minlength=256),
    )
    expected = cbpe_split(count_pos, sp_pos, count_neg, sp_neg, ece=0.0, labelled=labelled)
    for name in ("accuracy", "precision", "recall", "f1", "roc_auc"):
        got, want = m[f"estimated_{name}"], expected.by_name()[f"estimated_{name}"]
        assert got["value"] == pytest.approx(want.value, abs=2e-3)
    # the whole file's estimate rests on a third as many labels as it has predictions:
    # flagged, its intervals withheld, and it says why
    assert m["estimate_reliable"]["value"] == 0.0 and not expected.reliable
    assert "calibration's own uncertainty" in m["estimate_reliable"]["interval_note"]
    assert m["estimated_accuracy"]["ci_lower"] is None
    assert m["accuracy"]["value"] == pytest.approx(np.mean(pos[:LABELED] == (y[:LABELED] > 0)))
    # the last two minutes' estimate rests on 2,000 labels for 300 predictions: trusted,
    # and its interval holds what the labels will show (not known to the monitor yet)
    (last,) = [r for r in report["results"] if r["model"] == "calibrated"
               and r["window"] == "2m" and r["slice"] == "all"]  # fmt: skip
    assert last["metrics"]["estimate_reliable"]["value"] == 1.0
    est = last["metrics"]["estimated_accuracy"]
    tail = slice(N - last["predictions"], N)
    realized = float(np.mean(pos[tail] == (y[tail] > 0)))
    assert est["ci_lower"] < est["value"] < est["ci_upper"]
    assert est["ci_lower"] <= realized <= est["ci_upper"]


def test_a_miscalibrated_model_is_flagged(run: tuple[dict, dict]) -> None:
    report, _ = run
    m = _metrics(report, "overconfident")
    assert m["estimate_reliable"]["value"] == 0.0
    assert "max_ece 0.03" in m["estimated_accuracy"]["interval_note"]


def test_estimates_survive_a_checkpoint_round_trip() -> None:
    """The prediction-time histograms are engine state: restored, the same estimate."""
    from monitor.engine.core import Engine
    from monitor.engine.models import ModelSpec, WindowSpec
    from monitor.engine.records import PredictionBatch, hash_ids

    spec = ModelSpec("m", windows=(WindowSpec("1h", 3_600_000),), estimation_bins=64)
    rng = np.random.default_rng(4)
    n = 500
    p = rng.random(n)
    now = int(time.time() * 1000)
    batch = PredictionBatch(
        hash_ids([f"k{i}" for i in range(n)]),
        np.full(n, now - 60_000, np.int64),
        np.zeros(n, np.int16),
        ["v1"] * n,
        p,
        (p >= 0.5).astype(np.int8),
    )

    def engine() -> Engine:
        return Engine([spec], 60_000, 3_600_000, 3_600_000, 10_000, 10_000)

    first = engine()
    first.apply_predictions(batch)
    meta, arrays = state_codec.encode(first)
    second = engine()
    state_codec.decode(second, meta, arrays)

    def estimate(e: Engine) -> float:
        (res,) = [r for r in e.snapshot(now).results if r.slice == "all"]
        (mv,) = [m for m in res.metrics if m.name == "estimated_accuracy"]
        return mv.value

    expected = float(np.mean(np.where(p >= 0.5, p, 1 - p)))
    assert estimate(first) == pytest.approx(expected, rel=1e-12)
    assert estimate(second) == estimate(first)


def test_slos_may_opt_into_estimated_metrics(tmp_path) -> None:
    from monitor.config import ConfigError

    slo = {"name": "est", "model": "m", "metric": "estimated_accuracy", "window": "1h",
           "objective": 0.8, "direction": "above", "confidence": "point"}  # fmt: skip
    base = {"state": {"dir": str(tmp_path)}, "slos": [slo]}
    settings_from_mapping(
        {**base, "models": [{"name": "m", "windows": [{"size": "1h"}], "estimation": {}}]}
    )
    with pytest.raises(ConfigError, match="estimated_accuracy"):
        settings_from_mapping({**base, "models": [{"name": "m", "windows": [{"size": "1h"}]}]})
