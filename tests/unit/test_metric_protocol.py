"""The metric protocol: the two built-ins added as one class each (negative predictive
value, top-k accuracy) equal scikit-learn; a family's statistic merges by addition; the
Poisson-bootstrap helper's coverage; the example plugins of every task through
``monitor replay`` against oracles computed from the input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from sklearn.metrics import precision_score, top_k_accuracy_score

from monitor.config import settings_from_mapping
from monitor.metrics.bootstrap import PoissonBootstrap
from monitor.metrics.npv import NegativePredictiveValue
from monitor.metrics.protocol import MulticlassRows
from monitor.metrics.top_k import TopKAccuracy
from monitor.wiring import build_engine

from .plugin_data import multiclass_records, traffic
from .ranking_data import traffic as ranking_traffic

ROOT = Path(__file__).resolve().parents[2]
BASE = 1_700_000_000_000


def test_npv_equals_scikit_learn_on_every_batch_row() -> None:
    rng = np.random.default_rng(1)
    rows, want = [], []
    for n in (5, 40, 300):
        y, d = rng.integers(0, 2, n), rng.integers(0, 2, n)
        tn, fp = int(((y == 0) & (d == 0)).sum()), int(((y == 0) & (d == 1)).sum())
        fn, tp = int(((y == 1) & (d == 0)).sum()), int(((y == 1) & (d == 1)).sum())
        rows.append([tn, fp, fn, tp])
        want.append(precision_score(y, d, pos_label=0, zero_division=np.nan))
    got = NegativePredictiveValue().compute(np.array(rows, np.float64), 0.95)
    for (mv,), w in zip(got, want, strict=True):
        assert mv.name == "npv" and mv.value == pytest.approx(w, abs=1e-12)
    assert got[0][0].note  # 5 trials: interval withheld, with the reason
    assert got[2][0].lower < got[2][0].value < got[2][0].upper


def _mc_batch(
    rng: np.random.Generator, n: int, k: int, ties: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    p = rng.dirichlet(np.ones(k), n)
    if ties:  # equal class probabilities (no longer summing to 1: not for the decoder)
        p[: n // 4] = np.round(p[: n // 4], 1)
    y = rng.integers(0, k, n)
    return y, p


def test_top_k_accuracy_equals_scikit_learn_with_ties_and_merges_by_addition() -> None:
    rng = np.random.default_rng(2)
    k_classes = 5
    y, p = _mc_batch(rng, 600, k_classes)
    fam = TopKAccuracy(k_classes, (1, 2, 3))
    whole = np.zeros((1, fam.width()))
    fam.update(whole, np.zeros(600, np.intp), MulticlassRows(y, p.argmax(1), p))
    halves = np.zeros((2, fam.width()))
    fam.update(halves, (np.arange(600) >= 300).astype(np.intp), MulticlassRows(y, p.argmax(1), p))
    assert np.array_equal(halves.sum(axis=0), whole[0])  # merge equals one pass
    (values,) = fam.compute(whole, 0.95)
    for mv, k in zip(values, (1, 2, 3), strict=True):
        want = top_k_accuracy_score(y, p, k=k, labels=np.arange(k_classes))
        assert mv.name == f"top_k_accuracy_at_{k}" and mv.value == pytest.approx(want, abs=1e-12)
    # rows without probabilities are not counted
    nan = np.full((3, k_classes), np.nan)
    fam.update(
        whole, np.zeros(3, np.intp), MulticlassRows(np.zeros(3, np.intp), np.zeros(3, np.intp), nan)
    )
    assert whole.sum() == 600


def test_top_k_and_npv_through_the_engine_equal_scikit_learn() -> None:
    rng = np.random.default_rng(3)
    classes = ["a", "b", "c", "d"]
    models = [
        {"name": "topic", "task": "multiclass", "classes": classes, "k": [2, 3],
         "metrics": ["accuracy", "top_k_accuracy"], "windows": [{"size": "1d"}]},
        {"name": "fraud", "metrics": ["accuracy", "npv"], "windows": [{"size": "1d"}],
         "slices": [{"dimensions": ["region"], "min_samples": 1}]},
    ]  # fmt: skip
    from monitor.ingest.deadletter import FileDeadLetter
    from monitor.ingest.pipeline import RawRecord
    from monitor.wiring import build_pipeline

    settings = settings_from_mapping({"models": models})
    engine = build_engine(settings)
    pipe = build_pipeline(settings, engine, FileDeadLetter(Path("/dev/null")))
    y, p = _mc_batch(rng, 500, 4, ties=False)
    score = rng.random(500)
    yb = (rng.random(500) < score).astype(int)
    region = np.array(["EU", "US"])[rng.integers(0, 2, 500)]
    preds, labels = multiclass_records("topic", classes, p, y, BASE, 1000)
    for i in range(500):
        ts = BASE + i * 1000
        preds.append(
            {
                "id": f"b{i}",
                "ts": ts,
                "model": "fraud",
                "version": "v1",
                "score": float(score[i]),
                "segments": {"region": str(region[i])},
            }
        )
        labels.append({"id": f"b{i}", "ts": ts + 10, "label": int(yb[i])})  # fmt: skip
    pipe.process("predictions", [RawRecord(orjson.dumps(r), "predictions") for r in preds])
    pipe.process("labels", [RawRecord(orjson.dumps(r), "labels") for r in labels])
    snap = engine.snapshot(BASE + 600_000)
    got = {(r.model, r.slice): {m.name: m for m in r.metrics} for r in snap.results}
    for k in (2, 3):
        want = top_k_accuracy_score(y, p, k=k, labels=np.arange(4))
        assert got["topic", "all"][f"top_k_accuracy_at_{k}"].value == pytest.approx(want, abs=1e-12)
    d = (score >= 0.5).astype(int)
    assert got["fraud", "all"]["npv"].value == pytest.approx(precision_score(yb, d, pos_label=0))
    eu = region == "EU"
    assert got["fraud", "region=EU"]["npv"].value == pytest.approx(
        precision_score(yb[eu], d[eu], pos_label=0)
    )
    assert snap.series["top_k_accuracy_at_2"].help.startswith("Share of labeled predictions")


@pytest.mark.slow
def test_poisson_bootstrap_interval_covers_at_its_documented_rate() -> None:
    """400 windows of 400 events, the ratio of means Σy/Σx (x ~ Exp(1), y = 2x + noise:
    true ratio 2), 200 replicates: the 95 % percentile interval covers 0.925 of them (the
    figure docs/plugins.md and metrics/bootstrap.py quote; 0.935 ± 0.006 over 2,000
    windows). The bounds allow the Monte Carlo error of 400 windows around 0.93."""
    rng = np.random.default_rng(11)
    covered = 0
    trials = 400
    for t in range(trials):
        boot = PoissonBootstrap(2, 200, seed=t)
        x = rng.exponential(1.0, 400)
        y = 2 * x + rng.normal(0, 1.0, 400)
        m = np.zeros((1, boot.total_width))
        boot.update(m, np.zeros(400, np.intp), np.stack([x, y], axis=1))
        mv = boot.interval("ratio", m[0], lambda v: v[1] / v[0], 400, 0.95)
        covered += mv.lower <= 2.0 <= mv.upper
    rate = covered / trials
    print(f"Poisson bootstrap coverage at nominal 0.95: {rate:.3f} ({covered}/{trials})")
    assert 0.90 <= rate <= 0.96, rate


def _replay(tmp_path: Path, cfg: str, preds: list[Any], labels: list[Any]) -> dict[str, Any]:
    pf, lf, out = tmp_path / "p.jsonl", tmp_path / "l.jsonl", tmp_path / "r.json"
    pf.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in preds))
    lf.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in labels))
    (tmp_path / "c.toml").write_text(f'[state]\ndir = "{tmp_path}/state"\n' + cfg)
    proc = subprocess.run(
        [sys.executable, "-m", "monitor", "replay", "-c", str(tmp_path / "c.toml"),
         "--predictions", str(pf), "--labels", str(lf), "--report", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report: dict[str, Any] = json.loads(out.read_text())
    assert report["operations"]["plugin_errors"] == {}
    return report


def _all(report: dict[str, Any], model: str) -> dict[str, Any]:
    # the report's "all" window holds every accepted record of the input
    (res,) = [
        r for r in report["results"]
        if r["model"] == model and r["slice"] == "all" and r["window"] == "all"
    ]  # fmt: skip
    return res["metrics"]  # type: ignore[no-any-return]


def test_regression_multiclass_and_ranking_plugins_through_replay(tmp_path: Path) -> None:
    n = 800
    data = traffic(n, BASE, 100, seed=4, classes=["a", "b", "c"])
    y_r, yhat, p, y_m = data.y, data.yhat, data.p, data.y_m
    rank_preds, rank_labels, truth = ranking_traffic(400, BASE)
    files = ("within_tolerance", "confident_accuracy", "relevant_listed")
    paths = ", ".join(f'"{ROOT}/plugins/{f}.py"' for f in files)
    cfg = (
        f"[plugins]\npaths = [{paths}]\n"
        "[plugins.options.within_tolerance]\ntolerance = 1.5\n"
        "[plugins.options.confident_accuracy]\nthreshold = 0.7\n"
        '[[models]]\nname = "demand"\ntask = "regression"\nwindows = [{ size = "1d" }]\n'
        '[[models]]\nname = "topic"\ntask = "multiclass"\nclasses = ["a", "b", "c"]\n'
        'windows = [{ size = "1d" }]\n'
        '[[models]]\nname = "search"\ntask = "ranking"\nk = [3]\nwindows = [{ size = "1d" }]\n'
    )
    report = _replay(tmp_path, cfg, data.preds + rank_preds, data.labels + rank_labels)
    rg = _all(report, "demand")["within_tolerance"]
    assert rg["value"] == pytest.approx(np.mean(np.abs(yhat - y_r) <= 1.5), abs=1e-12)
    assert rg["ci_lower"] < rg["value"] < rg["ci_upper"] and rg["n"] == n
    mc = _all(report, "topic")
    sure = p.max(axis=1) >= 0.7
    want = np.mean(p[sure].argmax(axis=1) == y_m[sure])
    assert mc["confident_accuracy"]["value"] == pytest.approx(want, abs=1e-12)
    assert mc["confident_share"]["value"] == pytest.approx(sure.mean(), abs=1e-12)
    rk = _all(report, "search")["relevant_listed"]
    relevant = [float(np.sum(np.asarray(t["grades"]) > 0)) for t in truth]
    assert rk["value"] == pytest.approx(np.mean(relevant), abs=1e-12)
    assert rk["ci_lower"] < rk["value"] < rk["ci_upper"]
    assert rk["interval_method"] == "poisson_bootstrap"
