"""Ranking comparisons and SLOs: ``loss = "ndcg_loss"`` (1 − NDCG@k per query, k = the
model's first cut-off) drives the same sequential machinery as any loss — its effect is the
difference of the arms' mean losses by scikit-learn's ``ndcg_score`` — in split and shadow
mode; SLOs on ranking metrics are validated against the model's k values and breach on the
interval."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from sklearn.metrics import ndcg_score

from monitor.alert_wiring import slo_specs
from monitor.alerting.slo import SloEvaluator
from monitor.config import ConfigError, settings_from_mapping
from monitor.ingest.deadletter import FileDeadLetter
from monitor.ingest.pipeline import RawRecord
from monitor.replay import replay
from monitor.wiring import build_engine, build_pipeline

K = 5


def _stream(
    n: int, seed: int, shadow: bool, noise_v2: float = 3.0
) -> tuple[list, list, dict[str, list[float]]]:
    """v1 ranks by relevance plus a little noise, v2 (by default) plus a lot; losses per
    version of the queries a comparison counts (from v2's first prediction, with a relevant
    item), and under "<version> window" of every query with a relevant item."""
    rng = np.random.default_rng(seed)
    start = int(time.time() * 1000) - 20 * 3_600_000
    preds, labels = [], []
    losses: dict[str, list[float]] = {"v1": [], "v2": []}
    for i in range(n):
        length = int(rng.integers(3, 9))
        grades = rng.choice([0, 0, 0, 1, 2], size=length).astype(float)
        ts = start + i * 1000
        versions = ("v1", "v2") if shadow else (("v1", "v2")[i % 2],)
        for v in versions:
            noise = 0.5 if v == "v1" else noise_v2
            scores = np.round(grades + rng.normal(0, noise, length), 1)  # some ties
            items = [{"item": f"d{j}", "score": float(s)} for j, s in enumerate(scores)]
            preds.append({"id": f"q{i}", "ts": ts, "model": "search", "version": v,
                          "items": items})  # fmt: skip
            if not grades.any():
                continue
            loss = 1.0 - float(ndcg_score([grades], [scores], k=K))
            losses.setdefault(f"{v} window", []).append(loss)  # every query: the metric
            if shadow or i >= 1:  # from the treatment's first prediction: the comparison
                losses[v].append(loss)
        rel = {f"d{j}": g for j, g in enumerate(grades.tolist()) if g > 0}
        labels.append({"id": f"q{i}", "ts": ts + 5000, "relevance": rel})
    return preds, labels, losses


def _settings(tmp: Path, comparison: dict[str, Any] | None = None, **extra: Any) -> Any:
    data: dict[str, Any] = {
        "state": {"dir": str(tmp / "state")},
        "models": [
            {"name": "search", "task": "ranking", "k": [K, 10], "windows": [{"size": "1d"}]}
        ],
        **extra,
    }
    if comparison is not None:
        data["comparisons"] = [{"name": "rk", "model": "search", "control": "v1",
                                "treatment": "v2", "loss": "ndcg_loss", "min_samples": 200,
                                "horizon": 2000, **comparison}]  # fmt: skip
    return settings_from_mapping(data)


def _replay(tmp: Path, preds: list, labels: list, comparison: dict[str, Any]) -> dict:
    pf, lf = tmp / "p.jsonl", tmp / "l.jsonl"
    pf.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in preds))
    lf.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in labels))
    report = replay(_settings(tmp, comparison), pf, lf, progress=None)
    (c,) = report["comparisons"]
    return c


def test_split_ranking_comparison_rolls_back_a_worse_ranker(tmp_path: Path) -> None:
    preds, labels, losses = _stream(3000, 1, shadow=False)
    c = _replay(tmp_path, preds, labels, {})
    assert c["loss"] == "ndcg_loss"
    assert c["samples"] == {"control": len(losses["v1"]), "treatment": len(losses["v2"])}
    want = float(np.mean(losses["v2"]) - np.mean(losses["v1"]))
    assert c["effect"] == pytest.approx(want, abs=1e-9)
    assert c["decision"] == "rollback", c["reason"]
    assert c["confidence_sequence"]["lower"] > 0


def test_shadow_ranking_comparison_pairs_the_queries(tmp_path: Path) -> None:
    preds, labels, losses = _stream(1500, 2, shadow=True)
    c = _replay(tmp_path, preds, labels, {"mode": "shadow"})
    n = len(losses["v1"])
    assert c["samples"] == {"control": n, "treatment": n}
    d = np.asarray(losses["v2"]) - np.asarray(losses["v1"])
    assert c["effect"] == pytest.approx(float(d.mean()), abs=1e-9)
    assert c["decision"] == "rollback", c["reason"]


def test_identical_rankers_do_not_roll_back(tmp_path: Path) -> None:
    preds, labels, _ = _stream(3000, 3, shadow=False, noise_v2=0.5)
    c = _replay(tmp_path, preds, labels, {"margin": 0.05})
    assert c["decision"] in ("continue", "promote"), c["reason"]


def test_ranking_losses_and_metrics_are_checked_in_the_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not apply to ranking"):
        _settings(tmp_path, {"loss": "log_loss"})
    with pytest.raises(ConfigError, match="does not apply to binary"):
        settings_from_mapping(
            {
                "models": [{"name": "m"}],
                "comparisons": [
                    {
                        "name": "c",
                        "model": "m",
                        "control": "a",
                        "treatment": "b",
                        "loss": "ndcg_loss",
                    }
                ],
            }
        )
    slo = {"name": "s", "model": "search", "window": "1d", "direction": "above",
           "objective": 0.5}  # fmt: skip
    _settings(tmp_path, slos=[{**slo, "metric": "ndcg_at_10"}])
    _settings(tmp_path, slos=[{**slo, "metric": "mrr"}])
    for bad in ("ndcg_at_7", "ndcg", "accuracy"):
        with pytest.raises(ConfigError, match="not among the metrics"):
            _settings(tmp_path, slos=[{**slo, "metric": bad}])
    with pytest.raises(ConfigError, match="distinct"):
        settings_from_mapping({"models": [{"name": "r", "task": "ranking", "k": [5, 5]}]})


def test_slo_on_ndcg_breaches_on_the_interval(tmp_path: Path) -> None:
    preds, labels, losses = _stream(800, 4, shadow=False)
    good = 1.0 - float(np.mean(losses["v1 window"]))
    slos = [
        {"name": "low", "model": "search", "version": "v1", "window": "1d",
         "metric": f"ndcg_at_{K}", "direction": "above", "objective": good + 0.2, "for": "0s"},
        {"name": "met", "model": "search", "version": "v1", "window": "1d",
         "metric": f"ndcg_at_{K}", "direction": "above", "objective": good - 0.2, "for": "0s"},
    ]  # fmt: skip
    settings = _settings(tmp_path, slos=slos)
    engine = build_engine(settings)
    pipe = build_pipeline(settings, engine, FileDeadLetter(tmp_path / "dead.jsonl"))
    for kind, records in (("predictions", preds), ("labels", labels)):
        pipe.process(kind, [RawRecord(orjson.dumps(r), kind, 0, i) for i, r in enumerate(records)])
    now_ms = max(p["ts"] for p in preds)
    snap = engine.snapshot(now_ms)
    status = {s.name: s for s in SloEvaluator(slo_specs(settings)).evaluate(snap, now_ms / 1000)}
    assert status["low"].firing and status["low"].value == pytest.approx(good, abs=1e-9)
    assert status["low"].upper < good + 0.2
    assert status["met"].state == "inactive" and not status["met"].breach


def test_no_error_rate_view_for_a_ranking_comparison(tmp_path: Path) -> None:
    preds, labels, _ = _stream(300, 5, shadow=False)
    c = _replay(tmp_path, preds, labels, {})
    assert c["fixed_horizon"] == []  # ranking results carry no confusion counts
